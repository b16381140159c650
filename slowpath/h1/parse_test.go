package h1

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/novaedge/novaedge/slowpath/internal/httphead"
)

// seen is what a handler saw of a request, copied out of the reused
// Request.
type seen struct {
	Method, RequestURI, Host string
	Path, RawPath, RawQuery  string
	URLHost                  string
	Header                   http.Header
	ContentLength            int64
	TransferEncoding         []string
	Body                     string
	BodyErr                  bool
	Trailer                  http.Header
	Close                    bool
	ProtoMajor, ProtoMinor   int
}

func see(r *http.Request) seen {
	b, err := io.ReadAll(r.Body)
	return seen{
		Method: r.Method, RequestURI: r.RequestURI, Host: r.Host,
		Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: r.URL.RawQuery, URLHost: r.URL.Host,
		Header: r.Header.Clone(), ContentLength: r.ContentLength,
		TransferEncoding: append([]string(nil), r.TransferEncoding...),
		Body:             string(b), BodyErr: err != nil, Trailer: r.Trailer.Clone(), Close: r.Close,
		ProtoMajor: r.ProtoMajor, ProtoMinor: r.ProtoMinor,
	}
}

// parseMaxHeaderBytes is the MaxHeaderBytes of the parse tests' server:
// heads up to 4096 bytes more are accepted.
const parseMaxHeaderBytes = 8192

type parseCase struct {
	name string
	raw  string
	// status the server answers itself; 0: the handler is called and sees
	// want (it answers 200).
	status int
	want   seen
	// keep: the connection serves another request afterwards.
	keep bool
}

func parseCases() []parseCase {
	longPath := "/" + strings.Repeat("a", 6000)
	get := func(target, extra string) string {
		return "GET " + target + " HTTP/1.1\r\nHost: example.com\r\n" + extra + "\r\n"
	}
	getSeen := func(path string) seen {
		return seen{Method: "GET", RequestURI: path, Host: "example.com", Path: path, Header: http.Header{}, ProtoMajor: 1, ProtoMinor: 1}
	}
	chunked := "POST /up HTTP/1.1\r\nHost: example.com\r\nTransfer-Encoding: chunked\r\n"
	post := func(path string, hdr http.Header, body string) seen {
		return seen{Method: "POST", RequestURI: path, Host: "example.com", Path: path, Header: hdr,
			ContentLength: int64(len(body)), Body: body, ProtoMajor: 1, ProtoMinor: 1}
	}
	with := func(s seen, f func(*seen)) seen { f(&s); return s }
	return []parseCase{
		{
			name: "simple GET with query and repeated header",
			raw:  "GET /a/b?x=1&y HTTP/1.1\r\nHost: example.com\r\nuser-agent: t\r\nX-Multi: a\r\nX-MULTI: b\r\nX-Ows: \t v w \t\r\n\r\n",
			want: seen{Method: "GET", RequestURI: "/a/b?x=1&y", Host: "example.com", Path: "/a/b", RawQuery: "x=1&y",
				Header:     http.Header{"User-Agent": {"t"}, "X-Multi": {"a", "b"}, "X-Ows": {"v w"}},
				ProtoMajor: 1, ProtoMinor: 1},
			keep: true,
		},
		{name: "bare LF line ends", raw: "GET / HTTP/1.1\nHost: example.com\n\n", want: getSeen("/"), keep: true},
		{name: "empty query forced", raw: get("/p?", ""), want: with(getSeen("/p?"), func(s *seen) { s.Path = "/p" }), keep: true},
		{
			name: "Content-Length body",
			raw:  "POST /up HTTP/1.1\r\nHost: example.com\r\nContent-Length: 5\r\n\r\nhello",
			want: post("/up", http.Header{"Content-Length": {"5"}}, "hello"), keep: true,
		},
		{
			name: "two equal Content-Lengths",
			raw:  "POST /up HTTP/1.1\r\nHost: example.com\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello",
			want: post("/up", http.Header{"Content-Length": {"5"}}, "hello"), keep: true,
		},
		{name: "two differing Content-Lengths", raw: "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!", status: 400},
		{name: "Content-Length list", raw: "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5, 5\r\n\r\nhello", status: 400},
		{name: "negative Content-Length", raw: "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: -1\r\n\r\n", status: 400},
		{name: "signed Content-Length", raw: "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: +5\r\n\r\nhello", status: 400},
		{name: "hex Content-Length", raw: "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 0x5\r\n\r\nhello", status: 400},
		{name: "overflowing Content-Length", raw: "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 99999999999999999999\r\n\r\n", status: 400},
		{
			name: "chunked with extension and trailers",
			raw:  chunked + "Trailer: X-T\r\n\r\n5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-T: v\r\nx-u: w\r\n\r\n",
			want: with(post("/up", http.Header{"Trailer": {"X-T"}}, "hello world"), func(s *seen) {
				s.ContentLength, s.TransferEncoding = -1, []string{"chunked"}
				s.Trailer = http.Header{"X-T": {"v"}, "X-U": {"w"}}
			}),
			keep: true,
		},
		{
			// Framing and routing fields in a trailer are dropped, not
			// passed on where the next hop might believe them.
			name: "chunked with prohibited trailers",
			raw:  chunked + "\r\n5\r\nhello\r\n0\r\nContent-Length: 99\r\nHost: evil\r\nTransfer-Encoding: chunked\r\nX-T: v\r\n\r\n",
			want: with(post("/up", http.Header{}, "hello"), func(s *seen) {
				s.ContentLength, s.TransferEncoding = -1, []string{"chunked"}
				s.Trailer = http.Header{"X-T": {"v"}}
			}),
			keep: true,
		},
		{
			name: "chunked, case-insensitive",
			raw:  "POST /up HTTP/1.1\r\nHost: example.com\r\nTransfer-Encoding: Chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n",
			want: with(post("/up", http.Header{}, "hi"), func(s *seen) {
				s.ContentLength, s.TransferEncoding = -1, []string{"chunked"}
			}),
			keep: true,
		},
		{
			// RFC 9112 §6.1: chunked wins, and the connection closes after
			// the response.
			name: "Content-Length and chunked",
			raw:  "POST /up HTTP/1.1\r\nHost: example.com\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
			want: with(post("/up", http.Header{}, "hello"), func(s *seen) {
				s.ContentLength, s.TransferEncoding, s.Close = -1, []string{"chunked"}, true
			}),
		},
		{name: "gzip transfer coding", raw: chunked[:len(chunked)-len("chunked\r\n")] + "gzip\r\n\r\n", status: 501},
		{name: "gzip then chunked", raw: chunked[:len(chunked)-len("chunked\r\n")] + "gzip, chunked\r\n\r\n0\r\n\r\n", status: 501},
		{name: "identity transfer coding", raw: "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: identity\r\nContent-Length: 1\r\n\r\nx", status: 501},
		{name: "two Transfer-Encoding fields", raw: chunked + "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", status: 501},
		{name: "Transfer-Encoding in HTTP/1.0", raw: "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", status: 400},
		{
			name: "bad chunk size",
			raw:  chunked + "\r\nzz\r\nhello\r\n0\r\n\r\n",
			want: with(post("/up", http.Header{}, ""), func(s *seen) {
				s.ContentLength, s.TransferEncoding, s.BodyErr = -1, []string{"chunked"}, true
			}),
		},
		{name: "obs-fold", raw: "GET / HTTP/1.1\r\nHost: h\r\nX-A: a\r\n b\r\n\r\n", status: 400},
		{name: "space before colon", raw: "GET / HTTP/1.1\r\nHost: h\r\nX-A : a\r\n\r\n", status: 400},
		{name: "header without colon", raw: "GET / HTTP/1.1\r\nHost: h\r\nX-A a\r\n\r\n", status: 400},
		{name: "empty header name", raw: "GET / HTTP/1.1\r\nHost: h\r\n: a\r\n\r\n", status: 400},
		{name: "invalid header name", raw: "GET / HTTP/1.1\r\nHost: h\r\nX@A: a\r\n\r\n", status: 400},
		{name: "NUL in header value", raw: "GET / HTTP/1.1\r\nHost: h\r\nX-A: a\x00b\r\n\r\n", status: 400},
		{name: "bare CR in header value", raw: "GET / HTTP/1.1\r\nHost: h\r\nX-A: a\rb\r\n\r\n", status: 400},
		{name: "missing Host in HTTP/1.1", raw: "GET / HTTP/1.1\r\nX-A: a\r\n\r\n", status: 400},
		{name: "two Host fields", raw: "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", status: 400},
		{name: "malformed Host", raw: "GET / HTTP/1.1\r\nHost: a b\r\n\r\n", status: 400},
		{
			name: "HTTP/1.0 without Host",
			raw:  "GET /old HTTP/1.0\r\n\r\n",
			want: seen{Method: "GET", RequestURI: "/old", Path: "/old", Header: http.Header{}, Close: true, ProtoMajor: 1},
		},
		{
			name: "HTTP/1.0 keep-alive",
			raw:  "GET /old HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
			want: seen{Method: "GET", RequestURI: "/old", Path: "/old", Header: http.Header{"Connection": {"keep-alive"}}, ProtoMajor: 1},
			keep: true,
		},
		{
			name: "Connection: close",
			raw:  get("/", "Connection: close\r\n"),
			want: with(getSeen("/"), func(s *seen) { s.Header = http.Header{"Connection": {"close"}}; s.Close = true }),
		},
		{
			name: "absolute-form target",
			raw:  "GET http://origin.example:8080/p?q=1 HTTP/1.1\r\nHost: other.example\r\n\r\n",
			want: seen{Method: "GET", RequestURI: "http://origin.example:8080/p?q=1", Host: "origin.example:8080",
				Path: "/p", RawQuery: "q=1", URLHost: "origin.example:8080", Header: http.Header{}, ProtoMajor: 1, ProtoMinor: 1},
			keep: true,
		},
		{
			name: "CONNECT authority-form",
			raw:  "CONNECT backend.example:443 HTTP/1.1\r\nHost: other.example\r\n\r\n",
			want: seen{Method: "CONNECT", RequestURI: "backend.example:443", Host: "backend.example:443",
				URLHost: "backend.example:443", Header: http.Header{}, ProtoMajor: 1, ProtoMinor: 1},
			keep: true,
		},
		{
			name: "asterisk-form",
			raw:  "OPTIONS * HTTP/1.1\r\nHost: example.com\r\n\r\n",
			want: seen{Method: "OPTIONS", RequestURI: "*", Host: "example.com", Path: "*", Header: http.Header{}, ProtoMajor: 1, ProtoMinor: 1},
			keep: true,
		},
		{
			name: "percent-escaped path",
			raw:  get("/a%20b/c%2Fd?x=%41", ""),
			want: with(getSeen("/a%20b/c%2Fd?x=%41"), func(s *seen) {
				s.Path, s.RawPath, s.RawQuery = "/a b/c/d", "/a%20b/c%2Fd", "x=%41"
			}),
			keep: true,
		},
		{
			// A sub-delimiter url would escape: RawPath keeps it as sent,
			// so the request goes upstream as "/a!b", not "/a%21b".
			name: "path with characters url escapes",
			raw:  get("/a!b*(c)", ""),
			want: with(getSeen("/a!b*(c)"), func(s *seen) {
				s.Path, s.RawPath = "/a!b*(c)", "/a!b*(c)"
			}),
			keep: true,
		},
		{name: "bad percent escape", raw: get("/a%zz", ""), status: 400},
		{name: "control character in target", raw: get("/a\x01b", ""), status: 400},
		{name: "DEL in target", raw: get("/a\x7f", ""), status: 400},
		{name: "tab in target", raw: "GET /a\tb HTTP/1.1\r\nHost: h\r\n\r\n", status: 400},
		{name: "space in target", raw: get("/a b", ""), status: 400},
		{name: "invalid method", raw: "G(T / HTTP/1.1\r\nHost: h\r\n\r\n", status: 400},
		{name: "no target", raw: "GET HTTP/1.1\r\nHost: h\r\n\r\n", status: 400},
		// RFC 9112 §2.2: empty lines before the request line are ignored.
		{name: "empty lines before the request line", raw: "\r\n\n" + get("/", ""), want: getSeen("/"), keep: true},
		{name: "only empty lines", raw: "\r\n\r\n\r\n\r\n\r\n", status: 400},
		{name: "HTTP/2.0 request line", raw: "GET / HTTP/2.0\r\nHost: h\r\n\r\n", status: 505},
		{name: "HTTP/2 preface without Handoff", raw: "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", status: 505},
		{name: "malformed version", raw: "GET / HTTP/1.1x\r\nHost: h\r\n\r\n", status: 400},
		{name: "not HTTP", raw: "SSH-2.0-x\r\n\r\n", status: 400},
		{name: "long request line within the limit", raw: get(longPath, ""), want: getSeen(longPath), keep: true},
		{name: "head over the limit", raw: get("/", "X-Big: "+strings.Repeat("b", parseMaxHeaderBytes+4096)+"\r\n"), status: 431},
		{name: "request line over the limit", raw: get("/"+strings.Repeat("a", parseMaxHeaderBytes+4096), ""), status: 431},
	}
}

// TestParse sends raw requests over loopback: the server either answers
// a status itself and closes, or the handler sees the request as
// expected.
func TestParse(t *testing.T) {
	got := make(chan seen, 1)
	ts := serve(t, &Server{
		MaxHeaderBytes: parseMaxHeaderBytes,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/next" {
				return
			}
			got <- see(r)
			_, _ = io.WriteString(w, "ok")
		}),
	})
	for _, tc := range parseCases() {
		t.Run(tc.name, func(t *testing.T) {
			cl := dial(t, ts.addr)
			// Written in the background: a server refusing a request
			// need not read all of it.
			go func() { _, _ = io.WriteString(cl.Conn, tc.raw) }()
			resp, body := cl.response("GET")
			if tc.status != 0 {
				if resp.StatusCode != tc.status {
					t.Fatalf("status %d (%q), want %d", resp.StatusCode, body, tc.status)
				}
				if !resp.Close {
					t.Errorf("refusal without Connection: close")
				}
				select {
				case s := <-got:
					t.Fatalf("handler called with %+v", s)
				default:
				}
				cl.expectEOF()
				return
			}
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d (%q), want the handler's 200", resp.StatusCode, body)
			}
			var s seen
			select {
			case s = <-got:
			default:
				t.Fatal("handler not called")
			}
			if diff := cmp.Diff(tc.want, s, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("request (-want +got):\n%s", diff)
			}
			if tc.keep {
				cl.expectOpen()
			} else {
				if !resp.Close {
					t.Errorf("response without Connection: close on a closing connection")
				}
				cl.expectEOF()
			}
		})
	}
}

// FuzzParse feeds arbitrary bytes to a server: it must never panic, and
// for every complete head it either answers a status itself or calls the
// handler.
func FuzzParse(f *testing.F) {
	for _, tc := range parseCases() {
		f.Add([]byte(tc.raw))
	}
	var called atomic.Int32
	ts := serve(f, &Server{
		MaxHeaderBytes:    parseMaxHeaderBytes,
		ReadHeaderTimeout: 5 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			called.Add(1)
			_, _ = io.Copy(io.Discard, r.Body)
			_, _ = io.WriteString(w, "ok")
		}),
	})
	f.Fuzz(func(t *testing.T, raw []byte) {
		called.Store(0)
		cl := dial(t, ts.addr)
		go func() {
			_, _ = cl.Write(raw)
			_ = cl.Conn.(*net.TCPConn).CloseWrite()
		}()
		resp, _, err := cl.tryResponse("GET")
		// Read to the end: the server is done with the connection (and
		// has called the handler, if it did) when it closes it.
		_, _ = io.Copy(io.Discard, cl.br)
		if httphead.HeadEnd(raw, 0) < 0 {
			return // an incomplete head may be closed unanswered
		}
		answered := err == nil && resp.StatusCode >= 400
		if called.Load() == 0 && !answered {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("no answer to %q: %v", clip(raw), err)
			}
			t.Fatalf("neither answered nor handled %q: response %v, %v", clip(raw), resp, err)
		}
	})
}

func clip(b []byte) []byte {
	if len(b) > 200 {
		return append(bytes.Clone(b[:200]), "..."...)
	}
	return b
}
