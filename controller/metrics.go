package controller

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics of the controller, registered in controller-runtime's registry
// (served on --metrics-addr with the manager's own).
type metrics struct {
	buildSeconds prometheus.Histogram
	builtNodes   prometheus.Gauge
	decisions    *prometheus.CounterVec
	// lineageWrites counts the Maglev lineage ConfigMaps the leader
	// created, updated and deleted.
	lineageWrites *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		buildSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "novaedge_controller_build_seconds", Help: "Time to build and publish the snapshots of every node after a change.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}),
		builtNodes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "novaedge_controller_nodes", Help: "Nodes a snapshot was built for in the last run.",
		}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "novaedge_controller_decision_runs_total", Help: "Leader decision runs (allocations, assignments, status), by result.",
		}, []string{"result"}),
		lineageWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "novaedge_controller_maglev_lineage_writes_total", Help: "Maglev lineage ConfigMaps the leader wrote, by operation (create, update, delete).",
		}, []string{"op"}),
	}
	if reg != nil {
		// Two controllers in one process (tests) share the registry and,
		// through it, the first one's collectors.
		m.buildSeconds = register(reg, m.buildSeconds)
		m.builtNodes = register(reg, m.builtNodes)
		m.decisions = register(reg, m.decisions)
		m.lineageWrites = register(reg, m.lineageWrites)
	}
	return m
}

// register registers c in reg and returns it, or the collector of the same
// name that reg already has.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
	}
	return c
}

func (m *metrics) observeBuild(nodes int, d time.Duration) {
	m.buildSeconds.Observe(d.Seconds())
	m.builtNodes.Set(float64(nodes))
}

func (m *metrics) decided(errs int) {
	r := "ok"
	if errs > 0 {
		r = "error"
	}
	m.decisions.WithLabelValues(r).Inc()
}
