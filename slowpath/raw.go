package slowpath

import (
	"bytes"
	"net"
	"net/http"
	"strings"
	"time"

	"golang.org/x/net/http2/hpack"

	"github.com/novaedge/novaedge/slowpath/h1"
	"github.com/novaedge/novaedge/slowpath/h2"
	"github.com/novaedge/novaedge/slowpath/internal/httphead"
	"github.com/novaedge/novaedge/slowpath/sockets"
	"github.com/novaedge/novaedge/slowpath/upstream"
)

// The raw request path: the common HTTP/1.x or HTTP/2 request (no body or
// one with a Content-Length, a route without filters, a plain HTTP/1.1
// backend) is proxied from its header fields as read (HTTP/1.x) or
// decoded (HTTP/2), and the backend's answer from its fields as read,
// without a header map either way. Profiles put building, copying and
// writing those maps at about a third of the CPU time of such a request.
// The exchange is the same as for any other request (balancing, retries,
// breakers, timeouts, outlier reports, metrics, error pages); only the
// headers travel differently. Anything the path does not cover is served
// the usual way: the server builds the header map when ServeRaw declines.

// rawHandler offers a socket's HTTP/1.x requests to its Proxy's raw path.
type rawHandler struct {
	p   *Proxy
	key sockets.Key
}

func (h *rawHandler) ServeRaw(w http.ResponseWriter, r *http.Request, head *h1.Head) bool {
	if !plainConnection(head.Block, head.Fields) {
		return false
	}
	return h.p.serveRaw(h.key, w, r, head, nil)
}

// rawH2Handler offers a socket's HTTP/2 requests to its Proxy's raw path.
type rawH2Handler struct {
	p   *Proxy
	key sockets.Key
}

func (h *rawH2Handler) ServeRaw(w http.ResponseWriter, r *http.Request, fields []hpack.HeaderField) bool {
	if r.Body != http.NoBody && r.ContentLength < 0 {
		return false // a body of unknown length: chunked upstream
	}
	if strings.HasPrefix(h2.FieldValue(fields, "content-type"), "application/grpc") {
		return false // its errors are gRPC statuses (writeError reads the header)
	}
	if h2.FieldValue(fields, "expect") != "" {
		return false // the upstream client waits for 100 Continue by the header map
	}
	return h.p.serveRaw(h.key, w, r, nil, fields)
}

// serveRaw serves r from its fields (an HTTP/1.x head, or HTTP/2 fields),
// or declines (false) having done nothing when the request needs what
// only the header map path does: routing on headers, filters,
// compression, scheme redirects, hash affinity on a header or cookie, or
// a backend other than plain HTTP/1.1.
func (p *Proxy) serveRaw(key sockets.Key, rw http.ResponseWriter, r *http.Request, head *h1.Head, h2Fields []hpack.HeaderField) bool {
	cfg := p.cfg.Load()
	ln := cfg.listeners[key]
	if ln == nil || ln.redirect != nil || ln.compress != nil || ln.router.MatchesHeaders() ||
		len(r.RequestURI) > p.opts.MaxURIBytes ||
		p.opts.MaxRequestBodyBytes > 0 && r.ContentLength > p.opts.MaxRequestBodyBytes {
		return false
	}
	m, ok := ln.router.Match(r)
	if !ok || !m.Rule.Filters.None() {
		return false
	}
	// Every backend of the rule must suit the path before one is picked:
	// declining after the pick would let the general path pick again,
	// and skew a weighted split.
	for _, b := range m.Rule.Backends {
		if !cfg.backends[b.Name].rawOK() {
			return false
		}
	}
	be, name := cfg.pickBackend(m.Rule)
	if be == nil {
		return false
	}

	if rawServed != nil {
		rawServed()
	}
	start := time.Now()
	x := p.getExchange()
	x.start = start
	w := &x.sw
	w.ResponseWriter = rw
	defer func() {
		p.metrics.observe(&x.series, ln.name, m.Rule.Route, name, w.code, start)
		p.putExchange(x)
	}()
	if ln.altSvcVals != nil {
		// Shared and never appended to: its capacity is its length.
		rw.Header()["Alt-Svc"] = ln.altSvcVals
	}
	x.rawFields = true
	if head != nil {
		x.reqFields = takeFields(x.reqFields[:0], r, head)
		x.scratch.SetRequestFields(head.Block, x.reqFields)
	} else {
		// HTTP/2 fields become header lines, ahead of the forwarding
		// fields (rawForwarding appends those).
		x.fwdLines = takeH2Fields(x.fwdLines[:0], r, h2Fields)
	}
	x.scratch.WantFields()
	p.forward(x, w, r, ln, m, be)
	return true
}

// rawOK reports whether the raw path can forward to be (nil: a backend
// the configuration lacks, which the general path answers): a plain
// HTTP/1.1 backend, hashing on nothing but the source address.
func (be *backend) rawOK() bool {
	if be == nil {
		return false
	}
	if _, own := be.transport.(*upstream.Transport); !own {
		return false
	}
	hp := be.hash
	return hp == nil || hp.GetHeader() == "" && hp.GetCookie() == ""
}

// rawServed, when set by a test, is called for every request the raw
// path serves.
var rawServed func()

// plainConnection reports whether the Connection fields of a head name
// nothing but close and keep-alive: other names make fields hop-by-hop,
// which the header map path handles.
func plainConnection(block []byte, fields []httphead.Field) bool {
	for _, f := range fields {
		if !f.Is(block, "Connection") {
			continue
		}
		for v := f.Value(block); len(v) > 0; {
			var item []byte
			item, v, _ = bytes.Cut(v, comma)
			item = bytes.Trim(item, " \t")
			if len(item) > 0 && !bytes.EqualFold(item, closeToken) && !bytes.EqualFold(item, keepAliveToken) {
				return false
			}
		}
	}
	return true
}

var (
	comma          = []byte(",")
	closeToken     = []byte("close")
	keepAliveToken = []byte("keep-alive")
)

// hopByHopField reports whether a field of a head whose Connection fields
// pass plainConnection is hop-by-hop: one of RFC 9110's, or named by
// Connection (only "Close" can be, besides Keep-Alive).
func hopByHopField(block []byte, fields []httphead.Field, name []byte) bool {
	switch string(name) {
	case "Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
		"Te", "Trailer", "Transfer-Encoding", "Upgrade":
		return true
	case "Close":
		return httphead.NamedByConnection(block, fields, name)
	}
	return false
}

// takeFields sorts a raw request's fields: those the exchange reads or
// replaces go into r.Header (the request ID, X-Forwarded-For, Forwarded,
// TE), as the header map path has them; the rest, minus Host and
// hop-by-hop fields, are appended to dst to be sent as they are.
func takeFields(dst []httphead.Field, r *http.Request, head *h1.Head) []httphead.Field {
	block := head.Block
	for _, f := range head.Fields {
		var key string
		name := f.Name(block)
		switch string(name) {
		case "Host", "X-Forwarded-Host", "X-Forwarded-Proto", "Content-Length":
			continue // in r.Host; set by rewriteOut; in r.ContentLength
		case requestIDHeader:
			key = requestIDHeader
		case "X-Forwarded-For":
			key = "X-Forwarded-For"
		case "Forwarded":
			key = "Forwarded"
		case "Te":
			key = "Te"
		default:
			if !hopByHopField(block, head.Fields, name) {
				dst = append(dst, f)
			}
			continue
		}
		r.Header[key] = append(r.Header[key], string(f.Value(block)))
	}
	return dst
}

// takeH2Fields is takeFields for HTTP/2 fields: those the exchange or
// the upstream client reads go into r.Header, the rest are appended to dst as HTTP/1.1 header lines
// with canonical names, a split cookie joined into one (RFC 9113 §8.2.3).
// HTTP/2 has no connection-specific fields (the server rejects them) but
// TE: trailers.
func takeH2Fields(dst []byte, r *http.Request, fields []hpack.HeaderField) []byte {
	cookies := 0
	for _, hf := range fields {
		var key string
		switch hf.Name {
		case "host", "x-forwarded-host", "x-forwarded-proto", "content-length",
			"proxy-authenticate", "proxy-authorization":
			continue // r.Host; set by rewriteOut; r.ContentLength; hop-by-hop
		case "cookie":
			cookies++
			continue
		case "x-request-id":
			key = requestIDHeader
		case "x-forwarded-for":
			key = "X-Forwarded-For"
		case "forwarded":
			key = "Forwarded"
		case "te":
			key = "Te"
		case "idempotency-key", "x-idempotency-key":
			// Sent from the upstream header map, where the client looks
			// for it to tell a request it may send again.
			key = canonicalH2(hf.Name)
		default:
			dst = appendCanonical(dst, hf.Name)
			dst = append(dst, ": "...)
			dst = append(dst, hf.Value...)
			dst = append(dst, "\r\n"...)
			continue
		}
		r.Header[key] = append(r.Header[key], hf.Value)
	}
	if cookies > 0 {
		dst = append(dst, "Cookie: "...)
		n := 0
		for _, hf := range fields {
			if hf.Name == "cookie" {
				if n > 0 {
					dst = append(dst, "; "...)
				}
				dst = append(dst, hf.Value...)
				n++
			}
		}
		dst = append(dst, "\r\n"...)
	}
	return dst
}

func canonicalH2(name string) string {
	if name == "idempotency-key" {
		return "Idempotency-Key"
	}
	return "X-Idempotency-Key"
}

// appendCanonical appends a lower-case field name in canonical form
// (textproto.CanonicalMIMEHeaderKey's, for a valid name).
func appendCanonical(dst []byte, name string) []byte {
	upper := true
	for i := 0; i < len(name); i++ {
		c := name[i]
		if upper && 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		dst = append(dst, c)
		upper = c == '-'
	}
	return dst
}

// rawForwarding is rewriteOut's forwarding fields for a raw request,
// written as header lines rather than set in the header map: the same
// fields with the same values. Those of the client that it replaces are
// deleted from h, the upstream header map. They follow the lines already
// in x.fwdLines (an HTTP/2 request's own fields).
func (x *exchange) rawForwarding(in *http.Request, h http.Header, proto string) {
	b := x.fwdLines
	if clientIP, _, err := net.SplitHostPort(in.RemoteAddr); err == nil {
		b = append(b, "X-Forwarded-For: "...)
		for _, v := range in.Header["X-Forwarded-For"] {
			b = append(b, v...)
			b = append(b, ", "...)
		}
		b = append(b, clientIP...)
		b = append(b, "\r\n"...)
	}
	b = append(b, "X-Forwarded-Host: "...)
	b = append(b, in.Host...)
	b = append(b, "\r\nX-Forwarded-Proto: "...)
	b = append(b, proto...)
	b = append(b, "\r\nForwarded: "...)
	for _, v := range in.Header["Forwarded"] {
		b = append(b, v...)
		b = append(b, ", "...)
	}
	b = appendForwardedElem(b, in, proto)
	b = append(b, "\r\n"+requestIDHeader+": "...)
	b = append(b, x.reqID...)
	b = append(b, "\r\n"...)
	x.fwdLines = b
	delete(h, "X-Forwarded-For")
	delete(h, "Forwarded")
	delete(h, requestIDHeader)
	x.scratch.SetRequestLines(b)
}

// responseFields passes the fields of an upstream response given as fields
// to the client's response, minus hop-by-hop ones. It reports false when
// the client's writer cannot take fields: the caller builds the header map.
func (x *exchange) responseFields(w http.ResponseWriter) bool {
	block, fields, ok := x.scratch.Fields()
	if !ok || !plainConnection(block, fields) {
		return false
	}
	kept := x.respFields[:0]
	for _, f := range fields {
		if !hopByHopField(block, fields, f.Name(block)) {
			kept = append(kept, f)
			if f.Is(block, "Alt-Svc") {
				// The backend's replaces the listener's, as on the
				// general path.
				delete(w.Header(), "Alt-Svc")
			}
		}
	}
	x.respFields = kept
	return h1.SetResponseFields(w, block, kept) || h2.SetResponseFields(w, block, kept)
}
