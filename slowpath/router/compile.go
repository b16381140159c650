package router

import (
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

// compiler turns routes into rules and entries; it holds what filters need
// from the listener.
type compiler struct {
	port  uint32
	https bool

	// rules, entries and backends hold the rules, entries and backends of
	// every route: Compile sizes them for the listener's routes, so a
	// listener takes three allocations for them instead of three per
	// route. Compile runs on every snapshot, over thousands of routes, and
	// each small allocation costs time, is rounded up to a size class, and
	// keeps a share of a memory page in use for as long as it lives.
	rules    []Rule
	entries  []entry
	backends []Backend
	compiled []compiledRoute
	hosts    []string
}

// take returns the next n elements of *store, with room for no more. It
// never moves elements it returned before (rules are pointed to): when
// *store has no room it starts a new one.
func take[T any](store *[]T, n int) []T {
	s := *store
	if cap(s)-len(s) < n {
		s = make([]T, 0, n)
	}
	*store = s[:len(s)+n]
	return s[len(s) : len(s)+n : len(s)+n]
}

// size makes room in the compiler's storage for the rules, matches and
// backends of the routes attached to l, but only for the entries of those
// compiled already (done): their rules stay where they were made.
func (c *compiler) size(l *pb.Listener, routes []*pb.Route, done map[*pb.Route]*compiledRoute) {
	var rules, entries, backends, compiled, hosts int
	for _, r := range routes {
		if !attached(r, l) {
			continue
		}
		if cr := done[r]; cr != nil {
			entries += len(cr.entries)
			continue
		}
		compiled++
		hosts += len(r.GetHostnames())
		rules += len(r.GetRules())
		for _, pr := range r.GetRules() {
			entries += max(len(pr.GetMatches()), 1)
			backends += len(pr.GetBackends())
		}
	}
	c.rules = make([]Rule, 0, rules)
	c.entries = make([]entry, 0, entries)
	c.backends = make([]Backend, 0, backends)
	c.compiled = make([]compiledRoute, 0, compiled)
	c.hosts = make([]string, 0, hosts)
}

// ruleErrs collects the errors of one rule.
type ruleErrs struct {
	route, name string
	index       int
	errs        []error
}

func (e *ruleErrs) add(field string, err error) {
	e.errs = append(e.errs, &Error{Route: e.route, Rule: e.index, RuleName: e.name, Field: field, Err: err})
}

func (e *ruleErrs) addf(field, format string, args ...any) {
	e.add(field, fmt.Errorf(format, args...))
}

// route compiles the rules of a route; ri is its input position. The rules
// and entries are those of the rules without errors; both are capped, so
// appending to them copies.
func (c *compiler) route(r *pb.Route, ri int) ([]Rule, []entry, []error) {
	n := 0
	for _, pr := range r.GetRules() {
		n += max(len(pr.GetMatches()), 1)
	}
	storage := take(&c.rules, len(r.GetRules()))
	entries := take(&c.entries, n)[:0]
	var errs []error
	kept := 0
	for i, pr := range r.GetRules() {
		re := ruleErrs{route: r.GetName(), name: pr.GetName(), index: i}
		rule := &storage[kept]
		before := len(entries)
		entries = c.rule(rule, r.GetName(), i, pr, &re, entries)
		if len(re.errs) > 0 {
			errs = append(errs, re.errs...)
			entries = entries[:before]
			continue
		}
		for j := before; j < len(entries); j++ {
			entries[j].route = int32(ri)
		}
		kept++
	}
	return storage[:kept:kept], entries[:len(entries):len(entries)], errs
}

// rule compiles a rule into *rule and appends its entries.
func (c *compiler) rule(rule *Rule, route string, index int, pr *pb.RouteRule, re *ruleErrs, entries []entry) []entry {
	*rule = Rule{
		Route:    route,
		Name:     pr.GetName(),
		Index:    index,
		Retry:    pr.GetRetry(),
		Timeouts: pr.GetTimeouts(),
		Policies: pr.GetPolicies(),
		Backends: take(&c.backends, len(pr.GetBackends()))[:0],
	}
	for i, b := range pr.GetBackends() {
		if b.GetBackend() == "" {
			re.addf(fmt.Sprintf("backends[%d].backend", i), "empty backend name")
			continue
		}
		rule.Backends = append(rule.Backends, Backend{Name: b.GetBackend(), Weight: b.GetWeight()})
		rule.TotalWeight += uint64(b.GetWeight())
	}

	allPrefix := true
	firstNonPrefix := -1
	if len(pr.GetMatches()) == 0 {
		entries = append(entries, entry{rule: rule, kind: pathPrefix})
	}
	for i, m := range pr.GetMatches() {
		e, ok := compileMatch(m, i, re)
		if !ok {
			continue
		}
		e.rule, e.matchIdx = rule, int32(i)
		if e.kind != pathPrefix && allPrefix {
			allPrefix, firstNonPrefix = false, i
		}
		entries = append(entries, e)
	}
	rule.Filters = c.filters(pr.GetFilters(), allPrefix, firstNonPrefix, re)
	return entries
}

// compileMatch compiles matches[mi] of a rule. Field names are only built
// for errors: Compile runs on every snapshot, for thousands of matches.
func compileMatch(m *pb.RouteMatch, mi int, re *ruleErrs) (entry, bool) {
	var e entry
	var c conditions
	ok := true
	field := func(suffix string) string { return fmt.Sprintf("matches[%d]%s", mi, suffix) }
	p := m.GetPath()
	switch p.GetType() {
	case pb.MatchType_MATCH_TYPE_UNSPECIFIED, pb.MatchType_MATCH_TYPE_PREFIX:
		v := p.GetValue()
		if v == "" {
			v = "/"
		}
		if !strings.HasPrefix(v, "/") {
			re.addf(field(".path"), "PathPrefix %q must start with /", v)
			ok = false
		}
		e.kind, e.path = pathPrefix, strings.TrimRight(v, "/")
	case pb.MatchType_MATCH_TYPE_EXACT:
		if !strings.HasPrefix(p.GetValue(), "/") {
			re.addf(field(".path"), "Exact path %q must start with /", p.GetValue())
			ok = false
		}
		e.kind, e.path = pathExact, p.GetValue()
	case pb.MatchType_MATCH_TYPE_REGEX:
		rx, err := anchored(p.GetValue())
		if err != nil {
			re.add(field(".path"), err)
			ok = false
		}
		e.kind, e.path, c.re = pathRegex, p.GetValue(), rx
	default:
		re.addf(field(".path"), "unsupported match type %v", p.GetType())
		ok = false
	}

	if meth := m.GetMethod(); meth != "" {
		if !isToken(meth) {
			re.addf(field(".method"), "invalid method %q", meth)
			ok = false
		}
		c.method = meth
	}

	for i, h := range m.GetHeaders() {
		f := func() string { return field(fmt.Sprintf(".headers[%d]", i)) }
		if !isToken(h.GetName()) {
			re.addf(f(), "invalid header name %q", h.GetName())
			ok = false
			continue
		}
		key := http.CanonicalHeaderKey(h.GetName())
		if slices.ContainsFunc(c.headers, func(h headerCond) bool { return h.key == key }) {
			continue // Gateway API: only the first entry of a name counts
		}
		value, rx, good := valueMatch(h, f, re)
		ok = ok && good
		c.headers = append(c.headers, headerCond{key: key, host: key == "Host", value: value, re: rx})
	}

	for i, q := range m.GetQueryParams() {
		f := func() string { return field(fmt.Sprintf(".queryParams[%d]", i)) }
		if q.GetName() == "" {
			re.addf(f(), "empty query parameter name")
			ok = false
			continue
		}
		if slices.ContainsFunc(c.queries, func(qc queryCond) bool { return qc.name == q.GetName() }) {
			continue
		}
		value, rx, good := valueMatch(q, f, re)
		ok = ok && good
		c.queries = append(c.queries, queryCond{name: q.GetName(), value: value, re: rx})
	}
	if c.re != nil || c.method != "" || len(c.headers) > 0 || len(c.queries) > 0 {
		e.cond = &c
	}
	return e, ok
}

// valueMatch compiles the value side of a header or query parameter match.
func valueMatch(sm *pb.StringMatch, field func() string, re *ruleErrs) (string, *regexp.Regexp, bool) {
	switch sm.GetType() {
	case pb.MatchType_MATCH_TYPE_UNSPECIFIED, pb.MatchType_MATCH_TYPE_EXACT:
		return sm.GetValue(), nil, true
	case pb.MatchType_MATCH_TYPE_REGEX:
		rx, err := anchored(sm.GetValue())
		if err != nil {
			re.add(field(), err)
			return "", nil, false
		}
		return "", rx, true
	}
	re.addf(field(), "unsupported match type %v: use Exact or RegularExpression", sm.GetType())
	return "", nil, false
}

// anchored compiles a RE2 expression that must match the whole value.
func anchored(expr string) (*regexp.Regexp, error) {
	if _, err := regexp.Compile(expr); err != nil {
		return nil, fmt.Errorf("invalid regular expression %q: %w", expr, err)
	}
	return regexp.MustCompile(`^(?:` + expr + `)$`), nil
}

func (c *compiler) filters(fs []*pb.RouteFilter, allPrefix bool, firstNonPrefix int, re *ruleErrs) Filters {
	var out Filters
	for i, f := range fs {
		field := fmt.Sprintf("filters[%d]", i)
		switch {
		case f.GetRequestHeaderModifier() != nil:
			field += ".requestHeaderModifier"
			if out.reqHeaders != nil {
				re.addf(field, "RequestHeaderModifier may appear once per rule")
			}
			out.reqHeaders = headerModifier(f.GetRequestHeaderModifier(), field, re)
		case f.GetResponseHeaderModifier() != nil:
			field += ".responseHeaderModifier"
			if out.respHeaders != nil {
				re.addf(field, "ResponseHeaderModifier may appear once per rule")
			}
			out.respHeaders = headerModifier(f.GetResponseHeaderModifier(), field, re)
		case f.GetUrlRewrite() != nil:
			field += ".urlRewrite"
			u := f.GetUrlRewrite()
			if out.rewrite != nil {
				re.addf(field, "URLRewrite may appear once per rule")
			}
			out.rewrite = &urlRewrite{hostname: u.GetHostname(), path: pathModifier(u.GetPath(), field+".path", allPrefix, firstNonPrefix, re)}
			if u.GetHostname() != "" {
				if _, err := normalizeHostname(u.GetHostname()); err != nil || isWildcard(u.GetHostname()) {
					re.addf(field+".hostname", "invalid hostname %q", u.GetHostname())
				}
			}
		case f.GetRequestRedirect() != nil:
			field += ".requestRedirect"
			if out.redirect != nil {
				re.addf(field, "RequestRedirect may appear once per rule")
			}
			out.redirect = c.redirect(f.GetRequestRedirect(), field, allPrefix, firstNonPrefix, re)
		case f.GetRequestMirror() != nil:
			field += ".requestMirror"
			m := f.GetRequestMirror()
			if m.GetBackend() == "" {
				re.addf(field+".backend", "empty backend name")
			}
			if m.GetPercent() > 100 {
				re.addf(field+".percent", "%d is above 100", m.GetPercent())
			}
			out.mirrors = append(out.mirrors, Mirror{Backend: m.GetBackend(), Percent: m.GetPercent()})
		default:
			re.addf(field, "empty or unknown filter")
		}
	}
	if out.redirect != nil && out.rewrite != nil {
		re.addf("filters", "RequestRedirect and URLRewrite cannot both be set")
	}
	return out
}

func headerModifier(hm *pb.HeaderModifier, field string, re *ruleErrs) *headerOps {
	ops := &headerOps{}
	name := func(f, n string) (string, bool) {
		if !isToken(n) {
			re.addf(f, "invalid header name %q", n)
			return "", false
		}
		return http.CanonicalHeaderKey(n), true
	}
	for i, n := range hm.GetRemove() {
		if k, ok := name(fmt.Sprintf("%s.remove[%d]", field, i), n); ok {
			ops.remove = append(ops.remove, k)
		}
	}
	for i, hv := range hm.GetSet() {
		if k, ok := name(fmt.Sprintf("%s.set[%d].name", field, i), hv.GetName()); ok {
			ops.set = append(ops.set, headerValue{key: k, value: hv.GetValue()})
		}
	}
	for i, hv := range hm.GetAdd() {
		if k, ok := name(fmt.Sprintf("%s.add[%d].name", field, i), hv.GetName()); ok {
			ops.add = append(ops.add, headerValue{key: k, value: hv.GetValue()})
		}
	}
	return ops
}

func pathModifier(pm *pb.PathModifier, field string, allPrefix bool, firstNonPrefix int, re *ruleErrs) pathMod {
	if pm == nil {
		return pathMod{}
	}
	switch pm.GetType() {
	case "ReplaceFullPath":
		v := pm.GetValue()
		if v == "" {
			v = "/"
		}
		if !strings.HasPrefix(v, "/") {
			re.addf(field, "ReplaceFullPath %q must start with /", v)
		}
		return pathMod{typ: pathReplaceFull, value: v}
	case "ReplacePrefixMatch":
		v := pm.GetValue()
		if v != "" && !strings.HasPrefix(v, "/") {
			re.addf(field, "ReplacePrefixMatch %q must start with / or be empty", v)
		}
		if !allPrefix {
			re.addf(field, "ReplacePrefixMatch needs every match of the rule to be a PathPrefix; matches[%d] is not", firstNonPrefix)
		}
		return pathMod{typ: pathReplacePrefix, value: strings.TrimRight(v, "/")}
	}
	re.addf(field+".type", "unknown path modifier type %q: use ReplaceFullPath or ReplacePrefixMatch", pm.GetType())
	return pathMod{}
}

func (c *compiler) redirect(rr *pb.RequestRedirect, field string, allPrefix bool, firstNonPrefix int, re *ruleErrs) *redirect {
	rd := &redirect{
		scheme:        rr.GetScheme(),
		hostname:      rr.GetHostname(),
		port:          rr.GetPort(),
		status:        int(rr.GetStatusCode()),
		path:          pathModifier(rr.GetPath(), field+".path", allPrefix, firstNonPrefix, re),
		listenerPort:  c.port,
		listenerHTTPS: c.https,
	}
	switch rd.scheme {
	case "", "http", "https":
	default:
		re.addf(field+".scheme", "unsupported scheme %q: use http or https", rd.scheme)
	}
	if rd.hostname != "" {
		if _, err := normalizeHostname(rd.hostname); err != nil || isWildcard(rd.hostname) {
			re.addf(field+".hostname", "invalid hostname %q", rd.hostname)
		}
	}
	if rd.port > 65535 {
		re.addf(field+".port", "%d is not a port", rd.port)
	}
	switch rd.status {
	case 0:
		rd.status = http.StatusFound
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
	default:
		re.addf(field+".statusCode", "unsupported status %d: use 301, 302, 303, 307 or 308", rd.status)
	}
	return rd
}

// isToken reports whether s is an RFC 9110 token (header names, methods).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return true
}
