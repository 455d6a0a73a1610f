package multinode

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/routelet/routelet/daemon/diagnose"
	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/pkg/overlay"
	"github.com/routelet/routelet/pkg/state"
)

// BenchmarkDiagnoseScale: routeletd diagnose on a node with 250 pods
// (attached through the plugin) and 1,000 peers (records in nodes/,
// programmed by the running daemon), on the real kernel: the command as an
// operator runs it, and the same walk in-process with its kernel reads
// counted.
func BenchmarkDiagnoseScale(b *testing.B) {
	const pods, npeers = 250, 1000
	c, n := startLone(b)
	runDaemon(b, n, "--encapsulation=vxlan", "--health-addr=")
	ctx := context.Background()
	netnstest.WaitFor(b, 30*time.Second, "routeletd ready", func() error {
		if st, err := n.Store.ReadDaemonStatus(); err != nil || !st.Ready {
			return fmt.Errorf("daemon.json: %+v, %v", st, err)
		}
		return nil
	})
	for i := range pods {
		if _, err := c.AddPod(ctx, n.Node, fmt.Sprintf("p%d", i)); err != nil {
			b.Fatal(err)
		}
	}
	var dst netip.Addr
	for i := range npeers {
		name := fmt.Sprintf("peer-%04d", i)
		h4 := netip.AddrFrom4([4]byte{10, 1, byte(i / 250), byte(i%250 + 1)})
		b4 := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(100 + i/256), byte(i % 256), 0}), 24)
		dst = b4.Addr().Next()
		rec := &state.Node{Version: state.RecordVersion, Name: name, HostIPv4: h4.String(), Blocks: []string{b4.String()},
			VTEPMAC: overlay.VTEPMAC(name, 4).String(), TunnelIPv4: b4.Addr().String(), Updated: time.Now().UTC()}
		if err := n.Store.PutNode(rec); err != nil {
			b.Fatal(err)
		}
	}
	netnstest.WaitFor(b, 60*time.Second, "1,000 overlay routes", func() error {
		rs, err := n.overlayRoutes(netlink.FAMILY_V4)
		if err != nil || len(rs) < npeers {
			return fmt.Errorf("%d overlay routes, %v", len(rs), err)
		}
		return nil
	})
	src := "demo/p0"
	args := []string{"diagnose", "--node-name=" + n.Spec.Name, "--state-dir=" + n.StateDir, "--encapsulation=vxlan", src, dst.String()}
	if out, err := netnstest.Exec(ctx, n.CNI.NS, filepath.Join(binDir, "routeletd"), args...); err != nil {
		b.Fatalf("diagnose is not clean at scale: %v\n%s", err, out)
	}

	b.Run("command", func(b *testing.B) {
		for b.Loop() {
			if out, err := netnstest.Exec(ctx, n.CNI.NS, filepath.Join(binDir, "routeletd"), args...); err != nil {
				b.Fatalf("%v\n%s", err, out)
			}
		}
	})
	b.Run("in-process", func(b *testing.B) {
		st, err := diagnose.OpenStateDir(n.StateDir)
		if err != nil {
			b.Fatal(err)
		}
		runs, reads := 0, 0
		err = n.CNI.NS.Do(func(ns.NetNS) error {
			k, closeK, err := diagnose.NewKernel(diagnose.KernelOptions{RouteProtocol: routeProto})
			if err != nil {
				return err
			}
			defer closeK()
			ck := diagnose.NewCounted(k)
			cfg := diagnose.Config{NodeName: n.Spec.Name, StateDir: n.StateDir, IfacePrefix: "cali", RouteProtocol: routeProto,
				Mode: overlay.ModeVXLAN, VXLANDevice: overlay.DeviceVXLAN, VNI: overlay.DefaultVNI, Port: overlay.DefaultPort}
			for b.Loop() {
				rep, err := diagnose.Run(cfg, st, ck, src, dst.String(), diagnose.Options{})
				if err != nil {
					return err
				}
				if !rep.OK {
					return fmt.Errorf("not clean: %+v", rep.Steps)
				}
				runs++
			}
			_, reads = ck.ByMethod()
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(reads)/float64(runs), "kernel-reads/op")
	})
}
