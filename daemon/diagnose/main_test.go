package diagnose

import (
	"os"
	"testing"

	"github.com/routelet/routelet/pkg/defaults"
	"github.com/routelet/routelet/pkg/wireguard"
)

// TestMain makes this test binary the userspace WireGuard datapath when
// started as one (`<binary> wireguard-datapath --device NAME --mtu N`), so
// the privileged WireGuard test needs no build.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == defaults.WireGuardDatapathCommand {
		os.Exit(wireguard.DatapathMain(os.Args[2:]))
	}
	os.Exit(m.Run())
}
