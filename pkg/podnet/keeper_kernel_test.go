package podnet

import (
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/internal/netnstest"
)

// TestKeeperRepairs: on a pod attached by Setup, every setting of
// HostSysctls and NodeSysctls that is changed, the veth set down and the
// pod's IPv6 neighbour deleted are put back by one Check and counted; a
// Check with nothing changed writes nothing; a prefixed link that is not a
// veth and a veth without the prefix are never touched.
func TestKeeperRepairs(t *testing.T) {
	withKeeper(t, "calikeep00001", []string{"10.77.0.7", "fd77::7"}, func(k *Keeper, att *Attached) error {
		h, err := netlink.NewHandle()
		if err != nil {
			return err
		}
		defer h.Close()
		// Strangers: a prefixed bridge and an unprefixed veth.
		if err := h.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "calibridge0"}}); err != nil {
			return err
		}
		if err := h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "other0"}, PeerName: "other1"}); err != nil {
			return err
		}
		v6 := netip.MustParseAddr("fd77::7")
		k.SetVeths([]HostVeth{
			{Name: "calikeep00001", IPv6: true, Neighbours: []netip.Addr{v6}, MAC: att.ContMAC},
			{Name: "calibridge0"},
			{Name: "other0"},
		})
		if rep, err := k.Check(true); err != nil || rep != (Repairs{}) {
			t.Fatalf("first Check after ADD: %+v, %v; want nothing to repair", rep, err)
		}

		settings := append(HostSysctls("calikeep00001", true), NodeSysctls(true)...)
		for _, s := range settings {
			flip := "1"
			if s.Value == "1" {
				flip = "0"
			} else if filepath.Base(s.Key) == "proxy_delay" {
				flip = "80" // jiffies: 1 reads back as 0
			}
			if err := writeSysctl(s.Key, flip); err != nil {
				return err
			}
		}
		for _, key := range []string{"net/ipv4/conf/calibridge0/proxy_arp", "net/ipv4/conf/other0/proxy_arp"} {
			if err := writeSysctl(key, "0"); err != nil {
				return err
			}
		}
		l, err := h.LinkByName("calikeep00001")
		if err != nil {
			return err
		}
		if err := h.LinkSetDown(l); err != nil {
			return err
		}
		// Down flushed the neighbours; delete it anyway if it survived.
		_ = h.NeighDel(&netlink.Neigh{LinkIndex: l.Attrs().Index, Family: unix.AF_INET6, IP: v6.AsSlice()})
		k.LinkChanged("calikeep00001")
		k.LinkChanged("calibridge0")
		k.LinkChanged("other0")

		rep, err := k.Check(true)
		if err != nil {
			t.Fatalf("Check: %v", err)
		}
		// ip_forward=0 also resets the per-interface IPv4 forwarding, and
		// IPv6 all/forwarding the per-interface one: at least one write
		// per setting, each counted.
		if rep.Sysctls < len(settings) || rep.Links != 1 || rep.Neighbours != 1 {
			t.Fatalf("repairs %+v: want %d+ sysctls, 1 link, 1 neighbour", rep, len(settings))
		}
		for _, s := range settings {
			if got, _ := ReadSysctl(s.Key); got != s.Value {
				t.Errorf("%s = %s after Check, want %s", s.Key, got, s.Value)
			}
		}
		if l, _ = h.LinkByName("calikeep00001"); l.Attrs().Flags&net.FlagUp == 0 {
			t.Error("veth still down")
		}
		ns, err := h.NeighList(l.Attrs().Index, unix.AF_INET6)
		if err != nil {
			return err
		}
		found := false
		for _, n := range ns {
			if a, _ := netip.AddrFromSlice(n.IP); a == v6 && n.State&netlink.NUD_PERMANENT != 0 && n.HardwareAddr.String() == att.ContMAC.String() {
				found = true
			}
		}
		if !found {
			t.Errorf("no permanent neighbour %s lladdr %s: %v", v6, att.ContMAC, ns)
		}
		for _, key := range []string{"net/ipv4/conf/calibridge0/proxy_arp", "net/ipv4/conf/other0/proxy_arp"} {
			if got, _ := ReadSysctl(key); got != "0" {
				t.Errorf("%s = %s: a stranger's setting was changed", key, got)
			}
		}
		for _, name := range []string{"calibridge0", "other0"} {
			if l, _ := h.LinkByName(name); l.Attrs().Flags&net.FlagUp != 0 {
				t.Errorf("%s was set up", name)
			}
		}
		if rep, err := k.Check(true); err != nil || rep != (Repairs{}) {
			t.Fatalf("Check with nothing changed: %+v, %v", rep, err)
		}
		// A veth gone (pod deleted before its record) is no error.
		if err := h.LinkDel(l); err != nil {
			return err
		}
		k.LinkChanged("calikeep00001")
		if _, err := os.Stat("/proc/sys/net/ipv4/conf/calikeep00001"); err == nil {
			t.Fatal("veth sysctls still there after delete")
		}
		if _, err := k.Check(true); err != nil {
			t.Fatalf("Check after the veth went: %v", err)
		}
		return nil
	})
}

// TestKeeperReadsWhatMayHaveChanged: the first poll after a veth is handed
// over reads all its sysctls; after that a Check reads a veth's Announced sysctls only when SysctlsChanged named it
// (the hint of a netconf event), the node's only after SysctlsChanged(""),
// and a Check with poll reads the settings that change silently
// (accept_ra here), on every kept veth.
func TestKeeperReadsWhatMayHaveChanged(t *testing.T) {
	withKeeper(t, "calikeep00002", []string{"10.77.0.8", "fd77::8"}, func(k *Keeper, att *Attached) error {
		const proxyARP, acceptRA, ipForward = "net/ipv4/conf/calikeep00002/proxy_arp", "net/ipv6/conf/calikeep00002/accept_ra", "net/ipv4/ip_forward"
		read := func(key string) string {
			v, err := ReadSysctl(key)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		// Changed before the keeper knew the veth: the first poll reads all
		// of a new veth's sysctls.
		if err := writeSysctl(proxyARP, "0"); err != nil {
			return err
		}
		k.SetVeths([]HostVeth{{Name: "calikeep00002", IPv6: true, Neighbours: []netip.Addr{netip.MustParseAddr("fd77::8")}, MAC: att.ContMAC}})
		if rep, err := k.Check(true); err != nil || rep != (Repairs{Sysctls: 1}) || read(proxyARP) != "1" {
			t.Fatalf("first poll after ADD: %+v, %v, proxy_arp %s; want proxy_arp alone repaired", rep, err, read(proxyARP))
		}
		for _, key := range []string{proxyARP, ipForward} {
			if err := writeSysctl(key, "0"); err != nil {
				return err
			}
		}
		if err := writeSysctl(acceptRA, "1"); err != nil {
			return err
		}
		if rep, err := k.Check(false); err != nil || rep != (Repairs{}) || read(proxyARP) != "0" {
			t.Fatalf("Check without hints: %+v, %v, proxy_arp %s; want nothing read", rep, err, read(proxyARP))
		}
		if rep, err := k.Check(true); err != nil || rep.Sysctls != 1 || read(acceptRA) != "0" || read(proxyARP) != "0" {
			t.Fatalf("polling Check: %+v, %v, accept_ra %s, proxy_arp %s; want accept_ra alone repaired", rep, err, read(acceptRA), read(proxyARP))
		}
		k.SysctlsChanged("calikeep00002")
		// ip_forward=0 also reset the veth's IPv4 forwarding; the node's
		// setting is read after a veth's too.
		if rep, err := k.Check(false); err != nil || rep.Sysctls < 2 || read(proxyARP) != "1" || read(ipForward) != "1" {
			t.Fatalf("Check after the veth's hint: %+v, %v, proxy_arp %s, ip_forward %s; want both repaired", rep, err, read(proxyARP), read(ipForward))
		}
		if err := writeSysctl(ipForward, "0"); err != nil {
			return err
		}
		if rep, err := k.Check(true); err != nil || rep != (Repairs{}) || read(ipForward) != "0" {
			t.Fatalf("polling Check: %+v, %v, ip_forward %s; want the node's sysctls left to their hint", rep, err, read(ipForward))
		}
		k.SysctlsChanged("")
		if rep, err := k.Check(false); err != nil || rep.Sysctls != 1 || read(ipForward) != "1" {
			t.Fatalf("Check after the node's hint: %+v, %v, ip_forward %s; want it repaired", rep, err, read(ipForward))
		}
		return nil
	})
}

// TestKeeperPollReadsAVethMadeAgain: the polled sysctls are read from
// files kept open between polls; when the veth is deleted and another made
// under its name (with the kernel's defaults), the next poll reads the new
// veth's settings, not the old files, and repairs them.
func TestKeeperPollReadsAVethMadeAgain(t *testing.T) {
	const host = "calikeep00003"
	withKeeper(t, host, []string{"10.77.0.9"}, func(k *Keeper, att *Attached) error {
		k.SetVeths([]HostVeth{{Name: host}})
		if rep, err := k.Check(true); err != nil || rep != (Repairs{}) {
			t.Fatalf("first Check after ADD: %+v, %v; want nothing to repair", rep, err)
		}
		proxyDelay := "net/ipv4/neigh/" + host + "/proxy_delay"
		for range 2 { // a second poll reads the kept files
			if rep, err := k.Check(true); err != nil || rep != (Repairs{}) {
				t.Fatalf("steady poll: %+v, %v; want nothing to repair", rep, err)
			}
		}
		h, err := netlink.NewHandle()
		if err != nil {
			return err
		}
		defer h.Close()
		l, err := h.LinkByName(host)
		if err != nil {
			return err
		}
		if err := h.LinkDel(l); err != nil {
			return err
		}
		if err := h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: host}, PeerName: "calikeep3peer"}); err != nil {
			return err
		}
		if v, err := ReadSysctl(proxyDelay); err != nil || v == "0" {
			t.Fatalf("new veth's proxy_delay %q, %v: want the kernel's non-zero default", v, err)
		}
		rep, err := k.Check(true) // no hint: only the poll can see it
		if err != nil {
			t.Fatalf("poll after the veth was made again: %v", err)
		}
		if v, _ := ReadSysctl(proxyDelay); v != "0" || rep.Sysctls == 0 {
			t.Fatalf("poll after the veth was made again: %+v, proxy_delay %q; want it repaired to 0", rep, v)
		}
		return nil
	})
}

// withKeeper attaches a pod with addrs on host veth host (Setup, fresh node
// and pod namespaces) and runs f in the node namespace with a Keeper for
// the "cali" prefix.
func withKeeper(t *testing.T, host string, addrs []string, f func(k *Keeper, att *Attached) error) {
	t.Helper()
	netnstest.SkipUnlessRoot(t, whyRoot)
	node, pod := newNS(t), newNS(t)
	att := attach(t, node, pod, host, addrs...)
	inNS(t, node, func() error {
		k, err := NewKeeper("cali", slog.New(slog.DiscardHandler))
		if err != nil {
			return err
		}
		defer k.Close()
		return f(k, att)
	})
}
