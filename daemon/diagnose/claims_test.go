package diagnose

import (
	"strings"
	"testing"

	"github.com/routelet/routelet/daemon/statusapi"
)

// TestBlockClaimsStep: a block claim conflict the running daemon reports
// is a block-claims step naming the block, the key and the value found
// (quoted): failing when an end of the path is in the block, Info
// otherwise; without a conflict there is no such step.
func TestBlockClaimsStep(t *testing.T) {
	for _, tc := range []struct {
		name, block string
		want        Status
	}{
		{"pod in the block", fakeBlock4.String(), Fail},
		{"another block", "10.244.9.0/24", Info},
		{"none", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newFakeNode(3, 3)
			fromEndpoint(n, "etcd")
			if tc.block != "" {
				n.daemon.Datastore.BlockConflicts = []statusapi.BlockConflict{{Block: tc.block, Key: "/routelet/blocks/x", Holder: "node-0001\x1b[2J", Since: fakeNow}}
			}
			rep, err := Run(n.cfg, n.st, n.k, "demo/pod-0", "10.100.1.5", Options{Daemon: n.daemon})
			if err != nil {
				t.Fatal(err)
			}
			var got *Step
			for i := range rep.Steps {
				if rep.Steps[i].ID == StepBlockClaims {
					got = &rep.Steps[i]
				}
			}
			switch {
			case tc.want == "" && got != nil:
				t.Errorf("step %+v without a conflict", *got)
			case tc.want == "":
			case got == nil:
				t.Fatalf("no %s step: %+v", StepBlockClaims, rep.Steps)
			case got.Status != tc.want || !strings.Contains(got.Fact, `block `+tc.block+`: key "/routelet/blocks/x" holds "node-0001\x1b[2J"`) || got.Fix == "":
				t.Errorf("step %+v, want %s naming the block, the key and the quoted value, with a fix", *got, tc.want)
			case rep.OK != (tc.want != Fail):
				t.Errorf("report ok %v with a %s step", rep.OK, tc.want)
			}
		})
	}
}
