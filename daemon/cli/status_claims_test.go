package cli

import (
	"strings"
	"testing"

	"github.com/routelet/routelet/daemon/statusapi"
)

// TestStatusBlockClaimConflict: a block claim conflict the daemon reports
// is counted in the Datastore line and listed under the problems with the
// block, the key and the value found, quoted (another writer chose them:
// no terminal escape reaches the screen).
func TestStatusBlockClaimConflict(t *testing.T) {
	st := &statusapi.State{Source: statusapi.SourceDaemon, Loop: true,
		Node:      statusapi.Node{Name: "node-a", Datastore: "etcd", LocalBlocks: []string{"10.244.0.0/26"}},
		Readiness: statusapi.Readiness{Ready: true, Updated: statusNow},
		Datastore: statusapi.DatastoreHealth{OK: true, LastRead: statusNow, BlockConflicts: []statusapi.BlockConflict{
			{Block: "10.244.0.0/26", Key: "/routelet/blocks/10.244.0.0-26", Holder: "node-b\x1b[2J", Since: statusNow},
		}}}
	text := renderStatus(st, statusNow)
	for _, want := range []string{
		"; 1 BLOCK CLAIM CONFLICTS",
		`✗ block 10.244.0.0/26: claim conflict: the datastore key "/routelet/blocks/10.244.0.0-26" holds "node-b\x1b[2J", not this node; this node keeps serving the block`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("status lacks %q:\n%s", want, text)
		}
	}
	if strings.ContainsRune(text, 0x1b) {
		t.Errorf("status shows the holder's escape raw:\n%q", text)
	}
}
