package main

import (
	"math"
	"strconv"
	"testing"
)

// TestGoRuntimeSettings: routeletd runs its Go runtime at felix's GC
// percent (40) and no memory limit by default, at go-gc-percent and
// go-memory-limit-mb when given, and at GOGC and GOMEMLIMIT when those are
// set, whatever the keys say; as its /metrics reports them.
func TestGoRuntimeSettings(t *testing.T) {
	cases := []struct {
		name       string
		env        map[string]string
		args       []string
		gc, memlim float64
	}{
		{"defaults", nil, nil, 40, math.MaxInt64},
		{"keys", nil, []string{"--go-gc-percent=80", "--go-memory-limit-mb=64"}, 80, 64 << 20},
		{"environment wins", map[string]string{"GOGC": "150", "GOMEMLIMIT": "100MiB"}, []string{"--go-gc-percent=80", "--go-memory-limit-mb=64"}, 150, 100 << 20},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v) // the daemon inherits the test's environment
			}
			tn := newTestNode(t, true)
			d := tn.startDaemon(tc.args...)
			defer d.stop(t)
			tn.waitReady()
			num := func(name string) float64 {
				v, err := strconv.ParseFloat(tn.metric(name), 64)
				if err != nil {
					t.Fatalf("metric %s: %v", name, err)
				}
				return v
			}
			if got := num("go_gc_gogc_percent"); got != tc.gc {
				t.Errorf("go_gc_gogc_percent = %v, want %v", got, tc.gc)
			}
			if got := num("go_gc_gomemlimit_bytes"); got != tc.memlim {
				t.Errorf("go_gc_gomemlimit_bytes = %v, want %v", got, tc.memlim)
			}
		})
	}
}
