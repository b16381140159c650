package upstream

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestResponseFraming: each way a response can end its body, read from a
// real connection, then a second request shows whether the connection was
// kept (one connection) or not (two).
func TestResponseFraming(t *testing.T) {
	bigValue := strings.Repeat("v", 10<<10) // a head larger than the read buffer
	cases := []struct {
		name       string
		method     string
		raw        string
		closeAfter bool // the server closes after its answer
		wantStatus string
		wantBody   string
		wantLength int64
		wantHeader http.Header // checked keys only
		wantTrail  http.Header
		wantConns  int32 // after two requests
	}{
		{
			name: "content-length", raw: lines("HTTP/1.1 200 OK", "Content-Length: 5", "", "hello"),
			wantStatus: "200 OK", wantBody: "hello", wantLength: 5, wantConns: 1,
		},
		{
			name: "chunked", raw: lines("HTTP/1.1 200 OK", "Transfer-Encoding: chunked", "", "5", "hello", "6", " world", "0", "", ""),
			wantStatus: "200 OK", wantBody: "hello world", wantLength: -1, wantConns: 1,
		},
		{
			name: "chunked with trailers", raw: lines("HTTP/1.1 200 OK", "Transfer-Encoding: chunked", "Trailer: X-Sum", "", "5", "hello", "0", "X-Sum: 42", "", ""),
			wantStatus: "200 OK", wantBody: "hello", wantLength: -1, wantTrail: http.Header{"X-Sum": {"42"}}, wantConns: 1,
		},
		{
			name: "chunk extensions and upper-case size", raw: lines("HTTP/1.1 200 OK", "Transfer-Encoding: Chunked", "", "A;ext=1", "0123456789", "0", "", ""),
			wantStatus: "200 OK", wantBody: "0123456789", wantLength: -1, wantConns: 1,
		},
		{
			name: "HEAD keeps the length and has no body", method: http.MethodHead, raw: lines("HTTP/1.1 200 OK", "Content-Length: 1234", "", ""),
			wantStatus: "200 OK", wantLength: 1234, wantHeader: http.Header{"Content-Length": {"1234"}}, wantConns: 1,
		},
		{
			name: "HEAD of a chunked resource", method: http.MethodHead, raw: lines("HTTP/1.1 200 OK", "Transfer-Encoding: chunked", "", ""),
			wantStatus: "200 OK", wantLength: -1, wantConns: 1,
		},
		{
			name: "204 has no body", raw: lines("HTTP/1.1 204 No Content", "", ""),
			wantStatus: "204 No Content", wantConns: 1,
		},
		{
			name: "304 ignores its Content-Length", raw: lines("HTTP/1.1 304 Not Modified", "Content-Length: 10", "Etag: \"x\"", "", ""),
			wantStatus: "304 Not Modified", wantHeader: http.Header{"Etag": {`"x"`}}, wantConns: 1,
		},
		{
			name: "empty body by length", raw: lines("HTTP/1.1 200 OK", "Content-Length: 0", "", ""),
			wantStatus: "200 OK", wantConns: 1,
		},
		{
			name: "connection close", raw: lines("HTTP/1.1 200 OK", "Content-Length: 2", "Connection: close", "", "ok"), closeAfter: true,
			wantStatus: "200 OK", wantBody: "ok", wantLength: 2, wantConns: 2,
		},
		{
			name: "body until close", raw: lines("HTTP/1.1 200 OK", "", "to the end"), closeAfter: true,
			wantStatus: "200 OK", wantBody: "to the end", wantLength: -1, wantConns: 2,
		},
		{
			name: "HTTP/1.0 closes by default", raw: lines("HTTP/1.0 200 OK", "Content-Length: 3", "", "old"), closeAfter: true,
			wantStatus: "200 OK", wantBody: "old", wantLength: 3, wantConns: 2,
		},
		{
			name: "HTTP/1.0 without length", raw: lines("HTTP/1.0 200 OK", "", "old"), closeAfter: true,
			wantStatus: "200 OK", wantBody: "old", wantLength: -1, wantConns: 2,
		},
		{
			name: "HTTP/1.0 keep-alive", raw: lines("HTTP/1.0 200 OK", "Connection: keep-alive", "Content-Length: 3", "", "old"),
			wantStatus: "200 OK", wantBody: "old", wantLength: 3, wantConns: 1,
		},
		{
			name:       "chunked wins over Content-Length and the connection is not kept",
			raw:        lines("HTTP/1.1 200 OK", "Content-Length: 100", "Transfer-Encoding: chunked", "", "2", "ok", "0", "", ""),
			wantStatus: "200 OK", wantBody: "ok", wantLength: -1, wantHeader: http.Header{"Content-Length": nil}, wantConns: 2,
		},
		{
			name:       "no reason phrase, bare LF, folded and repeated fields",
			raw:        "HTTP/1.1 201\nX-Folded: a\n  b\nSet-Cookie: 1\nset-cookie: 2\ncontent-LENGTH: 2\n\nok",
			wantStatus: "201", wantBody: "ok", wantLength: 2,
			wantHeader: http.Header{"X-Folded": {"a b"}, "Set-Cookie": {"1", "2"}}, wantConns: 1,
		},
		{
			name: "head larger than the read buffer", raw: lines("HTTP/1.1 200 OK", "X-Big: "+bigValue, "Content-Length: 2", "", "ok"),
			wantStatus: "200 OK", wantBody: "ok", wantLength: 2, wantHeader: http.Header{"X-Big": {bigValue}}, wantConns: 1,
		},
	}
	// Every case runs twice: with the response's header map, and asking
	// for its fields (Scratch.WantFields), whose outcome must not differ.
	for _, tc := range cases {
		for _, fields := range []bool{false, true} {
			name := tc.name
			if fields {
				name += " (fields)"
			}
			t.Run(name, func(t *testing.T) {
				srv := newRawServer(t, answerEach(tc.raw, tc.closeAfter))
				tr := &Transport{}
				defer tr.CloseIdleConnections()
				ctx := testCtx(t)
				method := tc.method
				if method == "" {
					method = http.MethodGet
				}
				for i := range 2 {
					var resp *http.Response
					var body string
					var err error
					if fields {
						resp, body, err = doFields(tr, newRequest(t, ctx, method, srv.url("/"), nil))
					} else {
						resp, body, err = do(t, tr, newRequest(t, ctx, method, srv.url("/"), nil))
					}
					if err != nil {
						t.Fatalf("request %d: %v", i, err)
					}
					if resp.Status != tc.wantStatus || body != tc.wantBody || resp.ContentLength != tc.wantLength {
						t.Fatalf("request %d: status %q body %q length %d, want %q %q %d", i, resp.Status, body, resp.ContentLength, tc.wantStatus, tc.wantBody, tc.wantLength)
					}
					for k, want := range tc.wantHeader {
						if diff := cmp.Diff(want, resp.Header[k]); diff != "" {
							t.Fatalf("header %s (-want +got):\n%s", k, diff)
						}
					}
					if tc.wantTrail != nil {
						if diff := cmp.Diff(tc.wantTrail, resp.Trailer); diff != "" {
							t.Fatalf("trailer (-want +got):\n%s", diff)
						}
					}
				}
				if n := srv.conns.Load(); n != tc.wantConns {
					t.Fatalf("%d connections for two requests, want %d", n, tc.wantConns)
				}
			})
		}
	}
}

// doFields is do asking for the response's fields; the header is built
// from them for the checks.
func doFields(tr *Transport, req *http.Request) (*http.Response, string, error) {
	var s Scratch
	s.WantFields()
	resp, err := tr.RoundTripScratch(req, nil, &s)
	if err != nil {
		return nil, "", err
	}
	b, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	resp.Header = s.BuildHeader()
	return resp, string(b), err
}

// TestWantFields: which response heads are given as fields, and that
// their fields are the head's, in order, as read.
func TestWantFields(t *testing.T) {
	cases := []struct {
		name   string
		raw    string
		fields string // "Name: value" lines in order; "-": given as a header map
	}{
		{"content-length", lines("HTTP/1.1 200 OK", "x-a: 1", "X-B:  2 ", "x-a: 3", "Content-Length: 2", "", "ok"), "X-A: 1|X-B: 2|X-A: 3|Content-Length: 2"},
		{"chunked", lines("HTTP/1.1 200 OK", "Transfer-Encoding: chunked", "", "2", "ok", "0", "", ""), "Transfer-Encoding: chunked"},
		{"after a 1xx", lines("HTTP/1.1 103 Early Hints", "Link: <a>", "", "") + lines("HTTP/1.1 204 No Content", "X-C: c", "", ""), "X-C: c"},
		{"announced trailer", lines("HTTP/1.1 200 OK", "Transfer-Encoding: chunked", "Trailer: X-T", "", "0", "X-T: t", "", ""), "-"},
		{"folded line", lines("HTTP/1.1 200 OK", "X-F: a", " b", "Content-Length: 0", "", ""), "-"},
		{"chunked and a length", lines("HTTP/1.1 200 OK", "Transfer-Encoding: chunked", "Content-Length: 2", "", "2", "ok", "0", "", ""), "-"},
		{"HTTP/1.0 chunked", lines("HTTP/1.0 200 OK", "Transfer-Encoding: chunked", "", "body"), "-"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := newRawServer(t, answerEach(tc.raw, true))
			tr := &Transport{}
			defer tr.CloseIdleConnections()
			var s Scratch
			s.WantFields()
			resp, err := tr.RoundTripScratch(newRequest(t, testCtx(t), http.MethodGet, srv.url("/"), nil), func(int, textproto.MIMEHeader) error { return nil }, &s)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = resp.Body.Close() }()
			block, fields, ok := s.Fields()
			got := "-"
			if ok {
				var ls []string
				for _, f := range fields {
					ls = append(ls, string(f.Name(block))+": "+string(f.Value(block)))
				}
				got = strings.Join(ls, "|")
				if len(resp.Header) != 0 {
					t.Errorf("header map %v beside the fields", resp.Header)
				}
			}
			if got != tc.fields {
				t.Errorf("fields %q, want %q", got, tc.fields)
			}
		})
	}
}

// TestMalformedResponses: answers that are not HTTP/1.x give a clear error
// wrapping ErrMalformedResponse (or io.ErrUnexpectedEOF for a cut one),
// never a hang, and the connection is not used again.
func TestMalformedResponses(t *testing.T) {
	cases := []struct {
		name    string
		raw     string
		maxHead int
		wantErr error
	}{
		{"not HTTP", lines("SSH-2.0-OpenSSH_9.6", "", ""), 0, ErrMalformedResponse},
		{"HTTP/2 status line", lines("HTTP/2.0 200 OK", "Content-Length: 0", "", ""), 0, ErrMalformedResponse},
		{"status code not a number", lines("HTTP/1.1 2x0 OK", "", ""), 0, ErrMalformedResponse},
		{"status code too short", lines("HTTP/1.1 20 OK", "", ""), 0, ErrMalformedResponse},
		{"status code below 100", lines("HTTP/1.1 099 Odd", "", ""), 0, ErrMalformedResponse},
		{"header line without colon", lines("HTTP/1.1 200 OK", "Content-Length 0", "", ""), 0, ErrMalformedResponse},
		{"space in a field name", lines("HTTP/1.1 200 OK", "Content Length: 0", "", ""), 0, ErrMalformedResponse},
		{"control character in a value", lines("HTTP/1.1 200 OK", "X-A: a\x00b", "Content-Length: 0", "", ""), 0, ErrMalformedResponse},
		{"fold before any field", lines("HTTP/1.1 200 OK", " folded", "", ""), 0, ErrMalformedResponse},
		{"conflicting lengths", lines("HTTP/1.1 200 OK", "Content-Length: 5", "Content-Length: 6", "", "hello"), 0, ErrMalformedResponse},
		{"negative length", lines("HTTP/1.1 200 OK", "Content-Length: -1", "", ""), 0, ErrMalformedResponse},
		{"length not a number", lines("HTTP/1.1 200 OK", "Content-Length: 12abc", "", ""), 0, ErrMalformedResponse},
		{"unsupported transfer coding", lines("HTTP/1.1 200 OK", "Transfer-Encoding: gzip, chunked", "", ""), 0, ErrMalformedResponse},
		{"head over the limit", lines("HTTP/1.1 200 OK", "X-Big: "+strings.Repeat("x", 2000), "", ""), 1024, errHeadTooLarge},
		{"big head over the limit", lines("HTTP/1.1 200 OK", "X-Big: "+strings.Repeat("x", 20000), "", ""), 8192, errHeadTooLarge},
		{"too many informational responses", strings.Repeat(lines("HTTP/1.1 103 Early Hints", "", ""), 20) + lines("HTTP/1.1 200 OK", "", ""), 0, ErrMalformedResponse},
		{"cut within the head", "HTTP/1.1 200 OK\r\nContent-", 0, io.ErrUnexpectedEOF},
		{"closed without an answer", "", 0, io.EOF},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := newRawServer(t, answerEach(tc.raw, true))
			tr := &Transport{MaxResponseHeaderBytes: tc.maxHead}
			ctx := testCtx(t)
			_, _, err := do(t, tr, newRequest(t, ctx, http.MethodGet, srv.url("/"), nil))
			notHung(t, ctx, err)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("error %v, want one wrapping %v", err, tc.wantErr)
			}
			if !strings.Contains(err.Error(), srv.ln.Addr().String()) {
				t.Errorf("error %q does not name the endpoint", err)
			}
			if n := tr.IdleConns(srv.ln.Addr().String()); n != 0 {
				t.Fatalf("%d idle connections after a malformed answer", n)
			}
		})
	}
}

// TestMalformedBodies: bodies that end early or are badly chunked fail the
// read with a clear error, and the connection is closed, not pooled.
func TestMalformedBodies(t *testing.T) {
	cases := []struct {
		name string
		raw  string
		want string
	}{
		{"closed within a sized body", lines("HTTP/1.1 200 OK", "Content-Length: 10", "", "abc"), "unexpected EOF"},
		{"bad chunk size", lines("HTTP/1.1 200 OK", "Transfer-Encoding: chunked", "", "zz", "abc", "0", "", ""), "chunk length"},
		{"closed within a chunk", lines("HTTP/1.1 200 OK", "Transfer-Encoding: chunked", "", "a", "abc"), "unexpected EOF"},
		{"malformed trailer", lines("HTTP/1.1 200 OK", "Transfer-Encoding: chunked", "", "0", "Bad Trailer: x", "", ""), "malformed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := newRawServer(t, answerEach(tc.raw, true))
			tr := &Transport{}
			ctx := testCtx(t)
			resp, err := tr.RoundTrip(newRequest(t, ctx, http.MethodGet, srv.url("/"), nil))
			if err != nil {
				t.Fatalf("head: %v", err)
			}
			_, err = io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			notHung(t, ctx, err)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("body error %v, want one mentioning %q", err, tc.want)
			}
			if n := tr.IdleConns(srv.ln.Addr().String()); n != 0 {
				t.Fatalf("%d idle connections after a broken body", n)
			}
		})
	}
}

// TestInformationalResponses: 1xx responses before the final one reach
// httptrace's Got1xxResponse (httputil.ReverseProxy forwards them so) and
// do not end the exchange.
func TestInformationalResponses(t *testing.T) {
	raw := lines("HTTP/1.1 103 Early Hints", "Link: </style.css>; rel=preload", "", "") +
		lines("HTTP/1.1 102 Processing", "", "") +
		lines("HTTP/1.1 200 OK", "Content-Length: 2", "", "ok")
	srv := newRawServer(t, answerEach(raw, false))
	tr := &Transport{}
	type info struct {
		Code int
		Link string
	}
	var got []info
	trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
		got = append(got, info{code, h.Get("Link")})
		return nil
	}}
	ctx := httptrace.WithClientTrace(testCtx(t), trace)
	resp, body, err := do(t, tr, newRequest(t, ctx, http.MethodGet, srv.url("/"), nil))
	if err != nil || resp.StatusCode != 200 || body != "ok" {
		t.Fatalf("final response: %v %q %v", resp, body, err)
	}
	want := []info{{103, "</style.css>; rel=preload"}, {102, ""}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("informational responses (-want +got):\n%s", diff)
	}
}

// TestRequestFraming: what the server receives of requests with and
// without bodies, sized and chunked, with trailers, and the headers
// written.
func TestRequestFraming(t *testing.T) {
	type seen struct {
		Method, URI, Host, Body, UA string
		Length                      int64
		TE                          []string
		Trailer                     http.Header
		Header                      http.Header
	}
	got := make(chan seen, 1)
	srv := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
		for {
			req, body := readRequest(br)
			if req == nil {
				return
			}
			s := seen{Method: req.Method, URI: req.RequestURI, Host: req.Host, Body: string(body), Length: req.ContentLength,
				TE: req.TransferEncoding, Trailer: req.Trailer, Header: http.Header{}}
			s.UA = strings.Join(req.Header["User-Agent"], ",")
			for _, k := range []string{"X-Multi", "Content-Length", "Connection"} {
				if v, ok := req.Header[k]; ok {
					s.Header[k] = v
				}
			}
			got <- s
			if _, err := io.WriteString(c, lines("HTTP/1.1 204 No Content", "", "")); err != nil {
				return
			}
		}
	})
	chunkedBody := func() io.Reader { return io.MultiReader(strings.NewReader("part1-"), strings.NewReader("part2")) }
	cases := []struct {
		name  string
		build func() *http.Request
		want  seen
	}{
		{
			name: "GET without body, multi-valued header, empty User-Agent dropped",
			build: func() *http.Request {
				r, _ := http.NewRequest(http.MethodGet, srv.url("/a%2Fb/c?x=1&y=%20"), nil)
				r.Host = "shop.test"
				r.Header["X-Multi"] = []string{"1", "2"}
				r.Header.Set("User-Agent", "")
				return r
			},
			want: seen{Method: "GET", URI: "/a%2Fb/c?x=1&y=%20", Host: "shop.test", Header: http.Header{"X-Multi": {"1", "2"}}},
		},
		{
			name: "POST without body sends Content-Length 0",
			build: func() *http.Request {
				r, _ := http.NewRequest(http.MethodPost, srv.url("/p"), nil)
				r.Header.Set("User-Agent", "agent/1")
				return r
			},
			want: seen{Method: "POST", URI: "/p", UA: "agent/1", Header: http.Header{"Content-Length": {"0"}}},
		},
		{
			name: "sized body",
			build: func() *http.Request {
				r, _ := http.NewRequest(http.MethodPut, srv.url("/put"), strings.NewReader("hello body"))
				return r
			},
			want: seen{Method: "PUT", URI: "/put", Body: "hello body", Length: 10, Header: http.Header{"Content-Length": {"10"}}},
		},
		{
			name: "large sized body",
			build: func() *http.Request {
				r, _ := http.NewRequest(http.MethodPost, srv.url("/big"), strings.NewReader(strings.Repeat("b", 300<<10)))
				return r
			},
			want: seen{Method: "POST", URI: "/big", Body: strings.Repeat("b", 300<<10), Length: 300 << 10, Header: http.Header{"Content-Length": {"307200"}}},
		},
		{
			name: "unsized body is chunked, with trailers",
			build: func() *http.Request {
				r, _ := http.NewRequest(http.MethodPost, srv.url("/c"), chunkedBody())
				r.ContentLength = -1
				r.Trailer = http.Header{"X-Check": {"abc"}}
				return r
			},
			want: seen{Method: "POST", URI: "/c", Body: "part1-part2", Length: -1, TE: []string{"chunked"}, Trailer: http.Header{"X-Check": {"abc"}}},
		},
		{
			name: "Close asks for Connection: close",
			build: func() *http.Request {
				r, _ := http.NewRequest(http.MethodGet, srv.url("/"), nil)
				r.Close = true
				return r
			},
			want: seen{Method: "GET", URI: "/", Header: http.Header{"Connection": {"close"}}},
		},
	}
	tr := &Transport{}
	defer tr.CloseIdleConnections()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := tc.build().WithContext(testCtx(t))
			resp, _, err := do(t, tr, req)
			if err != nil || resp.StatusCode != 204 {
				t.Fatalf("%v %v", resp, err)
			}
			s := <-got
			if tc.want.Host == "" {
				tc.want.Host = srv.ln.Addr().String()
			}
			if len(s.Trailer) == 0 {
				s.Trailer = nil
			}
			if len(s.Header) == 0 {
				s.Header = nil
			}
			if diff := cmp.Diff(tc.want, s); diff != "" {
				t.Fatalf("request as the server saw it (-want +got):\n%s", diff)
			}
		})
	}
}

// TestInvalidRequests are refused before any connection is made.
func TestInvalidRequests(t *testing.T) {
	srv := newRawServer(t, answerEach(lines("HTTP/1.1 204 No Content", "", ""), false))
	cases := []struct {
		name string
		mod  func(r *http.Request)
	}{
		{"newline in a header value", func(r *http.Request) { r.Header.Set("X-Evil", "a\r\nX-Injected: 1") }},
		{"invalid header name", func(r *http.Request) { r.Header["Bad Name"] = []string{"x"} }},
		{"newline in Host", func(r *http.Request) { r.Host = "a\r\nb" }},
		{"space in the query", func(r *http.Request) { r.URL.RawQuery = "a=1 HTTP/1.1\r\nX: y" }},
		{"https scheme", func(r *http.Request) { r.URL.Scheme = "https" }},
		{"invalid method", func(r *http.Request) { r.Method = "GE T" }},
	}
	tr := &Transport{}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := newRequest(t, testCtx(t), http.MethodGet, srv.url("/"), nil)
			tc.mod(req)
			if _, err := tr.RoundTrip(req); err == nil {
				t.Fatal("sent")
			}
		})
	}
	if n := srv.conns.Load(); n != 0 {
		t.Fatalf("%d connections for invalid requests", n)
	}
}

// TestScratch: responses built in one Scratch, one after the other on a
// kept-alive connection, each have exactly their own fields (none left
// from the one before, 1xx heads included) in the one reused map, and
// the values handed out earlier stay as they were.
func TestScratch(t *testing.T) {
	answers := []string{
		lines("HTTP/1.1 200 OK", "Content-Type: text/plain", "X-A: 1", "X-A: 2", "Content-Length: 2", "", "ok"),
		lines("HTTP/1.1 103 Early Hints", "Link: </a.css>; rel=preload", "", "") +
			lines("HTTP/1.1 404 Not Found", "X-B: b", "Content-Length: 0", "", ""),
		lines("HTTP/1.1 200 OK", "Transfer-Encoding: chunked", "Trailer: X-T", "", "3", "abc", "0", "X-T: t", "", ""),
	}
	want := []struct {
		code   int
		header http.Header
		body   string
	}{
		{200, http.Header{"Content-Type": {"text/plain"}, "X-A": {"1", "2"}, "Content-Length": {"2"}}, "ok"},
		{404, http.Header{"X-B": {"b"}, "Content-Length": {"0"}}, ""},
		{200, http.Header{"Transfer-Encoding": {"chunked"}}, "abc"}, // Trailer moves to resp.Trailer
	}
	srv := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
		for _, a := range answers {
			if req, _ := readRequest(br); req == nil {
				return
			}
			if _, err := io.WriteString(c, a); err != nil {
				return
			}
		}
	})
	tr := &Transport{}
	var s Scratch
	var links []string
	got1xx := func(code int, h textproto.MIMEHeader) error {
		links = append(links, h.Get("Link"))
		return nil
	}
	var kept []http.Header // copies by reference, as the proxy makes
	var mapPtr uintptr
	for i, w := range want {
		resp, err := tr.RoundTripScratch(newRequest(t, testCtx(t), http.MethodGet, srv.url("/"), nil), got1xx, &s)
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		b, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil || resp.StatusCode != w.code || string(b) != w.body {
			t.Fatalf("response %d: %d %q %v, want %d %q", i, resp.StatusCode, b, err, w.code, w.body)
		}
		if diff := cmp.Diff(w.header, resp.Header); diff != "" {
			t.Errorf("response %d header (-want +got):\n%s", i, diff)
		}
		if p := reflect.ValueOf(resp.Header).Pointer(); i == 0 {
			mapPtr = p
		} else if p != mapPtr {
			t.Errorf("response %d: a new header map, not the scratch's", i)
		}
		if i == 2 && resp.Trailer.Get("X-T") != "t" {
			t.Errorf("response %d: trailer %v", i, resp.Trailer)
		}
		shallow := http.Header{}
		for k, vs := range resp.Header {
			shallow[k] = vs
		}
		kept = append(kept, shallow)
	}
	if len(kept) != len(want) {
		t.Fatalf("%d responses", len(kept))
	}
	for i, w := range want {
		if diff := cmp.Diff(w.header, kept[i]); diff != "" {
			t.Errorf("values of response %d changed after the scratch was reused (-want +got):\n%s", i, diff)
		}
	}
	if diff := cmp.Diff([]string{"</a.css>; rel=preload"}, links); diff != "" {
		t.Errorf("1xx heads (-want +got):\n%s", diff)
	}
	s.Clear()
	if len(s.header) != 0 || s.r.resp.Request != nil || s.r.body.c != nil {
		t.Error("Clear left the last response in the scratch")
	}
}
