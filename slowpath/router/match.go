package router

import (
	"cmp"
	"net/http"
	"net/url"
	"regexp"
	"strings"
)

// pathKind orders path match types by precedence: lower first.
type pathKind uint8

const (
	pathExact pathKind = iota
	pathRegex
	pathPrefix
)

// entry is one match of one rule, compiled: the unit that host groups order
// by precedence and Match tries in turn. Most matches are a path alone, so
// the other conditions sit behind a pointer that is nil then: an entry takes
// 48 bytes instead of 120, for every match of every route.
type entry struct {
	rule *Rule
	// path is the exact path, or the prefix without trailing slashes ("" for
	// "/"), or the regular expression's source (for its length).
	path     string
	cond     *conditions // nil: the path is the only condition
	matchIdx int32
	route    int32 // position of the route in Compile's input, for ties
	kind     pathKind
}

// conditions are what a match tests besides a PathPrefix or Exact path.
type conditions struct {
	re      *regexp.Regexp // the compiled path of a RegularExpression match
	method  string
	headers []headerCond
	queries []queryCond
}

// none is the conditions of an entry without any.
var none conditions

// conds returns the entry's conditions, never nil; they must not be
// modified.
func (e *entry) conds() *conditions {
	if e.cond == nil {
		return &none
	}
	return e.cond
}

type headerCond struct {
	key   string // canonical form, as net/http stores request headers
	host  bool   // the Host header, which net/http keeps in Request.Host
	value string
	re    *regexp.Regexp
}

type queryCond struct {
	name  string
	value string
	re    *regexp.Regexp
}

// compareEntries orders entries by precedence (see the package comment).
// Every pair of entries of one group differs at least in (route, rule,
// match), so the order is total and sorting is deterministic.
func compareEntries(a, b *entry) int {
	if c := cmp.Compare(a.kind, b.kind); c != 0 {
		return c
	}
	if a.kind != pathExact {
		if c := cmp.Compare(len(b.path), len(a.path)); c != 0 {
			return c
		}
	}
	ac, bc := a.conds(), b.conds()
	if am, bm := ac.method != "", bc.method != ""; am != bm {
		if am {
			return -1
		}
		return 1
	}
	return cmp.Or(
		cmp.Compare(len(bc.headers), len(ac.headers)),
		cmp.Compare(len(bc.queries), len(ac.queries)),
		cmp.Compare(a.route, b.route),
		cmp.Compare(a.rule.Index, b.rule.Index),
		cmp.Compare(a.matchIdx, b.matchIdx),
	)
}

// matches reports whether the request satisfies every condition of the
// entry, and the length of the matched prefix for a PathPrefix match.
func (e *entry) matches(r *http.Request, path string) (prefixLen int, ok bool) {
	switch e.kind {
	case pathExact:
		if path != e.path {
			return 0, false
		}
	case pathPrefix:
		if !prefixMatch(path, e.path) {
			return 0, false
		}
		prefixLen = len(e.path)
	case pathRegex:
		if !e.cond.re.MatchString(path) {
			return 0, false
		}
	}
	c := e.cond
	if c == nil {
		return prefixLen, true
	}
	if c.method != "" {
		m := r.Method
		if m == "" {
			m = http.MethodGet // net/http's meaning of an empty client method
		}
		if m != c.method {
			return 0, false
		}
	}
	for i := range c.headers {
		if !c.headers[i].matches(r) {
			return 0, false
		}
	}
	if len(c.queries) > 0 {
		raw := ""
		if r.URL != nil {
			raw = r.URL.RawQuery
		}
		for i := range c.queries {
			q := &c.queries[i]
			v, found := queryValue(raw, q.name)
			if !found || !matchValue(v, q.value, q.re) {
				return 0, false
			}
		}
	}
	return prefixLen, true
}

// prefixMatch reports whether path starts with the path segments of prefix
// (given without trailing slashes; "" is "/", which matches every path).
func prefixMatch(path, prefix string) bool {
	if prefix == "" {
		return true
	}
	return strings.HasPrefix(path, prefix) && (len(path) == len(prefix) || path[len(prefix)] == '/')
}

func (h *headerCond) matches(r *http.Request) bool {
	if h.host {
		return matchValue(r.Host, h.value, h.re)
	}
	vals := r.Header[h.key]
	switch {
	case len(vals) == 0:
		return false
	case len(vals) == 1:
		return matchValue(vals[0], h.value, h.re)
	case h.re != nil:
		return h.re.MatchString(strings.Join(vals, ","))
	}
	return joinedEquals(vals, h.value)
}

func matchValue(v, want string, re *regexp.Regexp) bool {
	if re != nil {
		return re.MatchString(v)
	}
	return v == want
}

// joinedEquals reports whether strings.Join(vals, ",") == want without
// building the joined string.
func joinedEquals(vals []string, want string) bool {
	for i, v := range vals {
		if i > 0 {
			if want == "" || want[0] != ',' {
				return false
			}
			want = want[1:]
		}
		if !strings.HasPrefix(want, v) {
			return false
		}
		want = want[len(v):]
	}
	return want == ""
}

// queryValue returns the decoded value of the first occurrence of name in a
// raw query string, decoding and skipping pairs as url.ParseQuery does. It
// allocates only to unescape.
func queryValue(raw, name string) (string, bool) {
	for raw != "" {
		var pair string
		pair, raw, _ = strings.Cut(raw, "&")
		if pair == "" || strings.Contains(pair, ";") {
			continue
		}
		k, v, _ := strings.Cut(pair, "=")
		k, ok := unescapeQuery(k)
		if !ok || k != name {
			continue
		}
		if v, ok = unescapeQuery(v); ok {
			return v, true
		}
	}
	return "", false
}

func unescapeQuery(s string) (string, bool) {
	if !strings.ContainsAny(s, "%+") {
		return s, true
	}
	u, err := url.QueryUnescape(s)
	return u, err == nil
}
