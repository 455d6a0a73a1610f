package podnet

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestSysctlFilesReserveGrowsTheFileTable: reserve sizes the process's
// file table (FDSize in /proc/self/status) for every file the Keeper may
// keep, so opening them later never grows it.
func TestSysctlFilesReserveGrowsTheFileTable(t *testing.T) {
	var f sysctlFiles
	f.reserve()
	if f.limit == 0 {
		t.Skip("open-file limit too low to keep sysctl files open")
	}
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip("no /proc/self/status:", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "FDSize:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				t.Fatalf("FDSize %q: %v", v, err)
			}
			if n < f.limit+fileTableSlack {
				t.Fatalf("file table holds %d descriptors after reserve, want at least %d (%d kept files + %d)", n, f.limit+fileTableSlack, f.limit, fileTableSlack)
			}
			return
		}
	}
	t.Skip("no FDSize in /proc/self/status")
}
