package cli

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

func TestDemoBackendHTTP(t *testing.T) {
	ln := listen(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serveHello(ctx, ln, "web-1") }()
	for _, path := range []string{"/", "/healthz", "/api/x"} {
		resp, err := http.Get("http://" + ln.Addr().String() + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(body) != "hello from web-1\n" {
			t.Errorf("GET %s: %d %q", path, resp.StatusCode, body)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serveHello: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("serveHello did not stop")
	}
}

func TestDemoBackendEcho(t *testing.T) {
	ln := listen(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serveEcho(ctx, ln) }()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || line != "ping\n" {
		t.Errorf("echo: %q, %v", line, err)
	}
	// Stopping closes open connections too.
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serveEcho: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("serveEcho did not stop")
	}
}
