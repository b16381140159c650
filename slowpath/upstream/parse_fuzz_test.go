package upstream

import (
	"bufio"
	"bytes"
	"errors"
	"net"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/novaedge/novaedge/slowpath/internal/httphead"
)

// FuzzParseHead feeds arbitrary bytes to the response head parser: it
// never panics, a head it accepts has canonical keys and values without
// line breaks or NULs, and net/textproto accepts its fields as well and
// reads the same header (what this package accepts is a subset).
func FuzzParseHead(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n",
		"HTTP/1.0 404 Not Found\r\nconnection: keep-alive\r\n\r\n",
		"HTTP/1.1 201\nX-Folded: a\n  b\n\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n",
		"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n",
		"HTTP/1.1 2x0 OK\r\n\r\n",
		"HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n",
		"\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		end := httphead.HeadEnd(data, 0)
		if end < 0 {
			return
		}
		block := bytes.Clone(data[:end])
		h, err := parseHead(block, nil)
		if err != nil {
			if !errors.Is(err, ErrMalformedResponse) {
				t.Fatalf("error %v does not wrap ErrMalformedResponse", err)
			}
			return
		}
		for k, vs := range h.header {
			if k != http.CanonicalHeaderKey(k) {
				t.Fatalf("key %q is not canonical", k)
			}
			for _, v := range vs {
				if strings.ContainsAny(v, "\r\n\x00") {
					t.Fatalf("value %q of %s holds a line break or NUL", v, k)
				}
			}
		}
		tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(data[:end])))
		if _, err := tp.ReadLine(); err != nil {
			t.Fatalf("status line: %v", err)
		}
		want, err := tp.ReadMIMEHeader()
		if err != nil {
			t.Fatalf("accepted %q, which net/textproto rejects: %v", data[:end], err)
		}
		if diff := cmp.Diff(http.Header(want), h.header, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("header of %q differs from net/textproto's (-textproto +ours):\n%s", data[:end], diff)
		}
	})
}

// FuzzChunkedBody reads arbitrary bytes as a chunked response body: no
// panic, and no hang (the input is finite and the server closes).
func FuzzChunkedBody(f *testing.F) {
	for _, s := range []string{
		"5\r\nhello\r\n0\r\n\r\n",
		"3;x=y\r\nabc\r\n0\r\nX-T: 1\r\n\r\n",
		"zz\r\n",
		"0\r\nBad Trailer: x\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		nc, peer := net.Pipe()
		defer func() { _ = peer.Close() }()
		c := &conn{p: &hostPool{t: &Transport{}, addr: "fuzz", open: 1}, nc: nc}
		c.br = bufio.NewReader(bytes.NewReader(data))
		b := &respBody{c: c, ctx: t.Context(), resp: &http.Response{}, mode: modeChunked, close: true}
		b.cr = httputil.NewChunkedReader(c.br)
		buf := make([]byte, 7)
		for range len(data) + 2 {
			if _, err := b.Read(buf); err != nil {
				return
			}
		}
	})
}
