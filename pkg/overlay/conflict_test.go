package overlay_test

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/pkg/overlay"
	"github.com/routelet/routelet/pkg/overlay/overlaytest"
)

// TestVXLANForeignDevice: a VXLAN device of another name on our VNI and
// port makes Apply fail with ErrForeignDevice naming it, leaves it alone,
// and succeeds once it is gone; one on another port is no conflict.
func TestVXLANForeignDevice(t *testing.T) {
	f, m := newFakeVXLAN(t)
	eth0 := f.Link("eth0")
	foreign := &netlink.Vxlan{LinkAttrs: netlink.LinkAttrs{Name: "flannel.1"}, VxlanId: overlay.DefaultVNI, Port: overlay.DefaultPort,
		VtepDevIndex: eth0.Attrs().Index, SrcAddr: net.IP(hostA.AsSlice())}
	if err := f.LinkAdd(foreign); err != nil {
		t.Fatal(err)
	}
	err := m.Apply()
	if !errors.Is(err, overlay.ErrForeignDevice) || !strings.Contains(err.Error(), "flannel.1") || !strings.Contains(err.Error(), "VNI 4096") {
		t.Fatalf("Apply with flannel.1 on VNI 4096 port 4789: %v, want ErrForeignDevice naming it", err)
	}
	if f.Link("flannel.1") == nil || f.Link(overlay.DeviceVXLAN) != nil {
		t.Fatal("flannel.1 touched, or vxlan.calico created beside it")
	}
	if !f.DeleteLink("flannel.1") {
		t.Fatal("no flannel.1")
	}
	if err := m.Apply(); err != nil {
		t.Fatalf("Apply after flannel.1 was removed: %v", err)
	}

	// Another port: no conflict.
	f2, m2 := newFakeVXLAN(t)
	other := *foreign
	other.Port = 8472
	other.VtepDevIndex = f2.Link("eth0").Attrs().Index
	if err := f2.LinkAdd(&other); err != nil {
		t.Fatal(err)
	}
	if err := m2.Apply(); err != nil {
		t.Fatalf("Apply beside a vxlan device on port 8472: %v", err)
	}
}

// TestUnsupportedLinkKind: the kernel's EOPNOTSUPP for an unknown link
// kind becomes ErrUnsupported naming the kind; any other create error does
// not.
func TestUnsupportedLinkKind(t *testing.T) {
	f := overlaytest.NewFakeNetlink()
	f.AddUnderlay("eth0", 1500)
	m, err := overlay.NewIPIP(f, overlay.IPIPConfig{MTU: 1480, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	f.Fail("LinkAdd", fmt.Errorf("netlink: %w", unix.EOPNOTSUPP))
	if err := m.Apply(); !errors.Is(err, overlay.ErrUnsupported) || !strings.Contains(err.Error(), "cannot create ipip links") {
		t.Fatalf("Apply on a kernel without ipip: %v, want ErrUnsupported naming ipip", err)
	}
	f.Fail("LinkAdd", unix.EPERM)
	if err := m.Apply(); err == nil || errors.Is(err, overlay.ErrUnsupported) {
		t.Fatalf("Apply with EPERM: %v, want a plain error", err)
	}
	if err := m.Apply(); err != nil {
		t.Fatalf("Apply once the kernel can: %v", err)
	}
}
