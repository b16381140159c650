package stream

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the stream's novaedge_controller_* series. Per-node series
// are bounded by the number of nodes in the cluster.
type metrics struct {
	connected prometheus.Gauge
	sent      *prometheus.CounterVec
	acks      *prometheus.CounterVec
	nacks     *prometheus.CounterVec
	ackDelay  prometheus.Histogram
}

// newMetrics registers the series with reg (nil: none). It panics when they
// are registered already, as prometheus.MustRegister does: registering one
// server's metrics twice is a bug.
func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		connected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "novaedge_controller_agents_connected", Help: "Agents with an open configuration stream.",
		}),
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "novaedge_controller_snapshots_sent_total", Help: "Snapshots sent to agents, by node.",
		}, []string{"node"}),
		acks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "novaedge_controller_snapshot_acks_total", Help: "Snapshots agents applied (ACK), by node.",
		}, []string{"node"}),
		nacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "novaedge_controller_snapshot_nacks_total", Help: "Snapshots agents rejected (NACK), by node.",
		}, []string{"node"}),
		ackDelay: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "novaedge_controller_snapshot_ack_seconds",
			Help:    "Time from sending a snapshot to the agent's first ACK of it: transfer, compile and apply.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}),
	}
	if reg != nil {
		reg.MustRegister(m.connected, m.sent, m.acks, m.nacks, m.ackDelay)
	}
	return m
}

// forget drops the per-node series of node.
func (m *metrics) forget(node string) {
	m.sent.DeleteLabelValues(node)
	m.acks.DeleteLabelValues(node)
	m.nacks.DeleteLabelValues(node)
}
