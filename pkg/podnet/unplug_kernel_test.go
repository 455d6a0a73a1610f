package podnet

import (
	"errors"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/routelet/routelet/internal/netnstest"
)

// TestTeardownThen: the pair goes, and gone runs once the host veth is no
// longer in the node namespace, before TeardownThen returns, with its error
// returned; a missing link runs gone at once; a link that is not a veth is
// neither deleted nor followed by gone.
func TestTeardownThen(t *testing.T) {
	netnstest.SkipUnlessRoot(t, whyRoot)
	node, pod := newNS(t), newNS(t)
	attach(t, node, pod, "calitestth0001", "10.81.0.2")
	errGone := errors.New("gone's own error")
	inNS(t, node, func() error {
		ran := false
		delErr, goneErr := TeardownThen("calitestth0001", func() error {
			ran = true
			if _, err := netlink.LinkByName("calitestth0001"); err == nil {
				t.Errorf("gone ran while calitestth0001 was still in the node namespace")
			}
			return errGone
		})
		if delErr != nil || !errors.Is(goneErr, errGone) || !ran {
			t.Errorf("TeardownThen = %v, %v (gone ran: %v), want nil, gone's error, true", delErr, goneErr, ran)
		}
		if err := wantHostVethGone(t, "calitestth0001", "TeardownThen"); err != nil {
			return err
		}

		ran = false
		delErr, goneErr = TeardownThen("calitestth0001", func() error { ran = true; return nil })
		if delErr != nil || goneErr != nil || !ran {
			t.Errorf("TeardownThen of a missing link = %v, %v (gone ran: %v), want nil, nil, true", delErr, goneErr, ran)
		}

		if err := netlink.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "calitestthbr"}}); err != nil {
			return err
		}
		ran = false
		delErr, _ = TeardownThen("calitestthbr", func() error { ran = true; return nil })
		if delErr == nil || !strings.Contains(delErr.Error(), "calitestthbr") || ran {
			t.Errorf("TeardownThen of a bridge = %v (gone ran: %v), want an error naming calitestthbr and gone not run", delErr, ran)
		}
		if _, err := netlink.LinkByName("calitestthbr"); err != nil {
			t.Errorf("bridge was removed: %v", err)
		}
		return nil
	})
	if pv, err := InspectPod(pod.Path(), "eth0"); err != nil || pv.Exists {
		t.Errorf("pod eth0 after TeardownThen: exists=%v err=%v, want gone", pv != nil && pv.Exists, err)
	}
}
