package diagnose

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/routelet/routelet/pkg/overlay"
)

// proberFunc is a Prober that runs a function (which may bump the fake's
// counters, as the packet would).
type proberFunc func(netnsPath string, dst netip.Addr, size int) ProbeResult

func (f proberFunc) Probe(netnsPath string, dst netip.Addr, size int, _ time.Duration) (ProbeResult, error) {
	return f(netnsPath, dst, size), nil
}

// bump adds to the counters of the named links of k.
func bump(k *fakeKernel, tx, rx, txDropped map[string]uint64) {
	for i := range k.links {
		l := &k.links[i]
		l.Stats.TxPackets += tx[l.Name]
		l.Stats.RxPackets += rx[l.Name]
		l.Stats.TxDropped += txDropped[l.Name]
	}
}

// TestProbe: the probe is a DF echo of the pod MTU from the source pod's
// netns; without a reply it names the last hop whose counters moved.
func TestProbe(t *testing.T) {
	const veth = "cali00000000001"
	for _, tc := range []struct {
		name   string
		result ProbeResult
		tx, rx map[string]uint64
		drop   map[string]uint64
		status Status
		says   string
	}{
		{name: "reply", result: ProbeResult{Replied: true, RTT: time.Millisecond}, status: Pass, says: "reply in 1ms"},
		{name: "never left the pod", status: Fail, says: "never reached " + veth},
		{name: "dropped by the VXLAN device", rx: map[string]uint64{veth: 1}, drop: map[string]uint64{overlay.DeviceVXLAN: 1}, status: Fail,
			says: "vxlan.calico dropped it (tx_dropped +1"},
		{name: "lost beyond this node", rx: map[string]uint64{veth: 1}, tx: map[string]uint64{overlay.DeviceVXLAN: 1, "eth0": 1}, status: Fail,
			says: "left node a on eth0 (tx +1)"},
		{name: "frag needed", result: ProbeResult{ICMPError: "fragmentation needed, next-hop MTU 1400, from 10.0.1.1"}, status: Fail, says: "next-hop MTU 1400"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newFakeNode(3, 3)
			var sent struct {
				ns   string
				dst  netip.Addr
				size int
			}
			p := proberFunc(func(ns string, dst netip.Addr, size int) ProbeResult {
				sent.ns, sent.dst, sent.size = ns, dst, size
				bump(n.k, tc.tx, tc.rx, tc.drop)
				return tc.result
			})
			rep, err := Run(n.cfg, n.st, n.k, "demo/pod-0", "10.100.1.5", Options{Probe: true, Prober: p})
			if err != nil {
				t.Fatal(err)
			}
			if sent.ns != "/var/run/netns/pod-0" || sent.dst != netip.MustParseAddr("10.100.1.5") || sent.size != fakePodMTU {
				t.Errorf("probe sent from %s to %s, %d bytes; want the pod's netns, 10.100.1.5, %d", sent.ns, sent.dst, sent.size, fakePodMTU)
			}
			s := rep.Steps[len(rep.Steps)-1]
			if s.ID != StepProbe || s.Status != tc.status || !strings.Contains(s.Fact+" "+s.Problem, tc.says) {
				t.Errorf("probe step %+v, want %s saying %q", s, tc.status, tc.says)
			}
		})
	}
}

// TestParseReply: echo replies and ICMP errors about our echo are told
// apart from other ICMP traffic.
func TestParseReply(t *testing.T) {
	from := netip.MustParseAddr("10.0.1.1")
	reply := []byte{0, 0, 0, 0, 0x12, 0x34, 0, 1}
	if r, ok := parseReply(reply, false, 0x1234, from); !ok || !r.Replied {
		t.Errorf("echo reply not recognised: %+v %v", r, ok)
	}
	if _, ok := parseReply(reply, false, 0x4321, from); ok {
		t.Error("someone else's echo reply taken for ours")
	}
	frag := make([]byte, 8+20+8)
	frag[0], frag[1] = 3, 4
	frag[6], frag[7] = 0x05, 0x78 // 1400
	frag[8+20+4], frag[8+20+5] = 0x12, 0x34
	if r, ok := parseReply(frag, false, 0x1234, from); !ok || !strings.Contains(r.ICMPError, "next-hop MTU 1400, from 10.0.1.1") {
		t.Errorf("fragmentation needed: %+v %v", r, ok)
	}
	if c := checksum([]byte{8, 0, 0, 0, 0, 1, 0, 1}); c != 0xf7fd {
		t.Errorf("checksum = %#x, want 0xf7fd", c)
	}
}
