package h1

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// testDeadline bounds every client read and write: a test that hangs
// fails instead.
const testDeadline = 10 * time.Second

// testServer runs a Server behind a real loopback listener.
type testServer struct {
	srv  *Server
	addr string
	// ended receives each connection (as the server saw it) once
	// ServeConn has returned for it.
	ended chan net.Conn
	// writes counts the server's writes on each accepted connection.
	writes sync.Map // client address -> *atomic.Int32
}

// countingConn counts writes; embedding *net.TCPConn keeps CloseWrite.
type countingConn struct {
	*net.TCPConn
	n *atomic.Int32
}

func (c countingConn) Write(b []byte) (int, error) {
	c.n.Add(1)
	return c.TCPConn.Write(b)
}

// serve starts srv on 127.0.0.1 with an accept loop calling ServeConn per
// connection; the cleanup closes the listener and the server and waits
// for every ServeConn to return.
func serve(t testing.TB, srv *Server) *testServer { return serveWith(t, srv, nil) }

// serveWith is serve with each accepted connection passed through prepare
// first (a TLS handshake, say); prepare returns nil to drop it.
func serveWith(t testing.TB, srv *Server, prepare func(net.Conn) net.Conn) *testServer {
	return serveConns(t, srv, prepare, true)
}

// serveRaw is serve without the write counting: the server gets the
// *net.TCPConn itself, whose response ends it writes in bursts (package
// wbatch), as in production.
func serveRaw(t testing.TB, srv *Server) *testServer { return serveConns(t, srv, nil, false) }

func serveConns(t testing.TB, srv *Server, prepare func(net.Conn) net.Conn, counting bool) *testServer {
	t.Helper()
	if srv.Log == nil {
		srv.Log = slog.New(slog.DiscardHandler)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	ts := &testServer{srv: srv, addr: ln.Addr().String(), ended: make(chan net.Conn, 64)}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n := new(atomic.Int32)
			ts.writes.Store(c.RemoteAddr().String(), n)
			wg.Add(1)
			go func() {
				defer wg.Done()
				sc := c
				if counting {
					sc = countingConn{c.(*net.TCPConn), n}
				}
				if prepare != nil {
					if sc = prepare(sc); sc == nil {
						_ = c.Close()
						return
					}
				}
				srv.ServeConn(sc)
				select {
				case ts.ended <- c:
				default:
				}
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		_ = srv.Close()
		wg.Wait()
	})
	return ts
}

// writesOf returns how many writes the server made on cl's connection.
func (ts *testServer) writesOf(cl *client) int32 {
	v, ok := ts.writes.Load(cl.LocalAddr().String())
	if !ok {
		return -1
	}
	return v.(*atomic.Int32).Load()
}

// waitEnded waits until ServeConn has returned for cl's connection.
func (ts *testServer) waitEnded(t testing.TB, cl *client) {
	t.Helper()
	deadline := time.After(testDeadline)
	for {
		select {
		case c := <-ts.ended:
			if c.RemoteAddr().String() == cl.LocalAddr().String() {
				return
			}
		case <-deadline:
			t.Fatalf("ServeConn for %s did not return", cl.LocalAddr())
		}
	}
}

// client is a raw client connection.
type client struct {
	net.Conn
	br *bufio.Reader
	t  testing.TB
}

func dial(t testing.TB, addr string) *client {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	_ = c.SetDeadline(time.Now().Add(testDeadline))
	t.Cleanup(func() { _ = c.Close() })
	return &client{Conn: c, br: bufio.NewReader(c), t: t}
}

func (c *client) send(s string) {
	c.t.Helper()
	if _, err := io.WriteString(c.Conn, s); err != nil {
		c.t.Fatalf("write request: %v", err)
	}
}

// response reads one response (to a request of method) and its body.
func (c *client) response(method string) (*http.Response, string) {
	c.t.Helper()
	resp, body, err := c.tryResponse(method)
	if err != nil {
		c.t.Fatalf("read response: %v", err)
	}
	return resp, body
}

func (c *client) tryResponse(method string) (*http.Response, string, error) {
	resp, err := http.ReadResponse(c.br, &http.Request{Method: method})
	if err != nil {
		return nil, "", err
	}
	b, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	return resp, string(b), err
}

// expectEOF asserts that the server closed the connection (cleanly, not
// with a reset) with nothing more to read.
func (c *client) expectEOF() {
	c.t.Helper()
	b, err := c.br.ReadByte()
	if err == nil {
		rest, _ := c.br.Peek(c.br.Buffered())
		c.t.Fatalf("connection not closed: read %q", append([]byte{b}, rest...))
	}
	if !errors.Is(err, io.EOF) {
		c.t.Fatalf("connection not closed cleanly: %v", err)
	}
}

// expectOpen asserts that the connection still serves requests.
func (c *client) expectOpen() {
	c.t.Helper()
	c.send("GET /next HTTP/1.1\r\nHost: next\r\n\r\n")
	resp, _, err := c.tryResponse("GET")
	if err != nil {
		c.t.Fatalf("connection not kept: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		c.t.Fatalf("request on kept connection: status %d", resp.StatusCode)
	}
}

// logBuffer collects a server's log lines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.buf.String(), s)
}

// ok answers every request 200 "ok".
var ok = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })

// recv receives from ch, failing the test if nothing comes in time.
func recv[T any](t testing.TB, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(testDeadline):
		t.Fatalf("nothing received in %v", testDeadline)
		panic("unreachable")
	}
}
