package main

import (
	"path/filepath"
	"testing"

	"github.com/routelet/routelet/daemon/config"
	"github.com/routelet/routelet/daemon/hostread"
	"github.com/routelet/routelet/pkg/state"
)

// TestDaemonStatusNamesDevices: daemon.json carries the configured VXLAN
// device name and the default IPv6 VXLAN and IPIP names.
func TestDaemonStatusNamesDevices(t *testing.T) {
	store, err := state.Open(filepath.Join(t.TempDir(), "state"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := &config.Config{IfacePrefix: "cali", VXLANDevice: "vx-custom"}
	if err := (deviceStatus{store, hostread.OverlayDevices(cfg)}).WriteDaemonStatus(&state.DaemonStatus{Ready: true}); err != nil {
		t.Fatal(err)
	}
	st, err := store.ReadDaemonStatus()
	if err != nil {
		t.Fatal(err)
	}
	if st.VXLANDevice != "vx-custom" || st.VXLANDeviceV6 != "vxlan-v6.calico" || st.IPIPDevice != "tunl0" {
		t.Errorf("daemon.json devices = %q, %q, %q", st.VXLANDevice, st.VXLANDeviceV6, st.IPIPDevice)
	}
}
