package router

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

// refResult identifies what a request matched.
type refResult struct {
	route     string
	rule      int
	match     int
	prefixLen int
}

// refMatch is a deliberately naive model of the matching semantics, written
// from the package comment without host groups or pre-sorting: it scores
// every match of every attached route against the request and keeps the best
// by the full precedence key, hostname specificity first. Match must agree
// with it on every request.
func refMatch(l *pb.Listener, routes []*pb.Route, r *http.Request) (refResult, bool) {
	host := r.Host
	if i := strings.LastIndex(host, ":"); i >= 0 && !strings.Contains(host[i:], "]") {
		host = host[:i]
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	norm := func(hs []string) []string {
		if len(hs) == 0 {
			return []string{""}
		}
		var out []string
		for _, h := range hs {
			out = append(out, strings.ToLower(strings.TrimSuffix(h, ".")))
		}
		return out
	}
	// score of a hostname pattern accepting host: characters of an exact
	// hostname, then characters of the hostname; "" (any) scores lowest.
	score := func(p string) [2]int {
		if p == "" {
			return [2]int{0, 0}
		}
		if strings.HasPrefix(p, "*.") {
			return [2]int{0, len(p)}
		}
		return [2]int{len(p), len(p)}
	}
	accepts := func(p string) bool {
		switch {
		case p == "":
			return true
		case strings.HasPrefix(p, "*."):
			return len(host) > len(p)-1 && strings.HasSuffix(host, p[1:])
		}
		return p == host
	}

	type key struct {
		host                 [2]int
		kind, length         int
		method               bool
		headers, queries, ri int
		rule, match          int
	}
	better := func(a, b key) bool { // a before b
		if a.host != b.host {
			return a.host[0] > b.host[0] || a.host[0] == b.host[0] && a.host[1] > b.host[1]
		}
		if a.kind != b.kind {
			return a.kind < b.kind
		}
		if a.length != b.length {
			return a.length > b.length
		}
		if a.method != b.method {
			return a.method
		}
		if a.headers != b.headers {
			return a.headers > b.headers
		}
		if a.queries != b.queries {
			return a.queries > b.queries
		}
		if a.ri != b.ri {
			return a.ri < b.ri
		}
		if a.rule != b.rule {
			return a.rule < b.rule
		}
		return a.match < b.match
	}

	var best *key
	var res refResult
	for ri, rt := range routes {
		if rt == nil || rt.Kind != pb.RouteKind_ROUTE_KIND_HTTP || !slices.Contains(rt.Listeners, l.Name) {
			continue
		}
		hs, found := [2]int{}, false
		for _, a := range norm(l.Hostnames) {
			for _, b := range norm(rt.Hostnames) {
				if !accepts(a) || !accepts(b) {
					continue
				}
				for _, s := range [][2]int{score(a), score(b)} {
					if !found || s[0] > hs[0] || s[0] == hs[0] && s[1] > hs[1] {
						hs, found = s, true
					}
				}
			}
		}
		if !found {
			continue
		}
		for rj, ru := range rt.Rules {
			matches := ru.Matches
			if len(matches) == 0 {
				matches = []*pb.RouteMatch{{Path: &pb.StringMatch{Type: pb.MatchType_MATCH_TYPE_PREFIX, Value: "/"}}}
			}
			for mk, m := range matches {
				k, plen, ok := refCond(m, r)
				if !ok {
					continue
				}
				k2 := key{host: hs, kind: k.kind, length: k.length, method: k.method, headers: k.headers, queries: k.queries, ri: ri, rule: rj, match: mk}
				if best == nil || better(k2, *best) {
					best = &k2
					res = refResult{route: rt.Name, rule: rj, match: mk, prefixLen: plen}
				}
			}
		}
	}
	return res, best != nil
}

type refKey struct {
	kind, length     int
	method           bool
	headers, queries int
}

func refCond(m *pb.RouteMatch, r *http.Request) (refKey, int, bool) {
	var k refKey
	path := r.URL.Path
	if path == "" {
		path = "/"
	}
	full := func(expr, s string) bool { return regexp.MustCompile("^(?:" + expr + ")$").MatchString(s) }
	plen := 0
	v := m.GetPath().GetValue()
	switch m.GetPath().GetType() {
	case pb.MatchType_MATCH_TYPE_EXACT:
		if path != v {
			return k, 0, false
		}
	case pb.MatchType_MATCH_TYPE_REGEX:
		if !full(v, path) {
			return k, 0, false
		}
		k.kind, k.length = 1, len(v)
	default:
		p := strings.TrimRight(v, "/")
		if p != "" && path != p && !strings.HasPrefix(path, p+"/") {
			return k, 0, false
		}
		k.kind, k.length, plen = 2, len(p), len(p)
	}
	if m.Method != "" {
		if r.Method != m.Method {
			return k, 0, false
		}
		k.method = true
	}
	seen := map[string]bool{}
	for _, h := range m.Headers {
		name := strings.ToLower(h.Name)
		if seen[name] {
			continue
		}
		seen[name] = true
		k.headers++
		var val string
		if name == "host" {
			val = r.Host
		} else {
			vals := r.Header.Values(name)
			if len(vals) == 0 {
				return k, 0, false
			}
			val = strings.Join(vals, ",")
		}
		if h.Type == pb.MatchType_MATCH_TYPE_REGEX && !full(h.Value, val) || h.Type != pb.MatchType_MATCH_TYPE_REGEX && val != h.Value {
			return k, 0, false
		}
	}
	clear(seen)
	q, _ := url.ParseQuery(r.URL.RawQuery)
	for _, qm := range m.QueryParams {
		if seen[qm.Name] {
			continue
		}
		seen[qm.Name] = true
		k.queries++
		vals, ok := q[qm.Name]
		if !ok {
			return k, 0, false
		}
		if qm.Type == pb.MatchType_MATCH_TYPE_REGEX && !full(qm.Value, vals[0]) || qm.Type != pb.MatchType_MATCH_TYPE_REGEX && vals[0] != qm.Value {
			return k, 0, false
		}
	}
	return k, plen, true
}

func pick[T any](rng *rand.Rand, xs ...T) T { return xs[rng.IntN(len(xs))] }

var (
	refHosts   = []string{"a.example.com", "b.example.com", "*.example.com", "*.b.example.com", "x.a.example.com", "*.com", "other.org", "A.Example.com."}
	refReqHost = []string{"a.example.com", "b.example.com", "c.b.example.com", "x.a.example.com", "example.com", "other.org", "A.EXAMPLE.COM:8080", "b.example.com.", "zz.com", "[::1]:80", ""}
	refPaths   = []string{"/", "/a", "/a/", "/a/b", "/a/b/c", "/ab", "/b", "/abc", "", "*"}
)

// randomRoutes builds routes over a small vocabulary so that many of them
// overlap and precedence decides.
func randomRoutes(rng *rand.Rand, n int) []*pb.Route {
	var out []*pb.Route
	for i := range n {
		var hosts []string
		for range rng.IntN(3) {
			hosts = append(hosts, pick(rng, refHosts...))
		}
		var rules []*pb.RouteRule
		for j := range 1 + rng.IntN(3) {
			var matches []*pb.RouteMatch
			for range rng.IntN(3) {
				matches = append(matches, randomMatch(rng))
			}
			rules = append(rules, rule(fmt.Sprintf("r%d", j), matches...))
		}
		out = append(out, route(fmt.Sprintf("ns/route-%d", i), hosts, rules...))
	}
	return out
}

func randomMatch(rng *rand.Rand) *pb.RouteMatch {
	var opts []matchOpt
	switch rng.IntN(4) {
	case 0:
		opts = append(opts, method(pick(rng, "GET", "POST")))
	}
	for range rng.IntN(3) {
		if rng.IntN(3) == 0 {
			opts = append(opts, headerRE(pick(rng, "x-a", "X-B"), pick(rng, "[12]", "1|2,1", ".*")))
		} else {
			opts = append(opts, header(pick(rng, "x-a", "X-B", "host"), pick(rng, "1", "2", "1,2", "a.example.com")))
		}
	}
	for range rng.IntN(3) {
		if rng.IntN(3) == 0 {
			opts = append(opts, queryRE(pick(rng, "q", "r"), pick(rng, "[12]", "a b")))
		} else {
			opts = append(opts, query(pick(rng, "q", "r"), pick(rng, "1", "2", "a b")))
		}
	}
	switch rng.IntN(3) {
	case 0:
		return exact(pick(rng, "/", "/a", "/a/b", "/ab"), opts...)
	case 1:
		return regex(pick(rng, "/a.*", "/[ab]+", "/a/b", ".*", "/a|/b"), opts...)
	}
	return prefix(pick(rng, "/", "/a", "/a/", "/a/b", "/ab", "/b"), opts...)
}

func randomRequest(rng *rand.Rand) *http.Request {
	r := &http.Request{
		Method: pick(rng, "GET", "POST"),
		Host:   pick(rng, refReqHost...),
		URL:    &url.URL{Path: pick(rng, refPaths...)},
		Header: http.Header{},
	}
	for range rng.IntN(4) {
		r.Header.Add(pick(rng, "X-A", "X-B"), pick(rng, "1", "2"))
	}
	var q []string
	for range rng.IntN(4) {
		q = append(q, pick(rng, "q", "r", "q;x")+"="+pick(rng, "1", "2", "a+b", "a%20b", "%zz"))
	}
	r.URL.RawQuery = strings.Join(q, "&")
	return r
}

// TestMatchAgainstReference compares Match with refMatch over random route
// sets and requests (fixed seeds, so failures reproduce).
func TestMatchAgainstReference(t *testing.T) {
	listeners := [][]string{nil, {"*.example.com"}, {"a.example.com", "other.org"}, {"*.com"}}
	for seed := range uint64(40) {
		t.Run(fmt.Sprintf("seed-%d", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 1))
			l := listener(listeners[seed%uint64(len(listeners))]...)
			routes := randomRoutes(rng, 2+rng.IntN(8))
			rt := mustCompile(t, l, routes...)
			for range 300 {
				r := randomRequest(rng)
				compareWithReference(t, rt, l, routes, r)
			}
		})
	}
}

func compareWithReference(t *testing.T, rt *Router, l *pb.Listener, routes []*pb.Route, r *http.Request) {
	t.Helper()
	want, wantOK := refMatch(l, routes, r)
	m, ok := rt.Match(r)
	var gotRes refResult
	if ok {
		gotRes = refResult{route: m.Rule.Route, rule: m.Rule.Index, match: m.MatchIndex, prefixLen: m.PrefixLen}
	}
	if ok != wantOK || gotRes != want {
		t.Fatalf("%s Host %q path %q query %q headers %v:\nMatch     %+v %v\nreference %+v %v", r.Method, r.Host, r.URL.Path, r.URL.RawQuery, r.Header, gotRes, ok, want, wantOK)
	}
}

// fuzzRoutes is a fixed route set for FuzzMatch: random routes plus rules
// with rewrite and redirect filters.
func fuzzRoutes() (*pb.Listener, []*pb.Route) {
	rng := rand.New(rand.NewPCG(7, 7))
	routes := randomRoutes(rng, 12)
	rw := rule("rewrite", prefix("/a"), prefix("/rw/"))
	rw.Filters = []*pb.RouteFilter{rewriteFilter("b.internal", "ReplacePrefixMatch", "/x")}
	rd := rule("redirect", prefix("/"))
	rd.Filters = []*pb.RouteFilter{redirectFilter(&pb.RequestRedirect{Scheme: "https", Path: &pb.PathModifier{Type: "ReplacePrefixMatch", Value: ""}})}
	routes = append(routes, route("ns/filters", []string{"*.example.com", "a.example.com"}, rw, rd))
	return listener(), routes
}

func FuzzMatch(f *testing.F) {
	for _, s := range [][3]string{
		{"a.example.com", "/a/b", "q=1"},
		{"A.Example.COM.:8080", "/rw/x", ""},
		{"[::1]:80", "*", "q=%zz&r=a+b"},
		{"", "", ""},
		{"x.a.example.com", "/a/", "q;=1"},
		{"..example.com", "//a", "&&=&"},
		{"a.example.com:", "/\x00", "q=1&q=2"},
	} {
		f.Add(s[0], s[1], s[2])
	}
	l, routes := fuzzRoutes()
	rt, err := Compile(l, routes)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, host, path, rawQuery string) {
		r := &http.Request{Method: "GET", Host: host, URL: &url.URL{Path: path, RawQuery: rawQuery}, Header: http.Header{"X-A": {"1"}}}
		compareWithReference(t, rt, l, routes, r)
		m, ok := rt.Match(r)
		if !ok {
			return
		}
		if m.PrefixLen > len(path) && path != "" {
			t.Fatalf("PrefixLen %d beyond path %q", m.PrefixLen, path)
		}
		p, _, _ := m.Rule.Filters.Rewrite(r, m)
		if !strings.HasPrefix(p, "/") && p != path {
			t.Fatalf("Rewrite produced %q from %q", p, path)
		}
		if loc, _, ok := m.Rule.Filters.Redirect(r, m); ok {
			if _, err := url.Parse(loc); err != nil && validHost(host) {
				t.Fatalf("Redirect Location %q does not parse: %v", loc, err)
			}
		}
	})
}

// validHost reports whether a Host value is one a server would accept, so a
// Location built from it must parse.
func validHost(h string) bool {
	_, err := url.Parse("http://" + h + "/")
	return err == nil && !strings.ContainsAny(h, "/?#@ %")
}
