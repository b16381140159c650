package upstream

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// rawServer is a TCP server on 127.0.0.1 whose connections are handled by
// a test function that speaks bytes, so that tests control exactly what
// the client reads (malformed answers included).
type rawServer struct {
	ln    net.Listener
	conns atomic.Int32 // connections accepted
	wg    sync.WaitGroup
	mu    sync.Mutex
	open  []net.Conn
}

func newRawServer(t *testing.T, serve func(c net.Conn, br *bufio.Reader)) *rawServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &rawServer{ln: ln}
	s.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.conns.Add(1)
			s.mu.Lock()
			s.open = append(s.open, c)
			s.mu.Unlock()
			s.wg.Go(func() {
				defer func() { _ = c.Close() }()
				serve(c, bufio.NewReader(c))
			})
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		s.mu.Lock()
		for _, c := range s.open {
			_ = c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *rawServer) url(path string) string { return "http://" + s.ln.Addr().String() + path }

// readRequest reads one request and its whole body; nil at EOF or error.
func readRequest(br *bufio.Reader) (*http.Request, []byte) {
	req, err := http.ReadRequest(br)
	if err != nil {
		return nil, nil
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, nil
	}
	return req, body
}

// answerEach answers every request of a connection with raw; close ends
// the connection after the first answer.
func answerEach(raw string, closeAfter bool) func(net.Conn, *bufio.Reader) {
	return func(c net.Conn, br *bufio.Reader) {
		for {
			if req, _ := readRequest(br); req == nil {
				return
			}
			if _, err := io.WriteString(c, raw); err != nil || closeAfter {
				return
			}
		}
	}
}

// testCtx bounds a test's requests, so that a hang fails instead of
// blocking the run.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func newRequest(t *testing.T, ctx context.Context, method, url string, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// do sends a request and reads the whole body.
func do(t *testing.T, tr *Transport, req *http.Request) (*http.Response, string, error) {
	t.Helper()
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return nil, "", err
	}
	b, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	return resp, string(b), err
}

// notHung fails the test if err is the test context's own deadline: the
// transport hung instead of reporting a problem.
func notHung(t *testing.T, ctx context.Context, err error) {
	t.Helper()
	if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the request hung until the test's deadline: %v", err)
	}
}

// waitFor polls cond; the deadline only bounds a broken test.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func lines(s ...string) string { return strings.Join(s, "\r\n") }

// reverseProxyFor is httputil.ReverseProxy on a Transport to one backend.
type reverseProxyFor struct {
	backend string
	tr      *Transport
}

func (p *reverseProxyFor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = p.backend
		},
		Transport: p.tr,
	}
	rp.ServeHTTP(w, r)
}
