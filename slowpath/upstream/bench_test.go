package upstream

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"testing"

	"github.com/novaedge/novaedge/slowpath/internal/fixedhttp"
)

// BenchmarkRoundTrip compares this transport with net/http's on small
// keep-alive exchanges with a minimal raw backend (so that the numbers are
// mostly the client's): ns and allocations per request, directly and
// behind httputil.ReverseProxy (client and proxy in this process).
func BenchmarkRoundTrip(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	answer := []byte("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 19\r\n\r\nhello from backend\n")
	go fixedhttp.Serve(ln, answer)
	url := "http://" + ln.Addr().String() + "/"
	transports := []struct {
		name string
		rt   interface {
			http.RoundTripper
			CloseIdleConnections()
		}
	}{
		{"upstream", &Transport{}},
		{"net-http", &http.Transport{MaxIdleConnsPerHost: 256, DisableCompression: true}},
	}
	for _, tc := range transports {
		b.Run("direct/"+tc.name, func(b *testing.B) {
			defer tc.rt.CloseIdleConnections()
			req, _ := http.NewRequest(http.MethodGet, url, nil)
			b.ReportAllocs()
			for b.Loop() {
				resp, err := tc.rt.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}
		})
	}
	for _, tc := range transports {
		b.Run("reverseproxy/"+tc.name, func(b *testing.B) {
			defer tc.rt.CloseIdleConnections()
			proxy := httptest.NewServer(&httputil.ReverseProxy{
				Rewrite: func(pr *httputil.ProxyRequest) {
					pr.Out.URL.Scheme, pr.Out.URL.Host = "http", ln.Addr().String()
				},
				Transport: tc.rt,
			})
			defer proxy.Close()
			client := &http.Transport{MaxIdleConnsPerHost: 64}
			defer client.CloseIdleConnections()
			req, _ := http.NewRequest(http.MethodGet, proxy.URL+"/", nil)
			b.ReportAllocs()
			for b.Loop() {
				resp, err := client.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}
		})
	}
}
