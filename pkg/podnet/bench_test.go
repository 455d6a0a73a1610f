package podnet

import (
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/routelet/routelet/internal/netnstest"
)

// BenchmarkKeeperCheck250 measures one periodic keeper pass (the poll) on a
// node with 250 dual-stack pod veths whose settings are all right (the
// steady state): every veth's HostSysctls that are not Announced
// (proxy_delay, accept_ra, accept_dad) read from /proc/sys, nothing
// written.
func BenchmarkKeeperCheck250(b *testing.B) {
	n := netnstest.NewT(b)
	var batch strings.Builder
	var veths []HostVeth
	for i := range 250 {
		name := fmt.Sprintf("calib%04d", i)
		fmt.Fprintf(&batch, "link add %s type veth peer name pb%04d\nlink set %s up\n", name, i, name)
		veths = append(veths, HostVeth{Name: name, IPv6: true})
	}
	file := filepath.Join(b.TempDir(), "links.batch")
	if err := os.WriteFile(file, []byte(batch.String()), 0o600); err != nil {
		b.Fatal(err)
	}
	if out, err := exec.Command("ip", "-n", n.Name, "-batch", file).CombinedOutput(); err != nil {
		b.Fatalf("ip -batch: %v\n%s", err, out)
	}
	err := n.NetNS.Do(func(ns.NetNS) error {
		for _, v := range veths {
			if err := hostSysctls(v.Name, true); err != nil {
				return err
			}
		}
		if err := EnableForwarding(true); err != nil {
			return err
		}
		k, err := NewKeeper("cali", slog.New(slog.DiscardHandler))
		if err != nil {
			return err
		}
		defer k.Close()
		k.SetVeths(veths)
		if _, err := k.Check(true); err != nil { // reads the links once
			return err
		}
		b.ResetTimer()
		for b.Loop() {
			rep, err := k.Check(true)
			if err != nil || rep != (Repairs{}) {
				return fmt.Errorf("steady-state Check: %+v, %v", rep, err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/250, "us/veth")
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
}
