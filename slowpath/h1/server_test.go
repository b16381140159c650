package h1

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// echo answers with the request's path and body.
var echo = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	_, _ = io.WriteString(w, r.URL.Path+":"+string(b))
})

func TestKeepAlive(t *testing.T) {
	ts := serve(t, &Server{Handler: echo})

	t.Run("sequential requests", func(t *testing.T) {
		cl := dial(t, ts.addr)
		for i, path := range []string{"/a", "/b", "/c"} {
			cl.send("POST " + path + " HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\n" + string(rune('0'+i)))
			resp, body := cl.response("POST")
			if want := path + ":" + string(rune('0'+i)); body != want || resp.Close {
				t.Fatalf("request %d: %q close=%v, want %q kept", i, body, resp.Close, want)
			}
		}
	})
	t.Run("pipelined", func(t *testing.T) {
		cl := dial(t, ts.addr)
		cl.send("POST /1 HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nonePOST /2 HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\ntwo\r\n0\r\n\r\n" +
			"GET /3 HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
		for _, want := range []string{"/1:one", "/2:two", "/3:"} {
			if _, body := cl.response("GET"); body != want {
				t.Fatalf("response %q, want %q", body, want)
			}
		}
		cl.expectEOF()
	})
	t.Run("each request its own fields", func(t *testing.T) {
		// The header map and its values' array are the connection's:
		// nothing of one request's fields may show in the next's.
		hs := serve(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var keys []string
			for k, vs := range r.Header {
				keys = append(keys, k+"="+strings.Join(vs, ","))
			}
			slices.Sort(keys)
			_, _ = io.WriteString(w, strings.Join(keys, " "))
		})})
		cl := dial(t, hs.addr)
		for i, tc := range []struct{ fields, want string }{
			{"X-A: 1\r\nX-B: 2\r\nX-C: 3\r\n", "X-A=1 X-B=2 X-C=3"},
			{"X-D: 4\r\n", "X-D=4"},
			{"X-E: 5\r\nX-E: 6\r\nX-F: 7\r\nX-G: 8\r\nX-H: 9\r\nX-I: 10\r\n", "X-E=5,6 X-F=7 X-G=8 X-H=9 X-I=10"},
			{"", ""},
		} {
			cl.send("GET / HTTP/1.1\r\nHost: h\r\n" + tc.fields + "\r\n")
			if _, body := cl.response("GET"); body != tc.want {
				t.Fatalf("request %d: handler saw %q, want %q", i, body, tc.want)
			}
		}
	})
	t.Run("HTTP/1.0 closes", func(t *testing.T) {
		cl := dial(t, ts.addr)
		cl.send("GET /x HTTP/1.0\r\n\r\n")
		if resp, body := cl.response("GET"); body != "/x:" || !resp.Close {
			t.Fatalf("%q close=%v", body, resp.Close)
		}
		cl.expectEOF()
	})
	t.Run("HTTP/1.0 keep-alive", func(t *testing.T) {
		cl := dial(t, ts.addr)
		for range 2 {
			cl.send("GET /x HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n")
			if resp, body := cl.response("GET"); body != "/x:" || resp.Close {
				t.Fatalf("%q close=%v", body, resp.Close)
			}
		}
	})
	t.Run("Connection: close", func(t *testing.T) {
		cl := dial(t, ts.addr)
		cl.send("GET /x HTTP/1.1\r\nHost: h\r\nConnection: foo, close\r\n\r\n")
		if resp, body := cl.response("GET"); body != "/x:" || !resp.Close {
			t.Fatalf("%q close=%v", body, resp.Close)
		}
		cl.expectEOF()
	})
}

func TestExpectContinue(t *testing.T) {
	ts := serve(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/refuse" {
			http.Error(w, "no", http.StatusForbidden)
			return
		}
		echo(w, r)
	})})
	const head = " HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n"

	t.Run("100 before the body", func(t *testing.T) {
		cl := dial(t, ts.addr)
		cl.send("POST /up" + head)
		// The body is not sent before the 100 arrives: the handler's read
		// must ask for it.
		if resp, _ := cl.response("POST"); resp.StatusCode != http.StatusContinue {
			t.Fatalf("first response %d, want 100", resp.StatusCode)
		}
		cl.send("hello")
		if resp, body := cl.response("POST"); resp.StatusCode != 200 || body != "/up:hello" || resp.Close {
			t.Fatalf("final response %d %q close=%v", resp.StatusCode, body, resp.Close)
		}
		cl.expectOpen()
	})
	t.Run("no 100 when the body is not read", func(t *testing.T) {
		cl := dial(t, ts.addr)
		cl.send("POST /refuse" + head)
		resp, _ := cl.response("POST")
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("first response %d, want 403 without 100", resp.StatusCode)
		}
		if !resp.Close {
			t.Errorf("response without Connection: close")
		}
		cl.expectEOF()
	})
	t.Run("HTTP/1.0 gets no 100", func(t *testing.T) {
		cl := dial(t, ts.addr)
		cl.send("POST /up HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\nhello")
		if resp, body := cl.response("POST"); resp.StatusCode != 200 || body != "/up:hello" {
			t.Fatalf("response %d %q", resp.StatusCode, body)
		}
	})
}

func TestUnreadBody(t *testing.T) {
	ts := serve(t, &Server{Handler: ok})

	t.Run("small body is drained", func(t *testing.T) {
		cl := dial(t, ts.addr)
		cl.send("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 10000\r\n\r\n" + strings.Repeat("b", 10000))
		if resp, body := cl.response("POST"); body != "ok" || resp.Close {
			t.Fatalf("%q close=%v", body, resp.Close)
		}
		cl.expectOpen()
	})
	t.Run("small chunked body is drained", func(t *testing.T) {
		cl := dial(t, ts.addr)
		cl.send("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nX-T: 1\r\n\r\n")
		if resp, body := cl.response("POST"); body != "ok" || resp.Close {
			t.Fatalf("%q close=%v", body, resp.Close)
		}
		cl.expectOpen()
	})
	t.Run("large body closes", func(t *testing.T) {
		cl := dial(t, ts.addr)
		// Declared 1 MiB; 200 KiB sent, all of which the server reads
		// before it closes, so that the close is no reset.
		sent := make(chan error, 1)
		go func() {
			_, err := io.WriteString(cl.Conn, "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1048576\r\n\r\n"+strings.Repeat("b", 200<<10))
			sent <- err
		}()
		resp, body := cl.response("POST")
		if body != "ok" {
			t.Fatalf("body %q", body)
		}
		if !resp.Close {
			t.Errorf("response without Connection: close")
		}
		cl.expectEOF()
		if err := recv(t, sent); err != nil {
			t.Fatalf("client write: %v", err)
		}
	})
}

// TestBodyAfterHandler reads a request body after its handler returned:
// the read fails, and reads nothing of the connection.
func TestBodyAfterHandler(t *testing.T) {
	bodies := make(chan io.Reader, 1)
	ts := serve(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/short" {
			// Less than declared: the connection closes.
			w.Header().Set("Content-Length", "10")
		}
		if r.URL.Path != "/next" {
			bodies <- r.Body
		}
		_, _ = io.WriteString(w, "ok")
	})})
	for _, tc := range []struct {
		name, request string
		keep          bool
	}{
		{"drained", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello", true},
		{"unread chunked", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", true},
		{"too large", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1000000\r\n\r\nhello", false},
		{"closed connection", "POST / HTTP/1.1\r\nHost: h\r\nConnection: close\r\nContent-Length: 10\r\n\r\nhello", false},
		{"failed response", "POST /short HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\nhello", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := dial(t, ts.addr)
			cl.send(tc.request)
			_, _, _ = cl.tryResponse("POST")
			body := recv(t, bodies)
			// Wait until the server is done with the request: it has
			// answered the next one, or ended the connection.
			if tc.keep {
				cl.expectOpen()
			} else {
				_ = cl.Close()
				ts.waitEnded(t, cl)
			}
			n, err := body.Read(make([]byte, 10))
			if err == nil || n != 0 || errors.Is(err, io.EOF) {
				t.Fatalf("read after the handler: %d, %v; want an error", n, err)
			}
		})
	}
}

func TestHijack(t *testing.T) {
	hijacked := make(chan net.Conn, 1)
	ts := serve(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		nc, rw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			panic(err)
		}
		_, _ = rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
		// The line sent with the request is in the buffered reader.
		line, err := rw.ReadString('\n')
		if err != nil {
			panic(err)
		}
		_, _ = rw.WriteString("echo " + line)
		_ = rw.Flush()
		if _, err := w.Write([]byte("x")); !errors.Is(err, http.ErrHijacked) {
			panic("write after hijack: " + errString(err))
		}
		hijacked <- nc
	})})
	cl := dial(t, ts.addr)
	cl.send("GET /ws HTTP/1.1\r\nHost: h\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\nhello\n")
	if resp, err := http.ReadResponse(cl.br, nil); err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("response %v, %v", resp, err)
	}
	if line, err := cl.br.ReadString('\n'); err != nil || line != "echo hello\n" {
		t.Fatalf("echo %q, %v", line, err)
	}
	nc := recv(t, hijacked)
	defer func() { _ = nc.Close() }()
	ts.waitEnded(t, cl)
	// The server is done and wrote nothing more: the next bytes are ours,
	// and the connection is still open.
	if _, err := io.WriteString(nc, "ping\n"); err != nil {
		t.Fatalf("write on hijacked connection: %v", err)
	}
	if line, err := cl.br.ReadString('\n'); err != nil || line != "ping\n" {
		t.Fatalf("read %q, %v; want ping", line, err)
	}
}

func TestHandoff(t *testing.T) {
	handed := make(chan net.Conn, 1)
	ts := serve(t, &Server{Handler: ok, Handoff: func(c net.Conn) { handed <- c }})
	for _, tc := range []struct{ name, first string }{
		{"HTTP/2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00"},
		{"HTTP/2 preface in pieces", "PRI * HT|TP/2.0\r|\n\r\nSM\r\n\r\n"},
		{"not HTTP", "SSH-2.0-x\r\nmore"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := dial(t, ts.addr)
			for part := range strings.SplitSeq(tc.first, "|") {
				cl.send(part)
				time.Sleep(10 * time.Millisecond) // let the server see a partial line
			}
			want := strings.ReplaceAll(tc.first, "|", "")
			var nc net.Conn
			select {
			case nc = <-handed:
			case <-time.After(testDeadline):
				t.Fatal("connection not handed off")
			}
			defer func() { _ = nc.Close() }()
			_ = nc.SetDeadline(time.Now().Add(testDeadline))
			got := make([]byte, len(want))
			if _, err := io.ReadFull(nc, got); err != nil || string(got) != want {
				t.Fatalf("handed connection read %q, %v; want %q", got, err, want)
			}
			// It is still the client's connection, in both directions.
			cl.send("after")
			if _, err := io.ReadFull(nc, got[:5]); err != nil || string(got[:5]) != "after" {
				t.Fatalf("read %q, %v", got[:5], err)
			}
			if _, err := io.WriteString(nc, "reply"); err != nil {
				t.Fatal(err)
			}
			if b, err := cl.br.Peek(5); err != nil || string(b) != "reply" {
				t.Fatalf("client read %q, %v", b, err)
			}
		})
	}
	t.Run("HTTP/1.1 is served", func(t *testing.T) {
		cl := dial(t, ts.addr)
		cl.send("GET / HTTP/1.1\r\nHost: h\r\n\r\n")
		if _, body := cl.response("GET"); body != "ok" {
			t.Fatalf("body %q", body)
		}
		cl.expectOpen()
	})
}

func TestShutdown(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	ts := serve(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/block" {
			close(started)
			select {
			case <-release:
			case <-r.Context().Done(): // the test failed: its cleanup closes the server
			}
		}
		_, _ = io.WriteString(w, "ok")
	})})
	idle := dial(t, ts.addr)
	idle.send("GET / HTTP/1.1\r\nHost: h\r\n\r\n")
	idle.response("GET")
	active := dial(t, ts.addr)
	active.send("GET /block HTTP/1.1\r\nHost: h\r\n\r\n")
	recv(t, started)

	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
		defer cancel()
		done <- ts.srv.Shutdown(ctx)
	}()
	idle.expectEOF()
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned (%v) with a request in progress", err)
	default:
	}
	close(release)
	resp, body := active.response("GET")
	if body != "ok" || !resp.Close {
		t.Fatalf("active request: %q close=%v, want ok with Connection: close", body, resp.Close)
	}
	active.expectEOF()
	if err := recv(t, done); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	// A connection after Shutdown is closed unserved.
	late := dial(t, ts.addr)
	late.send("GET / HTTP/1.1\r\nHost: h\r\n\r\n")
	if _, err := late.br.ReadByte(); err == nil {
		t.Fatal("connection after Shutdown served")
	}
}

func TestCloseCancelsRequests(t *testing.T) {
	started, canceled := make(chan struct{}), make(chan error, 1)
	ts := serve(t, &Server{Handler: http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		close(started)
		select {
		case <-r.Context().Done():
			canceled <- r.Context().Err()
		case <-time.After(testDeadline):
			canceled <- errors.New("request context not canceled")
		}
	})})
	cl := dial(t, ts.addr)
	cl.send("GET / HTTP/1.1\r\nHost: h\r\n\r\n")
	recv(t, started)
	if err := ts.srv.Close(); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, canceled); !errors.Is(err, context.Canceled) {
		t.Fatalf("handler: %v", err)
	}
	if _, err := cl.br.ReadByte(); err == nil {
		t.Fatal("closed server answered")
	}
}

func TestTimeouts(t *testing.T) {
	const short = 100 * time.Millisecond
	// gated serves srv, each connection reaching it only once the test
	// has sent its first bytes (with open): the header timeout, which
	// starts with a new connection, then cannot expire while the test is
	// descheduled between its dial and its send.
	gated := func(t *testing.T, srv *Server) (ts *testServer, open func(first string) *client) {
		sent := make(chan struct{}, 1)
		ts = serveWith(t, srv, func(c net.Conn) net.Conn {
			select {
			case <-sent:
			case <-time.After(testDeadline):
			}
			return c
		})
		return ts, func(first string) *client {
			cl := dial(t, ts.addr)
			cl.send(first)
			sent <- struct{}{}
			return cl
		}
	}
	t.Run("ReadHeaderTimeout", func(t *testing.T) {
		_, open := gated(t, &Server{Handler: ok, ReadHeaderTimeout: short, IdleTimeout: time.Hour})
		cl := open("GET / HTTP/1.1\r\nHost: h\r\n")
		cl.expectEOF()
		// Also on a kept connection, where the idle timeout covers the
		// wait for the first byte.
		cl = open("GET / HTTP/1.1\r\nHost: h\r\n\r\n")
		cl.response("GET")
		cl.send("GET / HTTP/1.1\r\n")
		cl.expectEOF()
	})
	t.Run("IdleTimeout", func(t *testing.T) {
		ts := serve(t, &Server{Handler: ok, IdleTimeout: short})
		cl := dial(t, ts.addr)
		cl.send("GET / HTTP/1.1\r\nHost: h\r\n\r\n")
		cl.response("GET")
		cl.expectEOF()
	})
	// The deadline is set once for many requests (waitFor): a connection
	// that keeps sending is never cut, and the wait after its last
	// request is never shorter than the timeout, whichever request last
	// set the deadline. (A deadline that was not renewed when needed, or
	// one kept when it ended the wait too soon, fails here; how late the
	// close comes is not timed.)
	t.Run("IdleTimeout after a series", func(t *testing.T) {
		const idle = 300 * time.Millisecond
		ts := serve(t, &Server{Handler: ok, IdleTimeout: idle})
		for _, gap := range []time.Duration{0, 10 * time.Millisecond, 50 * time.Millisecond} {
			cl := dial(t, ts.addr)
			var sent time.Time
			for range 40 {
				sent = time.Now()
				cl.send("GET / HTTP/1.1\r\nHost: h\r\n\r\n")
				cl.response("GET")
				time.Sleep(gap)
			}
			cl.expectEOF()
			if waited := time.Since(sent); waited < idle {
				t.Fatalf("gap %v: closed %v after the last request, want at least %v", gap, waited, idle)
			}
		}
	})
	// The timeouts bound the head, not a body the handler reads slowly.
	for _, srv := range []*Server{
		{Handler: echo, IdleTimeout: short},
		{Handler: echo, ReadHeaderTimeout: short},
		{Handler: echo, ReadHeaderTimeout: short, IdleTimeout: short},
	} {
		t.Run("slow body", func(t *testing.T) {
			const req = "POST /up HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhe"
			_, open := gated(t, srv)
			cl := open(req)
			for i := range 2 { // a new and a kept connection
				time.Sleep(3 * short) // past both timeouts
				rest := "llo"
				if i == 0 {
					// The kept connection's request comes with it, before
					// its idle (or header) timeout starts: the test cannot
					// be too late for it.
					rest += req
				}
				cl.send(rest)
				if resp, body := cl.response("POST"); resp.StatusCode != 200 || body != "/up:hello" {
					t.Fatalf("request %d: %d %q", i, resp.StatusCode, body)
				}
			}
		})
	}
}

func TestPanic(t *testing.T) {
	var logs logBuffer
	ts := serve(t, &Server{
		Log: slog.New(slog.NewTextHandler(&logs, nil)),
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/panic":
				panic("boom")
			case "/abort":
				_, _ = io.WriteString(w, "partial")
				w.(http.Flusher).Flush()
				panic(http.ErrAbortHandler)
			}
			_, _ = io.WriteString(w, "ok")
		}),
	})
	for _, tc := range []struct {
		path   string
		logged int
	}{{"/panic", 1}, {"/abort", 0}} {
		before := logs.count("http handler panicked")
		cl := dial(t, ts.addr)
		cl.send("GET " + tc.path + " HTTP/1.1\r\nHost: h\r\n\r\n")
		if resp, body, err := cl.tryResponse("GET"); err == nil {
			t.Fatalf("%s: complete response %d %q", tc.path, resp.StatusCode, body)
		}
		_ = cl.Close()
		ts.waitEnded(t, cl)
		if n := logs.count("http handler panicked") - before; n != tc.logged {
			t.Errorf("%s: %d panics logged, want %d", tc.path, n, tc.logged)
		}
		// The server serves other connections.
		cl = dial(t, ts.addr)
		cl.send("GET / HTTP/1.1\r\nHost: h\r\n\r\n")
		if _, body := cl.response("GET"); body != "ok" {
			t.Fatalf("after panic: %q", body)
		}
	}
}

// TestHijackBody reads a request's body after its connection was
// hijacked: the read fails (the buffered bytes are the hijacker's now)
// rather than panicking.
func TestHijackBody(t *testing.T) {
	var logs logBuffer
	got := make(chan string, 1)
	ts := serve(t, &Server{
		Log: slog.New(slog.NewTextHandler(&logs, nil)),
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			nc, rw, err := w.(http.Hijacker).Hijack()
			if err != nil {
				panic(err)
			}
			defer func() { _ = nc.Close() }()
			n, err := r.Body.Read(make([]byte, 5))
			if err == nil || n != 0 {
				got <- "body read after hijack: " + errString(err)
				return
			}
			b := make([]byte, 5)
			if _, err := io.ReadFull(rw, b); err != nil {
				got <- "hijacker read: " + err.Error()
				return
			}
			got <- string(b)
		}),
	})
	cl := dial(t, ts.addr)
	cl.send("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello")
	ts.waitEnded(t, cl)
	if n := logs.count("panicked"); n != 0 {
		t.Fatalf("handler panicked: %s", logs.buf.String())
	}
	if s := recv(t, got); s != "hello" {
		t.Fatal(s)
	}
}

// TestGoBeforeShutdown: a connection handed to Go before Shutdown began
// (accepted just before the listener closed) is waited for, and its first
// request is answered with "Connection: close" even when it arrives after
// Shutdown began, also when the connection was still being prepared
// (a TLS handshake, say) at that moment.
func TestGoBeforeShutdown(t *testing.T) {
	srv := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "late but served") }),
		Log: slog.New(slog.DiscardHandler)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close(); _ = srv.Close() })
	cl := dial(t, ln.Addr().String())
	nc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	_ = ln.Close()
	prepared := make(chan struct{})
	srv.Go(nc, func(c net.Conn) net.Conn { <-prepared; return c })

	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
		defer cancel()
		done <- srv.Shutdown(ctx)
	}()
	// Shutdown has begun (or is about to): it must not end while the
	// connection is the server's.
	for !srv.draining.Load() {
		time.Sleep(time.Millisecond)
	}
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned (%v) before the connection was served", err)
	default:
	}
	close(prepared)
	cl.send("GET / HTTP/1.1\r\nHost: h\r\n\r\n")
	resp, body := cl.response("GET")
	if body != "late but served" || !resp.Close {
		t.Fatalf("got %q close=%v, want the answer with Connection: close", body, resp.Close)
	}
	cl.expectEOF()
	if err := recv(t, done); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

// TestBurstWrites runs the server on plain TCP connections, whose
// response ends go out in bursts (package wbatch): pipelined responses
// arrive whole and in order, a response before a close is not lost, and
// a hijacker writes after the response before it.
func TestBurstWrites(t *testing.T) {
	ts := serveRaw(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hijack" {
			nc, _, err := w.(http.Hijacker).Hijack()
			if err != nil {
				t.Errorf("hijack: %v", err)
				return
			}
			_, _ = io.WriteString(nc, "raw bytes")
			_ = nc.Close()
			return
		}
		_, _ = io.WriteString(w, "body of "+r.URL.Path)
	})})
	t.Run("pipelined", func(t *testing.T) {
		cl := dial(t, ts.addr)
		var reqs strings.Builder
		for i := range 20 {
			fmt.Fprintf(&reqs, "GET /%d HTTP/1.1\r\nHost: h\r\n\r\n", i)
		}
		cl.send(reqs.String())
		for i := range 20 {
			resp, body := cl.response("GET")
			if resp.StatusCode != 200 || body != fmt.Sprintf("body of /%d", i) {
				t.Fatalf("response %d: %d %q", i, resp.StatusCode, body)
			}
		}
	})
	t.Run("close", func(t *testing.T) {
		cl := dial(t, ts.addr)
		cl.send("GET /last HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
		resp, body := cl.response("GET")
		if body != "body of /last" || !resp.Close {
			t.Fatalf("got %q (close %v)", body, resp.Close)
		}
		if _, err := cl.br.ReadByte(); err != io.EOF {
			t.Fatalf("after the last response: %v, want EOF", err)
		}
	})
	t.Run("hijack after a response", func(t *testing.T) {
		cl := dial(t, ts.addr)
		cl.send("GET /first HTTP/1.1\r\nHost: h\r\n\r\nGET /hijack HTTP/1.1\r\nHost: h\r\n\r\n")
		if _, body := cl.response("GET"); body != "body of /first" {
			t.Fatalf("first response %q", body)
		}
		rest, err := io.ReadAll(cl.br)
		if err != nil || string(rest) != "raw bytes" {
			t.Fatalf("after the first response: %q, %v; want the hijacker's bytes", rest, err)
		}
	})
}

// TestSendTimeout: a client that stops reading a large response has its
// connection closed once the send timeout passes without progress (the
// handler's write fails); one that reads slowly but steadily gets it all.
func TestSendTimeout(t *testing.T) {
	const size = 8 << 20 // far more than the socket buffers
	handlerErr := make(chan error, 2)
	for _, batched := range []bool{false, true} {
		name := "counted conn"
		if batched {
			name = "plain TCP"
		}
		t.Run(name, func(t *testing.T) {
			server := func(t *testing.T, timeout time.Duration) *testServer {
				srv := &Server{SendTimeout: timeout, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("Content-Length", strconv.Itoa(size))
					chunk := bytes.Repeat([]byte("z"), 32<<10)
					for sent := 0; sent < size; sent += len(chunk) {
						if _, err := w.Write(chunk); err != nil {
							handlerErr <- err
							return
						}
					}
					handlerErr <- nil
				})}
				if batched {
					return serveRaw(t, srv)
				}
				return serve(t, srv)
			}
			t.Run("stalled", func(t *testing.T) {
				ts := server(t, 200*time.Millisecond)
				cl := dial(t, ts.addr)
				if tc, ok := cl.Conn.(*net.TCPConn); ok {
					_ = tc.SetReadBuffer(16 << 10)
				}
				cl.send("GET /big HTTP/1.1\r\nHost: h\r\n\r\n")
				select {
				case err := <-handlerErr:
					if err == nil {
						t.Fatal("the whole response was written to a client that reads nothing")
					}
				case <-time.After(testDeadline):
					t.Fatal("the handler's write to a client that reads nothing never failed")
				}
			})
			t.Run("slow but steady", func(t *testing.T) {
				// A timeout long enough that the client, however
				// descheduled, does not stall for half of it beyond its
				// pauses (a write can find half the timeout left).
				const timeout, pause = 2 * time.Second, 500 * time.Millisecond
				ts := server(t, timeout)
				cl := dial(t, ts.addr)
				cl.send("GET /big HTTP/1.1\r\nHost: h\r\n\r\n")
				resp, err := http.ReadResponse(cl.br, nil)
				if err != nil {
					t.Fatal(err)
				}
				// 8 MiB in 64 KiB pieces with pauses shorter than half the
				// timeout, over longer than it.
				buf := make([]byte, 64<<10)
				var got int
				for got < size {
					n, err := io.ReadFull(resp.Body, buf[:min(len(buf), size-got)])
					got += n
					if err != nil {
						t.Fatalf("after %d bytes: %v", got, err)
					}
					if got%(1<<20) == 0 && got < size {
						time.Sleep(pause)
					}
				}
				if err := <-handlerErr; err != nil {
					t.Fatalf("handler: %v", err)
				}
			})
		})
	}
}
