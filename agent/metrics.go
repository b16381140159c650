package agent

import (
	"fmt"
	"runtime"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/novaedge/novaedge/kernel"
)

// metrics are the agent's own novaedge_* series. Data-plane components
// register theirs in the same registry (Agent.Registry).
type metrics struct {
	reg          *prometheus.Registry
	ready        prometheus.Gauge
	version      prometheus.Gauge
	appliedAt    prometheus.Gauge
	lastOK       prometheus.Gauge
	reloads      *prometheus.CounterVec
	diagnostics  *prometheus.GaugeVec
	objects      *prometheus.GaugeVec
	plan         *prometheus.GaugeVec
	applyErrors  *prometheus.CounterVec
	restoredFrom prometheus.Gauge
}

func newMetrics(reg *prometheus.Registry, version string, features []kernel.Feature) (*metrics, error) {
	m := &metrics{
		reg: reg,
		ready: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "novaedge_agent_ready", Help: "1 once a configuration is in service.",
		}),
		version: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "novaedge_config_version", Help: "Version of the configuration snapshot in service.",
		}),
		appliedAt: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "novaedge_config_last_applied_timestamp_seconds", Help: "When the configuration in service was applied (Unix time).",
		}),
		lastOK: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "novaedge_config_last_reload_successful", Help: "1 if the last configuration read was applied, 0 if it was rejected.",
		}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "novaedge_config_reloads_total", Help: "Configurations read, by result: applied, unchanged or rejected.",
		}, []string{"result"}),
		diagnostics: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "novaedge_config_diagnostics", Help: "Diagnostics of the configuration in service, by severity.",
		}, []string{"severity"}),
		objects: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "novaedge_config_objects", Help: "Objects in the configuration in service, by kind.",
		}, []string{"kind"}),
		plan: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "novaedge_plan_entries", Help: "VIP address:port/protocol entries of the plan, by data path (fast: XDP, slow: Go proxy).",
		}, []string{"path"}),
		applyErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "novaedge_apply_errors_total", Help: "Configurations an applier could not switch to completely, by applier.",
		}, []string{"applier"}),
		restoredFrom: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "novaedge_config_restored", Help: "1 while the configuration in service is the cached last good one, restored because the configuration read at start had errors.",
		}),
	}
	info := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "novaedge_build_info", Help: "Always 1; labels give the agent's version and Go version.",
	}, []string{"version", "goversion"})
	info.WithLabelValues(version, runtime.Version()).Set(1)
	feat := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "novaedge_kernel_feature_available", Help: "Kernel features probed at start: 1 available, 0 missing.",
	}, []string{"feature"})
	for _, f := range features {
		v := 0.0
		if f.Available {
			v = 1
		}
		feat.WithLabelValues(f.Name).Set(v)
	}
	for _, r := range []string{"applied", "unchanged", "rejected"} {
		m.reloads.WithLabelValues(r)
	}
	for _, s := range []string{"error", "warning"} {
		m.diagnostics.WithLabelValues(s)
	}
	for _, c := range []prometheus.Collector{m.ready, m.version, m.appliedAt, m.lastOK, m.reloads, m.diagnostics, m.objects, m.plan, m.applyErrors, m.restoredFrom, info, feat} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register agent metrics: %w", err)
		}
	}
	return m, nil
}

// observe records a configuration put in service (result "applied" or
// "unchanged").
func (m *metrics) observe(s *State, result string) {
	m.reloads.WithLabelValues(result).Inc()
	m.lastOK.Set(1)
	m.ready.Set(1)
	m.version.Set(float64(s.Snapshot.GetVersion()))
	m.appliedAt.Set(float64(s.AppliedAt.UnixNano()) / 1e9)
	restored := 0.0
	if s.Restored {
		restored = 1
	}
	m.restoredFrom.Set(restored)
	m.diagnostics.WithLabelValues("error").Set(float64(len(s.Diagnostics.Errors())))
	m.diagnostics.WithLabelValues("warning").Set(float64(len(s.Diagnostics.Warnings())))
	c := s.Snapshot.GetCluster()
	m.objects.WithLabelValues("vip").Set(float64(len(c.GetVips())))
	m.objects.WithLabelValues("listener").Set(float64(len(c.GetListeners())))
	m.objects.WithLabelValues("route").Set(float64(len(c.GetRoutes())))
	m.objects.WithLabelValues("backend").Set(float64(len(c.GetBackends())))
	m.objects.WithLabelValues("policy").Set(float64(len(c.GetPolicies())))
	m.objects.WithLabelValues("certificate").Set(float64(len(c.GetCertificates())))
	m.objects.WithLabelValues("node_vip").Set(float64(len(s.Snapshot.GetNode().GetVips())))
	fast, slow := planCounts(s.Snapshot)
	m.plan.WithLabelValues("fast").Set(float64(fast))
	m.plan.WithLabelValues("slow").Set(float64(slow))
}

// rejected records a configuration that was not applied.
func (m *metrics) rejected() {
	m.reloads.WithLabelValues("rejected").Inc()
	m.lastOK.Set(0)
}
