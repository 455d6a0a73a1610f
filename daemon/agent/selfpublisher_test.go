package agent

import (
	"sync"
	"testing"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/routelet/routelet/pkg/peers"
)

// tunnelPublisher changes its part of the node's record (the IPv4 tunnel
// address) when told to, as the WireGuard manager does after a key
// rotation.
type tunnelPublisher struct {
	countingManager
	mu     sync.Mutex
	tunnel string
}

func (p *tunnelPublisher) set(s string) { p.mu.Lock(); p.tunnel = s; p.mu.Unlock() }

func (p *tunnelPublisher) UpdateSelf(self *peers.Record) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tunnel == "" || self.TunnelIPv4 == p.tunnel {
		return false
	}
	self.TunnelIPv4 = p.tunnel
	return true
}

// TestSelfPublisherRepublishes: a SelfPublisher's change to the node's
// record after a pass reaches the datastore (the file datastore's own
// record) at once, and the snapshots' Self, without a full sync.
func TestSelfPublisherRepublishes(t *testing.T) {
	f := newFixture(t)
	p := &tunnelPublisher{}
	f.run(t, p)
	waitFor(t, "ready", func() bool { ok, _ := f.st.Ready(); return ok })
	if n, err := f.store.GetNode("node-a"); err != nil || n.TunnelIPv4 != "" {
		t.Fatalf("record before the change: %+v, %v", n, err)
	}
	p.set("10.244.1.0")
	f.a.NotifyApply()
	waitFor(t, "record published again", func() bool {
		n, err := f.store.GetNode("node-a")
		return err == nil && n.TunnelIPv4 == "10.244.1.0"
	})
	n, _ := f.store.GetNode("node-a")
	if n.HostIPv4 != "192.0.2.10" || len(n.Blocks) != 2 {
		t.Errorf("republished record lost the rest: %+v", n)
	}
}

// TestSamePeerWireGuard: a peer whose WireGuard key or port changed is a
// changed peer, so the managers hear of it without a full sync.
func TestSamePeerWireGuard(t *testing.T) {
	a := peers.NodeInfo{Name: "node-b", WireGuard: peers.WireGuardPeer{PublicKey: wgtypes.Key{1}, Port: 51820}}
	for name, b := range map[string]peers.NodeInfo{
		"key":  {Name: "node-b", WireGuard: peers.WireGuardPeer{PublicKey: wgtypes.Key{2}, Port: 51820}},
		"port": {Name: "node-b", WireGuard: peers.WireGuardPeer{PublicKey: wgtypes.Key{1}, Port: 51821}},
		"gone": {Name: "node-b"},
	} {
		if samePeer(a, b) {
			t.Errorf("%s changed: samePeer says the peers are the same", name)
		}
	}
	if !samePeer(a, a) {
		t.Error("a peer differs from itself")
	}
}
