package upstream

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/novaedge/novaedge/slowpath/internal/ctxhook"
)

// TestUpgrade: a 101 answer's body is the connection (io.ReadWriteCloser),
// and bytes the server sent right behind the head are not lost.
func TestUpgrade(t *testing.T) {
	srv := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
		req, _ := readRequest(br)
		if req == nil || req.Header.Get("Upgrade") != "echo" {
			return
		}
		// Head and the first bytes of the new protocol in one write.
		_, _ = io.WriteString(c, lines("HTTP/1.1 101 Switching Protocols", "Connection: Upgrade", "Upgrade: echo", "", "hello\n"))
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			_, _ = io.WriteString(c, strings.ToUpper(line))
		}
	})
	tr := &Transport{}
	req := newRequest(t, testCtx(t), http.MethodGet, srv.url("/"), nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "echo")
	resp, err := tr.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("%v %v", resp, err)
	}
	rwc, ok := resp.Body.(io.ReadWriteCloser)
	if !ok {
		t.Fatalf("101 body %T is not an io.ReadWriteCloser", resp.Body)
	}
	br := bufio.NewReader(rwc)
	if got, err := br.ReadString('\n'); got != "hello\n" || err != nil {
		t.Fatalf("bytes behind the head: %q %v", got, err)
	}
	for _, msg := range []string{"one\n", "two\n"} {
		if _, err := io.WriteString(rwc, msg); err != nil {
			t.Fatal(err)
		}
		if got, err := br.ReadString('\n'); got != strings.ToUpper(msg) || err != nil {
			t.Fatalf("echo of %q: %q %v", msg, got, err)
		}
	}
	if err := rwc.Close(); err != nil {
		t.Fatal(err)
	}
	if n := tr.IdleConns(srv.ln.Addr().String()); n != 0 {
		t.Fatalf("an upgraded connection went back to the pool (%d idle)", n)
	}
}

// TestCancellation: ending the request's context interrupts each wait —
// for the head, within the body — with an error that wraps the context's
// error and its cause, and the connection is closed (the server sees it).
func TestCancellation(t *testing.T) {
	errCause := errors.New("the test's reason")
	cases := []struct {
		name string
		raw  string // what the server sends before it stalls
		// inBody: the cancellation comes while reading the body.
		inBody bool
	}{
		{"waiting for the head", "", false},
		{"within the head", "HTTP/1.1 200 OK\r\nContent-Le", false},
		{"within a sized body", lines("HTTP/1.1 200 OK", "Content-Length: 100", "", "some"), true},
		{"within a chunked body", lines("HTTP/1.1 200 OK", "Transfer-Encoding: chunked", "", "4", "some", ""), true},
	}
	// Both ways of watching a context: context.AfterFunc, and the hook of
	// a context whose owner cancels it (the HTTP/1.x server's).
	for _, hooked := range []bool{false, true} {
		for _, tc := range cases {
			name := tc.name
			if hooked {
				name += " (hooked context)"
			}
			t.Run(name, func(t *testing.T) { testCancellation(t, tc.raw, tc.inBody, hooked, errCause) })
		}
	}
}

func testCancellation(t *testing.T, raw string, inBody, hooked bool, errCause error) {
	serverSawClose := make(chan struct{})
	srv := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
		if req, _ := readRequest(br); req == nil {
			return
		}
		_, _ = io.WriteString(c, raw)
		_, _ = br.ReadByte() // blocks until the client closes
		close(serverSawClose)
	})
	tr := &Transport{}
	ctx, cancel := context.WithCancelCause(testCtx(t))
	if hooked {
		var slot ctxhook.Slot
		ctx = ctxhook.With(ctx, &slot)
		slot.Init(ctx, nil)
		plain := cancel
		cancel = func(cause error) { plain(cause); slot.Fire() }
	}
	req := newRequest(t, ctx, http.MethodGet, srv.url("/"), nil)
	var err error
	if inBody {
		resp, rerr := tr.RoundTrip(req)
		if rerr != nil {
			t.Fatal(rerr)
		}
		time.AfterFunc(50*time.Millisecond, func() { cancel(errCause) })
		_, err = io.ReadAll(resp.Body)
		_ = resp.Body.Close()
	} else {
		time.AfterFunc(50*time.Millisecond, func() { cancel(errCause) })
		_, err = tr.RoundTrip(req)
	}
	if !errors.Is(err, context.Canceled) || !errors.Is(err, errCause) {
		t.Fatalf("error %v, want one wrapping context.Canceled and the cause", err)
	}
	select {
	case <-serverSawClose:
	case <-time.After(10 * time.Second):
		t.Fatal("the connection stayed open after the cancellation")
	}
}

// TestResponseHeaderTimeout: a server that does not answer in time gives
// ErrResponseHeaderTimeout, not a hang.
func TestResponseHeaderTimeout(t *testing.T) {
	srv := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
		_, _ = readRequest(br)
		_, _ = br.ReadByte()
	})
	tr := &Transport{ResponseHeaderTimeout: 50 * time.Millisecond}
	ctx := testCtx(t)
	_, err := tr.RoundTrip(newRequest(t, ctx, http.MethodGet, srv.url("/"), nil))
	notHung(t, ctx, err)
	if !errors.Is(err, ErrResponseHeaderTimeout) {
		t.Fatalf("error %v, want ErrResponseHeaderTimeout", err)
	}
}

// TestExpectContinue: a body behind "Expect: 100-continue" is sent after
// the server's 100 Continue, or after ExpectContinueTimeout from a server
// that ignores the header, and not at all when the server answers first.
func TestExpectContinue(t *testing.T) {
	t.Run("net/http server sends 100", func(t *testing.T) {
		srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			_, _ = w.Write(b)
		})
		tr := &Transport{ExpectContinueTimeout: time.Minute}
		defer tr.CloseIdleConnections()
		var got100 atomic.Bool
		ctx := httptrace.WithClientTrace(testCtx(t), &httptrace.ClientTrace{Got1xxResponse: func(code int, _ textproto.MIMEHeader) error {
			got100.Store(code == 100)
			return nil
		}})
		req := newRequest(t, ctx, http.MethodPost, srv.URL+"/", strings.NewReader("the body"))
		req.Header.Set("Expect", "100-continue")
		_, body, err := do(t, tr, req)
		if err != nil || body != "the body" || !got100.Load() {
			t.Fatalf("body %q, error %v, 100 seen %v", body, err, got100.Load())
		}
	})
	t.Run("server ignores Expect", func(t *testing.T) {
		srv := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
			req, body := readRequest(br) // waits for the body without a 100
			if req == nil {
				return
			}
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+string(body))
		})
		tr := &Transport{ExpectContinueTimeout: 50 * time.Millisecond}
		req := newRequest(t, testCtx(t), http.MethodPost, srv.url("/"), strings.NewReader("late body"))
		req.Header.Set("Expect", "100-continue")
		_, body, err := do(t, tr, req)
		if err != nil || body != "late body" {
			t.Fatalf("body %q, error %v", body, err)
		}
	})
	t.Run("server answers first", func(t *testing.T) {
		srv := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
			if _, err := http.ReadRequest(br); err != nil {
				return
			}
			_, _ = io.WriteString(c, lines("HTTP/1.1 401 Unauthorized", "Content-Length: 0", "", ""))
			_, _ = br.ReadByte()
		})
		tr := &Transport{ExpectContinueTimeout: time.Minute}
		body := &watchedReader{r: strings.NewReader("never sent")}
		req := newRequest(t, testCtx(t), http.MethodPost, srv.url("/"), body)
		req.ContentLength = 10
		req.Header.Set("Expect", "100-continue")
		resp, _, err := do(t, tr, req)
		if err != nil || resp.StatusCode != 401 {
			t.Fatalf("%v %v", resp, err)
		}
		if body.reads.Load() != 0 {
			t.Fatal("the body was read although the server answered without 100 Continue")
		}
		if n := tr.IdleConns(srv.ln.Addr().String()); n != 0 {
			t.Fatal("the connection was kept although its request body was never sent")
		}
	})
}

type watchedReader struct {
	r     io.Reader
	reads atomic.Int32
}

func (w *watchedReader) Read(p []byte) (int, error) {
	w.reads.Add(1)
	return w.r.Read(p)
}

// TestRequestBodyErrors: a body that cannot be read fails the request with
// its own error (http.MaxBytesError stays visible for the 413 answer), a
// body shorter than its Content-Length with ErrBodyTooShort.
func TestRequestBodyErrors(t *testing.T) {
	srv := newRawServer(t, answerEach(lines("HTTP/1.1 204 No Content", "", ""), false))
	tr := &Transport{}
	ctx := testCtx(t)

	limited := http.MaxBytesReader(nil, io.NopCloser(strings.NewReader(strings.Repeat("x", 100))), 10)
	req := newRequest(t, ctx, http.MethodPost, srv.url("/"), limited)
	req.ContentLength = -1
	_, err := tr.RoundTrip(req)
	var tooLarge *http.MaxBytesError
	if !errors.As(err, &tooLarge) {
		t.Fatalf("error %v, want an *http.MaxBytesError", err)
	}

	req = newRequest(t, ctx, http.MethodPost, srv.url("/"), io.NopCloser(strings.NewReader("short")))
	req.ContentLength = 100
	if _, err = tr.RoundTrip(req); !errors.Is(err, ErrBodyTooShort) {
		t.Fatalf("error %v, want ErrBodyTooShort", err)
	}
}

// TestEarlyResponse: a server that answers 413 and closes without reading
// a large body: the client gets the 413 rather than the write error.
func TestEarlyResponse(t *testing.T) {
	srv := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		_, _ = io.WriteString(c, lines("HTTP/1.1 413 Payload Too Large", "Content-Length: 8", "Connection: close", "", "too big!"))
		// Return closes with the body unread: the client's writes fail.
	})
	tr := &Transport{}
	ctx := testCtx(t)
	req := newRequest(t, ctx, http.MethodPost, srv.url("/"), strings.NewReader(strings.Repeat("x", 32<<20)))
	resp, body, err := do(t, tr, req)
	notHung(t, ctx, err)
	if err != nil || resp.StatusCode != http.StatusRequestEntityTooLarge || body != "too big!" {
		t.Fatalf("%v %q %v, want the server's 413", resp, body, err)
	}
}

// TestBodyCloseBeforeEnd: closing a body before its end closes the
// connection (the rest would have to be read), and reading after Close
// fails.
func TestBodyCloseBeforeEnd(t *testing.T) {
	srv := newRawServer(t, answerEach(lines("HTTP/1.1 200 OK", "Content-Length: 10", "", "0123456789"), false))
	tr := &Transport{}
	resp, err := tr.RoundTrip(newRequest(t, testCtx(t), http.MethodGet, srv.url("/"), nil))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 3)
	if _, err := io.ReadFull(resp.Body, buf); err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if _, err := resp.Body.Read(buf); !errors.Is(err, http.ErrBodyReadAfterClose) {
		t.Fatalf("read after close: %v", err)
	}
	if n := tr.IdleConns(srv.ln.Addr().String()); n != 0 {
		t.Fatalf("%d idle connections after an early close", n)
	}
}

// TestThroughReverseProxy: httputil.ReverseProxy on this transport in
// front of a net/http backend: bodies both ways, trailers, 1xx
// forwarding, and a WebSocket-style upgrade.
func TestThroughReverseProxy(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/hints":
			w.Header().Set("Link", "</a.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			w.Header().Del("Link")
			_, _ = io.WriteString(w, "after hints")
		case "/trailers":
			w.Header().Set("Trailer", "X-Sum")
			_, _ = io.WriteString(w, "body")
			w.Header().Set("X-Sum", "7")
		case "/upgrade":
			if r.Header.Get("Upgrade") != "echo" {
				http.Error(w, "no upgrade", 400)
				return
			}
			c, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer func() { _ = c.Close() }()
			_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
			_ = brw.Flush()
			for {
				line, err := brw.ReadString('\n')
				if err != nil {
					return
				}
				_, _ = brw.WriteString(strings.ToUpper(line))
				_ = brw.Flush()
			}
		default:
			b, _ := io.ReadAll(r.Body)
			_, _ = w.Write(append([]byte(r.Method+":"), b...))
		}
	}))
	t.Cleanup(backend.Close)
	tr := &Transport{}
	defer tr.CloseIdleConnections()
	proxy := httptest.NewServer(&reverseProxyFor{backend: backend.Listener.Addr().String(), tr: tr})
	t.Cleanup(proxy.Close)

	resp, err := http.Post(proxy.URL+"/echo", "text/plain", strings.NewReader("ping"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if string(b) != "POST:ping" {
		t.Fatalf("echo: %q", b)
	}

	resp, err = http.Get(proxy.URL + "/trailers")
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if string(b) != "body" || resp.Trailer.Get("X-Sum") != "7" {
		t.Fatalf("trailers: %q %v", b, resp.Trailer)
	}

	var hints []string
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
		hints = append(hints, strconv.Itoa(code)+" "+h.Get("Link"))
		return nil
	}})
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, proxy.URL+"/hints", nil)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if len(hints) != 1 || hints[0] != "103 </a.css>; rel=preload" {
		t.Fatalf("early hints through the proxy: %q", hints)
	}

	c, err := net.Dial("tcp", proxy.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	_, _ = io.WriteString(c, "GET /upgrade HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
	br := bufio.NewReader(c)
	up, err := http.ReadResponse(br, nil)
	if err != nil || up.StatusCode != 101 {
		t.Fatalf("upgrade through the proxy: %v %v", up, err)
	}
	_, _ = io.WriteString(c, "ws\n")
	if got, err := br.ReadString('\n'); got != "WS\n" || err != nil {
		t.Fatalf("upgraded echo: %q %v", got, err)
	}
}
