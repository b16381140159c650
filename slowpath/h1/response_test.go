package h1

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/novaedge/novaedge/slowpath/internal/httphead"
)

// TestResponseFraming checks how responses are framed: Content-Length
// when the length is known, chunked when not, close-delimited for
// HTTP/1.0, and what that leaves of the connection.
func TestResponseFraming(t *testing.T) {
	big := strings.Repeat("x", holdBack+1)
	const get11 = "GET / HTTP/1.1\r\nHost: h\r\n\r\n"
	tests := []struct {
		name    string
		request string
		method  string // of the request, for reading the response
		handler http.HandlerFunc
		status  int
		clen    int64 // resp.ContentLength
		te      []string
		body    string
		bodyErr bool // reading the body fails (the server closed early)
		trailer http.Header
		header  http.Header // fields that must be present
		absent  []string    // fields that must be absent
		close   bool        // Connection: close and EOF after
		writes  int32       // the server's writes for the response; 0: not checked
	}{
		{
			name: "small body in one write",
			handler: func(w http.ResponseWriter, _ *http.Request) {
				_, _ = io.WriteString(w, "hel")
				_, _ = w.Write([]byte("lo"))
			},
			status: 200, clen: 5, body: "hello", writes: 1,
			header: http.Header{"Date": nil}, absent: []string{"Content-Type"},
		},
		{
			name:    "no body",
			handler: func(http.ResponseWriter, *http.Request) {},
			status:  200, clen: 0, writes: 1,
		},
		{
			name:    "large body chunked",
			handler: func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, big) },
			status:  200, clen: -1, te: []string{"chunked"}, body: big,
		},
		{
			name: "Flush makes it chunked",
			handler: func(w http.ResponseWriter, _ *http.Request) {
				_, _ = io.WriteString(w, "a")
				w.(http.Flusher).Flush()
				_, _ = io.WriteString(w, "b")
			},
			status: 200, clen: -1, te: []string{"chunked"}, body: "ab",
		},
		{
			name: "declared Content-Length",
			handler: func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Length", "5000")
				_, _ = io.WriteString(w, strings.Repeat("y", 4000))
				_, _ = io.WriteString(w, strings.Repeat("y", 1000))
			},
			status: 200, clen: 5000, body: strings.Repeat("y", 5000),
		},
		{
			name: "write past declared Content-Length fails",
			handler: func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Length", "2")
				if _, err := io.WriteString(w, "abc"); !errors.Is(err, http.ErrContentLength) {
					panic("write past Content-Length: " + errString(err))
				}
				_, _ = io.WriteString(w, "ab")
			},
			status: 200, clen: 2, body: "ab",
		},
		{
			name:    "HEAD keeps the length, sends no body",
			request: "HEAD / HTTP/1.1\r\nHost: h\r\n\r\n", method: "HEAD",
			handler: func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, big) },
			status:  200, clen: int64(len(big)),
		},
		{
			name:    "HEAD with declared length",
			request: "HEAD / HTTP/1.1\r\nHost: h\r\n\r\n", method: "HEAD",
			handler: func(w http.ResponseWriter, _ *http.Request) { w.Header().Set("Content-Length", "123") },
			status:  200, clen: 123,
		},
		{
			name: "204 without body",
			handler: func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(http.StatusNoContent)
				if _, err := io.WriteString(w, "x"); !errors.Is(err, http.ErrBodyNotAllowed) {
					panic("write to 204: " + errString(err))
				}
			},
			status: 204, absent: []string{"Content-Length", "Transfer-Encoding"},
		},
		{
			name:    "304 without body",
			handler: func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNotModified) },
			status:  304, absent: []string{"Content-Length", "Transfer-Encoding"},
		},
		{
			name:    "HTTP/1.0 small body",
			request: "GET / HTTP/1.0\r\n\r\n",
			handler: func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "hello") },
			status:  200, clen: 5, body: "hello", close: true,
		},
		{
			name:    "HTTP/1.0 keep-alive small body",
			request: "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
			handler: func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "hello") },
			status:  200, clen: 5, body: "hello", header: http.Header{"Connection": {"keep-alive"}},
		},
		{
			name:    "HTTP/1.0 without length is close-delimited",
			request: "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
			handler: func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, big) },
			status:  200, clen: -1, body: big, close: true,
		},
		{
			name: "trailers declared with Trailer",
			handler: func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Trailer", "X-Sum, x-count")
				_, _ = io.WriteString(w, "hello")
				w.Header().Set("X-Sum", "abc")
				w.Header().Set("X-Count", "1")
			},
			status: 200, clen: -1, te: []string{"chunked"}, body: "hello",
			trailer: http.Header{"X-Sum": {"abc"}, "X-Count": {"1"}},
		},
		{
			name: "trailers with TrailerPrefix",
			handler: func(w http.ResponseWriter, _ *http.Request) {
				_, _ = io.WriteString(w, "hello")
				w.Header().Set(http.TrailerPrefix+"X-Late", "z")
			},
			status: 200, clen: -1, te: []string{"chunked"}, body: "hello",
			trailer: http.Header{"X-Late": {"z"}},
		},
		{
			name: "TrailerPrefix after a large body",
			handler: func(w http.ResponseWriter, _ *http.Request) {
				_, _ = io.WriteString(w, big)
				w.Header().Set(http.TrailerPrefix+"X-Late", "z")
			},
			status: 200, clen: -1, te: []string{"chunked"}, body: big,
			trailer: http.Header{"X-Late": {"z"}},
		},
		{
			// A value with CR or LF cannot start a field of its own, and a
			// name that is no token is left out, in the head and in
			// trailers.
			name: "fields that would break the framing",
			handler: func(w http.ResponseWriter, _ *http.Request) {
				w.Header()["X-Inject"] = []string{"a\r\nSet-Cookie: evil"}
				w.Header()["Bad Name"] = []string{"v"}
				_, _ = io.WriteString(w, "hello")
				w.Header()[http.TrailerPrefix+"X-T"] = []string{"1\r\nX-Evil: 2"}
				w.Header()[http.TrailerPrefix+"Bad:Name"] = []string{"v"}
			},
			status: 200, clen: -1, te: []string{"chunked"}, body: "hello",
			header:  http.Header{"X-Inject": {"a  Set-Cookie: evil"}},
			absent:  []string{"Set-Cookie", "Bad Name"},
			trailer: http.Header{"X-T": {"1  X-Evil: 2"}},
		},
		{
			name: "handler asks to close",
			handler: func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Connection", "close")
				_, _ = io.WriteString(w, "bye")
			},
			status: 200, clen: 3, body: "bye", close: true,
		},
		{
			name: "CR and LF in values do not split fields",
			handler: func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("X-A", "a\r\nX-Injected: 1")
			},
			status: 200, clen: 0, header: http.Header{"X-A": {"a  X-Injected: 1"}}, absent: []string{"X-Injected"},
		},
		{
			// The fields are the server's own once set: a proxy may reuse
			// the head they came in (an upstream response's) as soon as
			// its handler returns, before a head held back is written.
			name: "fields passed as read, their block reused after",
			handler: withFields("X-Up: 1\r\nContent-Type: text/plain", func(w http.ResponseWriter, block []byte) {
				_, _ = io.WriteString(w, "hi")
				overwrite(block)
			}),
			status: 200, clen: 2, body: "hi",
			header: http.Header{"X-Up": {"1"}, "Content-Type": {"text/plain"}, "Date": nil},
		},
		{
			name: "fields with Content-Length frame the response",
			handler: withFields("Content-Length: 5\r\nX-Up: 2", func(w http.ResponseWriter, block []byte) {
				_, _ = io.WriteString(w, "hello")
				overwrite(block)
			}),
			status: 200, clen: 5, body: "hello", header: http.Header{"X-Up": {"2"}},
		},
		{
			name: "fields of a bodiless response, block reused before the head is written",
			handler: withFields("X-Up: 3\r\nContent-Length: 0", func(_ http.ResponseWriter, block []byte) {
				overwrite(block)
			}),
			status: 200, clen: 0, header: http.Header{"X-Up": {"3"}},
		},
		{
			name: "fields and a held-back body of unknown length",
			handler: withFields("X-Up: 4", func(w http.ResponseWriter, block []byte) {
				_, _ = io.WriteString(w, "held")
				overwrite(block)
			}),
			status: 200, clen: 4, body: "held", header: http.Header{"X-Up": {"4"}},
		},
		{
			name: "short body closes the connection",
			handler: func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Length", "10")
				_, _ = io.WriteString(w, "hello")
			},
			status: 200, clen: 10, body: "hello", bodyErr: true, close: true,
		},
	}
	cur := make(chan http.HandlerFunc, 1)
	ts := serve(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/next" {
			return
		}
		(<-cur)(w, r)
	})})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cl := dial(t, ts.addr)
			cur <- tc.handler
			if tc.request == "" {
				tc.request = get11
			}
			if tc.method == "" {
				tc.method = "GET"
			}
			cl.send(tc.request)
			resp, err := http.ReadResponse(cl.br, &http.Request{Method: tc.method})
			if err != nil {
				t.Fatalf("read response: %v", err)
			}
			b, err := io.ReadAll(resp.Body)
			if (err != nil) != tc.bodyErr {
				t.Fatalf("read body: %v, want error %v", err, tc.bodyErr)
			}
			if tc.writes != 0 {
				if n := ts.writesOf(cl); n != tc.writes {
					t.Errorf("server wrote the response in %d writes, want %d", n, tc.writes)
				}
			}
			if resp.StatusCode != tc.status {
				t.Errorf("status %d, want %d", resp.StatusCode, tc.status)
			}
			if resp.ContentLength != tc.clen && tc.status != 204 && tc.status != 304 {
				t.Errorf("ContentLength %d, want %d", resp.ContentLength, tc.clen)
			}
			if diff := cmp.Diff(tc.te, resp.TransferEncoding, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("TransferEncoding (-want +got):\n%s", diff)
			}
			if string(b) != tc.body {
				t.Errorf("body %q (%d bytes), want %d bytes", clip(b), len(b), len(tc.body))
			}
			if diff := cmp.Diff(tc.trailer, resp.Trailer, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Trailer (-want +got):\n%s", diff)
			}
			for k, vs := range tc.header {
				got, ok := resp.Header[k]
				if !ok || vs != nil && !cmp.Equal(vs, got) {
					t.Errorf("header %s: %q, want %q", k, got, vs)
				}
			}
			for _, k := range tc.absent {
				if v, ok := resp.Header[k]; ok {
					t.Errorf("header %s: %q, want none", k, v)
				}
			}
			// A short body is found out after its head was sent: the
			// connection just ends.
			if resp.Close != tc.close && !tc.bodyErr {
				t.Errorf("Close %v, want %v", resp.Close, tc.close)
			}
			if tc.close {
				if !tc.bodyErr && tc.clen >= 0 {
					cl.expectEOF()
				}
				return
			}
			cl.expectOpen()
		})
	}
}

// withFields is a handler that passes lines (header lines without their
// final CRLF) to its response with SetResponseFields, then calls body
// with the block the fields are in.
func withFields(lines string, body func(http.ResponseWriter, []byte)) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		block := []byte("HTTP/1.1 200 OK\r\n" + lines + "\r\n\r\n")
		fields, err := httphead.ScanFields(block, len("HTTP/1.1 200 OK\r\n"), nil, errors.New("malformed"), false)
		if err != nil {
			panic("scan test fields: " + err.Error())
		}
		if !SetResponseFields(w, block, fields) {
			panic("SetResponseFields refused the server's own writer")
		}
		body(w, block)
	}
}

// overwrite spoils a head's bytes, as the next use of a reused buffer
// would.
func overwrite(block []byte) {
	for i := range block {
		block[i] = 'Z'
	}
}

func errString(err error) string {
	if err == nil {
		return "no error"
	}
	return err.Error()
}

// TestInformational checks that a 1xx response (103 with a header) goes
// out before the final one.
func TestInformational(t *testing.T) {
	ts := serve(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/next" {
			return
		}
		w.Header().Set("Link", "</a.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		w.Header().Set("X-Final", "1")
		_, _ = io.WriteString(w, "done")
	})})
	cl := dial(t, ts.addr)
	cl.send("GET / HTTP/1.1\r\nHost: h\r\n\r\n")
	resp, _ := cl.response("GET")
	if resp.StatusCode != http.StatusEarlyHints || resp.Header.Get("Link") != "</a.css>; rel=preload" {
		t.Fatalf("first response %d %v, want 103 with Link", resp.StatusCode, resp.Header)
	}
	resp, body := cl.response("GET")
	if resp.StatusCode != 200 || body != "done" || resp.Header.Get("X-Final") != "1" || resp.Header.Get("Link") != "" {
		t.Fatalf("final response %d %v %q", resp.StatusCode, resp.Header, body)
	}
	cl.expectOpen()

	// HTTP/1.0 clients get no 1xx.
	cl = dial(t, ts.addr)
	cl.send("GET / HTTP/1.0\r\n\r\n")
	if resp, body = cl.response("GET"); resp.StatusCode != 200 || body != "done" {
		t.Fatalf("HTTP/1.0 response %d %q, want 200 without 103 first", resp.StatusCode, body)
	}
}
