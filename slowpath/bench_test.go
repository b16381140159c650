package slowpath

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/slowpath/internal/fixedhttp"
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

// BenchmarkProxyRaw is BenchmarkProxyHTTP1IdleTimeout with a client and a
// backend that allocate nothing (fixed bytes over TCP), so that
// allocations per op are the proxy's own; "raw" serves by the raw request
// path, "map" with it off (Options.NoRawPath).
func BenchmarkProxyRaw(b *testing.B) {
	for _, mode := range []string{"raw", "map"} {
		b.Run(mode, func(b *testing.B) {
			e := fixedEnv(b, mode == "map")
			req := "GET /bench HTTP/1.1\r\nHost: bench.example\r\nUser-Agent: bench\r\nAccept: */*\r\n\r\n"
			reqBytes := []byte(req)
			b.ReportAllocs()
			b.SetParallelism(8)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				c, err := net.Dial("tcp", e.addr)
				if err != nil {
					b.Error(err)
					return
				}
				defer func() { _ = c.Close() }()
				br := bufio.NewReader(c)
				size := 0 // of a response, learned from the first
				buf := make([]byte, 4096)
				for pb.Next() {
					if _, err := c.Write(reqBytes); err != nil {
						b.Error(err)
						return
					}
					if size == 0 {
						resp, err := http.ReadResponse(br, nil)
						if err != nil {
							b.Error(err)
							return
						}
						_, _ = io.Copy(io.Discard, resp.Body)
						_ = resp.Body.Close()
						size = responseSize(b, e.addr, req)
						continue
					}
					if _, err := io.ReadFull(br, buf[:size]); err != nil {
						b.Error(err)
						return
					}
					if !bytes.HasPrefix(buf, []byte("HTTP/1.1 200 OK\r\n")) || !bytes.HasSuffix(buf[:size], []byte("hello from backend\n")) {
						b.Errorf("response out of step: %q", buf[:size])
						return
					}
				}
			})
		})
	}
}

// responseSize is the length of the proxy's response to req, as bytes.
func responseSize(b *testing.B, addr, req string) int {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	_, _ = io.WriteString(c, strings.Replace(req, "\r\n\r\n", "\r\nConnection: close\r\n\r\n", 1))
	all, _ := io.ReadAll(c)
	// The response to the closing request says so; the others do not.
	return len(all) - len("Connection: close\r\n")
}

// fixedEnv is a proxy (with the raw path off when noRaw) routing every
// request, with the agent's default stream idle timeout, to a backend
// answering fixed bytes.
func fixedEnv(b *testing.B, noRaw bool) *env {
	e := newEnvWith(b, func(o *Options) { o.NoRawPath = noRaw })
	be := fixedBackend(b, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 19\r\n\r\nhello from backend\n")
	r := rule(prefix("/"), "ns/a")
	r.Timeouts = &pb.RouteTimeouts{IdleMs: uint32(time.Hour / time.Millisecond)}
	e.mustApply(e.snap(pb.Protocol_PROTOCOL_HTTP, nil, []*pb.Route{route("ns/r", r)}, []*pb.Backend{backendOf("ns/a", be)}))
	return e
}

// fixedBackend answers every request head on a connection with resp.
func fixedBackend(b *testing.B, resp string) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = ln.Close() })
	go fixedhttp.Serve(ln, []byte(resp))
	return ln.Addr().String()
}

// BenchmarkProxyH2 is BenchmarkProxyRaw over h2c with prior knowledge: one
// connection per client goroutine keeping 16 streams in flight, from a
// client that decodes no header block (it only counts END_STREAMs), so
// that allocations per op are nearly all the proxy's; "raw" by the raw
// request path, "map" with it off.
func BenchmarkProxyH2(b *testing.B) {
	for _, mode := range []string{"raw", "map"} {
		b.Run(mode, func(b *testing.B) {
			e := fixedEnv(b, mode == "map")
			const clients, streams = 2, 16
			var next atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			var wg sync.WaitGroup
			for range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := h2Client(e.addr, streams, func() bool { return next.Add(1) <= int64(b.N) }); err != nil {
						b.Error(err)
					}
				}()
			}
			wg.Wait()
		})
	}
}

// h2Client sends GETs over one h2c connection, streams at a time, while
// more() says so, and waits for each response's END_STREAM.
func h2Client(addr string, streams int, more func() bool) error {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer func() { _ = nc.Close() }()
	bw := bufio.NewWriterSize(nc, 32<<10)
	fr := http2.NewFramer(bw, bufio.NewReaderSize(nc, 32<<10))
	fr.SetReuseFrames()
	var hbuf bytes.Buffer
	henc := hpack.NewEncoder(&hbuf)
	_, _ = bw.WriteString(http2.ClientPreface)
	_ = fr.WriteSettings()
	_ = fr.WriteWindowUpdate(0, 1<<30)
	id, open, unacked := uint32(1), 0, 0
	send := func() {
		hbuf.Reset()
		for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "bench.example"}, {":path", "/bench"}, {"user-agent", "bench"}, {"accept", "*/*"}} {
			_ = henc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hbuf.Bytes(), EndStream: true, EndHeaders: true})
		id += 2
		open++
	}
	for open < streams && more() {
		send()
	}
	for open > 0 {
		if err := bw.Flush(); err != nil {
			return err
		}
		f, err := fr.ReadFrame()
		if err != nil {
			return err
		}
		ended := false
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.DataFrame:
			if unacked += len(f.Data()); unacked > 1<<20 {
				_ = fr.WriteWindowUpdate(0, uint32(unacked))
				unacked = 0
			}
			ended = f.StreamEnded()
		case *http2.HeadersFrame:
			// Not decoded: the encoder's table may drift from the
			// server's view, which only this client would notice.
			if f.StreamEnded() {
				return fmt.Errorf("stream %d: response without a body", f.StreamID)
			}
		case *http2.RSTStreamFrame:
			return fmt.Errorf("stream %d reset: %v", f.StreamID, f.ErrCode)
		case *http2.GoAwayFrame:
			return fmt.Errorf("GOAWAY %v", f.ErrCode)
		}
		if ended {
			open--
			if more() {
				send()
			}
		}
	}
	return nil
}
