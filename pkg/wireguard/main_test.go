package wireguard

import (
	"github.com/routelet/routelet/pkg/defaults"
	"os"
	"testing"
)

// TestMain makes this test binary the userspace datapath when started as
// one (`<binary> wireguard-datapath --device NAME --mtu N`, the command
// line routeletd's datapath has), so the privileged tests need no build.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == defaults.WireGuardDatapathCommand {
		os.Exit(DatapathMain(os.Args[2:]))
	}
	os.Exit(m.Run())
}
