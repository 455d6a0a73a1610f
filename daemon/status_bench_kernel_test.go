package main

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/routelet/routelet/daemon/cli"
	"github.com/routelet/routelet/daemon/config"
	"github.com/routelet/routelet/daemon/hostread"
	"github.com/routelet/routelet/daemon/inspect"
	"github.com/routelet/routelet/daemon/statusapi"
	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/pkg/nodespace"
	"github.com/routelet/routelet/pkg/overlay"
)

// BenchmarkStatusKernel measures `routeletd status` on a node with 250
// pods and 1,000 VXLAN peers, all programmed by a real daemon: through
// the running daemon's state socket ("daemon"), the routeletd binary
// asking it ("binary"), and, the daemon stopped, built from the state
// directory and the kernel in process ("offline", kernel reads counted).
func BenchmarkStatusKernel(b *testing.B) {
	netnstest.SkipUnlessRoot(b, whyRoot)
	const pods, peers = 250, 1000
	tn := benchNode(b, pods)
	for i := range pods {
		writeRecord(b, tn, i)
	}
	for i := range peers {
		if err := tn.store.PutNode(benchPeer(i, false)); err != nil {
			b.Fatal(err)
		}
	}
	flags := []string{"--log-level=info", "--pod-cidr=10.244.8.0/24", "--encapsulation=vxlan"}
	d := tn.startDaemon(flags...)
	tn.waitReady()
	healthy := func(st *statusapi.State) bool {
		if len(st.Workloads) != pods || len(st.Peers) != peers {
			return false
		}
		for _, t := range st.Tables {
			if t.Programmed != t.Desired {
				return false
			}
		}
		for _, p := range st.Peers {
			if !p.Routes.Present || !p.ARP.Present || !p.FDB.Present || !p.Allowlist.Present {
				return false
			}
		}
		return true
	}
	get := func() *statusapi.State {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st, err := statusapi.Get(ctx, tn.stateDir)
		if err != nil {
			b.Fatal(err)
		}
		return st
	}
	netnstest.Eventually(b, 60*time.Second, "every pod and peer programmed", func() bool { return healthy(get()) })

	b.Run("daemon", func(b *testing.B) {
		for b.Loop() {
			get()
		}
	})
	b.Run("binary", func(b *testing.B) {
		for b.Loop() {
			if _, errs, code := tn.runIn(tn.statusFlags(append(flags, "--output=json")...)...); code != 0 {
				b.Fatalf("status: exit %d: %s", code, errs)
			}
		}
	})
	if err := d.stop(b); err != nil {
		b.Fatal(err)
	}
	cfg, err := config.Load(append([]string{"--node-name=node-a", "--state-dir=" + tn.stateDir, "--pod-cidr=" + tn.podCIDR}, flags...),
		func(string) (string, bool) { return "", false }, os.ReadFile, os.Stderr)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("offline", func(b *testing.B) {
		var reads int64
		err := tn.node.NS.Do(func(ns.NetNS) error {
			nl, err := inspect.NewNetlink()
			if err != nil {
				return err
			}
			defer nl.Close()
			c := &inspect.Counting{R: nl}
			var st *statusapi.State
			for b.Loop() {
				onl, err := overlay.NewKernel()
				if err != nil {
					return err
				}
				host, err := nodespace.ReadHost(nil, cfg.RouteProtocol, hostread.OwnLink(cfg))
				if err != nil {
					return err
				}
				if st, err = cli.OfflineStatus(cfg, "routeletd is not running", c, onl, host, time.Now()); err != nil {
					return err
				}
			}
			reads = c.Reads()
			if !healthy(st) {
				return fmt.Errorf("offline status of the stopped daemon's node is not healthy")
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(reads)/float64(b.N), "kernel-reads/op")
	})
}
