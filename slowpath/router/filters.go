package router

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// Filters are the compiled filters of a rule. The zero value has none. The
// methods may be called concurrently.
type Filters struct {
	reqHeaders  *headerOps
	respHeaders *headerOps
	rewrite     *urlRewrite
	redirect    *redirect
	mirrors     []Mirror
}

// Mirror is a RequestMirror filter: Percent (0 to 100, as the snapshot gives
// it) of the requests are copied to Backend ("<namespace>/<name>").
type Mirror struct {
	Backend string
	Percent uint32
}

type headerOps struct {
	remove []string // canonical keys
	set    []headerValue
	add    []headerValue
}

type headerValue struct {
	key   string // canonical
	value string
}

type pathModType uint8

const (
	pathKeep pathModType = iota
	pathReplaceFull
	pathReplacePrefix
)

type pathMod struct {
	typ   pathModType
	value string // ReplacePrefixMatch: without trailing slashes
}

type urlRewrite struct {
	hostname string
	path     pathMod
}

type redirect struct {
	scheme   string // "" keeps the request's
	hostname string
	port     uint32
	path     pathMod
	status   int

	// From the listener: its port, and whether it speaks TLS.
	listenerPort  uint32
	listenerHTTPS bool
}

// None reports whether the rule has no filter at all.
func (f *Filters) None() bool {
	return f.reqHeaders == nil && f.respHeaders == nil && f.rewrite == nil && f.redirect == nil && len(f.mirrors) == 0
}

// HasRedirect reports whether the rule answers with a redirect (then its
// backends are not used).
func (f *Filters) HasRedirect() bool { return f.redirect != nil }

// HasRewrite reports whether the rule has a URLRewrite filter.
func (f *Filters) HasRewrite() bool { return f.rewrite != nil }

// Mirrors returns the RequestMirror filters in rule order. The slice is
// shared and must not be modified.
func (f *Filters) Mirrors() []Mirror { return f.mirrors }

// ApplyRequestHeaders applies the RequestHeaderModifier filter to h: remove,
// then set (replacing every value), then add (appending). A "Host" entry ends
// up in h; ApplyRequest moves it into Request.Host, where net/http reads it.
func (f *Filters) ApplyRequestHeaders(h http.Header) { f.reqHeaders.apply(h) }

// ApplyResponseHeaders applies the ResponseHeaderModifier filter to h, in the
// same order as ApplyRequestHeaders.
func (f *Filters) ApplyResponseHeaders(h http.Header) { f.respHeaders.apply(h) }

// ApplyRequest applies the RequestHeaderModifier filter to r.Header and then
// moves a "Host" header it produced into r.Host, since net/http sends
// r.Host and ignores r.Header["Host"].
func (f *Filters) ApplyRequest(r *http.Request) {
	if f.reqHeaders == nil {
		return
	}
	if r.Header == nil {
		r.Header = http.Header{}
	}
	f.reqHeaders.apply(r.Header)
	if v := r.Header["Host"]; len(v) > 0 {
		r.Host = v[len(v)-1]
		delete(r.Header, "Host")
	}
}

func (o *headerOps) apply(h http.Header) {
	if o == nil || h == nil {
		return
	}
	for _, k := range o.remove {
		delete(h, k)
	}
	for _, s := range o.set {
		h[s.key] = []string{s.value}
	}
	for _, a := range o.add {
		h[a.key] = append(h[a.key], a.value)
	}
}

// Rewrite applies the URLRewrite filter: it returns the path (decoded, as
// URL.Path) and the host to forward, and whether the rule rewrites either.
// Without a rewrite it returns r.URL.Path and r.Host unchanged. m must be
// the Match that selected this rule for r (its PrefixLen locates the prefix
// that ReplacePrefixMatch replaces).
func (f *Filters) Rewrite(r *http.Request, m Match) (path, host string, changed bool) {
	path, host = requestPath(r), r.Host
	rw := f.rewrite
	if rw == nil {
		return path, host, false
	}
	if rw.hostname != "" {
		host = rw.hostname
		changed = true
	}
	if p, ok := rw.path.apply(path, m.PrefixLen); ok {
		path = p
		changed = true
	}
	return path, host, changed
}

// Redirect answers the RequestRedirect filter: the Location (absolute URL,
// path escaped, query string as received) and the status code. ok is false
// when the rule has no redirect. m must be the Match that selected this rule
// for r.
func (f *Filters) Redirect(r *http.Request, m Match) (location string, status int, ok bool) {
	rd := f.redirect
	if rd == nil {
		return "", 0, false
	}
	scheme := rd.scheme
	if scheme == "" {
		scheme = "http"
		if r.TLS != nil || rd.listenerHTTPS {
			scheme = "https"
		}
	}
	host := rd.hostname
	if host == "" {
		host = stripPort(r.Host)
	}
	if strings.IndexByte(host, ':') >= 0 && !strings.HasPrefix(host, "[") {
		host = "[" + host + "]" // a bare IPv6 literal
	}
	port := rd.port
	switch {
	case port != 0:
	case rd.scheme != "":
		port = wellKnownPort(rd.scheme)
	default:
		port = rd.listenerPort
		if port == 0 {
			port = hostPort(r.Host)
		}
	}

	var b strings.Builder
	b.WriteString(scheme)
	b.WriteString("://")
	b.WriteString(host)
	if port != 0 && port != wellKnownPort(scheme) {
		b.WriteByte(':')
		b.WriteString(strconv.FormatUint(uint64(port), 10))
	}
	p, changed := rd.path.apply(requestPath(r), m.PrefixLen)
	switch {
	case changed:
		p = (&url.URL{Path: p}).EscapedPath()
	case r.URL != nil && r.URL.Path != "":
		p = r.URL.EscapedPath() // as received, RawPath included
	}
	b.WriteString(p)
	if r.URL != nil && r.URL.RawQuery != "" {
		b.WriteByte('?')
		b.WriteString(r.URL.RawQuery)
	}
	return b.String(), rd.status, true
}

// apply rewrites path; prefixLen is the length of the matched prefix.
func (p pathMod) apply(path string, prefixLen int) (string, bool) {
	switch p.typ {
	case pathReplaceFull:
		return p.value, true
	case pathReplacePrefix:
		return replacePrefix(path, prefixLen, p.value), true
	}
	return path, false
}

// replacePrefix replaces the first n bytes of path, a prefix ending on a
// segment boundary, by repl (given without trailing slashes), keeping the
// rest of the path from its "/" on; the result is never empty.
func replacePrefix(path string, n int, repl string) string {
	n = min(max(n, 0), len(path))
	out := repl + path[n:]
	if out == "" || out[0] != '/' {
		out = "/" + out
	}
	return out
}

// requestPath is the path Match compares: URL.Path, "/" when empty.
func requestPath(r *http.Request) string {
	if r.URL == nil || r.URL.Path == "" {
		return "/"
	}
	return r.URL.Path
}

func wellKnownPort(scheme string) uint32 {
	switch scheme {
	case "http":
		return 80
	case "https":
		return 443
	}
	return 0
}

// hostPort returns the port of a Host value, or 0.
func hostPort(host string) uint32 {
	i := strings.LastIndexByte(host, ':')
	if i < 0 || strings.IndexByte(host[i:], ']') >= 0 {
		return 0
	}
	p, err := strconv.ParseUint(host[i+1:], 10, 16)
	if err != nil {
		return 0
	}
	return uint32(p)
}
