package main

import (
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/routelet/routelet/daemon/config"
	"github.com/routelet/routelet/daemon/health"
	"github.com/routelet/routelet/pkg/state"
)

// TestNotReadyStatusNamesDevices: the daemon.json routeletd writes before
// its loop runs carries the configured VXLAN device name and the default
// IPv6 VXLAN and IPIP names, as the loop's does (the agent's tests), so
// the plugin judges the node's links by them from the start.
func TestNotReadyStatusNamesDevices(t *testing.T) {
	store, err := state.Open(filepath.Join(t.TempDir(), "state"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := &config.Config{IfacePrefix: "cali", VXLANDevice: "vx-custom"}
	notReady(cfg, store, health.NewStatus(time.Minute), "starting", slog.New(slog.NewTextHandler(io.Discard, nil)))
	st, err := store.ReadDaemonStatus()
	if err != nil {
		t.Fatal(err)
	}
	if st.Ready || st.Reason != "starting" {
		t.Errorf("daemon.json ready %v, reason %q; want not ready, starting", st.Ready, st.Reason)
	}
	if st.VXLANDevice != "vx-custom" || st.VXLANDeviceV6 != "vxlan-v6.calico" || st.IPIPDevice != "tunl0" {
		t.Errorf("daemon.json devices = %q, %q, %q", st.VXLANDevice, st.VXLANDeviceV6, st.IPIPDevice)
	}
	if st.WireGuardDevice != "" {
		t.Errorf("daemon.json wireguardDevice = %q without encryption, want none", st.WireGuardDevice)
	}
	cfg.Encryption, cfg.WireGuard.Device = config.EncryptionWireGuard, "wg-pods"
	notReady(cfg, store, health.NewStatus(time.Minute), "starting", slog.New(slog.NewTextHandler(io.Discard, nil)))
	if st, err := store.ReadDaemonStatus(); err != nil || st.WireGuardDevice != "wg-pods" {
		t.Errorf("daemon.json = %+v, %v; want wireguardDevice wg-pods with encryption", st, err)
	}
}
