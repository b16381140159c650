package slowpath

import (
	"bufio"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

// TestBadInput sends malformed and smuggling-shaped requests over raw TCP:
// each gets the right 4xx from the proxy and none reaches the backend in a
// form the backend could read differently from the proxy.
func TestBadInput(t *testing.T) {
	e := newEnv(t)
	e.p.opts.MaxRequestBodyBytes = 1024
	var reached atomic.Int32
	var lastBody atomic.Value
	be := echoServer(t, "a")
	counting := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		b := make([]byte, 4096)
		n, _ := r.Body.Read(b)
		lastBody.Store(string(b[:n]) + "|cl=" + r.Header.Get("Content-Length") + "|te=" + strings.Join(r.TransferEncoding, ","))
		w.WriteHeader(200)
	})
	be.Config.Handler = counting
	e.mustApply(e.snap(pb.Protocol_PROTOCOL_HTTP, nil, []*pb.Route{route("ns/r", rule(prefix("/"), "ns/a"))}, []*pb.Backend{backendOf("ns/a", hostport(be))}))

	long := strings.Repeat("a", 9000)
	tests := []struct {
		name    string
		raw     string
		status  int
		reaches bool
	}{
		{"valid", "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 200, true},
		// A request line with an HTTP version gets 400. A first line that
		// is neither HTTP/1.x nor the HTTP/2 preface is closed without an
		// answer on a listener that also speaks h2c (RFC 9113 §3.4, checked
		// by h2spec 3.5/2); garbage shorter than the 14 bytes of
		// "PRI * HTTP/2.0" waits for more input until the read-header
		// timeout.
		{"garbage request line", "HELLO THERE HTTP/1.1\r\n\r\n", 400, false},
		{"minimal HTTP/1.0", "GET / HTTP/1.0\r\n\r\n", 200, true},
		{"space before colon", "GET / HTTP/1.1\r\nHost: x\r\nContent-Length : 5\r\n\r\nhello", 400, false},
		{"conflicting content lengths", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!", 400, false},
		{"unknown transfer coding", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: xchunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", 501, false},
		{"invalid header name", "GET / HTTP/1.1\r\nHost: x\r\nBad Header: v\r\n\r\n", 400, false},
		{"no host", "GET / HTTP/1.1\r\n\r\n", 400, false},
		{"uri too long", "GET /" + long + " HTTP/1.1\r\nHost: x\r\n\r\n", 414, false},
		{"headers too large", "GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("b", 70<<10) + "\r\n\r\n", 431, false},
		{"body too large (length)", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2000\r\n\r\n" + strings.Repeat("c", 2000), 413, false},
		{"body too large (chunked)", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n7d0\r\n" + strings.Repeat("c", 2000) + "\r\n0\r\n\r\n", 413, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := reached.Load()
			status := rawStatus(t, e.addr, tc.raw)
			if status != tc.status {
				t.Fatalf("status %d, want %d", status, tc.status)
			}
			if got := reached.Load() > before; got != tc.reaches && (!tc.reaches || tc.status == 200) {
				t.Fatalf("reached the backend: %v, want %v", got, tc.reaches)
			}
		})
	}

	// Content-Length and Transfer-Encoding together: the proxy goes by the
	// chunked coding (RFC 9112 §6.3) and the backend gets no
	// Content-Length, so the two cannot disagree on where the body ends.
	status := rawStatus(t, e.addr, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
	if status != 200 {
		t.Fatalf("CL+TE: status %d", status)
	}
	if got := lastBody.Load().(string); got != "hello|cl=|te=chunked" && got != "hello|cl=5|te=" {
		t.Fatalf("CL+TE reached the backend as %q", got)
	}
}

// rawStatus writes raw to a new connection and returns the status of the
// first response.
func rawStatus(t *testing.T, addr, raw string) int {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	go func() { _, _ = c.Write([]byte(raw)) }()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no response: %v", err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}
