package podnet

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/vishvananda/netlink"

	"github.com/routelet/routelet/internal/netnstest"
)

// TestTeardownThen: the pair goes, and gone runs once the host veth is no
// longer in the node namespace, before TeardownThen returns, with its error
// returned; a missing link runs gone at once; a link that is not a veth is
// neither deleted nor followed by gone.
func TestTeardownThen(t *testing.T) {
	netnstest.SkipUnlessRoot(t, whyRoot)
	t.Run("in-process", func(t *testing.T) { testTeardownThen(t, false) })
	t.Run("carried", func(t *testing.T) { testTeardownThen(t, true) })
}

// testTeardownThen is TestTeardownThen, the deletion handed to a carrier
// (this test binary, see TestMain) when carried.
func testTeardownThen(t *testing.T, carried bool) {
	carrierReady.Store(carried)
	defer carrierReady.Store(false)
	node, pod := newNS(t), newNS(t)
	starts := carrierStarts.Load()
	attach(t, node, pod, "calitestth0001", "10.81.0.2")
	errGone := errors.New("gone's own error")
	inNS(t, node, func() error {
		ran := false
		delErr, goneErr := TeardownThen("calitestth0001", nil, func() error {
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
		if n := carrierStarts.Load() - starts; carried != (n == 1) {
			t.Errorf("TeardownThen started %d carriers, want one only when carried (%v)", n, carried)
		}

		ran = false
		delErr, goneErr = TeardownThen("calitestth0001", nil, func() error { ran = true; return nil })
		if delErr != nil || goneErr != nil || !ran {
			t.Errorf("TeardownThen of a missing link = %v, %v (gone ran: %v), want nil, nil, true", delErr, goneErr, ran)
		}

		if err := netlink.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "calitestthbr"}}); err != nil {
			return err
		}
		ran = false
		delErr, _ = TeardownThen("calitestthbr", nil, func() error { ran = true; return nil })
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

// TestMain lets this test binary serve as the carrier of TestTeardownThen's
// carried deletions; every other test deletes in-process.
func TestMain(m *testing.M) {
	CarrierMain()
	carrierReady.Store(false)
	os.Exit(m.Run())
}

// TestCarry: a carrier reports the kernel's answer as its exit status:
// 0 for a deleted link, ENODEV for an index no link has, and its own
// status for a request it cannot read; the link is gone after the first.
func TestCarry(t *testing.T) {
	netnstest.SkipUnlessRoot(t, whyRoot)
	node, pod := newNS(t), newNS(t)
	attach(t, node, pod, "calitestcar001", "10.81.0.3")
	inNS(t, node, func() error {
		l, err := netlink.LinkByName("calitestcar001")
		if err != nil {
			return err
		}
		fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		index := strconv.Itoa(l.Attrs().Index)
		for _, c := range []struct {
			v    string
			want int
		}{{index, 0}, {index, int(unix.ENODEV)}, {"eth0", carrierBadRequest}, {"0", carrierBadRequest}} {
			if got := carry(c.v, fd); got != c.want {
				t.Errorf("carry(%q) = %d, want %d", c.v, got, c.want)
			}
		}
		return wantHostVethGone(t, "calitestcar001", "carry")
	})
}
