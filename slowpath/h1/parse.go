package h1

import (
	"bytes"
	"errors"
	"net/http"
	"net/url"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/novaedge/novaedge/slowpath/internal/httphead"
)

var (
	errHeadTooLarge = errors.New("request head larger than the limit")
	errMalformed    = errors.New("malformed request")
)

// httpError is a request the server answers itself.
type httpError struct {
	status int
	msg    string
}

func (e *httpError) Error() string { return e.msg }

func bad(msg string) *httpError { return &httpError{http.StatusBadRequest, msg} }

// chunkedTE is the TransferEncoding of chunked requests (its capacity is
// its length, so that an append copies).
var chunkedTE = []string{"chunked"}

// commonKeys are request header names that need no string of their own.
var commonKeys = httphead.Keys(
	"Accept", "Accept-Encoding", "Accept-Language", "Authorization", "Cache-Control", "Connection",
	"Content-Length", "Content-Type", "Cookie", "Expect", "Forwarded", "Host", "If-Modified-Since",
	"If-None-Match", "Origin", "Pragma", "Range", "Referer", "Sec-Websocket-Extensions", "Sec-Websocket-Key",
	"Sec-Websocket-Protocol", "Sec-Websocket-Version", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
	"User-Agent", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "X-Real-Ip", "X-Request-Id",
)

// parse makes the connection's request of a head. The rules are
// net/http's, plus what a proxy needs: folded header lines and a
// Transfer-Encoding in an HTTP/1.0 request are refused.
func (c *conn) parse(block []byte) (*http.Request, *httpError) {
	e := bytes.IndexByte(block, '\n')
	line := httphead.TrimCR(block[:e])
	sp1 := bytes.IndexByte(line, ' ')
	sp2 := bytes.LastIndexByte(line, ' ')
	if sp1 <= 0 || sp2 <= sp1+1 {
		return nil, bad("malformed request line " + quote(line))
	}
	method, target, proto := line[:sp1], line[sp1+1:sp2], line[sp2+1:]
	var minor int
	switch string(proto) {
	case "HTTP/1.1":
		minor = 1
	case "HTTP/1.0":
	default:
		if len(proto) == 8 && string(proto[:5]) == "HTTP/" && isDigit(proto[5]) && proto[6] == '.' && isDigit(proto[7]) {
			return nil, &httpError{http.StatusHTTPVersionNotSupported, "unsupported protocol version " + quote(proto)}
		}
		return nil, bad("malformed HTTP version " + quote(proto))
	}
	for _, b := range method {
		if !httphead.TokenByte[b] {
			return nil, bad("invalid method " + quote(method))
		}
	}
	for _, b := range target {
		if b <= ' ' || b == 0x7f {
			return nil, bad("invalid request target " + quote(target))
		}
	}
	fields, err := httphead.ScanFields(block, e+1, c.fields[:0], errMalformed, true)
	if err != nil {
		return nil, bad(err.Error())
	}
	s := string(block) // the one copy: method, target and fields are its substrings
	if c.s.Raw != nil {
		if r := c.parseRaw(s, block, len(line), sp1, sp2, minor, fields); r != nil {
			return r, nil
		}
	}
	// The map and its values' array are the connection's: a handler is
	// done with the request when it returns.
	h, vals := httphead.BuildHeader(c.hdr, c.vals, s, block, fields, commonKeys)
	c.vals = vals

	r := &c.req
	*r = *c.tmpl
	r.Method = internMethod(s[:sp1])
	r.RequestURI = s[sp1+1 : sp2]
	r.Proto, r.ProtoMajor, r.ProtoMinor = s[sp2+1:len(line)], 1, minor
	r.Header = h
	r.RemoteAddr = c.remote
	if herr := c.parseTarget(r); herr != nil {
		return nil, herr
	}

	hosts := h["Host"]
	switch {
	case len(hosts) > 1:
		return nil, bad("too many Host headers")
	case len(hosts) == 0 && minor == 1:
		return nil, bad("missing required Host header")
	case len(hosts) == 1 && !httpguts.ValidHostHeader(hosts[0]):
		return nil, bad("malformed Host header " + quote([]byte(hosts[0])))
	}
	if r.Host == "" && len(hosts) == 1 {
		r.Host = hosts[0]
	}
	delete(h, "Host")

	if herr := c.framing(r, minor); herr != nil {
		return nil, herr
	}
	r.Close = r.Close || shouldClose(minor, h["Connection"])
	return r, nil
}

// parseRaw makes the connection's request of a head that the raw handler
// may serve (see RawHandler): in origin form, with one valid Host field, a
// body framed by Content-Length if any, and no Upgrade or Expect. Its
// Header is left empty; the fields stay in c.head. It returns nil for any
// other head, which parse then treats in full.
func (c *conn) parseRaw(s string, block []byte, lineEnd, sp1, sp2, minor int, fields []httphead.Field) *http.Request {
	host := -1
	length := false
	for i, f := range fields {
		switch string(block[f.K0:f.K1]) {
		case "Host":
			if host >= 0 {
				return nil
			}
			host = i
		case "Content-Length":
			length = true
		case "Transfer-Encoding", "Upgrade", "Expect":
			return nil
		}
	}
	if host < 0 {
		return nil
	}
	hostVal := s[fields[host].V0:fields[host].V1]
	if !httpguts.ValidHostHeader(hostVal) {
		return nil
	}
	method := s[:sp1]
	if method == http.MethodConnect {
		return nil
	}
	u := &c.url
	*u = url.URL{}
	if !httphead.ParseOriginForm(u, s[sp1+1:sp2]) {
		return nil
	}
	r := &c.req
	*r = *c.tmpl
	r.Method = internMethod(method)
	r.RequestURI = s[sp1+1 : sp2]
	r.URL = u
	r.Proto, r.ProtoMajor, r.ProtoMinor = s[sp2+1:lineEnd], 1, minor
	clear(c.hdr)
	r.Header = c.hdr
	r.RemoteAddr = c.remote
	r.Host = hostVal
	r.ContentLength = 0
	r.Body = http.NoBody
	c.body = nil
	if length {
		n, err := httphead.ContentLength(block, fields, errMalformed)
		if err != nil {
			return nil // parse answers it
		}
		if n > 0 {
			r.ContentLength = n
			r.Body = c.newBody(r, n)
			// Reading the body refills the read buffer, which holds the
			// head: the handler gets a copy.
			c.headCopy = append(c.headCopy[:0], block...)
			block = c.headCopy
		}
	}
	if minor == 0 {
		r.Close = !httphead.FieldsHaveToken(block, fields, "Connection", "keep-alive")
	} else {
		r.Close = httphead.FieldsHaveToken(block, fields, "Connection", "close")
	}
	c.rawReq = true
	c.head = Head{Block: block, Fields: fields}
	c.headStr = s
	return r
}

// buildHeader fills the Header of a request parseRaw made, for a handler
// that needs it after all.
func (c *conn) buildHeader(r *http.Request) {
	h, vals := httphead.BuildHeader(c.hdr, c.vals, c.headStr, c.head.Block, c.head.Fields, commonKeys)
	c.vals = vals
	delete(h, "Host")
	r.Header = h
}

// parseTarget sets the request's URL (and Host for an absolute target).
func (c *conn) parseTarget(r *http.Request) *httpError {
	target := r.RequestURI
	u := &c.url
	*u = url.URL{}
	r.URL = u
	switch {
	case r.Method == http.MethodConnect && !strings.HasPrefix(target, "/"):
		// authority-form: it names the host, as for net/http.
		u.Host = target
		r.Host = target
		return nil
	case httphead.ParseOriginForm(u, target):
		// origin-form needing no escapes, as nearly every request's.
		return nil
	}
	pu, err := url.ParseRequestURI(target)
	if err != nil {
		return bad("malformed request target " + quote([]byte(target)))
	}
	*u = *pu
	if u.Host != "" {
		r.Host = u.Host
	}
	return nil
}

// framing works out the request body's length: Content-Length or chunked,
// never both (chunked wins and Content-Length is dropped, RFC 9112 §6.3),
// and no other transfer coding.
func (c *conn) framing(r *http.Request, minor int) *httpError {
	c.body = nil // newBody sets it; a request without one must not see the last one's
	h := r.Header
	te := h["Transfer-Encoding"]
	if len(te) > 0 {
		if minor == 0 {
			return bad("Transfer-Encoding in an HTTP/1.0 request")
		}
		if len(te) > 1 || !strings.EqualFold(te[0], "chunked") {
			return &httpError{http.StatusNotImplemented, "unsupported transfer encoding " + quote([]byte(strings.Join(te, ",")))}
		}
		delete(h, "Transfer-Encoding")
		if _, ok := h["Content-Length"]; ok {
			// RFC 9112 §6.1: a server that reads such a request by its
			// Transfer-Encoding must close the connection after it.
			delete(h, "Content-Length")
			r.Close = true
		}
		r.TransferEncoding = chunkedTE
		r.ContentLength = -1
		r.Body = c.newBody(r, -1)
		return nil
	}
	n, err := httphead.ParseContentLength(h["Content-Length"], errMalformed)
	if err != nil {
		return bad(err.Error())
	}
	if len(h["Content-Length"]) > 1 {
		h["Content-Length"] = h["Content-Length"][:1]
	}
	if n <= 0 {
		r.ContentLength = 0
		r.Body = http.NoBody
		return nil
	}
	r.ContentLength = n
	r.Body = c.newBody(r, n)
	return nil
}

// shouldClose: HTTP/1.1 keeps the connection unless asked to close;
// HTTP/1.0 closes it unless asked to keep it.
func shouldClose(minor int, connection []string) bool {
	if minor == 0 {
		return !httpguts.HeaderValuesContainsToken(connection, "keep-alive")
	}
	return httpguts.HeaderValuesContainsToken(connection, "close")
}

// internMethod returns the constant for the common methods.
func internMethod(m string) string {
	switch m {
	case "GET":
		return http.MethodGet
	case "POST":
		return http.MethodPost
	case "HEAD":
		return http.MethodHead
	case "PUT":
		return http.MethodPut
	case "DELETE":
		return http.MethodDelete
	case "OPTIONS":
		return http.MethodOptions
	case "PATCH":
		return http.MethodPatch
	}
	return m
}

func isDigit(b byte) bool { return '0' <= b && b <= '9' }

func quote(b []byte) string { return "\"" + httphead.Clip(b) + "\"" }
