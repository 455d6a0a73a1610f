package config

import (
	"math"
	"runtime/debug"
	"testing"
)

// goRuntimeKeyCases are TestEveryKey's cases for the Go runtime keys.
var goRuntimeKeyCases = []struct {
	key  string
	good string
	ok   check
	bad  string
}{
	{"go-gc-percent", "80", func(c *Config) bool { return c.GoRuntime.GCPercent == 80 }, "0"},
	{"go-gc-percent", "-1", func(c *Config) bool { return c.GoRuntime.GCPercent == -1 }, "-2"},
	{"go-memory-limit-mb", "64", func(c *Config) bool { return c.GoRuntime.MemoryLimitMB == 64 }, "64MiB"},
}

// TestGoRuntimeDefaults: felix's GC percent (40) and no memory limit.
func TestGoRuntimeDefaults(t *testing.T) {
	c := mustLoad(t, []string{"--node-name=n1"}, nil, nil)
	if c.GoRuntime != (GoRuntime{GCPercent: 40, MemoryLimitMB: 0}) {
		t.Errorf("GoRuntime = %+v, want GC percent 40 and no memory limit", c.GoRuntime)
	}
}

// TestApplyGoRuntime: the keys set the runtime's GC percent and memory
// limit unless GOGC or GOMEMLIMIT is set, which the runtime applied itself.
func TestApplyGoRuntime(t *testing.T) {
	gc0, lim0 := debug.SetGCPercent(100), debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetGCPercent(gc0); debug.SetMemoryLimit(lim0) })
	c := mustLoad(t, []string{"--node-name=n1", "--go-gc-percent=55", "--go-memory-limit-mb=300"}, nil, nil)

	debug.SetMemoryLimit(math.MaxInt64)
	a := c.ApplyGoRuntime(func(string) (string, bool) { return "", false })
	if a != (GoRuntimeApplied{GCPercent: 55, GCSource: "config", MemoryLimit: 300 << 20, MemoryLimitSource: "config"}) {
		t.Errorf("applied %+v, want 55 %% and 300 MiB from config", a)
	}
	if got := debug.SetGCPercent(55); got != 55 {
		t.Errorf("runtime GC percent %d, want 55", got)
	}

	debug.SetGCPercent(120) // as GOGC=120 would have set it at start
	debug.SetMemoryLimit(1 << 30)
	env := map[string]string{GoGCEnv: "120", GoMemLimitEnv: "1GiB"}
	a = c.ApplyGoRuntime(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if a != (GoRuntimeApplied{GCPercent: 120, GCSource: GoGCEnv, MemoryLimit: 1 << 30, MemoryLimitSource: GoMemLimitEnv}) {
		t.Errorf("applied %+v, want the environment's 120 %% and 1 GiB", a)
	}
	if got := debug.SetGCPercent(120); got != 120 {
		t.Errorf("runtime GC percent %d after GOGC=120, want it left at 120", got)
	}
}
