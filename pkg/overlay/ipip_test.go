package overlay_test

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/routelet/routelet/pkg/overlay"
	"github.com/routelet/routelet/pkg/overlay/overlaytest"
)

func newFakeIPIP(t *testing.T) (*overlaytest.FakeNetlink, *overlay.IPIP) {
	t.Helper()
	f := overlaytest.NewFakeNetlink()
	f.AddUnderlay("eth0", 1500, netip.MustParsePrefix("10.0.0.1/24"))
	m, err := overlay.NewIPIP(f, overlay.IPIPConfig{HostIP: hostA, TunnelAddr: tunA, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return f, m
}

func TestIPIPDevice(t *testing.T) {
	f, m := newFakeIPIP(t)
	mustApply(t, m)
	want := "ipip tunl0 mtu 1480 up\naddr 10.244.1.0/32\n"
	if got := dump(f, "tunl0"); got != want {
		t.Fatalf("tunl0:\n%s\nwant:\n%s", got, want)
	}
	if d := m.Device(); d.Index == 0 || d.MTU != 1480 || d.Parent.Name != "eth0" || d.Created != 1 {
		t.Fatalf("Device() = %+v", d)
	}

	// Drift is repaired on the device's event.
	f.SetLinkMTU("tunl0", 1500)
	f.SetLinkDown("tunl0")
	f.AddAddr("tunl0", netip.MustParsePrefix("192.168.0.1/24"))
	if !m.OnLinkUpdate("tunl0") || m.OnLinkUpdate("eth1") {
		t.Fatal("OnLinkUpdate relevance wrong")
	}
	mustApply(t, m)
	if got := dump(f, "tunl0"); got != want {
		t.Fatalf("after repair:\n%s\nwant:\n%s", got, want)
	}

	// Deleted (the module unloaded and reloaded, say): created again.
	f.DeleteLink("tunl0")
	m.QueueCheck()
	mustApply(t, m)
	if got := dump(f, "tunl0"); got != want || m.Device().Created != 2 {
		t.Fatalf("after delete:\n%s\nwant:\n%s", got, want)
	}

	// Configured MTU and a new tunnel address.
	if err := m.SetConfig(overlay.IPIPConfig{MTU: 1400, TunnelAddr: netip.MustParseAddr("10.244.5.0"), Logger: quiet}); err != nil {
		t.Fatal(err)
	}
	mustApply(t, m)
	if got := dump(f, "tunl0"); got != "ipip tunl0 mtu 1400 up\naddr 10.244.5.0/32\n" {
		t.Fatalf("after config change:\n%s", got)
	}
}

func TestIPIPExistingFallbackDevice(t *testing.T) {
	// tunl0 already there (ipip module loaded): adopted, not recreated.
	f := overlaytest.NewFakeNetlink()
	f.AddUnderlay("eth0", 1500, netip.MustParsePrefix("10.0.0.1/24"))
	f.LinkAdd(&netlink.Iptun{LinkAttrs: netlink.LinkAttrs{Name: "tunl0", MTU: 1480}})
	m, err := overlay.NewIPIP(f, overlay.IPIPConfig{HostIP: hostA, TunnelAddr: tunA, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	mustApply(t, m)
	if f.Calls("LinkAdd") != 1 || m.Device().Created != 0 {
		t.Fatalf("existing tunl0 recreated (LinkAdd %d)", f.Calls("LinkAdd"))
	}
	// A failed create is reported and retried.
	f.DeleteLink("tunl0")
	f.Fail("LinkAdd", errBoom)
	m.QueueCheck()
	if err := m.Apply(); !errors.Is(err, errBoom) {
		t.Fatalf("injected LinkAdd failure not reported: %v", err)
	}
	mustApply(t, m)
	if f.Link("tunl0") == nil {
		t.Fatal("tunl0 not created on retry")
	}
}

func TestIPIPForeignLinkLeftAlone(t *testing.T) {
	f, m := newFakeIPIP(t)
	f.LinkAdd(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: "tunl0"}})
	err := m.Apply()
	if err == nil || !strings.Contains(err.Error(), "dummy") {
		t.Fatalf("Apply with a dummy named tunl0: %v, want an error naming its type", err)
	}
	if f.Calls("LinkDel") != 0 {
		t.Fatal("deleted a link that is not ours")
	}
}

func TestIPIPFailureConverges(t *testing.T) {
	for _, method := range []string{"AddrList", "LinkByName", "LinkAdd", "LinkSetUp", "AddrReplace", "AddrDel", "LinkSetMTU"} {
		t.Run(method, func(t *testing.T) {
			f, m := newFakeIPIP(t)
			f.LinkAdd(&netlink.Iptun{LinkAttrs: netlink.LinkAttrs{Name: "tunl0", MTU: 1480}})
			if method != "LinkAdd" {
				f.DeleteLink("tunl0")
				f.LinkAdd(&netlink.Iptun{LinkAttrs: netlink.LinkAttrs{Name: "tunl0", MTU: 1500}})
				f.AddAddr("tunl0", netip.MustParsePrefix("192.168.0.1/32"))
			} else {
				f.DeleteLink("tunl0")
			}
			f.Fail(method, errBoom)
			if err := m.Apply(); !errors.Is(err, errBoom) {
				t.Fatalf("first Apply %v, want the injected error", err)
			}
			for range 2 {
				if m.Apply() == nil {
					break
				}
			}
			if m.Dirty() {
				t.Fatal("not converged within 3 Apply calls")
			}
			if got := dump(f, "tunl0"); got != "ipip tunl0 mtu 1480 up\naddr 10.244.1.0/32\n" {
				t.Fatalf("converged to:\n%s", got)
			}
		})
	}
}

func TestIPIPConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg  overlay.IPIPConfig
		want string
	}{
		{overlay.IPIPConfig{HostIP: netip.MustParseAddr("fd00::1")}, "fd00::1"},
		{overlay.IPIPConfig{MTU: 1400, TunnelAddr: netip.MustParseAddr("fd10::")}, "fd10::"},
		{overlay.IPIPConfig{}, "neither an MTU nor a host IP"},
	} {
		if _, err := overlay.NewIPIP(overlaytest.NewFakeNetlink(), tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewIPIP(%+v): %v, want an error naming %q", tc.cfg, err, tc.want)
		}
	}
}

func TestParseKernelVersion(t *testing.T) {
	for _, tc := range []struct {
		release      string
		major, minor int
		ok           bool
	}{
		{"6.1.0-18-amd64", 6, 1, true}, {"4.18.0-553.el8_10.x86_64", 4, 18, true}, {"5.7", 5, 7, true}, {"garbage", 0, 0, false},
	} {
		major, minor, ok := overlay.ParseKernelVersion(tc.release)
		if major != tc.major || minor != tc.minor || ok != tc.ok {
			t.Errorf("parseKernelVersion(%q) = %d, %d, %v", tc.release, major, minor, ok)
		}
	}
}
