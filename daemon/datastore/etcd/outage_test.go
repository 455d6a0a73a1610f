package etcd

import (
	"context"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/routelet/routelet/internal/etcdtest"
	"github.com/routelet/routelet/internal/netnstest"
)

// proxy forwards TCP connections to target until cut; cut closes every
// connection and refuses new ones until restore.
type proxy struct {
	l      net.Listener
	target string
	mu     sync.Mutex
	down   bool
	conns  []net.Conn
}

// newProxy listens on loopback for target.
func newProxy(t *testing.T, target string) *proxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{l: l, target: target}
	t.Cleanup(func() { l.Close(); p.cut() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			down := p.down
			p.mu.Unlock()
			if down {
				c.Close()
				continue
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			go func() { io.Copy(u, c); u.Close() }()
			go func() { io.Copy(c, u); c.Close() }()
		}
	}()
	return p
}

// cut drops every connection and refuses new ones.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// restore accepts connections again.
func (p *proxy) restore() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}

// TestOutage: node-b cut off from etcd keeps its peers and reports the
// outage in routelet_datastore_up; what changed meanwhile (a peer added,
// one removed) is served once etcd is reachable again. Liveness keys are
// reported, and a peer whose liveness key is gone stays a peer.
func TestOutage(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	px := newProxy(t, strings.TrimPrefix(srv.Endpoints[0], "http://"))
	b := open(t, srv, "node-b", func(o *Options) { o.Etcd.Endpoints = []string{"http://" + px.l.Addr().String()} })
	a := open(t, srv, "node-a")
	recA := record("node-a", "10.244.0.0/26", "192.168.1.1")
	if err := a.Publish(recA); err != nil {
		t.Fatal(err)
	}
	actx, stopA := context.WithCancel(context.Background())
	defer stopA()
	watchedCtx(t, actx, a)
	if err := b.Publish(record("node-b", "10.244.0.64/26", "192.168.1.2")); err != nil {
		t.Fatal(err)
	}
	watched(t, b)
	waitPeers(t, b, "node-a", recA)
	netnstest.Eventually(t, 30*time.Second, "node-a live", func() bool { return slices.Contains(b.Live(), "node-a") })
	if n := testutil.ToFloat64(b.m.live); n != 1 {
		t.Errorf("routelet_datastore_peers_live = %v, want 1", n)
	}

	px.cut()
	netnstest.Eventually(t, 30*time.Second, "routelet_datastore_up 0", func() bool { return testutil.ToFloat64(b.m.up) == 0 })
	if h := b.Health(); h.Reachable == nil || *h.Reachable || !h.Liveness || !slices.Contains(h.Live, "node-a") {
		t.Errorf("health during the outage: %+v; want unreachable, node-a live", h)
	}
	c := open(t, srv, "node-c")
	recC := record("node-c", "10.244.0.128/26", "192.168.1.3")
	if err := c.Publish(recC); err != nil {
		t.Fatal(err)
	}
	stopA() // leave is for a stopped daemon
	if _, err := a.Leave(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Cut off, node-b still has node-a.
	waitPeers(t, b, "node-a kept during the outage", recA)

	px.restore()
	waitPeers(t, b, "node-c, and node-a gone, after the outage", recC)
	netnstest.Eventually(t, 30*time.Second, "routelet_datastore_up 1", func() bool { return testutil.ToFloat64(b.m.up) == 1 })
	if n := testutil.ToFloat64(b.m.errors.WithLabelValues("keepalive")); n == 0 {
		t.Errorf("no failed keepalive counted during the outage")
	}
	if h := b.Health(); h.Reachable == nil || !*h.Reachable || h.RequestErrors["keepalive"] != int(testutil.ToFloat64(b.m.errors.WithLabelValues("keepalive"))) {
		t.Errorf("health after the outage: %+v; want reachable, the failed keepalives as counted in the metric", h)
	}
}
