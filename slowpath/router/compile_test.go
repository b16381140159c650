package router

import (
	"errors"
	"fmt"
	"net/http"
	"regexp/syntax"
	"slices"
	"strings"
	"testing"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

func TestCompileErrors(t *testing.T) {
	withFilter := func(f *pb.RouteFilter, matches ...*pb.RouteMatch) *pb.RouteRule {
		r := rule("api", matches...)
		r.Filters = []*pb.RouteFilter{f}
		return r
	}
	tests := []struct {
		name     string
		rule     *pb.RouteRule
		hosts    []string
		wantRule int // -1: route-level
		field    string
		contains string
	}{
		{
			name: "invalid path regex", rule: rule("api", prefix("/"), regex("(")),
			wantRule: 0, field: "matches[1].path", contains: `invalid regular expression "("`,
		},
		{
			name: "invalid header regex", rule: rule("api", prefix("/", headerRE("x-a", "[a-"))),
			wantRule: 0, field: "matches[0].headers[0]", contains: "invalid regular expression",
		},
		{
			name: "invalid query regex", rule: rule("api", prefix("/", queryRE("q", "a**"))),
			wantRule: 0, field: "matches[0].queryParams[0]", contains: "invalid regular expression",
		},
		{
			name: "relative prefix", rule: rule("api", prefix("api")),
			wantRule: 0, field: "matches[0].path", contains: "must start with /",
		},
		{
			name: "relative exact", rule: rule("api", exact("")),
			wantRule: 0, field: "matches[0].path", contains: "must start with /",
		},
		{
			name: "unknown path match type", rule: rule("api", pathMatch(pb.MatchType(9), "/")),
			wantRule: 0, field: "matches[0].path", contains: "unsupported match type",
		},
		{
			name: "prefix header match", rule: rule("api", prefix("/", func(m *pb.RouteMatch) {
				m.Headers = []*pb.StringMatch{{Type: pb.MatchType_MATCH_TYPE_PREFIX, Name: "x", Value: "y"}}
			})),
			wantRule: 0, field: "matches[0].headers[0]", contains: "unsupported match type",
		},
		{
			name: "bad header name", rule: rule("api", prefix("/", header("x a", "1"))),
			wantRule: 0, field: "matches[0].headers[0]", contains: "invalid header name",
		},
		{
			name: "empty query name", rule: rule("api", prefix("/", query("", "1"))),
			wantRule: 0, field: "matches[0].queryParams[0]", contains: "empty query parameter name",
		},
		{
			name: "bad method", rule: rule("api", prefix("/", method("GE T"))),
			wantRule: 0, field: "matches[0].method", contains: "invalid method",
		},
		{
			name: "unknown path modifier type", rule: withFilter(rewriteFilter("", "ReplaceSomething", "/x"), prefix("/")),
			wantRule: 0, field: "filters[0].urlRewrite.path.type", contains: `unknown path modifier type "ReplaceSomething"`,
		},
		{
			name: "ReplacePrefixMatch with an exact match", rule: withFilter(rewriteFilter("", "ReplacePrefixMatch", "/x"), prefix("/a"), exact("/b")),
			wantRule: 0, field: "filters[0].urlRewrite.path", contains: "matches[1] is not",
		},
		{
			name: "ReplacePrefixMatch with a regex match", rule: withFilter(redirectFilter(&pb.RequestRedirect{Path: &pb.PathModifier{Type: "ReplacePrefixMatch", Value: "/x"}}), regex("/a.*")),
			wantRule: 0, field: "filters[0].requestRedirect.path", contains: "needs every match of the rule to be a PathPrefix",
		},
		{
			name: "relative ReplaceFullPath", rule: withFilter(rewriteFilter("", "ReplaceFullPath", "x"), prefix("/")),
			wantRule: 0, field: "filters[0].urlRewrite.path", contains: "must start with /",
		},
		{
			name: "bad rewrite hostname", rule: withFilter(rewriteFilter("*.example.com", "", ""), prefix("/")),
			wantRule: 0, field: "filters[0].urlRewrite.hostname", contains: "invalid hostname",
		},
		{
			name: "redirect status", rule: withFilter(redirectFilter(&pb.RequestRedirect{StatusCode: 200}), prefix("/")),
			wantRule: 0, field: "filters[0].requestRedirect.statusCode", contains: "unsupported status 200",
		},
		{
			name: "redirect scheme", rule: withFilter(redirectFilter(&pb.RequestRedirect{Scheme: "ftp"}), prefix("/")),
			wantRule: 0, field: "filters[0].requestRedirect.scheme", contains: `unsupported scheme "ftp"`,
		},
		{
			name: "redirect port", rule: withFilter(redirectFilter(&pb.RequestRedirect{Port: 70000}), prefix("/")),
			wantRule: 0, field: "filters[0].requestRedirect.port", contains: "not a port",
		},
		{
			name: "mirror percent", rule: withFilter(mirrorFilter("demo/m", 101), prefix("/")),
			wantRule: 0, field: "filters[0].requestMirror.percent", contains: "above 100",
		},
		{
			name: "mirror backend", rule: withFilter(mirrorFilter("", 10), prefix("/")),
			wantRule: 0, field: "filters[0].requestMirror.backend", contains: "empty backend name",
		},
		{
			name: "empty filter", rule: withFilter(&pb.RouteFilter{}, prefix("/")),
			wantRule: 0, field: "filters[0]", contains: "empty or unknown filter",
		},
		{
			name: "bad header modifier name", rule: withFilter(reqHeaderFilter(nil, [][2]string{{"bad name", "v"}}), prefix("/")),
			wantRule: 0, field: "filters[0].requestHeaderModifier.add[0].name", contains: "invalid header name",
		},
		{
			name: "empty backend name", rule: func() *pb.RouteRule {
				r := rule("api", prefix("/"))
				r.Backends = append(r.Backends, &pb.WeightedBackend{Weight: 1})
				return r
			}(),
			wantRule: 0, field: "backends[1].backend", contains: "empty backend name",
		},
		{
			name: "redirect and rewrite", rule: func() *pb.RouteRule {
				r := rule("api", prefix("/"))
				r.Filters = []*pb.RouteFilter{redirectFilter(&pb.RequestRedirect{Scheme: "https"}), rewriteFilter("b", "", "")}
				return r
			}(),
			wantRule: 0, field: "filters", contains: "cannot both be set",
		},
		{
			name: "bad route hostname", rule: rule("api", prefix("/")), hosts: []string{"a.*.example.com"},
			wantRule: -1, field: "hostnames[0]", contains: "wildcard must be the whole first label",
		},
		{
			name: "empty route hostname", rule: rule("api", prefix("/")), hosts: []string{"ok.example.com", ""},
			wantRule: -1, field: "hostnames[1]", contains: "empty hostname",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rt, err := Compile(listener(), []*pb.Route{route("demo/web", tc.hosts, tc.rule)})
			if err == nil {
				t.Fatalf("Compile succeeded: %v", rt)
			}
			if rt != nil {
				t.Error("Compile returned a router with an error")
			}
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("error %v is not an *Error", err)
			}
			if ce.Route != "demo/web" || ce.Rule != tc.wantRule || ce.Field != tc.field {
				t.Errorf("error at route %q rule %d field %q, want demo/web %d %q (%v)", ce.Route, ce.Rule, ce.Field, tc.wantRule, tc.field, err)
			}
			if !strings.Contains(err.Error(), tc.contains) {
				t.Errorf("error %q does not contain %q", err, tc.contains)
			}
			wantPrefix := "route demo/web: " + tc.field + ": "
			if tc.wantRule >= 0 {
				wantPrefix = fmt.Sprintf("route demo/web rule %d (api): %s: ", tc.wantRule, tc.field)
			}
			if !strings.HasPrefix(err.Error(), wantPrefix) {
				t.Errorf("error %q does not start with %q", err, wantPrefix)
			}
		})
	}
}

func TestCompileErrorFormat(t *testing.T) {
	_, err := Compile(listener(), []*pb.Route{route("demo/web", nil, rule("api", prefix("/"), regex("(")))})
	const want = `route demo/web rule 0 (api): matches[1].path: invalid regular expression "(": error parsing regexp: missing closing ): ` + "`(`"
	if err == nil || err.Error() != want {
		t.Fatalf("error = %v\nwant    %s", err, want)
	}
	var se *syntax.Error
	if !errors.As(err, &se) {
		t.Error("the regexp error is not wrapped")
	}

	// Without a rule name, and every error reported, in input order.
	_, err = Compile(listener(), []*pb.Route{
		route("demo/a", nil, &pb.RouteRule{Matches: []*pb.RouteMatch{prefix("x")}}),
		route("demo/b", nil, rule("ok", prefix("/")), rule("bad", exact("y"))),
	})
	const want2 = "route demo/a rule 0: matches[0].path: PathPrefix \"x\" must start with /\n" +
		"route demo/b rule 1 (bad): matches[0].path: Exact path \"y\" must start with /"
	if err == nil || err.Error() != want2 {
		t.Fatalf("error = %v\nwant    %s", err, want2)
	}
}

func TestCompileListenerErrors(t *testing.T) {
	if _, err := Compile(nil, nil); err == nil {
		t.Error("nil listener accepted")
	}
	_, err := Compile(listener("ok.example.com", "bad host"), nil)
	if err == nil || !strings.Contains(err.Error(), "listener demo/gw/http: hostnames[1]") {
		t.Errorf("bad listener hostname: %v", err)
	}
}

// TestCompileDeterministic compiles the same input twice and checks the
// precedence order of every group is the same, and that the order does not
// depend on map iteration.
func TestCompileDeterministic(t *testing.T) {
	routes := manyRoutes(50, true)
	a := mustCompile(t, listener(), routes...)
	for range 5 {
		b := mustCompile(t, listener(), routes...)
		if d := dumpRouter(a); d != dumpRouter(b) {
			t.Fatalf("two compilations differ:\n%s\n---\n%s", d, dumpRouter(b))
		}
	}
}

// dumpRouter renders the groups of a router in a stable text form.
func dumpRouter(rt *Router) string {
	var b strings.Builder
	dump := func(g *group) {
		fmt.Fprintf(&b, "[%s]\n", g.hostname)
		for _, e := range g.entries {
			c := e.conds()
			fmt.Fprintf(&b, "  %s#%d.%d kind=%d path=%q m=%q h=%d q=%d\n", e.rule.Route, e.rule.Index, e.matchIdx, e.kind, e.path, c.method, len(c.headers), len(c.queries))
		}
	}
	for _, h := range sortedKeys(rt.exact) {
		dump(rt.exact[h])
	}
	for _, h := range sortedKeys(rt.wildcard) {
		dump(rt.wildcard[h])
	}
	if rt.any != nil {
		dump(rt.any)
	}
	return b.String()
}

func sortedKeys(m map[string]*group) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// manyRoutes builds n routes "ns/route-i" with exact hostnames
// "host-i.example.com" (or none for every tenth when mixed), each with an
// exact, a prefix and a header-matching rule.
func manyRoutes(n int, mixed bool) []*pb.Route {
	var out []*pb.Route
	for i := range n {
		var hosts []string
		if !mixed || i%10 != 0 {
			hosts = []string{fmt.Sprintf("host-%d.example.com", i)}
		}
		out = append(out, route(fmt.Sprintf("ns/route-%05d", i), hosts,
			rule("health", exact("/healthz")),
			rule("api", prefix("/api", method(http.MethodGet)), prefix("/api/v2")),
			rule("canary", prefix("/", header("x-canary", "1"))),
			rule("web", prefix("/")),
		))
	}
	return out
}

// TestCompileStorage: the rules and entries of all routes share storage
// sized for the listener's own routes only, and each rule keeps its own
// backends; routes of other listeners take no room.
func TestCompileStorage(t *testing.T) {
	other := &pb.Listener{Name: "demo/gw/other", Port: 81, Protocol: pb.Protocol_PROTOCOL_HTTP}
	var routes []*pb.Route
	for i := range 30 {
		r := route(fmt.Sprintf("ns/r%02d", i), []string{fmt.Sprintf("h%d.example.com", i)},
			rule("a", prefix("/a"), exact("/")), rule("b", prefix("/b", header("x-b", "1"))))
		r.Rules[1].Backends = append(r.Rules[1].Backends, &pb.WeightedBackend{Backend: "demo/extra", Weight: 2})
		if i%3 == 0 {
			r.Listeners = []string{other.GetName()} // not on the listener compiled
		}
		routes = append(routes, r)
	}
	tests := []struct {
		name     string
		l        *pb.Listener
		routes   int
		backends []int // per rule of each route
	}{
		{"main listener", listener(), 20, []int{1, 2}},
		{"other listener", other, 10, []int{1, 2}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rt := mustCompile(t, tc.l, routes...)
			rules := rt.Rules()
			if len(rules) != 2*tc.routes || cap(rules) != len(rules) {
				t.Fatalf("%d rules with room for %d, want %d and no more room", len(rules), cap(rules), 2*tc.routes)
			}
			seen := map[*Rule]bool{}
			for i, r := range rules {
				if seen[r] {
					t.Fatalf("rule %d (%s) shares its storage with another", i, r.Route)
				}
				seen[r] = true
				if want := tc.backends[i%2]; len(r.Backends) != want || cap(r.Backends) != want {
					t.Errorf("%s rule %d: %d backends with room for %d, want %d", r.Route, r.Index, len(r.Backends), cap(r.Backends), want)
				}
			}
			for _, r := range routes {
				if r.GetListeners()[0] != tc.l.GetName() {
					continue
				}
				host := r.GetHostnames()[0]
				if g := got(rt, req("GET", "http://"+host+"/b/x", "X-B", "1")); g != r.GetName()+":b" {
					t.Errorf("%s /b/x matched %q", host, g)
				}
				if g := got(rt, req("GET", "http://"+host+"/")); g != r.GetName()+":a" {
					t.Errorf("%s / matched %q", host, g)
				}
			}
		})
	}
}

// TestTake: take hands out consecutive parts of the store without room to
// grow into each other, and starts a new store rather than move what it
// handed out.
func TestTake(t *testing.T) {
	store := make([]int, 0, 5)
	a := take(&store, 2)
	b := take(&store, 3)
	if cap(a) != 2 || cap(b) != 3 || &store[0] != &a[0] || &store[2] != &b[0] {
		t.Fatalf("take from a store with room: caps %d, %d; want 2, 3 in the store", cap(a), cap(b))
	}
	a[0], b[0] = 1, 2
	c := take(&store, 4) // no room left
	c[0] = 3
	if a[0] != 1 || b[0] != 2 || len(c) != 4 || cap(c) != 4 {
		t.Fatalf("take without room moved or overwrote what it handed out: a %v b %v c %v", a, b, c)
	}
}

// TestCompileAllocations: compiling a route takes a few allocations of its
// own, not one per rule, entry and backend list: Compile runs on every
// snapshot, and each small allocation outlives the compile in memory.
func TestCompileAllocations(t *testing.T) {
	var routes []*pb.Route
	for i := range 1000 {
		routes = append(routes, route(fmt.Sprintf("ns/r%04d", i), []string{fmt.Sprintf("h%d.example.com", i)}, rule("r", prefix("/api"), exact("/"))))
	}
	l := listener()
	perRoute := testing.AllocsPerRun(3, func() { _, _ = Compile(l, routes) }) / float64(len(routes))
	if perRoute >= 4 {
		t.Errorf("Compile allocates %.2f times per route, want fewer than 4 (host list, group, map share)", perRoute)
	}
}
