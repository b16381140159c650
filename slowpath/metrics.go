package slowpath

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/novaedge/novaedge/slowpath/endpoint"
	"github.com/novaedge/novaedge/slowpath/health"
	"github.com/novaedge/novaedge/slowpath/sockets"
)

// metrics are the slow path's novaedge_* series. Labels are bounded by the
// configuration (listeners, routes, backends, endpoints), never by request
// content.
type metrics struct {
	requests   *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	upstream   *prometheus.CounterVec
	retries    *prometheus.CounterVec
	overloaded *prometheus.CounterVec
	healthy    *prometheus.GaugeVec
	ejected    *prometheus.GaugeVec

	// The series of the per-request metrics, by label values: looking a
	// series up in a Vec (WithLabelValues) validates and hashes every label
	// value and takes the Vec's lock, on every request. Series are never
	// deleted, so a cached one stays the exported one.
	requestSeries  sync.Map // requestLabels → prometheus.Counter
	durationSeries sync.Map // [2]string{listener, route} → prometheus.Observer
	upstreamSeries sync.Map // upstreamLabels → prometheus.Counter
}

type requestLabels struct {
	listener, route, backend string
	code                     int
}

type upstreamLabels struct {
	backend string
	result  health.Result
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "novaedge_http_requests_total", Help: "HTTP requests answered by the slow path, by listener, route, backend and status code (route and backend are empty when none matched).",
		}, []string{"listener", "route", "backend", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "novaedge_http_request_duration_seconds", Help: "Time from the request's headers to the end of the response, by listener and route.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"listener", "route"}),
		upstream: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "novaedge_upstream_requests_total", Help: "Tries sent to backend endpoints, by backend and outcome (success, failure_5xx, gateway_error, connect_failure, timeout, reset).",
		}, []string{"backend", "result"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "novaedge_upstream_retries_total", Help: "Retries sent, by backend.",
		}, []string{"backend"}),
		overloaded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "novaedge_upstream_overloaded_total", Help: "Requests refused by a backend's circuit breaker (503).",
		}, []string{"backend"}),
		healthy: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "novaedge_endpoint_healthy", Help: "1 when the endpoint passes its active health check (or has none).",
		}, []string{"backend", "endpoint"}),
		ejected: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "novaedge_endpoint_ejected", Help: "1 while passive outlier detection keeps the endpoint out of balancing.",
		}, []string{"backend", "endpoint"}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.duration, m.upstream, m.retries, m.overloaded, m.healthy, m.ejected)
	}
	return m
}

// steeringCollector exports the QUIC steering counters of a socket set
// (package sockets/quicsteer) as novaedge_quic_steered_datagrams_total:
// how a restart or upgrade's QUIC traffic is split between generations
// is visible, and "unselected" says when steering found no socket.
type steeringCollector struct {
	socks *sockets.Set
	desc  *prometheus.Desc
}

func newSteeringCollector(socks *sockets.Set) steeringCollector {
	return steeringCollector{socks: socks, desc: prometheus.NewDesc("novaedge_quic_steered_datagrams_total",
		"QUIC datagrams the reuseport steering program sent, by UDP socket and how: by the generation in their connection ID (connection_id), to the newest generation (newest: new connections and generations without a socket), or nowhere it could choose (unselected: the kernel's hash decided). Counted since the socket's first agent process loaded the program.",
		[]string{"socket", "via"}, nil)}
}

func (c steeringCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c steeringCollector) Collect(ch chan<- prometheus.Metric) {
	for k, st := range c.socks.SteeringStats() {
		sock := k.String()
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(st.ByConnectionID), sock, "connection_id")
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(st.Newest), sock, "newest")
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(st.Unselected), sock, "unselected")
	}
}

var resultNames = map[health.Result]string{
	health.Success: "success", health.Failure5xx: "failure_5xx", health.GatewayError: "gateway_error",
	health.ConnectFailure: "connect_failure", health.Timeout: "timeout", health.Reset: "reset",
}

func resultName(r health.Result) string {
	if n, ok := resultNames[r]; ok {
		return n
	}
	return "other"
}

// statusWriter records the status code for metrics. It unwraps for
// http.ResponseController (flushes, hijacking for upgrades).
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.code == 0 && code >= 200 {
		s.code = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.code == 0 {
		s.code = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Flush lets streaming responses (gRPC, SSE) through without a controller.
func (s *statusWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// seriesCache remembers the series an exchange counted in last: a pooled
// exchange serves the same route again and again, and looking a series up
// in the maps above hashes all its labels. Series are never deleted, so a
// remembered one stays right.
type seriesCache struct {
	rk requestLabels
	rc prometheus.Counter
	dk [2]string
	do prometheus.Observer
	uk upstreamLabels
	uc prometheus.Counter
}

// observe records one answered request.
func (m *metrics) observe(sc *seriesCache, listener, route, backend string, code int, start time.Time) {
	if code == 0 {
		code = http.StatusSwitchingProtocols // hijacked for an upgrade, or no answer
	}
	rk := requestLabels{listener, route, backend, code}
	if sc.rc == nil || rk != sc.rk {
		c, ok := m.requestSeries.Load(rk)
		if !ok {
			c, _ = m.requestSeries.LoadOrStore(rk, m.requests.WithLabelValues(listener, route, backend, strconv.Itoa(code)))
		}
		sc.rk, sc.rc = rk, c.(prometheus.Counter)
	}
	sc.rc.Inc()
	dk := [2]string{listener, route}
	if sc.do == nil || dk != sc.dk {
		o, ok := m.durationSeries.Load(dk)
		if !ok {
			o, _ = m.durationSeries.LoadOrStore(dk, m.duration.WithLabelValues(listener, route))
		}
		sc.dk, sc.do = dk, o.(prometheus.Observer)
	}
	sc.do.Observe(time.Since(start).Seconds())
}

// upstreamTry counts one try sent to a backend by its outcome.
func (m *metrics) upstreamTry(sc *seriesCache, backend string, res health.Result) {
	k := upstreamLabels{backend, res}
	if sc.uc == nil || k != sc.uk {
		c, ok := m.upstreamSeries.Load(k)
		if !ok {
			c, _ = m.upstreamSeries.LoadOrStore(k, m.upstream.WithLabelValues(backend, resultName(res)))
		}
		sc.uk, sc.uc = k, c.(prometheus.Counter)
	}
	sc.uc.Inc()
}

// onHealth keeps the endpoint gauges in step with health verdicts.
func (m *metrics) onHealth(backend string) func(*endpoint.Endpoint, bool, string) {
	return func(ep *endpoint.Endpoint, healthy bool, _ string) {
		v := 0.0
		if healthy {
			v = 1
		}
		m.healthy.WithLabelValues(backend, ep.Addr).Set(v)
	}
}

// onEjection keeps the ejection gauge in step with outlier detection.
func (m *metrics) onEjection(backend string) func(*endpoint.Endpoint, bool, string) {
	return func(ep *endpoint.Endpoint, healthy bool, _ string) {
		v := 1.0
		if healthy {
			v = 0
		}
		m.ejected.WithLabelValues(backend, ep.Addr).Set(v)
	}
}
