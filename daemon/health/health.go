package health

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/routelet/routelet/internal/buildinfo"
	"github.com/routelet/routelet/internal/termsafe"
)

// Status tracks liveness and readiness. Progress is lock-free so the loop
// can call it from hot paths; ready and reason are guarded by mu.
type Status struct {
	staleAfter   time.Duration
	now          func() time.Time
	lastProgress atomic.Int64 // unix nanoseconds of the last Progress call

	mu       sync.Mutex
	ready    bool
	reason   string
	onChange []func(ready bool, reason string)
}

// NewStatus returns a Status that reports unhealthy when Progress has not
// been called for staleAfter, and not ready until SetReady(true, "").
func NewStatus(staleAfter time.Duration) *Status {
	s := &Status{staleAfter: staleAfter, now: time.Now, reason: "starting"}
	s.Progress()
	return s
}

// Progress records that the loop is alive and moving.
func (s *Status) Progress() { s.lastProgress.Store(s.now().UnixNano()) }

// SetReady sets readiness; reason says why not when ready is false.
func (s *Status) SetReady(ready bool, reason string) {
	s.mu.Lock()
	changed := ready != s.ready || reason != s.reason
	s.ready, s.reason = ready, reason
	hooks := s.onChange
	s.mu.Unlock()
	if changed {
		for _, f := range hooks {
			f(ready, reason)
		}
	}
}

// OnChange makes SetReady call f (after the hooks added before) whenever
// readiness or its reason changes, from SetReady's caller; f must not
// block.
func (s *Status) OnChange(f func(ready bool, reason string)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onChange = append(s.onChange, f)
}

// Ready reports readiness and, when not ready, why.
func (s *Status) Ready() (bool, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ready, s.reason
}

// Healthy reports whether the loop made progress within staleAfter.
func (s *Status) Healthy() (bool, string) {
	age := s.now().Sub(time.Unix(0, s.lastProgress.Load()))
	if age > s.staleAfter {
		return false, fmt.Sprintf("apply loop made no progress for %s (limit %s)", age.Round(time.Millisecond), s.staleAfter)
	}
	return true, ""
}

// Metrics are routeletd's Prometheus metrics, registered on Registry.
type Metrics struct {
	Registry         *prometheus.Registry
	RoutesProgrammed *prometheus.GaugeVec // label table: "ipv4" | "ipv6"
	DirtyInterfaces  *prometheus.GaugeVec // label table
	ResyncDuration   prometheus.Histogram
	ApplyDuration    prometheus.Histogram
	ApplyErrors      prometheus.Counter
	Workloads        prometheus.Gauge
	BadRecords       prometheus.Gauge
	Peers            prometheus.Gauge
	LeakCollections  prometheus.Counter
	Ready            prometheus.Gauge
	// Repairs counts dataplane settings put back after something changed
	// them; label object: "sysctl" | "link" | "neigh" | "guard" | "master" |
	// "record" (a workload record file written back from its last good read).
	Repairs *prometheus.CounterVec
	// RouteConflicts counts desired routes found blocked by a route
	// routelet does not own under the same kernel key; label table.
	RouteConflicts *prometheus.CounterVec
}

// NewMetrics creates and registers every metric, plus the Go and process
// collectors, on a fresh registry.
func NewMetrics() *Metrics {
	buckets := []float64{.0001, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}
	m := &Metrics{
		Registry:         prometheus.NewRegistry(),
		RoutesProgrammed: gaugeVec("routelet_routes_programmed", "Routes routelet believes are programmed, per routing table.", "table"),
		DirtyInterfaces:  gaugeVec("routelet_route_dirty_interfaces", "Interfaces waiting to be reconciled, per routing table.", "table"),
		ResyncDuration:   histogram("routelet_resync_duration_seconds", "Duration of full resyncs (re-read records, reconcile every route).", buckets),
		ApplyDuration:    histogram("routelet_apply_duration_seconds", "Duration of each dataplane apply.", buckets),
		ApplyErrors:      counter("routelet_apply_errors_total", "Applies that returned an error (the failed parts are retried)."),
		Workloads:        gauge("routelet_workloads", "Workload records currently served."),
		BadRecords:       gauge("routelet_bad_records", "Records skipped as unreadable, invalid or of an unknown version at the last read."),
		Peers:            gauge("routelet_peers", "Node records of other nodes."),
		LeakCollections:  counter("routelet_leak_collections_total", "Workloads released because their netns and host veth were gone past the leak grace period."),
		Ready:            gauge("routelet_ready", "1 once the first full sync is done."),
		Repairs:          counterVec("routelet_repairs_total", "Dataplane settings routelet put back after they were changed: per-veth and node sysctls, veth admin state, IPv6 pod neighbours, pod guards (the source check on each pod veth's ingress, rewritten or removed with their veth), the VXLAN device enslaved to a bridge, workload record files that held no JSON written back from the last good read.", "object"),
		RouteConflicts:   counterVec("routelet_route_conflicts_total", "Desired routes not programmed because a route routelet does not own holds their kernel key (counted once per conflict).", "table"),
	}
	for _, o := range []string{"sysctl", "link", "neigh", "guard", "master", "record"} {
		m.Repairs.WithLabelValues(o)
	}
	build := gaugeVec("routelet_build_info", "Always 1; the labels name the running routeletd's version, the commit it was built from and the Go release that built it.", "version", "revision", "goversion")
	build.WithLabelValues(buildinfo.Version(), buildinfo.Revision(), buildinfo.GoVersion()).Set(1)
	m.Registry.MustRegister(build, m.RoutesProgrammed, m.DirtyInterfaces, m.ResyncDuration, m.ApplyDuration,
		m.ApplyErrors, m.Workloads, m.BadRecords, m.Peers, m.LeakCollections, m.Ready,
		m.Repairs, m.RouteConflicts,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// gauge, gaugeVec, counter, counterVec and histogram make a metric with its
// name and help (and label names or buckets).
func gauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
}

// gaugeVec: see gauge.
func gaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
}

// counter: see gauge.
func counter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
}

// counterVec: see gauge.
func counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}

// histogram: see gauge.
func histogram(name, help string, buckets []float64) prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets})
}

// Handler serves /healthz, /readyz and /metrics. The probes answer 200 "ok"
// or 503 with the reason.
func Handler(st *Status, m *Metrics) http.Handler {
	mux := http.NewServeMux()
	probe := func(check func() (bool, string)) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			if ok, why := check(); !ok {
				w.WriteHeader(http.StatusServiceUnavailable)
				fmt.Fprintln(w, termsafe.Escape(why)) // names records' values; read with curl on a terminal
				return
			}
			fmt.Fprintln(w, "ok")
		}
	}
	mux.Handle("GET /healthz", probe(st.Healthy))
	mux.Handle("GET /readyz", probe(st.Ready))
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	return mux
}

// Listen binds addr; call it before the loop starts so a port clash fails
// start-up rather than surfacing later.
func Listen(addr string) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("health-addr %s: %w", addr, err)
	}
	return l, nil
}

// Serve serves h on l until ctx is done, then shuts down gracefully.
func Serve(ctx context.Context, l net.Listener, h http.Handler, log *slog.Logger) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	log.Info("serving health and metrics", "addr", l.Addr().String())
	err := srv.Serve(l)
	<-done
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return fmt.Errorf("health server %s: %w", l.Addr(), err)
}

// Unregistering is a prometheus.Registerer whose Register removes the
// collector (one with the same descriptors) from Reg instead: a part's
// Register(Unregistering{Reg: reg}) takes back its metrics, so the loop's next
// build can register its own.
type Unregistering struct{ Reg prometheus.Registerer }

// Register unregisters c from Reg.
func (u Unregistering) Register(c prometheus.Collector) error {
	u.Reg.Unregister(c)
	return nil
}

// MustRegister unregisters cs from Reg.
func (u Unregistering) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		u.Reg.Unregister(c)
	}
}

// Unregister unregisters c from Reg.
func (u Unregistering) Unregister(c prometheus.Collector) bool { return u.Reg.Unregister(c) }
