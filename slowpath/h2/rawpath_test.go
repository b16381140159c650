package h2

import (
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/novaedge/novaedge/slowpath/internal/httphead"
)

// rawFunc is a RawHandler.
type rawFunc func(w http.ResponseWriter, r *http.Request, fields []hpack.HeaderField) bool

func (f rawFunc) ServeRaw(w http.ResponseWriter, r *http.Request, fields []hpack.HeaderField) bool {
	return f(w, r, fields)
}

// seenRequest is what a handler saw of a request.
type seenRequest struct {
	raw    bool // by ServeRaw
	fields []hpack.HeaderField
	header http.Header
	host   string
	method string
	uri    string
	clen   int64
	body   string
}

// TestRawHandler checks what ServeRaw is offered, and that a request it
// declines reaches Handler as it would without Raw: the same Header, Host
// and body.
func TestRawHandler(t *testing.T) {
	cases := []struct {
		name    string
		method  string
		extra   []string // regular fields, name then value
		body    string
		offered bool
		decline bool
		host    string // want; "" means :authority's
	}{
		{name: "plain", method: "GET", extra: []string{"user-agent", "t", "accept", "*/*", "x-many", "1", "x-many", "2"}, offered: true},
		{name: "split cookie", method: "GET", extra: []string{"cookie", "a=1", "x-b", "2", "cookie", "b=2"}, offered: true},
		{name: "declined split cookie", method: "GET", extra: []string{"cookie", "a=1", "cookie", "b=2"}, offered: true, decline: true},
		{name: "host field", method: "GET", extra: []string{"host", "other.test"}, offered: true},
		{name: "declined host field", method: "GET", extra: []string{"host", "other.test", "x-a", "1"}, offered: true, decline: true},
		{name: "body", method: "POST", extra: []string{"content-length", "5", "content-type", "text/plain"}, body: "hello", offered: true},
		{name: "declined body", method: "POST", extra: []string{"content-length", "5"}, body: "hello", offered: true, decline: true},
		{name: "trailers declared", method: "POST", extra: []string{"trailer", "x-t", "te", "trailers"}, body: "x"},
	}
	got := make(chan seenRequest, 1)
	record := func(r *http.Request, raw bool, fields []hpack.HeaderField) {
		b, _ := io.ReadAll(r.Body)
		h := r.Header.Clone()
		got <- seenRequest{raw: raw, fields: append([]hpack.HeaderField(nil), fields...), header: h,
			host: r.Host, method: r.Method, uri: r.RequestURI, clen: r.ContentLength, body: string(b)}
	}
	handler := http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { record(r, false, nil) })
	decline := map[string]bool{}
	withRaw := startServer(t, false, handler, func(s *Server) {
		s.ReuseRequestHeader = true
		s.Raw = rawFunc(func(_ http.ResponseWriter, r *http.Request, fields []hpack.HeaderField) bool {
			if len(r.Header) != 0 {
				t.Errorf("ServeRaw's request has a Header: %v", r.Header)
			}
			if decline[r.URL.Path] {
				return false
			}
			record(r, true, fields)
			return true
		})
	})
	without := startServer(t, false, handler, func(s *Server) { s.ReuseRequestHeader = true })
	send := func(ts *testServer, path string, tc int) seenRequest {
		c := cases[tc]
		rc := dialRaw(t, ts.addr)
		if err := rc.request(1, c.method, path, c.body == "", c.extra...); err != nil {
			t.Fatal(err)
		}
		if c.body != "" {
			if err := rc.write(func() error { return rc.fr.WriteData(1, true, []byte(c.body)) }); err != nil {
				t.Fatal(err)
			}
		}
		return <-got
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := "/" + strings.ReplaceAll(tc.name, " ", "-")
			decline[path] = tc.decline
			s := send(withRaw, path, i)
			if s.raw != (tc.offered && !tc.decline) {
				t.Errorf("served by ServeRaw: %v, want %v", s.raw, tc.offered && !tc.decline)
			}
			plain := send(without, path, i)
			if s.raw {
				var want []hpack.HeaderField
				for j := 0; j+1 < len(tc.extra); j += 2 {
					want = append(want, hpack.HeaderField{Name: tc.extra[j], Value: tc.extra[j+1]})
				}
				if !reflect.DeepEqual(s.fields, want) {
					t.Errorf("fields %v, want %v", s.fields, want)
				}
				if len(s.header) != 0 {
					t.Errorf("Header %v, want empty", s.header)
				}
				// The rest of the request is what Handler gets without Raw.
				s.fields, s.header, s.raw = nil, plain.header, false
			}
			if !reflect.DeepEqual(s, plain) {
				t.Errorf("request\n%+v\nwithout Raw\n%+v", s, plain)
			}
		})
	}
}

// TestSetResponseFields passes an HTTP/1.1 head's fields to the response
// and spoils the head before the response is sent: the client gets the
// fields (lower-case, connection-specific ones left out), framed by their
// Content-Length, with no second Date or sniffed Content-Type.
func TestSetResponseFields(t *testing.T) {
	cases := []struct {
		name   string
		lines  string // header lines of the head, without the final CRLF
		header http.Header
		body   string
		want   http.Header // fields the response must have
		absent []string
		short  bool // the body is shorter than the fields' Content-Length
	}{
		{
			name:  "fields",
			lines: "Content-Type: text/plain\r\nX-Up: 1\r\nX-Up: 2\r\nContent-Length: 5\r\nDate: Mon, 02 Jan 2006 15:04:05 GMT",
			body:  "hello",
			want: http.Header{"Content-Type": {"text/plain"}, "X-Up": {"1", "2"}, "Content-Length": {"5"},
				"Date": {"Mon, 02 Jan 2006 15:04:05 GMT"}},
		},
		{
			name:   "with the Header's",
			lines:  "X-Up: 1",
			header: http.Header{"X-Own": {"o"}},
			body:   "<html>",
			want:   http.Header{"X-Own": {"o"}, "X-Up": {"1"}, "Content-Type": {"text/html; charset=utf-8"}, "Content-Length": {"6"}},
		},
		{
			name:   "connection-specific fields left out",
			lines:  "Keep-Alive: timeout=5\r\nUpgrade: h2c\r\nTe: trailers\r\nX-Up: 1",
			want:   http.Header{"X-Up": {"1"}},
			absent: []string{"Keep-Alive", "Upgrade", "Te"},
		},
		{
			name:   "invalid Content-Length left out",
			lines:  "Content-Length: 1x\r\nX-Up: 1",
			body:   "abc",
			want:   http.Header{"X-Up": {"1"}, "Content-Length": {"3"}},
			absent: []string{},
		},
		{
			name:  "body short of the Content-Length",
			lines: "Content-Length: 10",
			body:  "abc",
			short: true,
		},
	}
	cur := make(chan int, 1)
	ts := startServer(t, false, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		tc := cases[<-cur]
		block := []byte("HTTP/1.1 200 OK\r\n" + tc.lines + "\r\n\r\n")
		fields, err := httphead.ScanFields(block, len("HTTP/1.1 200 OK\r\n"), nil, errors.New("malformed"), false)
		if err != nil {
			panic(err)
		}
		for k, vs := range tc.header {
			w.Header()[k] = vs
		}
		if !SetResponseFields(w, block, fields) {
			panic("SetResponseFields refused the server's writer")
		}
		for i := range block {
			block[i] = 'Z' // the caller reuses its buffer
		}
		for i := range fields {
			fields[i] = httphead.Field{}
		}
		_, _ = io.WriteString(w, tc.body)
	}), nil)
	cl := ts.client(t)
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cur <- i
			res, err := cl.Get(ts.url() + "/")
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = res.Body.Close() }()
			body, err := io.ReadAll(res.Body)
			if tc.short {
				var se http2.StreamError
				if !errors.As(err, &se) {
					t.Errorf("body %q, error %v: want the stream reset", body, err)
				}
				return
			}
			if err != nil || string(body) != tc.body {
				t.Errorf("body %q, %v; want %q", body, err, tc.body)
			}
			for k, vs := range tc.want {
				if !reflect.DeepEqual(res.Header[k], vs) {
					t.Errorf("%s: %q, want %q", k, res.Header[k], vs)
				}
			}
			if n := len(res.Header["Date"]); n != 1 {
				t.Errorf("%d Date fields, want 1", n)
			}
			for _, k := range tc.absent {
				if v, ok := res.Header[k]; ok {
					t.Errorf("%s: %q, want none", k, v)
				}
			}
		})
	}
	// A writer of another server is refused.
	if SetResponseFields(fakeWriter{}, nil, nil) {
		t.Error("SetResponseFields took a writer of another server")
	}
}

type fakeWriter struct{ http.ResponseWriter }
