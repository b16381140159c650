package controller

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics of the controller, registered in controller-runtime's registry
// (served on --metrics-addr with the manager's own).
type metrics struct {
	buildSeconds prometheus.Histogram
	builtNodes   prometheus.Gauge
	decisions    *prometheus.CounterVec
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
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.buildSeconds, m.builtNodes, m.decisions} {
			// Two controllers in one process (tests) share the registry:
			// the first registration serves.
			_ = reg.Register(c)
		}
	}
	return m
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
