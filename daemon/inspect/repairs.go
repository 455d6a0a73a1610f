package inspect

import (
	"slices"
	"sync"
	"time"

	"github.com/routelet/routelet/daemon/statusapi"
)

// RepairLog keeps the time of each drift repair (at most
// statusapi.MaxRepairs, the oldest dropped). Safe for concurrent use.
type RepairLog struct {
	now func() time.Time
	mu  sync.Mutex
	log []statusapi.Repair
}

// NewRepairLog returns an empty log on the wall clock.
func NewRepairLog() *RepairLog { return &RepairLog{now: time.Now} }

// Add records n repairs of object (none when n < 1).
func (l *RepairLog) Add(object, detail string, n int) {
	if l == nil || n < 1 {
		return
	}
	t := l.now().UTC()
	l.mu.Lock()
	defer l.mu.Unlock()
	for range n {
		l.log = append(l.log, statusapi.Repair{Time: t, Object: object, Detail: detail})
	}
	if over := len(l.log) - statusapi.MaxRepairs; over > 0 {
		l.log = slices.Delete(l.log, 0, over)
	}
}

// List returns the repairs, oldest first.
func (l *RepairLog) List() []statusapi.Repair {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.log)
}
