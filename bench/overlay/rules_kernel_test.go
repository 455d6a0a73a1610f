package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/routelet/routelet/internal/netnstest"
)

// TestReferenceRulesLoad: every ruleset under testdata loads into a
// reference node, with its placeholders filled in for that node, so a
// -reference-nft run cannot stop halfway on a broken file.
func TestReferenceRulesLoad(t *testing.T) {
	netnstest.SkipUnlessRoot(t, "creates network namespaces")
	if _, err := exec.LookPath("nft"); err != nil {
		t.Fatalf("nft not found: install nftables (make deps)")
	}
	files, err := filepath.Glob("testdata/*.nft")
	if err != nil || len(files) == 0 {
		t.Fatalf("no rulesets under testdata: %v", err)
	}
	ctx := context.Background()
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			r := &reference{}
			for _, n := range []refNode{refA, refB} {
				node := netnstest.NewT(t)
				if _, err := netnstest.Exec(ctx, node.NetNS, "ip", "link", "add", refHostVeth(n), "type", "veth", "peer", "name", "eth9"); err != nil {
					t.Fatal(err)
				}
				r.nodes = append(r.nodes, ns.NetNS(node.NetNS))
			}
			if err := r.loadRules(ctx, file); err != nil {
				t.Fatal(err)
			}
			for i, n := range []refNode{refA, refB} {
				out, err := netnstest.Exec(ctx, r.nodes[i], "nft", "list", "ruleset")
				if err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(out, n.pod4) || strings.Contains(out, "{veth}") {
					t.Errorf("%s on %s: ruleset without its pod address %s or with a placeholder left:\n%s", file, n.name, n.pod4, out)
				}
			}
		})
	}
	if leftover, _ := filepath.Glob(filepath.Join(os.TempDir(), fmt.Sprintf("%sref-*-%d.nft", benchPrefix, os.Getpid()))); len(leftover) > 0 {
		t.Errorf("temporary rule files left behind: %v", leftover)
	}
}
