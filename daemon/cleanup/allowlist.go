package cleanup

import (
	"fmt"
	"log/slog"

	"github.com/routelet/routelet/pkg/allowlist"
	"github.com/routelet/routelet/pkg/firewall"
	"github.com/routelet/routelet/pkg/ipset"
	"github.com/routelet/routelet/pkg/podguard"
)

// removeAllowlist removes routelet's jumps and ROUTELET-* chains through
// backend's iptables and ip6tables (IPv6 skipped, with a log line, when
// ip6tables is not usable), then every set whose name starts with
// "routelet-". Rules go first: the kernel refuses to destroy a set a rule
// still uses. Nothing else in the built-in chains and no other set is
// touched; running it twice is fine.
func removeAllowlist(backend string, log *slog.Logger) error {
	v4, v6, v6Err, err := firewall.NewIPTablesPair(backend)
	if err != nil {
		return fmt.Errorf("cleanup: %w", err)
	}
	defer firewall.ClosePair(v4, v6)
	if v6Err != nil {
		log.Warn("cleanup: ip6tables unavailable, IPv6 chains left alone", "err", v6Err)
	}
	k, err := ipset.NewNetlink()
	if err != nil {
		return fmt.Errorf("cleanup: %w", err)
	}
	defer k.Close()
	if err := allowlist.Cleanup(k, v4, v6, log); err != nil {
		return fmt.Errorf("cleanup: %w", err)
	}
	log.Info("removed routelet's iptables jumps, chains and ipsets", "iptablesBackend", backend)
	return nil
}

// removeGuards deletes routelet's netdev table, and with it every pod
// veth's source check (pkg/podguard); no other table is touched.
func removeGuards(log *slog.Logger) error {
	g, err := podguard.New()
	if err != nil {
		return fmt.Errorf("cleanup: %w", err)
	}
	defer g.Close()
	if err := g.Cleanup(); err != nil {
		return fmt.Errorf("cleanup: %w", err)
	}
	log.Info("removed routelet's pod guards", "table", "netdev "+podguard.TableName)
	return nil
}
