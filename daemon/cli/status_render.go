package cli

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/routelet/routelet/daemon/statusapi"
	"github.com/routelet/routelet/internal/termsafe"
)

// renderStatus is the text form of st: a header (running or not first,
// node, readiness, datastore, blocks, pods, route tables, devices, drift,
// last resync), the peers' table, then every problem found, one a line.
// Times are shown relative to now. Every value from records or the kernel
// (names, addresses, reasons, errors) goes through esc, so none can put a
// control character on the terminal.
func renderStatus(st *statusapi.State, now time.Time) string {
	var b strings.Builder
	n := st.Node
	if st.Source == statusapi.SourceOffline {
		fmt.Fprintf(&b, "routeletd is NOT RUNNING: state below is what the state directory and the kernel show\n\n")
	} else {
		fmt.Fprintf(&b, "routeletd is running (version %s)\n\n", esc(orDash(n.Version)))
	}
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "Node:\t%s (datastore %s, mode %s, state dir %s)\n", esc(n.Name), esc(orDash(n.Datastore)), esc(orDash(n.Mode)), esc(n.StateDir))
	fmt.Fprintf(w, "Host IPs:\t%s\tpod MTU %s\n", esc(orDash(strings.Join(nonEmpty(n.HostIPv4, n.HostIPv6), ", "))), intOrDash(n.PodMTU))
	ready := "yes"
	if !st.Readiness.Ready {
		ready = "NO: " + orDash(st.Readiness.Reason)
	}
	fmt.Fprintf(w, "Ready:\t%s\n", esc(ready))
	if !st.Loop && st.Source == statusapi.SourceDaemon {
		fmt.Fprintf(w, "Datastore:\t%s: not read yet (the apply loop starts once this node has its blocks)\n", esc(orDash(n.Datastore)))
		fmt.Fprintf(w, "\t(the apply loop is not running yet: nothing else to show)\n")
		for _, e := range st.Errors {
			fmt.Fprintf(w, "\t✗ %s: %s\n", esc(e.Object), esc(e.Error))
		}
		w.Flush()
		return b.String()
	}
	fmt.Fprintf(w, "Datastore:\t%s\n", esc(datastoreLine(n.Datastore, st, now)))
	fmt.Fprintf(w, "Blocks:\t%s\n", esc(blocksLine(st.Blocks)))
	fmt.Fprintf(w, "Pods:\t%s\n", podsLine(st.Workloads))
	fmt.Fprintf(w, "Routes:\t%s\n", esc(tablesLine(st.Tables)))
	fmt.Fprintf(w, "Devices:\t%s\n", esc(devicesLine(st.Devices)))
	if st.WireGuard != nil {
		fmt.Fprintf(w, "WireGuard:\t%s\n", esc(wireGuardLine(st.WireGuard)))
	}
	if st.BGP != nil {
		fmt.Fprintf(w, "BGP:\t%s\n", esc(bgpLine(st.BGP)))
	}
	if st.Source == statusapi.SourceDaemon {
		fmt.Fprintf(w, "Drift repaired:\t%s\n", esc(driftLine(st, now)))
		fmt.Fprintf(w, "Last resync:\t%s\n", ago(st.LastResync, now))
	} else {
		fmt.Fprintf(w, "Drift repaired:\tunknown (only the running daemon counts repairs)\n")
		fmt.Fprintf(w, "Last resync:\tunknown (daemon.json written %s)\n", ago(st.Readiness.Updated, now))
	}
	w.Flush()

	switch {
	case st.PeersUnknown != "":
		fmt.Fprintf(&b, "\nPeers: %s\n", esc(st.PeersUnknown))
	default:
		fmt.Fprintf(&b, "\nPeers: %s\n", peersSummary(st.Peers))
	}
	if len(st.Peers) > 0 {
		w = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		head := "NAME\tHOST IP\tPATH\tDEVICE\tROUTES\tARP\tFDB\tALLOWLIST\tLAST CHANGE"
		if st.Datastore.Liveness {
			head += "\tLIVE"
		}
		fmt.Fprintln(w, head)
		for _, p := range st.Peers {
			row := fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s", esc(p.Name), esc(orDash(strings.Join(nonEmpty(p.HostIPv4, p.HostIPv6), ","))),
				esc(p.Path), esc(orDash(p.Device)), mark(p.Routes), mark(p.ARP), mark(p.FDB), mark(p.Allowlist), ago(p.LastChange, now))
			if st.Datastore.Liveness {
				row += "\t" + map[bool]string{true: "yes", false: "NO"}[p.Live != nil && *p.Live]
			}
			fmt.Fprintln(w, row)
		}
		w.Flush()
	}
	if wg := st.WireGuard; wg != nil {
		renderWireGuard(&b, wg, st.Taken, now)
	}
	if bg := st.BGP; bg != nil {
		renderBGP(&b, bg, now)
	}
	if probs := problems(st); len(probs) > 0 {
		fmt.Fprintf(&b, "\nProblems (%d):\n", len(probs))
		for _, p := range probs {
			fmt.Fprintf(&b, "  ✗ %s\n", esc(p))
		}
	} else {
		fmt.Fprintf(&b, "\nNo problems: every desired route, device, ARP, FDB and allowlist entry is in place.\n")
	}
	return b.String()
}

// esc makes a value from a record or the kernel safe for the terminal.
var esc = termsafe.Escape

// nonEmpty drops empty strings.
func nonEmpty(ss ...string) []string {
	return slices.DeleteFunc(ss, func(s string) bool { return s == "" })
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func intOrDash(n int) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprint(n)
}

// mark is one check's cell: ✓, ✗ or - (not wanted).
func mark(c statusapi.Check) string {
	switch {
	case !c.Wanted:
		return "-"
	case c.Present:
		return "✓"
	}
	return "✗"
}

// ago shows t relative to now ("never" for the zero time).
func ago(t, now time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := now.Sub(t)
	if d < 0 {
		d = 0
	}
	return fmt.Sprintf("%s (%s ago)", t.UTC().Format(time.RFC3339), d.Round(time.Second))
}

// datastoreLine is the datastore's health: its name, whether it answers
// (when it tells), the last read of the peers, its failed requests and
// its liveness of the peers.
func datastoreLine(name string, st *statusapi.State, now time.Time) string {
	ds := st.Datastore
	s := orDash(name)
	switch {
	case st.PeersUnknown != "":
		return s + ": unknown (only the running daemon reads it)"
	case ds.Reachable != nil && *ds.Reachable:
		s += " reachable"
	case ds.Reachable != nil:
		s += " UNREACHABLE (the last known peers are kept)"
	}
	if !ds.OK {
		s += ": FAILING: " + orDash(ds.Error)
	} else {
		s += fmt.Sprintf(": ok: %d peer records, %d valid peers, last read %s", ds.Records, ds.Valid, ago(ds.LastRead, now))
	}
	if n := len(ds.Unreadable); n > 0 {
		s += fmt.Sprintf("; %d unreadable", n)
	}
	if n := len(ds.Refused); n > 0 {
		s += fmt.Sprintf("; %d values refused", n)
	}
	if n := len(ds.BlockConflicts); n > 0 {
		s += fmt.Sprintf("; %d BLOCK CLAIM CONFLICTS", n)
	}
	if len(ds.RequestErrors) > 0 {
		var parts []string
		total := 0
		for _, op := range slices.Sorted(maps.Keys(ds.RequestErrors)) {
			parts = append(parts, fmt.Sprintf("%s %d", op, ds.RequestErrors[op]))
			total += ds.RequestErrors[op]
		}
		s += fmt.Sprintf("; %d failed requests since start (%s)", total, strings.Join(parts, ", "))
	}
	if ds.Liveness {
		live := 0
		for _, p := range st.Peers {
			if p.Live != nil && *p.Live {
				live++
			}
		}
		s += fmt.Sprintf("; %d/%d peers live", live, len(st.Peers))
	}
	return s
}

func blocksLine(bs []statusapi.Block) string {
	if len(bs) == 0 {
		return "none (the plugin's conflist names the blocks)"
	}
	var parts []string
	for _, b := range bs {
		pct := 0.0
		if b.Size > 0 {
			pct = 100 * float64(b.Used) / float64(b.Size)
		}
		parts = append(parts, fmt.Sprintf("%s %d/%d used (%.0f%%)", b.CIDR, b.Used, b.Size, pct))
	}
	return strings.Join(parts, ", ")
}

func podsLine(ws []statusapi.Workload) string {
	served, refused, down := 0, 0, 0
	for _, w := range ws {
		switch {
		case w.Refused != "":
			refused++
		default:
			served++
			if !w.IfaceUp {
				down++
			}
		}
	}
	s := fmt.Sprintf("%d", served)
	if refused > 0 || down > 0 {
		s += fmt.Sprintf(" (%d refused, %d with veth missing or down)", refused, down)
	}
	return s
}

func tablesLine(ts []statusapi.RouteTable) string {
	var parts []string
	for _, t := range ts {
		if t.Desired == 0 && len(t.Routes) == 0 && strings.HasSuffix(t.Name, "ipv6") {
			continue
		}
		s := fmt.Sprintf("%s %d/%d programmed", t.Name, t.Programmed, t.Desired)
		if extra := len(t.Routes) - t.Desired; extra > 0 {
			s += fmt.Sprintf(" +%d unexpected", extra)
		}
		parts = append(parts, s)
	}
	return orDash(strings.Join(parts, ", "))
}

func devicesLine(ds []statusapi.Device) string {
	if len(ds) == 0 {
		return "none"
	}
	var parts []string
	for _, d := range ds {
		s := fmt.Sprintf("%s %s mtu %d ✓", d.Name, d.Kind, d.MTU)
		if d.Problem != "" {
			s = fmt.Sprintf("%s %s ✗ %s", d.Name, d.Kind, d.Problem)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}

// driftLine counts the repairs of the last hour by object.
func driftLine(st *statusapi.State, now time.Time) string {
	since := now.Add(-time.Hour)
	by := map[string]int{}
	var last time.Time
	for _, r := range st.Repairs {
		if !r.Time.Before(since) {
			by[r.Object]++
			last = r.Time
		}
	}
	total := st.RepairsSince(since)
	if total == 0 {
		return "none in the last hour"
	}
	var parts []string
	for _, o := range slices.Sorted(maps.Keys(by)) {
		parts = append(parts, fmt.Sprintf("%s %d", o, by[o]))
	}
	return fmt.Sprintf("%d in the last hour (%s), last %s", total, strings.Join(parts, ", "), ago(last, now))
}

func peersSummary(ps []statusapi.Peer) string {
	bad := 0
	for _, p := range ps {
		if !peerOK(p) {
			bad++
		}
	}
	return fmt.Sprintf("%d (%d ok, %d with problems)", len(ps), len(ps)-bad, bad)
}

// peerOK reports whether every check towards p passed and its record has
// no problem.
func peerOK(p statusapi.Peer) bool {
	return p.Problem == "" && p.Routes.OK() && p.ARP.OK() && p.FDB.OK() && p.Allowlist.OK()
}

// problems lists, one a line, everything that is not as desired: errors,
// refusals, devices, peers' checks, workloads, routes.
func problems(st *statusapi.State) []string {
	var out []string
	for _, e := range st.Errors {
		out = append(out, fmt.Sprintf("%s: %s", e.Object, e.Error))
	}
	for _, s := range st.Datastore.Unreadable {
		out = append(out, "unreadable node record: "+s)
	}
	for _, c := range st.Datastore.BlockConflicts {
		out = append(out, blockConflictLine(c))
	}
	if wg := st.WireGuard; wg != nil {
		if wg.Error != "" {
			out = append(out, fmt.Sprintf("wireguard %s: %s", wg.Device, wg.Error))
		}
		for _, p := range wg.Peers {
			if !p.Configured {
				out = append(out, fmt.Sprintf("wireguard peer %s (key %s): not configured on %s as wanted", p.Node, p.PublicKey, wg.Device))
			}
		}
	}
	if bg := st.BGP; bg != nil {
		out = append(out, bgpProblems(bg)...)
	}
	for _, d := range st.Devices {
		if d.Problem != "" {
			out = append(out, fmt.Sprintf("device %s: %s", d.Name, d.Problem))
		}
	}
	for _, p := range st.Peers {
		if p.Problem != "" {
			out = append(out, fmt.Sprintf("peer %s: %s", p.Name, p.Problem))
		}
		for _, c := range []struct {
			what string
			c    statusapi.Check
		}{{"routes", p.Routes}, {"ARP", p.ARP}, {"FDB", p.FDB}, {"allowlist", p.Allowlist}} {
			if !c.c.OK() {
				out = append(out, fmt.Sprintf("peer %s: %s: %s", p.Name, c.what, c.c.Fact))
			}
		}
	}
	for _, w := range st.Workloads {
		name := w.Key
		if w.Pod != "" {
			name = w.Pod
		}
		switch {
		case w.Refused != "":
			// in Errors (daemon) or listed here (offline)
			if st.Source == statusapi.SourceOffline {
				out = append(out, fmt.Sprintf("pod %s: refused: %s", name, w.Refused))
			}
		case !w.IfaceExists:
			out = append(out, fmt.Sprintf("pod %s: veth %s missing", name, w.HostIface))
		case !w.IfaceUp:
			out = append(out, fmt.Sprintf("pod %s: veth %s down", name, w.HostIface))
		case !w.Routes.OK():
			out = append(out, fmt.Sprintf("pod %s: routes: %s", name, w.Routes.Fact))
		}
	}
	for _, t := range st.Tables {
		for _, r := range t.Routes {
			if r.Desired || r.Peer != "" {
				continue
			}
			out = append(out, fmt.Sprintf("%s: unexpected route %s %s dev %s (%s)", t.Name, r.Type, r.CIDR, orDash(r.Iface), r.Kernel))
		}
		for _, r := range t.Routes {
			if r.Desired && !r.Programmed && r.Peer == "" && !strings.HasPrefix(t.Name, "workloads") {
				out = append(out, fmt.Sprintf("%s: route %s dev %s not programmed", t.Name, r.CIDR, orDash(r.Iface)))
			}
		}
		for _, r := range t.Routes {
			if r.Desired && !r.Programmed && r.Iface == "" && strings.HasPrefix(t.Name, "workloads") {
				out = append(out, fmt.Sprintf("%s: blackhole %s not programmed", t.Name, r.CIDR))
			}
		}
	}
	return out
}

// blockConflictLine says what a block claim conflict is and what the
// daemon does about it. The key and the value are quoted: another writer
// chose them.
func blockConflictLine(c statusapi.BlockConflict) string {
	return fmt.Sprintf("block %s: claim conflict: the datastore key %q holds %q, not this node; this node keeps serving the block (its pods use it) and does not overwrite the claim (since %s)",
		c.Block, c.Key, c.Holder, c.Since.UTC().Format(time.RFC3339))
}

// wireGuardLine sums up the WireGuard device: implementation, state,
// port, MTU, public key, and its peers.
func wireGuardLine(wg *statusapi.WireGuard) string {
	state := "down"
	if wg.Up {
		state = "up"
	}
	hs := 0
	for _, p := range wg.Peers {
		if p.HandshakeAgeSeconds != nil {
			hs++
		}
	}
	s := fmt.Sprintf("%s (%s, %s, port %d, mtu %d), public key %s; %d peers, %d with a handshake",
		wg.Device, orDash(wg.Implementation), state, wg.Port, wg.MTU, orDash(wg.PublicKey), len(wg.Peers), hs)
	if n := len(wg.PeersWithoutKey); n > 0 {
		s += fmt.Sprintf("; %d without a key (their pods unreachable): %s", n, strings.Join(wg.PeersWithoutKey, ", "))
	}
	return s
}

// renderWireGuard is the WireGuard block: the device (implementation,
// name, public key, port) and one row per peer: node, endpoint, latest
// handshake's age ("never" before the first), bytes received and sent.
// Ages are those the daemon computed when it took the state (taken),
// moved on to now.
func renderWireGuard(b *strings.Builder, wg *statusapi.WireGuard, taken, now time.Time) {
	state := "down"
	if wg.Up {
		state = "up"
	}
	fmt.Fprintf(b, "\nWireGuard: %s\n", esc(fmt.Sprintf("%s device %s (%s, mtu %d), port %d, public key %s",
		orDash(wg.Implementation), wg.Device, state, wg.MTU, wg.Port, orDash(wg.PublicKey))))
	if wg.Error != "" {
		fmt.Fprintf(b, "  ✗ %s\n", esc(wg.Error))
	}
	if len(wg.Peers) > 0 {
		w := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(w, "  NODE\tENDPOINT\tHANDSHAKE\tRX\tTX\tCONFIGURED\tPUBLIC KEY")
		for _, p := range wg.Peers {
			fmt.Fprintf(w, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\n", esc(p.Node), esc(orDash(p.Endpoint)), handshakeAge(p, taken, now),
				byteCount(p.RxBytes), byteCount(p.TxBytes), map[bool]string{true: "✓", false: "✗"}[p.Configured], esc(p.PublicKey))
		}
		w.Flush()
	}
	for _, n := range wg.PeersWithoutKey {
		fmt.Fprintf(b, "  %s: no WireGuard key: its pods are unreachable (not sent in plaintext)\n", esc(n))
	}
}

// handshakeAge is a peer's latest handshake as an age ("12s ago"), or
// "never".
func handshakeAge(p statusapi.WireGuardPeer, taken, now time.Time) string {
	var age time.Duration
	switch {
	case p.HandshakeAgeSeconds != nil:
		age = time.Duration(*p.HandshakeAgeSeconds) * time.Second
		if !taken.IsZero() && now.After(taken) {
			age += now.Sub(taken)
		}
	case !p.LatestHandshake.IsZero():
		age = now.Sub(p.LatestHandshake)
	default:
		return "never"
	}
	return fmt.Sprintf("%s ago", max(age, 0).Round(time.Second))
}

// byteCount renders a byte counter (B, KiB, MiB, GiB).
func byteCount(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	f, i := float64(n), 0
	for f >= unit && i < 3 {
		f /= unit
		i++
	}
	return fmt.Sprintf("%.1f %s", f, []string{"B", "KiB", "MiB", "GiB"}[i])
}

// bgpLine sums up the BGP speaker: AS, whether it programs what it
// learns, its sessions, what it announces and learns.
func bgpLine(bg *statusapi.BGP) string {
	up := 0
	for _, p := range bg.Peers {
		if p.State == "established" {
			up++
		}
	}
	s := fmt.Sprintf("AS %d, %s; %d sessions, %d established; %d prefixes announced; %d learned, %d accepted, %d refused",
		bg.ASN, bgpMode(bg), len(bg.Peers), up, len(bg.Announced), bg.Learned, bg.Accepted, bg.RefusedNow)
	if !bg.Converged {
		s += fmt.Sprintf("; converging (keeping %d routes of the previous run)", bg.Adopted)
	}
	return s
}

// bgpMode says what the speaker does with what it learns.
func bgpMode(bg *statusapi.BGP) string {
	if bg.Programmed {
		return "learned routes programmed"
	}
	return "announce only"
}

// renderBGP is the BGP block: the speaker (AS, router ID, mode), one row
// per session (address, AS, where it comes from, state and since when,
// prefixes received, accepted and advertised, End-of-RIB), the announced
// prefixes and the refused learned routes (counts by reason since the
// start, then the newest refused now).
func renderBGP(b *strings.Builder, bg *statusapi.BGP, now time.Time) {
	conv := "converged"
	if !bg.Converged {
		conv = fmt.Sprintf("converging: keeping %d routes of the previous run", bg.Adopted)
	}
	fmt.Fprintf(b, "\nBGP: %s\n", esc(fmt.Sprintf("AS %d, router ID %s, %s (%s)", bg.ASN, orDash(bg.RouterID), bgpMode(bg), conv)))
	if bg.Error != "" {
		fmt.Fprintf(b, "  ✗ %s\n", esc(bg.Error))
	}
	if len(bg.Peers) > 0 {
		w := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(w, "  PEER\tAS\tFROM\tSTATE\tSINCE\tRECEIVED\tACCEPTED\tADVERTISED\tEOR\tLAST ERROR")
		for _, p := range bg.Peers {
			addr := p.Address
			if p.Port != 0 {
				addr = fmt.Sprintf("%s port %d", addr, p.Port)
			}
			from := p.Description
			if p.RouteReflector {
				from += " (route reflector)"
			}
			fmt.Fprintf(w, "  %s\t%d\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\n", esc(addr), p.ASN, esc(orDash(from)), esc(orDash(p.State)),
				ago(p.Since, now), p.Received, p.Accepted, p.Advertised, map[bool]string{true: "✓", false: "-"}[p.EndOfRIB], esc(orDash(p.LastError)))
		}
		w.Flush()
	}
	fmt.Fprintf(b, "  Announced: %s\n", esc(orDash(strings.Join(bg.Announced, ", "))))
	if len(bg.RefusedTotal) > 0 || bg.RefusedNow > 0 {
		var parts []string
		for _, r := range slices.Sorted(maps.Keys(bg.RefusedTotal)) {
			parts = append(parts, fmt.Sprintf("%s %d", r, bg.RefusedTotal[r]))
		}
		fmt.Fprintf(b, "  Refused: %d now; since start: %s\n", bg.RefusedNow, esc(orDash(strings.Join(parts, ", "))))
		for _, r := range bg.Refused {
			fmt.Fprintf(b, "    %s\n", esc(fmt.Sprintf("%s from %s next hop %s: %s: %s", r.Prefix, r.Peer, orDash(r.NextHop), r.Reason, r.Detail)))
		}
		if n := bg.RefusedNow - len(bg.Refused); n > 0 {
			fmt.Fprintf(b, "    (and %d more)\n", n)
		}
	}
}

// bgpProblems are the speaker's problem lines: its error, every session
// not established, the learned routes refused.
func bgpProblems(bg *statusapi.BGP) []string {
	var out []string
	if bg.Error != "" {
		out = append(out, "bgp: "+bg.Error)
	}
	for _, p := range bg.Peers {
		if p.State == "established" {
			continue
		}
		s := fmt.Sprintf("bgp peer %s (%s): %s", p.Address, orDash(p.Description), orDash(p.State))
		if p.LastError != "" {
			s += ": " + p.LastError
		}
		out = append(out, s)
	}
	if bg.RefusedNow > 0 {
		out = append(out, fmt.Sprintf("bgp: %d learned routes refused (see BGP above)", bg.RefusedNow))
	}
	return out
}
