// Package health serves routeletd's observability endpoints: /healthz (the
// apply loop made progress recently), /readyz (the first full sync is done)
// and /metrics (Prometheus text format from a private registry).
package health
