package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/routelet/routelet/internal/netnstest"
)

// dumpScript prints, in the namespace it runs in, everything of the
// datapath that could make one pod path cost more CPU than another: links
// with their driver details (MTU, txqueuelen, gso/gro sizes, VXLAN
// options), qdiscs, offloads, addresses, routes, neighbours (proxy entries
// too), the interface and node sysctls, and every netfilter table of both
// iptables backends and of nftables.
const dumpScript = `
echo "## ip -d link"; ip -d link show
echo "## tc qdisc"; tc qdisc show
for l in $(ls /sys/class/net); do
  echo "## ethtool -k $l"; ethtool -k "$l" 2>&1 | grep -v ' \[fixed\]$'
done
echo "## ip addr"; ip addr show
echo "## ip -4 route"; ip -4 route show table all
echo "## ip -6 route"; ip -6 route show table all
echo "## ip neigh"; ip neigh show nud all; echo "## ip neigh proxy"; ip neigh show proxy
echo "## sysctl"; sysctl -a 2>/dev/null | grep -E '^net\.(ipv4\.(ip_forward|conf|neigh)|ipv6\.(conf|neigh)|core\.(netdev|gro|rps|xfrm|bpf))' | grep -v -E 'stable_secret'
echo "## nft list ruleset"; nft list ruleset
echo "## iptables-legacy-save"; iptables-legacy-save 2>&1
echo "## ip6tables-legacy-save"; ip6tables-legacy-save 2>&1
echo "## conntrack entries (none unless something in this namespace turned conntrack on)"; cat /proc/net/nf_conntrack 2>/dev/null | wc -l
`

// dumpState writes dumpScript's output for routelet's node and pod and the
// reference's into dir as <role>.txt, with the host veth names replaced by
// HOSTVETH so the files diff line by line.
func dumpState(ctx context.Context, dir string, roles map[string]ns.NetNS, hostVeths []string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for role, n := range roles {
		// ip netns exec, not ns.Do: /sys/class/net must show n's links.
		b, err := exec.CommandContext(ctx, "ip", "netns", "exec", netnstest.Name(n), "sh", "-c", dumpScript).CombinedOutput()
		if err != nil {
			return fmt.Errorf("dump %s: %w: %s", role, err, b)
		}
		out := string(b)
		for _, v := range hostVeths {
			out = strings.ReplaceAll(out, v, "HOSTVETH")
		}
		if err := os.WriteFile(filepath.Join(dir, role+".txt"), []byte(out), 0o644); err != nil {
			return err
		}
	}
	return nil
}
