package slowpath

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

// failing is a backend whose answers the test switches: healthy (200),
// failing (503 to everything, health checks included).
type failing struct {
	srv    *httptest.Server
	down   atomic.Bool
	hits   atomic.Int64
	checks atomic.Int64 // health check requests
}

func newFailing(t *testing.T, name string) *failing {
	f := &failing{}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			f.hits.Add(1)
		} else {
			f.checks.Add(1)
		}
		if f.down.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("X-Backend", name)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

// TestOutlierEjectionThroughTheProxy: an endpoint answering 503 is ejected
// after consecutiveFailures, and while ejected it gets no requests.
func TestOutlierEjectionThroughTheProxy(t *testing.T) {
	e := newEnv(t)
	bad, good := newFailing(t, "bad"), newFailing(t, "good")
	bad.down.Store(true)
	b := backendOf("ns/b", hostport(bad.srv), hostport(good.srv))
	b.LbPolicy = pb.LBPolicy_LB_POLICY_ROUND_ROBIN
	b.CircuitBreaker = &pb.CircuitBreaker{ConsecutiveFailures: 3, BaseEjectionTimeMs: 60_000, MaxEjectionPercent: 50}
	e.mustApply(e.snap(pb.Protocol_PROTOCOL_HTTP, nil, []*pb.Route{route("ns/r", rule(prefix("/"), "ns/b"))}, []*pb.Backend{b}))
	c := &http.Client{}
	for range 6 { // round robin: three of these reach the bad endpoint
		resp, _, _ := get(t, c, "http://"+e.addr+"/")
		_ = resp
	}
	if n := testutil.ToFloat64(e.p.metrics.ejected.WithLabelValues("ns/b", hostport(bad.srv))); n != 1 {
		t.Fatalf("novaedge_endpoint_ejected for the failing endpoint = %v, want 1", n)
	}
	before := bad.hits.Load()
	for i := range 20 {
		resp, _, _ := get(t, c, "http://"+e.addr+"/")
		if resp.StatusCode != 200 || resp.Header.Get("X-Backend") != "good" {
			t.Fatalf("request %d after the ejection: %d from %q", i, resp.StatusCode, resp.Header.Get("X-Backend"))
		}
	}
	if bad.hits.Load() != before {
		t.Fatalf("the ejected endpoint got %d more requests", bad.hits.Load()-before)
	}
}

// TestActiveHealthCheckThroughTheProxy: an endpoint whose health check
// fails gets no traffic; when it recovers it gets its share again.
func TestActiveHealthCheckThroughTheProxy(t *testing.T) {
	e := newEnv(t)
	a, bb := newFailing(t, "a"), newFailing(t, "b")
	b := backendOf("ns/b", hostport(a.srv), hostport(bb.srv))
	b.LbPolicy = pb.LBPolicy_LB_POLICY_ROUND_ROBIN
	b.HealthCheck = &pb.HealthCheck{Type: "HTTP", HttpPath: "/healthz", IntervalMs: 50, TimeoutMs: 50, HealthyThreshold: 1, UnhealthyThreshold: 1}
	a.down.Store(true)
	e.mustApply(e.snap(pb.Protocol_PROTOCOL_HTTP, nil, []*pb.Route{route("ns/r", rule(prefix("/"), "ns/b"))}, []*pb.Backend{b}))
	healthy := func(addr string) float64 {
		return testutil.ToFloat64(e.p.metrics.healthy.WithLabelValues("ns/b", addr))
	}
	waitUntil(t, "endpoint a marked unhealthy", func() bool { return healthy(hostport(a.srv)) == 0 })
	c := &http.Client{}
	for range 10 {
		resp, _, _ := get(t, c, "http://"+e.addr+"/")
		if resp.Header.Get("X-Backend") != "b" {
			t.Fatalf("request reached %q while a fails its health check", resp.Header.Get("X-Backend"))
		}
	}
	a.down.Store(false)
	waitUntil(t, "endpoint a healthy again", func() bool { return healthy(hostport(a.srv)) == 1 })
	seen := map[string]bool{}
	for range 10 {
		resp, _, _ := get(t, c, "http://"+e.addr+"/")
		seen[resp.Header.Get("X-Backend")] = true
	}
	if !seen["a"] || !seen["b"] {
		t.Fatalf("after recovery, backends seen: %v", seen)
	}
}

// waitUntil polls; the deadline only bounds a broken test.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestProbeFailuresAndControllerVerdicts: ProbeFailures reports what this
// node's checks find unhealthy; an endpoint the snapshot marks unhealthy
// (the controller's verdict from every agent's reports) gets no requests
// but is still probed, so its recovery is seen and reported.
func TestProbeFailuresAndControllerVerdicts(t *testing.T) {
	e := newEnv(t)
	a, bb := newFailing(t, "a"), newFailing(t, "b")
	b := backendOf("ns/b", hostport(a.srv), hostport(bb.srv))
	b.LbPolicy = pb.LBPolicy_LB_POLICY_ROUND_ROBIN
	b.HealthCheck = &pb.HealthCheck{Type: "HTTP", HttpPath: "/healthz", IntervalMs: 50, TimeoutMs: 50, HealthyThreshold: 1, UnhealthyThreshold: 1}
	a.down.Store(true)
	e.mustApply(e.snap(pb.Protocol_PROTOCOL_HTTP, nil, []*pb.Route{route("ns/r", rule(prefix("/"), "ns/b"))}, []*pb.Backend{b}))
	waitUntil(t, "a reported as failing", func() bool {
		f := e.p.ProbeFailures()
		return len(f) == 1 && f[0] == hostport(a.srv)
	})

	// The controller marks it unhealthy for every node.
	b.Endpoints[0].State = pb.EndpointState_ENDPOINT_STATE_UNHEALTHY
	e.mustApply(e.snap(pb.Protocol_PROTOCOL_HTTP, nil, []*pb.Route{route("ns/r", rule(prefix("/"), "ns/b"))}, []*pb.Backend{b}))
	checks := a.checks.Load()
	waitUntil(t, "a still probed", func() bool { return a.checks.Load() >= checks+2 })
	if f := e.p.ProbeFailures(); len(f) != 1 {
		t.Fatalf("ProbeFailures = %v while a still fails", f)
	}
	a.down.Store(false)
	waitUntil(t, "a's recovery to be seen by the probes", func() bool { return len(e.p.ProbeFailures()) == 0 })
	before := a.hits.Load()
	c := &http.Client{}
	for range 10 {
		resp, _, _ := get(t, c, "http://"+e.addr+"/")
		if resp.Header.Get("X-Backend") != "b" {
			t.Fatalf("a request reached %q, which the snapshot marks unhealthy", resp.Header.Get("X-Backend"))
		}
	}
	if a.hits.Load() != before {
		t.Fatalf("the unhealthy endpoint got %d requests", a.hits.Load()-before)
	}
}
