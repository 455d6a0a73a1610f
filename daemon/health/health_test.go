package health

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/routelet/routelet/internal/buildinfo"
)

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	b, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, string(b)
}

func TestProbes(t *testing.T) {
	st := NewStatus(time.Minute)
	clock := time.Unix(1000, 0)
	st.now = func() time.Time { return clock }
	st.Progress()
	m := NewMetrics()
	h := Handler(st, m)

	if code, body := get(t, h, "/readyz"); code != 503 || !strings.Contains(body, "starting") {
		t.Errorf("/readyz before sync = %d %q, want 503 starting", code, body)
	}
	st.SetReady(true, "")
	if code, _ := get(t, h, "/readyz"); code != 200 {
		t.Errorf("/readyz after sync = %d, want 200", code)
	}
	if code, _ := get(t, h, "/healthz"); code != 200 {
		t.Errorf("/healthz fresh = %d, want 200", code)
	}
	clock = clock.Add(2 * time.Minute)
	if code, body := get(t, h, "/healthz"); code != 503 || !strings.Contains(body, "no progress") {
		t.Errorf("/healthz stale = %d %q, want 503", code, body)
	}
	st.Progress()
	if code, _ := get(t, h, "/healthz"); code != 200 {
		t.Errorf("/healthz after progress = %d, want 200", code)
	}
}

func TestMetricsExposed(t *testing.T) {
	m := NewMetrics()
	m.RoutesProgrammed.WithLabelValues("ipv4").Set(3)
	m.LeakCollections.Inc()
	m.ApplyDuration.Observe(0.002)
	code, body := get(t, Handler(NewStatus(time.Minute), m), "/metrics")
	if code != 200 {
		t.Fatalf("/metrics = %d", code)
	}
	for _, want := range []string{
		`routelet_routes_programmed{table="ipv4"} 3`,
		"routelet_leak_collections_total 1",
		"routelet_apply_duration_seconds_count 1",
		"routelet_resync_duration_seconds_count 0",
		"routelet_apply_errors_total 0",
		"routelet_workloads 0",
		"routelet_peers 0",
		`routelet_build_info{goversion="` + buildinfo.GoVersion() + `",revision="` + buildinfo.Revision() + `",version="` + buildinfo.Version() + `"} 1`,
		"go_goroutines",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// TestOnChange: the hook sees each change of readiness or reason once, not
// the repeats the loop sends on every pass.
func TestOnChange(t *testing.T) {
	st := NewStatus(time.Minute)
	var got []string
	st.OnChange(func(ready bool, reason string) {
		got = append(got, fmt.Sprintf("%v %s", ready, reason))
	})
	for _, s := range []struct {
		ready  bool
		reason string
	}{{false, "initial sync in progress"}, {false, "initial sync in progress"}, {true, ""}, {true, ""}, {false, "stopping"}} {
		st.SetReady(s.ready, s.reason)
	}
	want := []string{"false initial sync in progress", "true ", "false stopping"}
	if !slices.Equal(got, want) {
		t.Errorf("OnChange saw %q, want %q", got, want)
	}
}
