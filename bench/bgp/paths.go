package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/routelet/routelet/internal/birdtest"
	"github.com/routelet/routelet/internal/cluster"
	"github.com/routelet/routelet/pkg/peers"
	"github.com/routelet/routelet/pkg/routes"
)

// bgpPath is the BGP node with the router's BIRD.
type bgpPath struct {
	bird  *birdtest.Bird // the router's
	watch *routeWatch    // the speaker's routes in the node
	o     options
	sp    speaker
}

// speaker is what receives BIRD's announcements in the node and programs
// them: routeletd, or in the package's test a stand-in.
type speaker interface {
	Start(ctx context.Context) error // afresh, and wait until it is ready
	Stop() error                     // its routes stay
	Mem() (rss, hwm int64, err error)
	Log() string // the last lines of its log, for errors
}

// daemonSpeaker is routeletd on a cluster node.
type daemonSpeaker struct {
	c *cluster.Cluster
	n *cluster.Node
}

func (d daemonSpeaker) Start(ctx context.Context) error  { return startDaemon(ctx, d.c, d.n) }
func (d daemonSpeaker) Stop() error                      { return d.n.Stop() }
func (d daemonSpeaker) Mem() (rss, hwm int64, err error) { return memOf(d.n) }
func (d daemonSpeaker) Log() string                      { return d.n.LogTail(20) }

// newBGPPath watches the routes of protocol proto in n, where sp runs.
func newBGPPath(n *cluster.Node, proto int, sp speaker, b *birdtest.Bird, o options) (*bgpPath, error) {
	w, err := watchRoutes(n.CNI.NS, proto, pool)
	if err != nil {
		return nil, err
	}
	return &bgpPath{bird: b, watch: w, o: o, sp: sp}, nil
}

// round starts the speaker on an empty table, waits for its session with
// BIRD, enables the static protocol and times the routes' arrival; then
// stops the speaker, disables the static protocol and deletes the routes.
func (p *bgpPath) round(ctx context.Context) (s sample, err error) {
	if err := p.watch.Flush(); err != nil {
		return s, err
	}
	if err := p.sp.Start(ctx); err != nil {
		return s, err
	}
	defer func() { err = errors.Join(err, p.reset(ctx)) }()
	if err := p.waitSession(ctx); err != nil {
		return s, err
	}
	p.watch.Drain()
	t0 := time.Now()
	if err := p.bird.Enable(ctx, staticProto); err != nil {
		return s, err
	}
	t1, err := p.watch.WaitCount(ctx, p.o.n, p.o.timeout)
	if err != nil {
		out, _ := p.bird.Birdc(ctx, "show", "protocols", "all", birdPeer)
		return s, fmt.Errorf("bgp path: %w\nrouter: %s\nspeaker:\n%s", err, strings.TrimSpace(out), p.sp.Log())
	}
	s.elapsed = t1.Sub(t0)
	if s.rss, s.hwm, err = p.sp.Mem(); err != nil {
		return s, err
	}
	return s, p.watch.Check(p.o.n, func(netip.Prefix) netip.Addr { return routerIP })
}

// waitSession waits until BIRD's session with the node is established.
func (p *bgpPath) waitSession(ctx context.Context) error {
	deadline := time.Now().Add(p.o.timeout)
	for {
		pr, err := p.bird.Protocol(ctx, birdPeer)
		if err == nil && pr.Established() {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bgp path: session %s not established after %s (%+v, %v)\nspeaker:\n%s", birdPeer, p.o.timeout, pr, err, p.sp.Log())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// reset stops the speaker (its routes stay, as routeletd's do on a real
// node), withdraws the announcements and deletes the routes left.
func (p *bgpPath) reset(ctx context.Context) error {
	return errors.Join(p.sp.Stop(), p.bird.Disable(ctx, staticProto), p.watch.Flush())
}

// filePath is the file-datastore node.
type filePath struct {
	c       *cluster.Cluster
	n       *cluster.Node
	watch   *routeWatch
	staging string // the records, written once; copied for each round
	names   []string
	hosts   map[netip.Prefix]netip.Addr // each record's block → its host IP
	o       options
}

func newFilePath(n *cluster.Node, c *cluster.Cluster, work string, o options) (*filePath, error) {
	blocks, err := birdtest.Subnets(pool, blockBits, o.n)
	if err != nil {
		return nil, err
	}
	p := &filePath{c: c, n: n, staging: filepath.Join(work, "records"), hosts: map[netip.Prefix]netip.Addr{}, o: o}
	if err := os.MkdirAll(p.staging, 0o700); err != nil {
		return nil, err
	}
	for i, b := range blocks {
		name, host, data, err := encodeRecord(i, b)
		if err != nil {
			return nil, err
		}
		p.hosts[b] = host
		if err := os.WriteFile(filepath.Join(p.staging, name), data, 0o600); err != nil {
			return nil, err
		}
		p.names = append(p.names, name)
	}
	if p.watch, err = watchRoutes(n.CNI.NS, routes.DefaultProtocol, pool); err != nil {
		return nil, err
	}
	return p, nil
}

// round starts routeletd on an empty table with no peer records, renames
// the records in (copied first into a directory on the state directory's
// file system) and times the routes' arrival; then stops routeletd and
// removes the records and routes.
func (p *filePath) round(ctx context.Context) (s sample, err error) {
	if err := p.watch.Flush(); err != nil {
		return s, err
	}
	ready := filepath.Join(filepath.Dir(p.n.StateDir), "records-ready")
	if err := os.RemoveAll(ready); err != nil {
		return s, err
	}
	if err := os.MkdirAll(ready, 0o700); err != nil {
		return s, err
	}
	for _, name := range p.names {
		b, err := os.ReadFile(filepath.Join(p.staging, name))
		if err != nil {
			return s, err
		}
		if err := os.WriteFile(filepath.Join(ready, name), b, 0o600); err != nil {
			return s, err
		}
	}
	if err := startDaemon(ctx, p.c, p.n); err != nil {
		return s, err
	}
	defer func() { err = errors.Join(err, p.reset()) }()
	nodes := p.n.Store.NodesDir()
	p.watch.Drain()
	t0 := time.Now()
	for _, name := range p.names {
		if err := os.Rename(filepath.Join(ready, name), filepath.Join(nodes, name)); err != nil {
			return s, fmt.Errorf("file path: %w", err)
		}
	}
	s.writeTime = time.Since(t0)
	t1, err := p.watch.WaitCount(ctx, p.o.n, p.o.timeout)
	if err != nil {
		return s, fmt.Errorf("file path: %w\nrouteletd:\n%s", err, p.n.LogTail(20))
	}
	s.elapsed = t1.Sub(t0)
	if s.rss, s.hwm, err = memOf(p.n); err != nil {
		return s, err
	}
	return s, p.watch.Check(p.o.n, func(b netip.Prefix) netip.Addr { return p.hosts[b] })
}

// reset stops routeletd, removes the peer records, the first-seen times
// of their values (the next round's daemon meets them as new, as the
// first did) and deletes the routes left.
func (p *filePath) reset() error {
	errs := []error{p.n.Stop()}
	if err := os.Remove(filepath.Join(p.n.StateDir, peers.LedgerFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	nodes := p.n.Store.NodesDir()
	for _, name := range p.names {
		if err := os.Remove(filepath.Join(nodes, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(append(errs, p.watch.Flush())...)
}
