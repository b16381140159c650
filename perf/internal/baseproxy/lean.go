package baseproxy

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/slowpath/router"
)

// ServeLean proxies connections to addr to backend until accepting fails,
// as ServeGoroutines does, and does on the way the work NovaEdge's slow
// path cannot skip for a plain request on a route without filters: every
// header field scanned and checked, the request routed by slowpath/router
// (the same compiled router, given method, host and path; one route for
// every host and path), hop-by-hop fields dropped both ways,
// X-Forwarded-For appended to, X-Forwarded-Host/-Proto, Forwarded and
// X-Request-Id added, the answer framed by its Content-Length. It leaves
// out what only rare requests need: bodies and chunked answers end the
// connection; no timeouts, retries, health reports or metrics. Its rate
// beside NovaEdge's is how much of the gap to HAProxy a path without
// http.Request and http.Header could close.
func ServeLean(addr, backend string) error {
	rt, err := router.Compile(
		&pb.Listener{Name: "lean", Port: 80, Protocol: pb.Protocol_PROTOCOL_HTTP},
		[]*pb.Route{{Name: "all", Kind: pb.RouteKind_ROUTE_KIND_HTTP, Listeners: []string{"lean"},
			Rules: []*pb.RouteRule{{Backends: []*pb.WeightedBackend{{Backend: "lean/backend", Weight: 1}}}}}})
	if err != nil {
		return fmt.Errorf("route: %w", err)
	}
	ln, err := net.Listen("tcp4", addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", addr, err)
	}
	p := &leanProxy{rt: rt, pool: &gpool{backend: backend}}
	for {
		c, err := ln.Accept()
		if err != nil {
			return fmt.Errorf("accept: %w", err)
		}
		go p.serve(c)
	}
}

type leanProxy struct {
	rt   *router.Router
	pool *gpool
}

// field is one header field, its name and value slices of a head.
type field struct{ name, value []byte }

// scanFields splits the field lines of head (after its first line) and
// checks names and values as RFC 9110 asks.
func scanFields(head []byte, dst []field) ([]field, []byte, error) {
	e := bytes.IndexByte(head, '\n')
	first := bytes.TrimSuffix(head[:e], []byte("\r"))
	rest := head[e+1:]
	for {
		e = bytes.IndexByte(rest, '\n')
		line := bytes.TrimSuffix(rest[:e], []byte("\r"))
		rest = rest[e+1:]
		if len(line) == 0 {
			return dst, first, nil
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 {
			return nil, nil, fmt.Errorf("field line without a name: %q", line)
		}
		name := line[:colon]
		for _, b := range name {
			if !isToken(b) {
				return nil, nil, fmt.Errorf("field name %q: not a token", name)
			}
		}
		value := bytes.Trim(line[colon+1:], " \t")
		for _, b := range value {
			if b < ' ' && b != '\t' || b == 0x7f {
				return nil, nil, fmt.Errorf("field %s: control character in the value", name)
			}
		}
		dst = append(dst, field{name, value})
	}
}

func isToken(b byte) bool {
	return 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' ||
		bytes.IndexByte([]byte("!#$%&'*+-.^_`|~"), b) >= 0
}

// hopByHop: the fields a proxy must not forward (RFC 9110 §7.6.1).
func hopByHop(name []byte) bool {
	for _, h := range [...]string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
		"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"} {
		if len(name) == len(h) && bytes.EqualFold(name, []byte(h)) {
			return true
		}
	}
	return false
}

func appendField(b []byte, f field) []byte {
	b = append(b, f.name...)
	b = append(b, ": "...)
	b = append(b, f.value...)
	return append(b, "\r\n"...)
}

func lookup(fs []field, name string) []byte {
	for _, f := range fs {
		if bytes.EqualFold(f.name, []byte(name)) {
			return f.value
		}
	}
	return nil
}

func (p *leanProxy) serve(nc net.Conn) {
	c := &gconn{Conn: nc, in: make([]byte, 0, 4<<10)}
	defer func() { _ = c.Close() }()
	client, _, _ := net.SplitHostPort(nc.RemoteAddr().String())
	var fields [32]field
	out := make([]byte, 0, 4<<10)
	resp := make([]byte, 0, 4<<10)
	for {
		n := c.head()
		if n < 0 {
			return
		}
		fs, line, err := scanFields(c.in[:n], fields[:0])
		if err != nil {
			return
		}
		method, target, ok := requestLine(line)
		host := lookup(fs, "Host")
		if !ok || host == nil || lookup(fs, "Content-Length") != nil || lookup(fs, "Transfer-Encoding") != nil {
			return // not this measuring stick's business
		}
		path, _, _ := bytes.Cut(target, []byte("?"))
		req := http.Request{Method: string(method), Host: string(host), URL: &url.URL{Path: string(path)}}
		if _, ok := p.rt.Match(&req); !ok {
			return
		}
		out = appendRequest(out[:0], line, fs, client, host)
		c.in = c.in[:copy(c.in, c.in[n:])]
		if !p.exchange(c, out, &resp) {
			return
		}
	}
}

func requestLine(line []byte) (method, target []byte, ok bool) {
	method, rest, ok1 := bytes.Cut(line, []byte(" "))
	target, version, ok2 := bytes.Cut(rest, []byte(" "))
	return method, target, ok1 && ok2 && string(version) == "HTTP/1.1" && len(target) > 0 && target[0] == '/'
}

// appendRequest appends the upstream request head: the request line, the
// client's end-to-end fields and the forwarding fields.
func appendRequest(b, line []byte, fs []field, client string, host []byte) []byte {
	b = append(b, line...)
	b = append(b, "\r\n"...)
	var xff []byte
	for _, f := range fs {
		if hopByHop(f.name) {
			continue
		}
		if bytes.EqualFold(f.name, []byte("X-Forwarded-For")) {
			xff = f.value
			continue
		}
		b = appendField(b, f)
	}
	b = append(b, "X-Forwarded-For: "...)
	if xff != nil {
		b = append(b, xff...)
		b = append(b, ", "...)
	}
	b = append(b, client...)
	b = append(b, "\r\nX-Forwarded-Host: "...)
	b = append(b, host...)
	b = append(b, "\r\nX-Forwarded-Proto: http\r\nForwarded: for="...)
	b = append(b, client...)
	b = append(b, ";host=\""...)
	b = append(b, host...)
	b = append(b, "\";proto=http\r\nX-Request-Id: "...)
	var id [16]byte
	a, z := rand.Uint64(), rand.Uint64()
	for i := range 8 {
		id[i], id[8+i] = byte(a>>(8*i)), byte(z>>(8*i))
	}
	b = hex.AppendEncode(b, id[:])
	return append(b, "\r\n\r\n"...)
}

// exchange sends req over a backend connection and the answer back to c,
// built in *buf.
func (p *leanProxy) exchange(c *gconn, req []byte, buf *[]byte) bool {
	u := p.pool.get()
	if u == nil {
		return false
	}
	if _, err := u.Write(req); err != nil {
		_ = u.Close()
		return false
	}
	n := u.head()
	if n < 0 {
		_ = u.Close()
		return false
	}
	var fields [32]field
	fs, status, err := scanFields(u.in[:n], fields[:0])
	cl := lookup(fs, "Content-Length")
	length, cerr := strconv.Atoi(string(cl))
	if err != nil || len(status) < 12 || !bytes.HasPrefix(status, []byte("HTTP/1.1 ")) || cl == nil || cerr != nil || length < 0 {
		_ = u.Close()
		return false
	}
	out := append((*buf)[:0], status...)
	out = append(out, "\r\n"...)
	for _, f := range fs {
		if hopByHop(f.name) {
			continue
		}
		out = appendField(out, f)
	}
	out = append(out, "\r\n"...)
	for len(u.in) < n+length {
		if !u.fill() {
			_ = u.Close()
			return false
		}
	}
	out = append(out, u.in[n:n+length]...)
	u.in = u.in[:copy(u.in, u.in[n+length:])]
	p.pool.put(u)
	*buf = out
	_, err = c.Write(out)
	return err == nil
}
