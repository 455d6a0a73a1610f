package agent

import (
	"context"
	"net/netip"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/routelet/routelet/daemon/datastore"
	"github.com/routelet/routelet/daemon/debugapi"
	"github.com/routelet/routelet/pkg/peers"
)

// healthDS is a datastore with liveness and its own metrics, as the etcd
// datastore has.
type healthDS struct {
	up     prometheus.Gauge
	errors *prometheus.CounterVec
}

func (healthDS) LocalBlocks(context.Context, func(string)) ([]netip.Prefix, error) { return nil, nil }
func (healthDS) Publish(peers.Record) error                                        { return nil }
func (healthDS) Watch(context.Context, func()) error                               { return nil }
func (healthDS) Peers() ([]peers.Record, []error, error)                           { return nil, nil, nil }
func (healthDS) Live() []string                                                    { return []string{"b"} }
func (healthDS) Health() datastore.Health                                          { return datastore.Health{} }
func (d healthDS) Describe(ch chan<- *prometheus.Desc)                             { d.up.Describe(ch); d.errors.Describe(ch) }
func (d healthDS) Collect(ch chan<- prometheus.Metric)                             { d.up.Collect(ch); d.errors.Collect(ch) }

// TestDatastoreHealth: a snapshot's datastore health carries what the
// datastore tells: liveness (Live), reachability and failed requests
// (its metrics), each read at snapshot time.
func TestDatastoreHealth(t *testing.T) {
	ds := healthDS{
		up:     prometheus.NewGauge(prometheus.GaugeOpts{Name: "routelet_datastore_up"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "routelet_datastore_errors_total"}, []string{"op"}),
	}
	s := newSnapState()
	src := datastore.Peers{DS: ds}
	var h debugapi.DatastoreHealth
	s.datastoreHealth(src, &h)
	if !h.Liveness || !slices.Equal(h.Live, []string{"b"}) || h.Reachable == nil || *h.Reachable || h.RequestErrors != nil {
		t.Fatalf("health before any request: %+v", h)
	}
	ds.up.Set(1)
	ds.errors.WithLabelValues("watch").Add(2)
	h = debugapi.DatastoreHealth{}
	s.datastoreHealth(src, &h)
	if h.Reachable == nil || !*h.Reachable || h.RequestErrors["watch"] != 2 {
		t.Errorf("health after a reached request and two failed watches: reachable %v, errors %v", h.Reachable, h.RequestErrors)
	}
}
