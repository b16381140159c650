package slowpath

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/novaedge/novaedge/slowpath/router"
	"github.com/novaedge/novaedge/slowpath/sockets"
)

// requestIDHeader carries the request ID to backends (and is kept when the
// client sends one, so a trace spans hops).
const requestIDHeader = "X-Request-Id"

// serveHTTP is every request's entry: the socket's current listener,
// scheme redirects, routing, route redirects, then forwarding.
func (p *Proxy) serveHTTP(key sockets.Key, rw http.ResponseWriter, r *http.Request) {
	start := time.Now()
	x := p.getExchange()
	x.start = start
	w := &x.sw
	w.ResponseWriter = rw
	var lname, route, backend string
	defer func() {
		p.metrics.observe(&x.series, lname, route, backend, w.code, start)
		p.putExchange(x)
	}()

	cfg := p.cfg.Load()
	ln := cfg.listeners[key]
	if ln != nil {
		lname = ln.name
	}
	if ln == nil {
		writeError(w, r, http.StatusServiceUnavailable, "listener is being removed")
		return
	}
	if ln.altSvc != "" {
		w.Header().Set("Alt-Svc", ln.altSvc)
	}
	if bad := badRequest(r); bad != "" {
		writeError(w, r, http.StatusBadRequest, bad)
		return
	}
	if len(r.RequestURI) > p.opts.MaxURIBytes {
		writeError(w, r, http.StatusRequestURITooLong, "request target longer than "+strconv.Itoa(p.opts.MaxURIBytes)+" bytes")
		return
	}
	if limit := p.opts.MaxRequestBodyBytes; limit > 0 && r.Body != nil && r.Body != http.NoBody {
		if r.ContentLength > limit {
			writeError(w, r, http.StatusRequestEntityTooLarge, "request body larger than "+strconv.FormatInt(limit, 10)+" bytes")
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, limit)
	}
	if ln.redirect != nil {
		redirectScheme(w, r, ln.redirect)
		return
	}
	m, ok := ln.router.Match(r)
	if !ok {
		writeError(w, r, http.StatusNotFound, "no route")
		return
	}
	route = m.Rule.Route
	if loc, status, ok := m.Rule.Filters.Redirect(r, m); ok {
		w.Header().Set("Location", loc)
		w.WriteHeader(status)
		return
	}
	be, name := cfg.pickBackend(m.Rule)
	backend = name
	if be == nil {
		// Gateway API: a share whose backend is missing fails with 500.
		p.log.Warn("route backend missing", "route", m.Rule.Route, "rule", m.Rule.Name, "backend", name)
		writeError(w, r, http.StatusInternalServerError, "backend "+name+" is not available")
		return
	}
	if ln.compress != nil {
		cw, finish := ln.compress.Wrap(w, r)
		defer func() {
			if err := finish(); err != nil {
				p.log.Debug("compressed response not completed", "route", route, "error", err)
			}
		}()
		p.forward(x, cw, r, ln, m, be)
		return
	}
	p.forward(x, w, r, ln, m, be)
}

// badRequest returns why a request must not be forwarded, or "". Go's
// server already rejects conflicting Content-Length and Transfer-Encoding,
// malformed headers and oversized header blocks; this adds what a proxy
// must check on top.
func badRequest(r *http.Request) string {
	if r.ProtoMajor == 1 && len(r.TransferEncoding) > 0 && r.Header.Get("Content-Length") != "" {
		return "both Transfer-Encoding and Content-Length"
	}
	if r.Method != http.MethodConnect && r.RequestURI != "*" && !strings.HasPrefix(r.URL.Path, "/") && r.URL.Path != "" {
		return "request path must start with /"
	}
	return ""
}

// pickBackend chooses among a rule's weighted backends. It returns nil and
// the backend's name when the chosen backend is not in the configuration.
func (cfg *Config) pickBackend(rule *router.Rule) (*backend, string) {
	switch len(rule.Backends) {
	case 0:
		return nil, "(none)"
	case 1:
		return cfg.backends[rule.Backends[0].Name], rule.Backends[0].Name
	}
	name := pickWeighted(rule.Backends)
	if name == "" {
		return nil, "(all weights are 0)"
	}
	return cfg.backends[name], name
}

// pickWeighted chooses a backend name by weight; "" when all weights are 0.
func pickWeighted(bs []router.Backend) string {
	var total uint64
	for _, b := range bs {
		total += uint64(b.Weight)
	}
	if total == 0 {
		return ""
	}
	n := rand.Uint64N(total)
	for _, b := range bs {
		if n < uint64(b.Weight) {
			return b.Name
		}
		n -= uint64(b.Weight)
	}
	return ""
}

// redirectScheme answers with a redirect to the same host and path on
// another scheme (redirectScheme, sslRedirect).
func redirectScheme(w http.ResponseWriter, r *http.Request, rd *schemeRedirect) {
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	defaultPort := rd.scheme == "https" && rd.port == 443 || rd.scheme == "http" && rd.port == 80
	if rd.port != 0 && !defaultPort {
		host += ":" + strconv.FormatUint(uint64(rd.port), 10)
	}
	w.Header().Set("Location", rd.scheme+"://"+host+r.URL.RequestURI())
	w.WriteHeader(rd.status)
}

// newRequestID returns 16 random bytes in hex, with one allocation.
func newRequestID() string {
	var src [16]byte
	binary.LittleEndian.PutUint64(src[:8], rand.Uint64())
	binary.LittleEndian.PutUint64(src[8:], rand.Uint64())
	var b [32]byte
	hex.Encode(b[:], src[:])
	return string(b[:])
}

// isGRPC reports whether r is a gRPC call, whose errors must be gRPC
// statuses rather than HTTP error pages.
func isGRPC(r *http.Request) bool {
	return r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc")
}

// grpcCode maps the proxy's HTTP error statuses to gRPC codes, as Envoy
// does (RFC: grpc/doc/http-grpc-status-mapping.md).
func grpcCode(status int) int {
	switch status {
	case http.StatusBadRequest:
		return 13 // INTERNAL
	case http.StatusUnauthorized:
		return 16 // UNAUTHENTICATED
	case http.StatusForbidden:
		return 7 // PERMISSION_DENIED
	case http.StatusNotFound:
		return 12 // UNIMPLEMENTED
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable:
		return 14 // UNAVAILABLE
	case http.StatusGatewayTimeout:
		return 4 // DEADLINE_EXCEEDED
	}
	return 2 // UNKNOWN
}

// writeError answers with a short plain-text body, or for gRPC calls with
// HTTP 200 and grpc-status / grpc-message, as gRPC clients expect.
func writeError(w http.ResponseWriter, r *http.Request, status int, msg string) {
	if isGRPC(r) {
		h := w.Header()
		h.Set("Content-Type", "application/grpc")
		h.Set("Grpc-Status", strconv.Itoa(grpcCode(status)))
		h.Set("Grpc-Message", msg)
		w.WriteHeader(http.StatusOK)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = fmt.Fprintf(w, "%d %s: %s\n", status, http.StatusText(status), msg)
}
