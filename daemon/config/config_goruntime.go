package config

import (
	"errors"
	"runtime/debug"
	"strconv"
)

// Go runtime memory settings (go-gc-percent, go-memory-limit-mb), as
// Calico's felix offers them (FelixConfiguration goGCThreshold and
// goMemoryLimitMB). The environment variables the Go runtime reads itself,
// GOGC and GOMEMLIMIT, win over the keys when set.
const (
	// DefaultGoGCPercent is go-gc-percent's default: felix's, so the heap
	// grows 40 % over the live data between collections instead of Go's
	// 100 %.
	DefaultGoGCPercent = 40
	// GoGCEnv and GoMemLimitEnv are the Go runtime's own variables.
	GoGCEnv       = "GOGC"
	GoMemLimitEnv = "GOMEMLIMIT"
)

// GoRuntime is the Go runtime's memory configuration.
type GoRuntime struct {
	GCPercent     int // go-gc-percent: heap growth between collections; -1 turns the collector off
	MemoryLimitMB int // go-memory-limit-mb: soft memory limit in MiB; 0 is none
}

// goRuntimeKeys are the Go runtime's keys.
func goRuntimeKeys() []key {
	return []key{
		{name: "go-gc-percent", help: "Go GC target: heap growth in percent of the live heap before a collection (felix goGCThreshold); -1 disables the collector (use with go-memory-limit-mb); env GOGC wins",
			def: []string{strconv.Itoa(DefaultGoGCPercent)}, set: func(c *Config, v []string) error {
				if err := parseInt(&c.GoRuntime.GCPercent, v[0], -1, 10000); err != nil {
					return err
				}
				if c.GoRuntime.GCPercent == 0 {
					return errors.New("must be -1 (off) or between 1 and 10000")
				}
				return nil
			}},
		{name: "go-memory-limit-mb", help: "Go soft memory limit in MiB (felix goMemoryLimitMB); the collector runs harder near it; 0 = none; env GOMEMLIMIT wins",
			def: []string{"0"}, set: func(c *Config, v []string) error {
				return parseInt(&c.GoRuntime.MemoryLimitMB, v[0], 0, 1<<20)
			}},
	}
}

// GoRuntimeApplied is what ApplyGoRuntime left in effect, and where each
// value came from ("config" or the environment variable's name).
type GoRuntimeApplied struct {
	GCPercent         int
	GCSource          string
	MemoryLimit       int64 // bytes; math.MaxInt64 is none
	MemoryLimitSource string
}

// ApplyGoRuntime sets the Go runtime's GC percent and memory limit from
// the configuration, leaving each alone whose environment variable (GOGC,
// GOMEMLIMIT) is set: the runtime has applied that one at start. getenv is
// os.LookupEnv in production.
func (c *Config) ApplyGoRuntime(getenv func(string) (string, bool)) GoRuntimeApplied {
	a := GoRuntimeApplied{GCSource: "config", MemoryLimitSource: "config"}
	if _, ok := getenv(GoGCEnv); ok {
		a.GCSource = GoGCEnv
		a.GCPercent = debug.SetGCPercent(100) // read it back ...
		debug.SetGCPercent(a.GCPercent)       // ... unchanged
	} else {
		debug.SetGCPercent(c.GoRuntime.GCPercent)
		a.GCPercent = c.GoRuntime.GCPercent
	}
	if _, ok := getenv(GoMemLimitEnv); ok {
		a.MemoryLimitSource = GoMemLimitEnv
	} else if c.GoRuntime.MemoryLimitMB > 0 {
		debug.SetMemoryLimit(int64(c.GoRuntime.MemoryLimitMB) << 20)
	}
	a.MemoryLimit = debug.SetMemoryLimit(-1) // a negative limit only reads it
	return a
}
