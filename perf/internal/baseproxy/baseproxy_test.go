package baseproxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestServe runs both proxies against a real backend over loopback:
// keep-alive requests on one connection, pipelined requests, a request with
// a body (the connection ends) and a backend answer without Content-Length.
func TestServe(t *testing.T) {
	for _, tc := range []struct {
		name  string
		serve func(addr, backend string) error
	}{
		{"epoll", Serve},
		{"goroutines", ServeGoroutines},
	} {
		t.Run(tc.name, func(t *testing.T) { testServe(t, tc.serve) })
	}
}

func testServe(t *testing.T, serve func(addr, backend string) error) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/stream" {
			w.(http.Flusher).Flush() // no Content-Length: chunked
			_, _ = io.WriteString(w, "x")
			return
		}
		_, _ = fmt.Fprintf(w, "path %s", r.URL.Path)
	}))
	defer backend.Close()
	addr := start(t, serve, backend.Listener.Addr().String())
	c := dial(t, addr)
	br := bufio.NewReader(c)
	get := func(path string) string { return "GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n" }
	read := func() string {
		t.Helper()
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("read response: %v", err)
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("read body: %v", err)
		}
		return string(body)
	}
	for _, p := range []string{"/a", "/b"} {
		if _, err := io.WriteString(c, get(p)); err != nil {
			t.Fatal(err)
		}
		if got, want := read(), "path "+p; got != want {
			t.Errorf("keep-alive: got %q, want %q", got, want)
		}
	}
	if _, err := io.WriteString(c, get("/c")+get("/d")); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"path /c", "path /d"} {
		if got := read(); got != want {
			t.Errorf("pipelined: got %q, want %q", got, want)
		}
	}

	ends(t, addr, "request body", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi")
	ends(t, addr, "answer without length", get("/stream"))
}

// dial connects to addr with a deadline, closed when the test ends.
func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	return c
}

// ends checks that the proxy at addr ends a connection on which req was
// sent without answering it.
func ends(t *testing.T, addr, name, req string) {
	t.Helper()
	c := dial(t, addr)
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(c)
	if err != nil || len(rest) != 0 {
		t.Errorf("%s: read %q, %v; want the connection closed with nothing sent", name, rest, err)
	}
}

// start runs serve on a free loopback port and returns the address once it
// accepts connections.
func start(t *testing.T, serve func(addr, backend string) error, backend string) string {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	errc := make(chan error, 1)
	go func() { errc <- serve(addr, backend) }()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		c, err := net.Dial("tcp4", addr)
		if err == nil {
			_ = c.Close()
			return addr
		}
		select {
		case err := <-errc:
			t.Fatalf("serve: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
	}
}
