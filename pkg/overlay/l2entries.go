package overlay

import (
	"net"
	"net/netip"
)

// L2Entries returns the permanent entries a VXLAN device of family
// ipVersion holds for peers: tunnel IP → VTEP MAC (ARP/NDP) and VTEP MAC
// (its String) → host IP (FDB), as the device manager programs them.
func L2Entries(ipVersion int, peers []Peer) (arp map[netip.Addr]net.HardwareAddr, fdb map[string]netip.Addr) {
	w, _ := desiredL2(ipVersion, peers)
	fdb = make(map[string]netip.Addr, len(w.fdb))
	for mac, dst := range w.fdb {
		fdb[net.HardwareAddr(mac[:]).String()] = dst
	}
	return w.arp, fdb
}
