package agent

import (
	"strings"
	"sync"
	"testing"

	"github.com/routelet/routelet/pkg/peers"
)

// blockingManager is a Manager that says it cannot work until cleared.
type blockingManager struct {
	mu     sync.Mutex
	reason string
}

func (m *blockingManager) OnNodes([]peers.NodeInfo) {}
func (m *blockingManager) OnWorkloads(Served)       {}
func (m *blockingManager) Apply() error             { return nil }
func (m *blockingManager) NotReady() string         { m.mu.Lock(); defer m.mu.Unlock(); return m.reason }
func (m *blockingManager) clear()                   { m.mu.Lock(); m.reason = ""; m.mu.Unlock() }

// TestManagerHoldsNotReady: a manager's NotReady reason keeps the daemon
// not ready after the first sync, in /readyz and daemon.json; once the
// manager has no reason, the next pass makes it ready.
func TestManagerHoldsNotReady(t *testing.T) {
	f := newFixture(t)
	m := &blockingManager{reason: "ipip tunl0: the kernel cannot create ipip links"}
	f.run(t, m)
	// daemon.json is written first, /readyz follows: wait for both.
	waitFor(t, "daemon.json and /readyz with the manager's reason", func() bool {
		st, err := f.store.ReadDaemonStatus()
		ok, why := f.st.Ready()
		return err == nil && !st.Ready && strings.Contains(st.Reason, "cannot create ipip links") &&
			!ok && strings.Contains(why, "ipip")
	})
	m.clear()
	f.a.NotifyApply()
	waitFor(t, "ready once the manager has no reason", func() bool {
		ok, _ := f.st.Ready()
		st, err := f.store.ReadDaemonStatus()
		return ok && err == nil && st.Ready
	})
}
