package overlaymgr

import (
	"slices"

	"github.com/routelet/routelet/daemon/inspect"
	"github.com/routelet/routelet/pkg/overlay"
	"github.com/routelet/routelet/pkg/peers"
)

// Snapshot implements inspect.Snapshotter: the mode, and per family the
// routes, devices and ARP/FDB entries the manager wants for d's peers
// (what OnNodes derived from the same peers).
func (m *Manager) Snapshot(d *inspect.Desired) {
	d.Node.Mode = string(m.cfg.Mode)
	nodes := make([]peers.NodeInfo, 0, len(d.Peers))
	for _, p := range d.Peers {
		nodes = append(nodes, p.NodeInfo)
	}
	for _, f := range m.fams {
		ps := Peers(nodes, f.v)
		in := f.in
		in.Peers = ps
		want, errs := overlay.Routes(in)
		of := inspect.OverlayFamily{Version: f.v, Routes: want}
		for _, err := range errs {
			of.Problems = append(of.Problems, err.Error())
		}
		for _, dev := range f.devices {
			w := inspect.DeviceWant{Name: dev.Device().Name, Kind: "ipip", MTU: f.mtu}
			if f.vxlan != nil && dev == device(f.vxlan) {
				w.Kind, w.MAC = "vxlan", overlay.VTEPMAC(m.cfg.NodeName, f.v).String()
			}
			of.Devices = append(of.Devices, w)
		}
		if f.vxlan != nil {
			of.VXLANDevice = f.vxlan.Device().Name
			of.ARP, of.FDB = overlay.L2Entries(f.v, ps)
		}
		d.Overlay = append(d.Overlay, of)
	}
	slices.SortFunc(d.Overlay, func(a, b inspect.OverlayFamily) int { return a.Version - b.Version })
}
