package h2

import (
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2/hpack"

	"github.com/novaedge/novaedge/slowpath/internal/httphead"
)

// Malformed requests (RFC 9113 §8.1.1) are reset with PROTOCOL_ERROR;
// these errors say why, for tests and debug logs.
var (
	errMissingPseudo    = errors.New("missing a required pseudo-header field")
	errConnectPseudo    = errors.New("CONNECT with :scheme or :path, or without :authority")
	errProtocolPseudo   = errors.New(":protocol without extended CONNECT")
	errEmptyPath        = errors.New("empty :path")
	errBadPath          = errors.New(":path is neither absolute nor *")
	errConnHeader       = errors.New("connection-specific header field")
	errTE               = errors.New(`te other than "trailers"`)
	errContentLength    = errors.New("invalid content-length")
	errLengthMismatch   = errors.New("content-length and END_STREAM disagree")
	errInvalidAuthority = errors.New("invalid :authority")
)

// requestFields is what a request's HEADERS frame says, checked.
type requestFields struct {
	method, scheme, authority, path string
	header                          http.Header
	values                          []string // the backing array of header's values
	contentLength                   int64    // -1 when absent
}

// parseRequest checks a request header block against RFC 9113 §8.3.1 and
// §8.2.2 and collects its fields. fields come from headerDecoder, which
// checked names, values and the pseudo-header fields' order, names and
// uniqueness. endStream says the HEADERS frame ended the stream.
//
// The header goes into hdr (cleared first) and its values into vals'
// backing array when they are given and vals is large enough; otherwise
// into new ones.
func parseRequest(fields []hpack.HeaderField, endStream bool, hdr http.Header, vals []string) (requestFields, error) {
	rf, regular, err := checkRequest(fields, endStream)
	if err != nil {
		return rf, err
	}
	rf.fillHeader(regular, hdr, vals)
	return rf, nil
}

// checkRequest is parseRequest without building the header: it returns
// the regular fields (those after the pseudo-header fields).
func checkRequest(fields []hpack.HeaderField, endStream bool) (requestFields, []hpack.HeaderField, error) {
	var rf requestFields
	rf.contentLength = -1
	hasPath := false
	n := 0 // pseudo-header fields, which come first
	for ; n < len(fields) && strings.HasPrefix(fields[n].Name, ":"); n++ {
		hf := fields[n]
		switch hf.Name {
		case ":method":
			rf.method = hf.Value
		case ":scheme":
			rf.scheme = hf.Value
		case ":authority":
			rf.authority = hf.Value
		case ":path":
			rf.path, hasPath = hf.Value, true
		case ":protocol":
			return rf, nil, errProtocolPseudo
		}
	}
	isConnect := rf.method == http.MethodConnect
	switch {
	case rf.method == "":
		return rf, nil, errMissingPseudo
	case isConnect:
		if rf.scheme != "" || rf.path != "" || rf.authority == "" {
			return rf, nil, errConnectPseudo
		}
	case rf.scheme == "":
		return rf, nil, errMissingPseudo
	case rf.path == "":
		// Present but empty, or absent: both malformed (§8.3.1).
		if hasPath {
			return rf, nil, errEmptyPath
		}
		return rf, nil, errMissingPseudo
	case (rf.scheme == "http" || rf.scheme == "https") && rf.path[0] != '/' && (rf.path != "*" || rf.method != http.MethodOptions):
		return rf, nil, errBadPath
	}
	if !validMethod(rf.method) {
		return rf, nil, fmt.Errorf("invalid :method %q", rf.method)
	}
	if rf.authority != "" && !httpguts.ValidHostHeader(rf.authority) {
		return rf, nil, errInvalidAuthority
	}
	regular := fields[n:]
	for _, hf := range regular {
		switch hf.Name {
		case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade":
			return rf, nil, errConnHeader
		case "te":
			if !strings.EqualFold(hf.Value, "trailers") {
				return rf, nil, errTE
			}
		case "content-length":
			n, err := strconv.ParseInt(hf.Value, 10, 64)
			if err != nil || n < 0 || hf.Value[0] == '+' || rf.contentLength >= 0 && n != rf.contentLength {
				return rf, nil, errContentLength
			}
			rf.contentLength = n
		}
	}
	if endStream && rf.contentLength > 0 {
		return rf, nil, errLengthMismatch
	}
	return rf, regular, nil
}

// fillHeader builds rf.header from a checked block's regular fields, in
// hdr and vals as parseRequest says.
func (rf *requestFields) fillHeader(regular []hpack.HeaderField, hdr http.Header, vals []string) {
	if hdr != nil {
		if len(hdr) > 0 {
			clear(hdr)
		}
		rf.header = hdr
	} else {
		rf.header = make(http.Header, len(regular))
	}
	// One backing array for the values of all fields: a field seen once
	// (nearly all) costs no allocation of its own.
	if cap(vals) < len(regular) {
		vals = make([]string, len(regular))
	}
	values := vals[:len(regular)]
	rf.values = values
	var cookies []string
	for _, hf := range regular {
		if hf.Name == "cookie" {
			// §8.2.3: split cookie fields join with "; ".
			cookies = append(cookies, hf.Value)
			continue
		}
		key := canonicalKey(hf.Name)
		if vv, ok := rf.header[key]; ok {
			rf.header[key] = append(vv, hf.Value)
			continue
		}
		values[0] = hf.Value
		rf.header[key] = values[:1:1]
		values = values[1:]
	}
	if len(cookies) == 1 {
		rf.header["Cookie"] = cookies
	} else if len(cookies) > 1 {
		rf.header["Cookie"] = []string{strings.Join(cookies, "; ")}
	}
}

func validMethod(m string) bool {
	for i := 0; i < len(m); i++ {
		if !httpguts.IsTokenRune(rune(m[i])) {
			return false
		}
	}
	return m != ""
}

// buildRequest turns a decoded request header block into st's request;
// end says its HEADERS frame ended the stream. With Server.Raw, a request
// that can be offered to it keeps its fields (st.rawFields) and gets an
// empty Header, filled only if ServeRaw declines (rawHeader).
func (st *stream) buildRequest(fields []hpack.HeaderField, end bool) error {
	rf, regular, err := checkRequest(fields, end)
	if err != nil {
		return err
	}
	srv := st.c.srv
	var hdr http.Header
	if srv.ReuseRequestHeader {
		if st.reqHdr == nil {
			st.reqHdr = make(http.Header, 8)
		}
		hdr = st.reqHdr
	}
	host := rf.authority
	st.raw = srv.Raw != nil && rf.method != http.MethodConnect && rawOffer(regular)
	if st.raw {
		st.rawFields = append(st.rawFields[:0], regular...)
		if hdr == nil {
			hdr = make(http.Header)
		} else if len(hdr) > 0 {
			clear(hdr)
		}
		rf.header = hdr
		if host == "" {
			host = FieldValue(regular, "host")
		}
	} else {
		rf.header = st.headerFrom(regular, hdr)
		if host == "" {
			host = rf.header.Get("Host")
		}
		delete(rf.header, "Host")
	}
	c := st.c
	tmpl := http.Request{
		Method:     rf.method,
		Proto:      "HTTP/2.0",
		ProtoMajor: 2,
		Header:     rf.header,
		Host:       host,
		RemoteAddr: c.remoteAddr,
		TLS:        c.tls,
	}
	// The request and its URL are the handler's to keep: some (grpc-go's
	// ServeHTTP) still read them after returning, so they are not pooled
	// with the stream.
	u := new(url.URL)
	tmpl.URL = u
	if rf.method == http.MethodConnect {
		*u = url.URL{Host: rf.authority}
		tmpl.RequestURI = rf.authority
	} else {
		if !httphead.ParseOriginForm(u, rf.path) {
			pu, err := url.ParseRequestURI(rf.path)
			if err != nil {
				return fmt.Errorf("parse :path: %w", err)
			}
			*u = *pu
		}
		tmpl.RequestURI = rf.path
	}
	for _, v := range rf.header["Trailer"] {
		for k := range strings.SplitSeq(v, ",") {
			k = textproto.CanonicalMIMEHeaderKey(textproto.TrimString(k))
			if k == "" || !validTrailer(k) {
				continue
			}
			if tmpl.Trailer == nil {
				tmpl.Trailer = make(http.Header)
			}
			tmpl.Trailer[k] = nil
		}
	}
	if end {
		tmpl.Body = http.NoBody
	} else {
		st.body = &requestBody{c: c, st: st}
		tmpl.Body = st.body
		tmpl.ContentLength = rf.contentLength
		if rf.contentLength < 0 {
			tmpl.ContentLength = -1
		}
		st.declared = rf.contentLength
		expect := rf.header["Expect"]
		if st.raw {
			expect = nil
			if v := FieldValue(regular, "expect"); v != "" {
				expect = []string{v}
			}
		}
		if len(expect) == 1 && strings.EqualFold(expect[0], "100-continue") {
			st.needContinue = true
		}
	}
	st.head = rf.method == http.MethodHead
	st.req = tmpl.WithContext(st.ctx)
	return nil
}

// rawOffer reports whether a request with these regular fields may be
// offered to Server.Raw: not one declaring trailers, whose Trailer map
// the request must carry from the start.
func rawOffer(regular []hpack.HeaderField) bool {
	for _, hf := range regular {
		if hf.Name == "trailer" {
			return false
		}
	}
	return true
}

// FieldValue is the value of the first of fields named name (lower case,
// as HTTP/2 names are), or "".
func FieldValue(fields []hpack.HeaderField, name string) string {
	for _, hf := range fields {
		if hf.Name == name {
			return hf.Value
		}
	}
	return ""
}

// headerFrom builds a request's header from its regular fields in hdr
// (nil: a new map), its values in the stream's kept backing array when
// the server reuses request headers.
func (st *stream) headerFrom(regular []hpack.HeaderField, hdr http.Header) http.Header {
	var rf requestFields
	reuse := st.c.srv.ReuseRequestHeader
	var vals []string
	if reuse {
		vals = st.reqVals
	}
	rf.fillHeader(regular, hdr, vals)
	if reuse {
		st.reqVals = rf.values
	}
	return rf.header
}

// rawHeader fills the request's Header from the fields kept for
// Server.Raw, which declined it: the request is then what it would have
// been without Raw.
func (st *stream) rawHeader() {
	delete(st.headerFrom(st.rawFields, st.req.Header), "Host")
}

// fromUpgrade makes r, the HTTP/1.1 request of an h2c Upgrade, st's
// request: it arrived whole, so the stream is half-closed (remote).
func (st *stream) fromUpgrade(r *http.Request) {
	c := st.c
	r2 := r.WithContext(st.ctx)
	r2.Proto, r2.ProtoMajor, r2.ProtoMinor = "HTTP/2.0", 2, 0
	r2.RemoteAddr = c.remoteAddr
	r2.TLS = c.tls
	h := r2.Header.Clone()
	for _, k := range []string{"Connection", "Upgrade", "Http2-Settings", "Keep-Alive", "Proxy-Connection", "Transfer-Encoding"} {
		delete(h, k)
	}
	r2.Header = h
	if r2.Body == nil {
		r2.Body = http.NoBody
	}
	st.head = r2.Method == http.MethodHead
	st.req = r2
}

// validTrailer reports whether a canonical key may be a trailer (RFC 9110
// §6.5.1: not framing, routing, or authentication fields).
func validTrailer(k string) bool {
	return httpguts.ValidTrailerHeader(k)
}

// commonNames maps the lower-case names of common fields to their
// canonical form and back, so that neither direction allocates for them.
var (
	canonOf = map[string]string{}
	lowerOf = map[string]string{}
)

func init() {
	for _, n := range []string{
		"accept", "accept-charset", "accept-encoding", "accept-language", "accept-ranges",
		"access-control-allow-credentials", "access-control-allow-headers", "access-control-allow-methods",
		"access-control-allow-origin", "access-control-expose-headers", "access-control-max-age",
		"access-control-request-headers", "access-control-request-method", "age", "allow", "alt-svc",
		"authorization", "cache-control", "content-disposition", "content-encoding", "content-language",
		"content-length", "content-location", "content-range", "content-type", "cookie", "date", "etag",
		"expect", "expires", "forwarded", "from", "grpc-encoding", "grpc-accept-encoding", "grpc-message",
		"grpc-status", "grpc-timeout", "host", "if-match", "if-modified-since", "if-none-match",
		"if-range", "if-unmodified-since", "last-modified", "link", "location", "max-forwards", "origin",
		"pragma", "priority", "proxy-authenticate", "proxy-authorization", "range", "referer", "refresh",
		"retry-after", "server", "set-cookie", "strict-transport-security", "te", "trailer", "user-agent",
		"vary", "via", "www-authenticate", "x-content-type-options", "x-forwarded-for",
		"x-forwarded-host", "x-forwarded-proto", "x-frame-options", "x-request-id", "x-real-ip",
	} {
		k := http.CanonicalHeaderKey(n)
		canonOf[n] = k
		lowerOf[k] = n
	}
}

// canonicalKey is textproto.CanonicalMIMEHeaderKey for a lower-case wire
// name, without allocating for common names.
func canonicalKey(name string) string {
	if k, ok := canonOf[name]; ok {
		return k
	}
	return textproto.CanonicalMIMEHeaderKey(name)
}

// lowerName is the wire name of a header map key.
func lowerName(k string) string {
	if n, ok := lowerOf[k]; ok {
		return n
	}
	return strings.ToLower(k)
}

// responseFieldName returns the wire name of a response header key, or
// false for a key that must not be sent on HTTP/2 (connection-specific,
// RFC 9113 §8.2.2) or is not a valid field name, or is a trailer.
func responseFieldName(k string) (string, bool) {
	if n, ok := lowerOf[k]; ok {
		if n == "te" {
			return "", false
		}
		return n, true
	}
	switch k {
	case "Connection", "Keep-Alive", "Proxy-Connection", "Transfer-Encoding", "Upgrade":
		return "", false
	}
	if strings.HasPrefix(k, http.TrailerPrefix) || !httpguts.ValidHeaderFieldName(k) {
		return "", false
	}
	return strings.ToLower(k), true
}
