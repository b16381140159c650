package h2

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// benchBody is the benchmark's response: 19 bytes.
var benchBody = []byte("hello from bench!\n\n")

func benchHandler(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain")
	_, _ = w.Write(benchBody)
}

// BenchmarkServer measures a small GET (19-byte response) over h2c with 16
// concurrent streams on one connection, client and server in this
// process: this package's server against x/net's http2.Server serving the
// same handler, each driven by two clients. With x/net's Transport
// ("transport") ns/op and allocs/op include that client's share, the same
// in both, and larger than the server's; the raw client ("raw": a Framer
// keeping 16 streams in flight, writes batched) costs little, so its
// numbers are mostly the server's.
func BenchmarkServer(b *testing.B) {
	for _, tc := range []struct {
		name  string
		serve func(net.Conn)
	}{
		{"h2", func(c net.Conn) {
			(&Server{Handler: http.HandlerFunc(benchHandler)}).ServeConn(c, ConnOptions{})
		}},
		{"xnet", func(c net.Conn) {
			// The baseline: x/net's server (deprecated for net/http's,
			// which serves it the same way).
			(&http2.Server{}).ServeConn(c, &http2.ServeConnOpts{Handler: http.HandlerFunc(benchHandler)}) //nolint:staticcheck // SA1019: see above
		}},
	} {
		b.Run(tc.name+"/transport", func(b *testing.B) { benchServe(b, tc.serve, benchTransport) })
		b.Run(tc.name+"/raw", func(b *testing.B) { benchServe(b, tc.serve, benchRaw) })
	}
}

func benchServe(b *testing.B, serve func(net.Conn), client func(b *testing.B, addr string, reset func())) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	var conns sync.Map
	var writes atomic.Int64 // the server's write calls
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Store(c, true)
			wg.Add(1)
			go func() { defer wg.Done(); serve(&countingConn{Conn: c, n: &writes}) }()
		}
	}()
	defer func() {
		_ = ln.Close()
		conns.Range(func(k, _ any) bool { _ = k.(net.Conn).Close(); return true })
		wg.Wait()
	}()
	client(b, ln.Addr().String(), func() { writes.Store(0) })
	b.ReportMetric(float64(writes.Load())/float64(b.N), "writes/op")
}

// countingConn counts a server connection's Write calls: each is a
// system call.
type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.n.Add(1)
	return c.Conn.Write(p)
}

// benchTransport runs b.N GETs through x/net's Transport from 16
// goroutines.
func benchTransport(b *testing.B, addr string, resetWrites func()) {
	dial := func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	tr := &http2.Transport{AllowHTTP: true, DialTLSContext: dial} //nolint:staticcheck // SA1019: x/net's client, as in server_test.go
	defer tr.CloseIdleConnections()                               //nolint:staticcheck // SA1019: as above
	url := "http://" + addr + "/bench"
	get := func() error {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		res, err := tr.RoundTrip(req) //nolint:staticcheck // SA1019: as above
		if err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, res.Body)
		_ = res.Body.Close()
		return err
	}
	if err := get(); err != nil { // open the connection outside the timing
		b.Fatal(err)
	}
	const streams = 16
	var next atomic.Int64
	var failed atomic.Value
	b.ReportAllocs()
	resetWrites()
	b.ResetTimer()
	var cw sync.WaitGroup
	for range streams {
		cw.Add(1)
		go func() {
			defer cw.Done()
			for next.Add(1) <= int64(b.N) {
				if err := get(); err != nil {
					failed.Store(err)
					return
				}
			}
		}()
	}
	cw.Wait()
	b.StopTimer()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
}

// benchRaw runs b.N GETs on one connection with a hand-driven client that
// keeps 16 streams open and writes what it has before each read.
func benchRaw(b *testing.B, addr string, resetWrites func()) {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = nc.Close() }()
	bw := bufio.NewWriterSize(nc, 32<<10)
	br := bufio.NewReaderSize(nc, 32<<10)
	fr := http2.NewFramer(bw, br)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	var hbuf bytes.Buffer
	henc := hpack.NewEncoder(&hbuf)
	_, _ = bw.WriteString(clientPreface)
	_ = fr.WriteSettings()
	_ = fr.WriteWindowUpdate(0, 1<<30)
	nextID := uint32(1)
	send := func() {
		hbuf.Reset()
		for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", addr}, {":path", "/bench"}} {
			_ = henc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: nextID, BlockFragment: hbuf.Bytes(), EndStream: true, EndHeaders: true})
		nextID += 2
	}
	const streams = 16
	b.ReportAllocs()
	resetWrites()
	b.ResetTimer()
	sent, done := 0, 0
	for ; sent < min(streams, b.N); sent++ {
		send()
	}
	unacked := 0
	for done < b.N {
		if br.Buffered() == 0 {
			if err := bw.Flush(); err != nil {
				b.Fatal(err)
			}
		}
		f, err := fr.ReadFrame()
		if err != nil {
			b.Fatal(err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.DataFrame:
			unacked += len(f.Data())
			if unacked > 1<<20 {
				_ = fr.WriteWindowUpdate(0, uint32(unacked))
				unacked = 0
			}
			if f.StreamEnded() {
				done++
				if sent < b.N {
					send()
					sent++
				}
			}
		case *http2.MetaHeadersFrame:
			if f.StreamEnded() {
				b.Fatalf("response without body on stream %d", f.StreamID)
			}
		case *http2.RSTStreamFrame:
			b.Fatalf("stream %d reset: %v", f.StreamID, f.ErrCode)
		case *http2.GoAwayFrame:
			b.Fatalf("GOAWAY %v", f.ErrCode)
		}
	}
	b.StopTimer()
}
