package overlay

import (
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"testing"
)

// TestL2BurstMemoryReleased: the maps that held a burst of entries (the
// start-up's ARP/FDB writes of every peer, and their pending echoes) give
// their memory back once the burst is done, instead of keeping every
// bucket they grew for the life of the daemon.
func TestL2BurstMemoryReleased(t *testing.T) {
	const n = 5000
	ps := make([]Peer, n)
	for i := range ps {
		ps[i] = Peer{Name: fmt.Sprintf("p%05d", i), HostIP: netip.AddrFrom4([4]byte{10, 1, byte(i / 250), byte(1 + i%250)}),
			VTEPMAC: net.HardwareAddr{2, 0, 0, 0, byte(i / 256), byte(i % 256)}, TunnelIP: netip.AddrFrom4([4]byte{10, 200, byte(i / 256), byte(i % 256)})}
	}
	heap := func() int64 {
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return int64(ms.HeapAlloc)
	}
	base := heap()
	s := newL2State(4)
	var e echoes
	s.setPeers(4, ps)
	for _, p := range ps {
		e.wrote(neighEcho(p.TunnelIP, p.VTEPMAC, false))
		e.wrote(fdbEcho([6]byte(p.VTEPMAC), p.HostIP, false))
	}
	s.held()
	for _, p := range ps {
		if !e.seen(neighEcho(p.TunnelIP, p.VTEPMAC, false)) || !e.seen(fdbEcho([6]byte(p.VTEPMAC), p.HostIP, false)) {
			t.Fatalf("the echo of %s's entries was not recognised", p.Name)
		}
	}
	// What stays is the wanted entries and the peers (about 150 bytes a
	// peer); the buckets the burst grew were another 180.
	if kept := heap() - base; kept > 240*n {
		t.Errorf("after the burst the state holds %d bytes (%d a peer); want at most 240 a peer", kept, kept/n)
	}
	runtime.KeepAlive(&s)
}
