package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/routelet/routelet/daemon/config"
	"github.com/routelet/routelet/daemon/hostread"
	"github.com/routelet/routelet/internal/readlimit"
	"github.com/routelet/routelet/pkg/nodespace"
	"github.com/routelet/routelet/pkg/peers"
	"github.com/routelet/routelet/pkg/state"
)

// nodesUsage is the nodes subcommand's synopsis.
const nodesUsage = `usage: routeletd nodes list [--output text|json] [daemon flags]
       routeletd nodes show NAME [--output text|json] [daemon flags]
       routeletd nodes add NAME --host-ipv4 IP [--host-ipv6 IP] --block CIDR... [--vtep-mac MAC] [--vtep-mac-v6 MAC]
                           [--tunnel-ipv4 IP] [--tunnel-ipv6 IP] [--wireguard-public-key KEY [--wireguard-listen-port PORT]]
                           [--bgp-as N] [--replace] [daemon flags]
       routeletd nodes add --from FILE [--replace] [daemon flags]   (a record as another node's nodes/<name>.json; - for stdin)
       routeletd nodes remove NAME [daemon flags]

The file datastore's peer records in <state-dir>/nodes/. A record is
written only when the daemon would accept every value of it (the same
checks: each value on its own, then against this node and the other
records); a refusal names the value. Daemon flags (state-dir, node-name,
pod-cidr, config, …) say which node's state directory this is; nodes add's
--bgp-as is the peer's BGP AS number (the daemon's own bgp-as is not read).
`

// nodesFlags are the nodes subcommand's own flags beside --output (name →
// boolean).
var nodesFlags = map[string]bool{
	"from": false, "replace": true,
	"host-ipv4": false, "host-ipv6": false, "block": false, "vtep-mac": false, "vtep-mac-v6": false,
	"tunnel-ipv4": false, "tunnel-ipv6": false, "wireguard-public-key": false, "wireguard-listen-port": false,
	"bgp-as": false,
}

// recordFlags are the value flags of nodes add, the record's fields.
var recordFlags = []string{"host-ipv4", "host-ipv6", "block", "vtep-mac", "vtep-mac-v6", "tunnel-ipv4", "tunnel-ipv6", "wireguard-public-key", "wireguard-listen-port", "bgp-as"}

// Nodes lists, shows, adds or removes peer records of the file
// datastore.
func Nodes(args []string) int {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		fmt.Fprint(os.Stderr, nodesUsage)
		return ExitConfig
	}
	verb, args := args[0], args[1:]
	name := ""
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	got, output, cfg, code := subcommandConfig("nodes", args, nodesFlags)
	if cfg == nil {
		return code
	}
	if cfg.Datastore != config.DatastoreFile {
		fmt.Fprintf(os.Stderr, "routeletd nodes: config key datastore is %q: node records are only files with the file datastore\n", cfg.Datastore)
		return ExitConfig
	}
	if _, err := os.Lstat(cfg.StateDir); err != nil {
		fmt.Fprintf(os.Stderr, "routeletd nodes: state directory %s (config key state-dir): %s\n", esc(cfg.StateDir), esc(err.Error()))
		return ExitFail
	}
	store, err := state.Open(cfg.StateDir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "routeletd nodes: %s\n", esc(err.Error()))
		return ExitFail
	}
	switch verb {
	case "list":
		err = listNodes(os.Stdout, store, cfg, output)
	case "show":
		err = showNode(os.Stdout, store, cfg, name, output)
	case "add":
		err = addNode(store, cfg, name, got)
	case "remove":
		err = removeNode(store, cfg, name)
	default:
		fmt.Fprintf(os.Stderr, "routeletd nodes: unknown command %q\n%s", verb, nodesUsage)
		return ExitConfig
	}
	var ue usageError
	switch {
	case errors.As(err, &ue):
		fmt.Fprintf(os.Stderr, "routeletd nodes %s: %s\n", verb, esc(err.Error()))
		return ExitConfig
	case err != nil:
		fmt.Fprintf(os.Stderr, "routeletd nodes %s: %s\n", verb, esc(err.Error()))
		return ExitFail
	}
	return ExitOK
}

// usageError is a wrong invocation (exit 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// nodeRow is one record as list and show print it: the record and what
// the daemon's checks say of it.
type nodeRow struct {
	Record  *state.Node `json:"record"`
	Self    bool        `json:"self,omitempty"`    // this node's own record (the daemon writes it)
	Refused []string    `json:"refused,omitempty"` // values the daemon refuses
}

// checkedNodes reads every record and runs the daemon's checks over them.
func checkedNodes(store *state.Store, cfg *config.Config) ([]nodeRow, []error, error) {
	ns, bad := store.ListNodes()
	for _, err := range bad {
		if dirError(err, store.NodesDir()) {
			return nil, nil, err
		}
	}
	refused := map[string][]string{}
	for _, r := range checkRecords(store, cfg, ns, nil) {
		refused[r.Node] = append(refused[r.Node], r.Error())
	}
	rows := make([]nodeRow, 0, len(ns))
	for _, n := range ns {
		rows = append(rows, nodeRow{Record: n, Self: n.Name == cfg.NodeName, Refused: refused[n.Name]})
	}
	return rows, bad, nil
}

// checkRecords runs the daemon's checks (peers.Parse, then peers.Resolve
// against this node and the other records) over the peer records ns plus
// extra, extra last seen (the records already there keep what they
// claim), and returns the refusals.
func checkRecords(store *state.Store, cfg *config.Config, ns []*state.Node, extra *state.Node) []peers.Refusal {
	self := peers.Self{Name: cfg.NodeName, Blocks: cfg.PodCIDRs}
	if st, err := store.ReadDaemonStatus(); err == nil && len(st.Blocks) > 0 {
		self.Blocks = nil
		for _, b := range st.Blocks {
			if p, err := netip.ParsePrefix(b); err == nil {
				self.Blocks = append(self.Blocks, p)
			}
		}
	}
	var recs []peers.Record
	now := time.Now()
	for _, n := range ns {
		if n.Name == cfg.NodeName {
			own, _ := peers.Parse(peers.FromState(n))
			self.IPv4, self.IPv6, self.WireGuardKey = own.IPv4, own.IPv6, own.WireGuard.PublicKey
			continue
		}
		if extra != nil && n.Name == extra.Name {
			continue
		}
		r := peers.FromState(n)
		if r.Updated.After(now) {
			r.Updated = now
		}
		recs = append(recs, r)
	}
	if extra != nil {
		r := peers.FromState(extra)
		r.Updated = now.Add(time.Second) // the newcomer: established claims win
		recs = append(recs, r)
	}
	host, _ := nodespace.ReadHost(nil, cfg.RouteProtocol, hostread.OwnLink(cfg)) // unreadable: checked against the records only
	return peers.Resolve(peers.Input{Self: self, Host: host, Records: recs, Now: now.Add(2 * time.Second)}).Refused
}

// listNodes prints every record with what the daemon makes of it.
func listNodes(w io.Writer, store *state.Store, cfg *config.Config, output string) error {
	rows, bad, err := checkedNodes(store, cfg)
	if err != nil {
		return err
	}
	if output == "json" {
		var unreadable []string
		for _, e := range bad {
			unreadable = append(unreadable, e.Error())
		}
		return writeJSON(w, struct {
			Nodes      []nodeRow `json:"nodes"`
			Unreadable []string  `json:"unreadable,omitempty"`
		}{rows, unreadable})
	}
	// Every value is a record's (or a file name's): escaped, so none can
	// put a control character on the terminal or a tab into the table.
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tHOST IPv4\tHOST IPv6\tBLOCKS\tVTEP MAC\tWIREGUARD\tUPDATED\tSTATE")
	for _, r := range rows {
		n := r.Record
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", esc(n.Name), esc(orDash(n.HostIPv4)), esc(orDash(n.HostIPv6)), esc(orDash(strings.Join(n.Blocks, ","))),
			esc(orDash(n.VTEPMAC)), esc(wireguardColumn(n)), n.Updated.UTC().Format(time.RFC3339), rowState(r))
	}
	tw.Flush()
	for _, e := range bad {
		fmt.Fprintf(w, "unreadable: %s\n", esc(e.Error()))
	}
	return nil
}

// wireguardColumn is a record's WIREGUARD column: its public key and, when
// not the default, :port; "-" without a key.
func wireguardColumn(n *state.Node) string {
	switch {
	case n.WireGuardPublicKey == "" && n.WireGuardPort == 0:
		return "-"
	case n.WireGuardPort == 0:
		return n.WireGuardPublicKey
	}
	return fmt.Sprintf("%s:%d", orDash(n.WireGuardPublicKey), n.WireGuardPort)
}

// rowState is a record's STATE column.
func rowState(r nodeRow) string {
	switch {
	case r.Self:
		return "this node"
	case len(r.Refused) > 0:
		return fmt.Sprintf("%d refused", len(r.Refused))
	}
	return "ok"
}

// showNode prints one record and every refusal of it.
func showNode(w io.Writer, store *state.Store, cfg *config.Config, name, output string) error {
	if name == "" {
		return usageError{"which node? routeletd nodes show NAME"}
	}
	if err := state.ValidateNodeName(name); err != nil {
		return fmt.Errorf("node name %q: %w", name, err)
	}
	rows, _, err := checkedNodes(store, cfg)
	if err != nil {
		return err
	}
	for _, r := range rows {
		if r.Record.Name != name {
			continue
		}
		if output == "json" {
			return writeJSON(w, r)
		}
		if err := writeEscapedJSON(w, r.Record); err != nil {
			return err
		}
		fmt.Fprintf(w, "state: %s\n", rowState(r))
		for _, why := range r.Refused {
			fmt.Fprintf(w, "  ✗ %s\n", esc(why))
		}
		return nil
	}
	if _, err := store.GetNode(name); err != nil {
		return fmt.Errorf("node %q: %w", name, err)
	}
	return fmt.Errorf("node %q: %w", name, state.ErrNotFound)
}

// writeJSON writes v indented.
func writeJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// writeEscapedJSON is writeJSON for a terminal: JSON escapes the C0
// controls but leaves DEL, the C1 controls and the bidi overrides raw, so
// each line is escaped as well. The result is for reading (a C1 control
// or an override shows as its \u escape, DEL as \x7f); --output json is
// the exact document.
func writeEscapedJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	lines := strings.Split(string(b), "\n")
	for i, l := range lines {
		lines[i] = esc(l)
	}
	_, err = io.WriteString(w, strings.Join(lines, "\n")+"\n")
	return err
}

// addNode writes a peer record from flags or a file after the daemon's
// checks; a value the daemon would refuse refuses the whole write.
func addNode(store *state.Store, cfg *config.Config, name string, got map[string][]string) error {
	n, err := recordFromArgs(name, got)
	if err != nil {
		return err
	}
	if n.Name == cfg.NodeName {
		return usageError{fmt.Sprintf("node %q is this node (config key node-name): its daemon writes its record", n.Name)}
	}
	if _, err := store.GetNode(n.Name); err == nil && len(got["replace"]) == 0 {
		return fmt.Errorf("node %q already has a record (%s/%s.json); --replace to overwrite it", n.Name, store.NodesDir(), n.Name)
	}
	ns, _ := store.ListNodes()
	if refused := checkRecords(store, cfg, ns, n); len(refused) > 0 {
		var msgs []string
		for _, r := range refused {
			if r.Node == n.Name {
				msgs = append(msgs, r.Error())
			}
		}
		if len(msgs) > 0 {
			return fmt.Errorf("refused, nothing written: %s", strings.Join(msgs, "; "))
		}
	}
	n.Updated = time.Now().UTC()
	if err := store.PutNode(n); err != nil {
		return err
	}
	fmt.Printf("wrote %s/%s.json\n", store.NodesDir(), n.Name)
	return nil
}

// recordFromArgs builds the record from --from or from the value flags.
func recordFromArgs(name string, got map[string][]string) (*state.Node, error) {
	if from := lastValue(got, "from", ""); from != "" {
		for _, f := range recordFlags {
			if len(got[f]) > 0 {
				return nil, usageError{fmt.Sprintf("--from and --%s: the record comes from one of them", f)}
			}
		}
		var data []byte
		var err error
		// At most a record's size, so an endless file or stream
		// (/dev/zero, a pipe) ends in an error, not in memory exhaustion.
		if from == "-" {
			data, err = readlimit.All(os.Stdin, "stdin", state.MaxRecordSize)
		} else {
			data, err = readlimit.File(from, state.MaxRecordSize)
		}
		if err != nil {
			return nil, fmt.Errorf("read record: %w", err)
		}
		var n state.Node
		dec := json.NewDecoder(strings.NewReader(string(data)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&n); err != nil {
			return nil, fmt.Errorf("record %s: %w", from, err)
		}
		if n.Version != 0 && n.Version != state.RecordVersion {
			return nil, fmt.Errorf("record %s: version %d, this routeletd reads %d", from, n.Version, state.RecordVersion)
		}
		if name != "" && name != n.Name {
			return nil, usageError{fmt.Sprintf("name %q given, but the record in %s is %q", name, from, n.Name)}
		}
		return &n, nil
	}
	if name == "" {
		return nil, usageError{"which node? routeletd nodes add NAME --host-ipv4 … --block … (or --from FILE)"}
	}
	n := &state.Node{Name: name, HostIPv4: lastValue(got, "host-ipv4", ""), HostIPv6: lastValue(got, "host-ipv6", ""),
		VTEPMAC: lastValue(got, "vtep-mac", ""), VTEPMACv6: lastValue(got, "vtep-mac-v6", ""),
		TunnelIPv4: lastValue(got, "tunnel-ipv4", ""), TunnelIPv6: lastValue(got, "tunnel-ipv6", ""), Blocks: []string{},
		WireGuardPublicKey: lastValue(got, "wireguard-public-key", "")}
	if port := lastValue(got, "wireguard-listen-port", ""); port != "" {
		if n.WireGuardPublicKey == "" {
			return nil, usageError{"--wireguard-listen-port without --wireguard-public-key: a port is only used with a key"}
		}
		p, err := strconv.Atoi(port)
		if err != nil || p < 1 || p > 65535 {
			return nil, usageError{fmt.Sprintf("--wireguard-listen-port %q is not a port (1-65535)", port)}
		}
		n.WireGuardPort = p
	}
	if as := lastValue(got, "bgp-as", ""); as != "" {
		asn, err := peers.ParseASN(as)
		if err != nil {
			return nil, usageError{fmt.Sprintf("--bgp-as %q is %v", as, err)}
		}
		n.BGPAS = int(asn)
	}
	for _, v := range got["block"] {
		for _, b := range strings.Split(v, ",") {
			if b = strings.TrimSpace(b); b != "" {
				n.Blocks = append(n.Blocks, b)
			}
		}
	}
	if n.HostIPv4 == "" && n.HostIPv6 == "" {
		return nil, usageError{"a peer needs --host-ipv4 or --host-ipv6"}
	}
	return n, nil
}

// removeNode deletes one peer record.
func removeNode(store *state.Store, cfg *config.Config, name string) error {
	if name == "" {
		return usageError{"which node? routeletd nodes remove NAME"}
	}
	if name == cfg.NodeName {
		return usageError{fmt.Sprintf("node %q is this node (config key node-name): its daemon writes its record back", name)}
	}
	if err := state.ValidateNodeName(name); err != nil {
		return fmt.Errorf("node name %q: %w", name, err)
	}
	if _, err := os.Lstat(store.NodesDir() + "/" + name + ".json"); err != nil {
		return fmt.Errorf("node %q: no record %s/%s.json", name, store.NodesDir(), name)
	}
	if err := store.DeleteNode(name); err != nil {
		return err
	}
	fmt.Printf("removed %s/%s.json\n", store.NodesDir(), name)
	return nil
}
