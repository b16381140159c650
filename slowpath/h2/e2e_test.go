package h2

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/novaedge/novaedge/slowpath/internal/ctxhook"
)

// echoHandler streams the request body back as it arrives.
func echoHandler(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusOK)
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func forBoth(t *testing.T, fn func(t *testing.T, useTLS bool)) {
	for _, tc := range []struct {
		name string
		tls  bool
	}{{"h2c", false}, {"h2-tls", true}} {
		t.Run(tc.name, func(t *testing.T) { fn(t, tc.tls) })
	}
}

// TestEcho sends bodies both ways through a streaming echo handler: many
// concurrent small and medium requests, and 10 MB each way on one stream,
// ten times the stream window, so flow control has to work on both sides.
func TestEcho(t *testing.T) {
	forBoth(t, func(t *testing.T, useTLS bool) {
		ts := startServer(t, useTLS, http.HandlerFunc(echoHandler), nil)
		cl := ts.client(t)
		for _, tc := range []struct {
			name       string
			concurrent int
			size       int
		}{
			{"64x1KiB", 64, 1 << 10},
			{"32x100KiB", 32, 100 << 10},
			{"1x10MB", 1, 10 << 20},
		} {
			t.Run(tc.name, func(t *testing.T) {
				var wg sync.WaitGroup
				errs := make(chan error, tc.concurrent)
				for range tc.concurrent {
					wg.Add(1)
					go func() {
						defer wg.Done()
						errs <- echoOnce(t.Context(), cl, ts.url()+"/echo", tc.size)
					}()
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					if err != nil {
						t.Fatal(err)
					}
				}
			})
		}
	})
}

func echoOnce(ctx context.Context, cl *http.Client, url string, size int) error {
	body := make([]byte, size)
	_, _ = rand.Read(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, io.NopCloser(bytes.NewReader(body)))
	if err != nil {
		return err
	}
	req.ContentLength = -1 // streamed: no content-length
	res, err := cl.Do(req)
	if err != nil {
		return fmt.Errorf("POST %d bytes: %w", size, err)
	}
	defer func() { _ = res.Body.Close() }()
	h := sha256.New()
	n, err := io.Copy(h, res.Body)
	if err != nil {
		return fmt.Errorf("read echo of %d bytes after %d: %w", size, n, err)
	}
	if res.Proto != "HTTP/2.0" || n != int64(size) || !bytes.Equal(h.Sum(nil), sha256Of(body)) {
		return fmt.Errorf("echo of %d bytes: got %d bytes over %s, digest match %v", size, n, res.Proto, bytes.Equal(h.Sum(nil), sha256Of(body)))
	}
	return nil
}

func sha256Of(b []byte) []byte { s := sha256.Sum256(b); return s[:] }

// TestRequestFields checks what a handler sees of a request.
func TestRequestFields(t *testing.T) {
	forBoth(t, func(t *testing.T, useTLS bool) {
		type seen struct {
			proto, method, host, uri, path, query, cookie, remote string
			major                                                 int
			cl                                                    int64
			noBody, tls                                           bool
		}
		got := make(chan seen, 1)
		ts := startServer(t, useTLS, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got <- seen{r.Proto, r.Method, r.Host, r.RequestURI, r.URL.Path, r.URL.RawQuery, r.Header.Get("Cookie"), r.RemoteAddr,
				r.ProtoMajor, r.ContentLength, r.Body == http.NoBody, r.TLS != nil}
		}), nil)
		cl := ts.client(t)
		req, _ := http.NewRequest(http.MethodGet, ts.url()+"/a/b?x=1", nil)
		req.Host = "example.test"
		req.AddCookie(&http.Cookie{Name: "a", Value: "1"})
		req.AddCookie(&http.Cookie{Name: "b", Value: "2"})
		res, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = res.Body.Close()
		s := <-got
		want := seen{"HTTP/2.0", "GET", "example.test", "/a/b?x=1", "/a/b", "x=1", "a=1; b=2", s.remote, 2, 0, true, useTLS}
		if s != want || !strings.HasPrefix(s.remote, "127.0.0.1:") {
			t.Fatalf("handler saw %+v, want %+v", s, want)
		}
	})
}

// TestTrailers sends trailers both ways: the handler finds the request's
// declared trailers after the body's EOF, the client finds the response's
// declared and TrailerPrefix trailers after the body.
func TestTrailers(t *testing.T) {
	forBoth(t, func(t *testing.T, useTLS bool) {
		ts := startServer(t, useTLS, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			before := r.Trailer.Get("X-Up")
			b, err := io.ReadAll(r.Body)
			if err != nil {
				t.Errorf("read body: %v", err)
			}
			w.Header().Set("Trailer", "X-Down")
			_, _ = w.Write(b)
			w.(http.Flusher).Flush()
			w.Header().Set("X-Down", "down:"+r.Trailer.Get("X-Up")+":before="+before)
			w.Header().Set(http.TrailerPrefix+"X-Late", "late")
		}), nil)
		cl := ts.client(t)
		pr, pw := io.Pipe()
		req, _ := http.NewRequest(http.MethodPost, ts.url()+"/t", pr)
		req.Trailer = http.Header{"X-Up": nil}
		go func() {
			_, _ = pw.Write([]byte("body"))
			req.Trailer.Set("X-Up", "up")
			_ = pw.Close()
		}()
		res, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(res.Body)
		_ = res.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != "body" {
			t.Fatalf("body %q, want %q", b, "body")
		}
		if got, want := res.Trailer.Get("X-Down"), "down:up:before="; got != want {
			t.Errorf("trailer X-Down %q, want %q", got, want)
		}
		if got := res.Trailer.Get("X-Late"); got != "late" {
			t.Errorf("trailer X-Late %q, want late", got)
		}
	})
}

// TestResponseHeaders: Date and a sniffed Content-Type are added, a nil
// Content-Type suppresses sniffing, a small body gets its Content-Length,
// HEAD gets headers only, and writing beyond a declared Content-Length
// fails.
func TestResponseHeaders(t *testing.T) {
	forBoth(t, func(t *testing.T, useTLS bool) {
		overflow := make(chan error, 1)
		ts := startServer(t, useTLS, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/html":
				_, _ = io.WriteString(w, "<html><body>hi</body></html>")
			case "/nosniff":
				w.Header()["Content-Type"] = nil
				_, _ = io.WriteString(w, "<html><body>hi</body></html>")
			case "/cl":
				w.Header().Set("Content-Length", "3")
				_, _ = io.WriteString(w, "abc")
				_, err := io.WriteString(w, "d")
				overflow <- err
			}
		}), nil)
		cl := ts.client(t)
		for _, tc := range []struct {
			method, path, ctype, body string
			cl                        int64
		}{
			{"GET", "/html", "text/html; charset=utf-8", "<html><body>hi</body></html>", 28},
			{"HEAD", "/html", "", "", 28},
			{"GET", "/nosniff", "", "<html><body>hi</body></html>", 28},
			{"GET", "/cl", "text/plain; charset=utf-8", "abc", 3},
		} {
			req, _ := http.NewRequest(tc.method, ts.url()+tc.path, nil)
			res, err := cl.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(res.Body)
			_ = res.Body.Close()
			if err != nil {
				t.Fatalf("%s %s: %v", tc.method, tc.path, err)
			}
			if string(b) != tc.body || res.Header.Get("Content-Type") != tc.ctype || res.ContentLength != tc.cl || res.Header.Get("Date") == "" {
				t.Errorf("%s %s: body %q content-type %q length %d date %q; want %q %q %d and a date", tc.method, tc.path, b,
					res.Header.Get("Content-Type"), res.ContentLength, res.Header.Get("Date"), tc.body, tc.ctype, tc.cl)
			}
		}
		if err := <-overflow; !errors.Is(err, http.ErrContentLength) {
			t.Errorf("write beyond Content-Length: %v, want http.ErrContentLength", err)
		}
	})
}

// TestInformational: a 103 with its Link header reaches the client before
// the final response.
func TestInformational(t *testing.T) {
	forBoth(t, func(t *testing.T, useTLS bool) {
		ts := startServer(t, useTLS, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Link", "</style.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, "made")
		}), nil)
		var got []string
		trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
			got = append(got, fmt.Sprintf("%d %s", code, h.Get("Link")))
			return nil
		}}
		req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), http.MethodGet, ts.url()+"/", nil)
		res, err := ts.client(t).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		_ = res.Body.Close()
		if res.StatusCode != http.StatusCreated || string(b) != "made" {
			t.Fatalf("final response %d %q, want 201 made", res.StatusCode, b)
		}
		if len(got) != 1 || got[0] != "103 </style.css>; rel=preload" {
			t.Fatalf("1xx responses %q, want one 103 with the Link", got)
		}
	})
}

// TestPanic: http.ErrAbortHandler resets the stream quietly, another panic
// is logged and resets it; the connection serves on.
func TestPanic(t *testing.T) {
	forBoth(t, func(t *testing.T, useTLS bool) {
		var logged bytes.Buffer
		var logMu sync.Mutex
		ts := startServer(t, useTLS, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/abort":
				_, _ = io.WriteString(w, "partial")
				w.(http.Flusher).Flush()
				panic(http.ErrAbortHandler)
			case "/boom":
				panic(errTest)
			}
			_, _ = io.WriteString(w, "ok")
		}), func(s *Server) { s.Log = newTestLogger(&logged, &logMu) })
		cl := ts.client(t)
		for _, path := range []string{"/abort", "/boom"} {
			res, err := cl.Get(ts.url() + path)
			if err == nil {
				_, err = io.ReadAll(res.Body)
				_ = res.Body.Close()
			}
			var se http2.StreamError
			if !errors.As(err, &se) || se.Code != http2.ErrCodeInternal {
				t.Errorf("GET %s: %v, want a stream reset with INTERNAL_ERROR", path, err)
			}
		}
		res, err := cl.Get(ts.url() + "/fine")
		if err != nil {
			t.Fatal(err)
		}
		_ = res.Body.Close()
		logMu.Lock()
		defer logMu.Unlock()
		if n := strings.Count(logged.String(), "handler panic"); n != 1 || !strings.Contains(logged.String(), "test") {
			t.Errorf("log has %d panic reports, want one (for /boom only):\n%s", n, logged.String())
		}
	})
}

// TestClientCancel: a client canceling its request cancels the handler's
// context.
func TestClientCancel(t *testing.T) {
	forBoth(t, func(t *testing.T, useTLS bool) {
		started := make(chan struct{})
		canceled := make(chan error, 1)
		hooked := make(chan struct{})
		ts := startServer(t, useTLS, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// The upstream client's way of waiting for the end: the
			// stream context's hook (package ctxhook).
			h, ok := ctxhook.Of(r.Context())
			if !ok {
				canceled <- errors.New("the stream's context has no hook")
				close(started)
				return
			}
			h.Watch(func() { close(hooked) })
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			close(started)
			select {
			case <-r.Context().Done():
				canceled <- r.Context().Err()
			case <-time.After(20 * time.Second):
				canceled <- errors.New("context not canceled within 20s")
			}
		}), nil)
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ts.url()+"/wait", nil)
		res, err := ts.client(t).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		<-started
		cancel()
		_ = res.Body.Close()
		if err := <-canceled; !errors.Is(err, context.Canceled) {
			t.Fatalf("handler's context: %v, want canceled", err)
		}
		select {
		case <-hooked:
		case <-time.After(10 * time.Second):
			t.Fatal("the context's hook did not run when the client reset the stream")
		}
	})
}

// TestHandlersBoundedOnReset: a client opening and resetting streams fast
// never has more handlers running than MaxConcurrentStreams, and past the
// reset budget the connection ends with ENHANCE_YOUR_CALM.
func TestHandlersBoundedOnReset(t *testing.T) {
	var running, peak atomic.Int32
	release := make(chan struct{})
	ts := startServer(t, false, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := running.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		<-release // ignores the reset: a slow handler
		running.Add(-1)
	}), func(s *Server) { s.MaxConcurrentStreams = 8 })
	defer close(release)
	rc := dialRaw(t, ts.addr)
	var code http2.ErrCode
	done := make(chan struct{})
	go func() {
		defer close(done)
		code = rc.readUntilGoAway(t)
	}()
	for id := uint32(1); id < 2*(resetBurst+200); id += 2 {
		if err := rc.request(id, "GET", "/", false); err != nil {
			break // the server hung up
		}
		if err := rc.write(func() error { return rc.fr.WriteRSTStream(id, http2.ErrCodeCancel) }); err != nil {
			break
		}
	}
	<-done
	if code != http2.ErrCodeEnhanceYourCalm {
		t.Fatalf("GOAWAY %v, want ENHANCE_YOUR_CALM", code)
	}
	if p := peak.Load(); p > 8 {
		t.Fatalf("%d handlers ran at once, want at most MaxConcurrentStreams 8", p)
	}
}

// TestReuseRequestHeader: with ReuseRequestHeader, requests one after the
// other on a connection see exactly their own fields, in the map the
// stream keeps (fewer fields, more, repeated ones, none); without it too.
func TestReuseRequestHeader(t *testing.T) {
	reqs := []http.Header{
		{"X-A": {"1"}, "X-B": {"2"}, "Accept": {"*/*"}},
		{"X-C": {"3"}},
		{"X-D": {"4", "5"}, "X-E": {"6"}, "X-F": {"7"}, "X-G": {"8"}, "X-H": {"9"}},
		{},
	}
	for _, reuse := range []bool{true, false} {
		t.Run(fmt.Sprintf("reuse=%v", reuse), func(t *testing.T) {
			type seen struct {
				header http.Header
				ptr    uintptr
			}
			got := make(chan seen, 1)
			ts := startServer(t, false, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				h := r.Header.Clone()
				delete(h, "Accept-Encoding") // the client's own
				delete(h, "User-Agent")
				got <- seen{h, reflect.ValueOf(r.Header).Pointer()}
			}), func(s *Server) { s.ReuseRequestHeader = reuse })
			cl := ts.client(t)
			ptrs := map[uintptr]bool{}
			const n = 20 // the race detector's sync.Pool drops some streams
			for i := range n {
				want := reqs[i%len(reqs)]
				req, _ := http.NewRequest(http.MethodGet, ts.url()+"/", nil)
				req.Header = want.Clone()
				req.Header.Set("User-Agent", "test")
				res, err := cl.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				_ = res.Body.Close()
				s := <-got
				if !reflect.DeepEqual(s.header, want) {
					t.Errorf("request %d: handler saw %v, want %v", i, s.header, want)
				}
				ptrs[s.ptr] = true
			}
			// Sequential requests on one connection: a reused stream (from
			// the pool) keeps its map.
			if reuse && len(ptrs) == n {
				t.Errorf("no header map reused over %d requests", n)
			}
		})
	}
}
