package podnet

import (
	"net/netip"
	"testing"

	"github.com/routelet/routelet/internal/nlutil"
	"github.com/routelet/routelet/pkg/podguard"
)

// TestCheckGuardsAfterCleanCheck: a check that found every guard right
// leaves the ruleset alone while nothing changes, and still repairs a
// guard that is deleted after it and a guard whose veth gets another
// address.
func TestCheckGuardsAfterCleanCheck(t *testing.T) {
	withKeeper(t, "caliguard0001", []string{"10.77.1.7", "fd77:1::7"}, func(k *Keeper, att *Attached) error {
		g, err := podguard.New()
		if err != nil {
			return err
		}
		defer g.Close()
		k.SetGuards(g, 0)
		v := HostVeth{Name: "caliguard0001", IPv6: true, Addrs: []netip.Addr{netip.MustParseAddr("10.77.1.7"), netip.MustParseAddr("fd77:1::7")}, MAC: att.ContMAC}
		k.SetVeths([]HostVeth{v})
		if _, err := k.Check(true); err != nil {
			return err
		}
		check := func(what string, want int) {
			t.Helper()
			rep, err := k.CheckGuards()
			if err != nil || rep.Guards != want {
				t.Errorf("%s: CheckGuards = %+v, %v; want %d guards written", what, rep, err, want)
			}
		}
		check("first check: the guard is written", 1)
		check("second check", 0)
		gen, err := nlutil.NFTGeneration(nil)
		if err != nil {
			return err
		}
		check("a check with nothing changed", 0)
		if now, err := nlutil.NFTGeneration(nil); err != nil || now != gen {
			t.Errorf("nf_tables generation %d → %d (%v) over a check with nothing changed", gen, now, err)
		}
		if err := g.Remove("caliguard0001"); err != nil {
			return err
		}
		check("guard deleted after a clean check", 1)
		check("after its repair", 0)
		v.Addrs = v.Addrs[:1]
		k.SetVeths([]HostVeth{v})
		check("the veth's addresses changed", 1)
		if st, err := g.Read(podguard.Spec{Device: v.Name, Addrs: v.Addrs}, nil); err != nil || st != podguard.OK {
			t.Errorf("guard after the address change: %v, %v; want OK", st, err)
		}
		return nil
	})
}
