package slowpath

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

// BenchmarkProxyHTTP1 sends small keep-alive HTTP/1.1 requests through the
// proxy to a local backend: ns and allocations per proxied request (the
// client and backend are in the same process and counted too; compare
// with BenchmarkDirectHTTP1 for the proxy's share).
func BenchmarkProxyHTTP1(b *testing.B) {
	t := &testing.T{}
	e := newEnvB(b)
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "hello from backend\n") }))
	defer be.Close()
	_ = t
	e.mustApply(e.snap(pb.Protocol_PROTOCOL_HTTP, nil, []*pb.Route{route("ns/r", rule(prefix("/"), "ns/a"))}, []*pb.Backend{backendOf("ns/a", hostport(be))}))
	runClients(b, "http://"+e.addr+"/")
}

// BenchmarkProxyHTTP1IdleTimeout is BenchmarkProxyHTTP1 with the route
// timeouts snapshot.Build gives every route by default (a 1 h stream idle
// timeout), as the agent runs.
func BenchmarkProxyHTTP1IdleTimeout(b *testing.B) {
	e := newEnvB(b)
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "hello from backend\n") }))
	defer be.Close()
	r := rule(prefix("/"), "ns/a")
	r.Timeouts = &pb.RouteTimeouts{IdleMs: uint32(time.Hour / time.Millisecond)}
	e.mustApply(e.snap(pb.Protocol_PROTOCOL_HTTP, nil, []*pb.Route{route("ns/r", r)}, []*pb.Backend{backendOf("ns/a", hostport(be))}))
	runClients(b, "http://"+e.addr+"/")
}

// BenchmarkDirectHTTP1 is the same load straight to the backend.
func BenchmarkDirectHTTP1(b *testing.B) {
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "hello from backend\n") }))
	defer be.Close()
	runClients(b, be.URL+"/")
}

func runClients(b *testing.B, url string) {
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	b.ReportAllocs()
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := c.Get(url)
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		}
	})
}
