package h2

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// TestHeaderListTooLarge: a request whose header list exceeds
// MaxHeaderBytes gets 431 without reaching the handler, and the
// connection serves on.
func TestHeaderListTooLarge(t *testing.T) {
	reached := make(chan string, 2)
	ts := startServer(t, false, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached <- r.URL.Path
	}), func(s *Server) { s.MaxHeaderBytes = 2048 })
	rc := dialRaw(t, ts.addr)
	var extra []string
	for i := range 40 {
		extra = append(extra, fmt.Sprintf("x-h%d", i), strings.Repeat("v", 100))
	}
	if err := rc.request(1, "GET", "/big", true, extra...); err != nil {
		t.Fatal(err)
	}
	f, err := rc.next(t)
	if h, ok := f.(*http2.MetaHeadersFrame); err != nil || !ok || h.StreamID != 1 || h.PseudoValue("status") != "431" || !h.StreamEnded() {
		t.Fatalf("got %v, %v; want HEADERS 431 with END_STREAM on stream 1", f, err)
	}
	if err := rc.request(3, "GET", "/small", true); err != nil {
		t.Fatal(err)
	}
	f, err = rc.next(t)
	if h, ok := f.(*http2.MetaHeadersFrame); err != nil || !ok || h.StreamID != 3 || h.PseudoValue("status") != "200" {
		t.Fatalf("next request: %v, %v; want HEADERS 200 on stream 3", f, err)
	}
	if p := <-reached; p != "/small" {
		t.Fatalf("handler reached for %s", p)
	}
}

// TestContinuationFlood: a header block continued without end is cut off
// with a connection error once it passes the header list limit; the
// server does not buffer it.
func TestContinuationFlood(t *testing.T) {
	ts := startServer(t, false, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("handler reached for a flood")
	}), func(s *Server) { s.MaxHeaderBytes = 4096 })
	rc := dialRaw(t, ts.addr)
	var hb strings.Builder
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "x"}, {":path", "/"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	_ = rc.write(func() error {
		return rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte(hb.String()), EndHeaders: false})
	})
	var block strings.Builder
	enc = hpack.NewEncoder(&block)
	for i := range 100 {
		_ = enc.WriteField(hpack.HeaderField{Name: fmt.Sprintf("x-%d", i), Value: strings.Repeat("f", 150)})
	}
	done := make(chan http2.ErrCode, 1)
	go func() { done <- rc.readUntilGoAway(t) }()
	// 64 × ~16 KB: far past the limit; the server must stop reading.
	for range 64 {
		if err := rc.write(func() error { return rc.fr.WriteContinuation(1, false, []byte(block.String())) }); err != nil {
			break
		}
	}
	if code := <-done; code != http2.ErrCodeProtocol && code != http2.ErrCodeCompression {
		t.Fatalf("GOAWAY %v, want PROTOCOL_ERROR (or COMPRESSION_ERROR)", code)
	}
}
