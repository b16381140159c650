package router

import (
	"net/http"
	"testing"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

// matchCase is one request and the "<route>:<rule>" it must select ("" for
// no match).
type matchCase struct {
	name string
	req  *http.Request
	want string
}

func runMatches(t *testing.T, rt *Router, cases []matchCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if g := got(rt, tc.req); g != tc.want {
				t.Errorf("%s %s (Host %q): matched %q, want %q", tc.req.Method, tc.req.URL, tc.req.Host, g, tc.want)
			}
		})
	}
}

// TestPrecedence has one case per precedence rule; in each the winner is
// listed after the loser, so a router that took the first match, or ignored
// the rule under test, fails.
func TestPrecedence(t *testing.T) {
	tests := []struct {
		name   string
		routes []*pb.Route
		req    *http.Request
		want   string
	}{
		{
			name: "exact over a prefix of the same length",
			routes: []*pb.Route{route("a/r", nil,
				rule("prefix", prefix("/foo")),
				rule("exact", exact("/foo")))},
			req: req("GET", "http://h/foo"), want: "a/r:exact",
		},
		{
			name: "exact over a longer regular expression",
			routes: []*pb.Route{route("a/r", nil,
				rule("regex", regex("/fo+.*")),
				rule("exact", exact("/foo")))},
			req: req("GET", "http://h/foo"), want: "a/r:exact",
		},
		{
			name: "regular expression over a longer prefix",
			routes: []*pb.Route{route("a/r", nil,
				rule("prefix", prefix("/foo/bar/baz")),
				rule("regex", regex("/foo/.*")))},
			req: req("GET", "http://h/foo/bar/baz"), want: "a/r:regex",
		},
		{
			name: "longer regular expression first",
			routes: []*pb.Route{route("a/r", nil,
				rule("short", regex("/.*")),
				rule("long", regex("/foo/.*")))},
			req: req("GET", "http://h/foo/x"), want: "a/r:long",
		},
		{
			name: "longest prefix",
			routes: []*pb.Route{route("a/r", nil,
				rule("short", prefix("/foo")),
				rule("long", prefix("/foo/bar")))},
			req: req("GET", "http://h/foo/bar/x"), want: "a/r:long",
		},
		{
			name: "longest prefix across routes beats route order",
			routes: []*pb.Route{
				route("a/first", nil, rule("short", prefix("/"))),
				route("b/second", nil, rule("long", prefix("/api"))),
			},
			req: req("GET", "http://h/api/v1"), want: "b/second:long",
		},
		{
			name: "a trailing slash does not lengthen a prefix",
			routes: []*pb.Route{
				route("a/first", nil, rule("plain", prefix("/foo"))),
				route("b/second", nil, rule("slash", prefix("/foo/"))),
			},
			req: req("GET", "http://h/foo/x"), want: "a/first:plain",
		},
		{
			name: "prefix length over method",
			routes: []*pb.Route{route("a/r", nil,
				rule("method", prefix("/a", method("GET"))),
				rule("longer", prefix("/a/b")))},
			req: req("GET", "http://h/a/b"), want: "a/r:longer",
		},
		{
			name: "method over more headers",
			routes: []*pb.Route{route("a/r", nil,
				rule("headers", prefix("/a", header("x-a", "1"), header("x-b", "1"))),
				rule("method", prefix("/a", method("GET"))))},
			req: req("GET", "http://h/a", "X-A", "1", "X-B", "1"), want: "a/r:method",
		},
		{
			name: "more headers",
			routes: []*pb.Route{route("a/r", nil,
				rule("one", prefix("/a", header("x-a", "1"))),
				rule("two", prefix("/a", header("x-a", "1"), header("x-b", "1"))))},
			req: req("GET", "http://h/a", "X-A", "1", "X-B", "1"), want: "a/r:two",
		},
		{
			name: "headers over more query parameters",
			routes: []*pb.Route{route("a/r", nil,
				rule("queries", prefix("/a", query("p", "1"), query("q", "1"))),
				rule("header", prefix("/a", header("x-a", "1"))))},
			req: req("GET", "http://h/a?p=1&q=1", "X-A", "1"), want: "a/r:header",
		},
		{
			name: "more query parameters",
			routes: []*pb.Route{route("a/r", nil,
				rule("one", prefix("/a", query("p", "1"))),
				rule("two", prefix("/a", query("p", "1"), query("q", "1"))))},
			req: req("GET", "http://h/a?p=1&q=1"), want: "a/r:two",
		},
		{
			name: "duplicate header entries count once",
			routes: []*pb.Route{route("a/r", nil,
				rule("one", prefix("/a", header("x-b", "1"))),
				rule("dup", prefix("/a", header("x-a", "1"), header("X-A", "1"))))},
			req: req("GET", "http://h/a", "X-A", "1", "X-B", "1"), want: "a/r:one",
		},
		{
			name: "duplicate query entries count once",
			routes: []*pb.Route{route("a/r", nil,
				rule("one", prefix("/a", query("b", "1"))),
				rule("dup", prefix("/a", query("a", "1"), query("a", "1"))))},
			req: req("GET", "http://h/a?a=1&b=1"), want: "a/r:one",
		},
		{
			name: "route order breaks ties (input order, not name order)",
			routes: []*pb.Route{
				route("z/given-first", nil, rule("r", prefix("/a"))),
				route("a/given-second", nil, rule("r", prefix("/a"))),
			},
			req: req("GET", "http://h/a"), want: "z/given-first:r",
		},
		{
			name: "rule order breaks ties within a route",
			routes: []*pb.Route{route("a/r", nil,
				rule("first", prefix("/a")),
				rule("second", prefix("/a")))},
			req: req("GET", "http://h/a"), want: "a/r:first",
		},
		{
			name: "precedence is per match, not per rule",
			routes: []*pb.Route{route("a/r", nil,
				rule("prefix-root", prefix("/")),
				rule("mixed", prefix("/zzz"), exact("/x")))},
			req: req("GET", "http://h/x"), want: "a/r:mixed",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rt := mustCompile(t, listener(), tc.routes...)
			if g := got(rt, tc.req); g != tc.want {
				t.Fatalf("matched %q, want %q", g, tc.want)
			}
		})
	}
}

func TestMatchIndex(t *testing.T) {
	rt := mustCompile(t, listener(), route("a/r", nil, rule("r",
		prefix("/", header("x-a", "1")),
		prefix("/", header("x-b", "1")),
		exact("/x"))))
	tests := []struct {
		name string
		req  *http.Request
		want int
	}{
		{"first of equal matches", req("GET", "http://h/y", "X-A", "1", "X-B", "1"), 0},
		{"second", req("GET", "http://h/y", "X-B", "1"), 1},
		{"exact match wins inside the rule", req("GET", "http://h/x", "X-A", "1"), 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, ok := rt.Match(tc.req)
			if !ok || m.MatchIndex != tc.want {
				t.Fatalf("Match = %+v, %v; want MatchIndex %d", m, ok, tc.want)
			}
		})
	}
}

func TestHostnames(t *testing.T) {
	rt := mustCompile(t, listener(),
		route("a/any", nil, rule("r", prefix("/"))),
		route("b/wild", []string{"*.example.com"}, rule("r", prefix("/"))),
		route("c/longwild", []string{"*.b.example.com"}, rule("r", prefix("/"))),
		route("d/exact", []string{"a.example.com", "x.b.example.com"}, rule("r", prefix("/"))),
		route("e/upper", []string{"Upper.Example.Org."}, rule("r", prefix("/"))),
	)
	runMatches(t, rt, []matchCase{
		{"exact beats wildcard", req("GET", "http://a.example.com/"), "d/exact:r"},
		{"exact beats a longer wildcard", req("GET", "http://x.b.example.com/"), "d/exact:r"},
		{"wildcard", req("GET", "http://z.example.com/"), "b/wild:r"},
		{"wildcard spans labels", req("GET", "http://z.y.example.com/"), "b/wild:r"},
		{"longer wildcard beats shorter", req("GET", "http://y.b.example.com/"), "c/longwild:r"},
		{"longer wildcard over several labels", req("GET", "http://z.y.b.example.com/"), "c/longwild:r"},
		{"wildcard does not take the bare domain", req("GET", "http://example.com/"), "a/any:r"},
		{"wildcard does not take the bare suffix of the longer", req("GET", "http://b.example.com/"), "b/wild:r"},
		{"no hostname is the last resort", req("GET", "http://other.org/"), "a/any:r"},
		{"host case ignored", req("GET", "http://A.Example.COM/"), "d/exact:r"},
		{"route hostname case and dot ignored", req("GET", "http://upper.example.org/"), "e/upper:r"},
		{"trailing dot ignored", req("GET", "http://a.example.com./"), "d/exact:r"},
		{"port ignored", req("GET", "http://a.example.com:8080/"), "d/exact:r"},
		{"port and trailing dot", req("GET", "http://A.example.com.:8080/"), "d/exact:r"},
		{"wildcard with port", req("GET", "http://q.example.com:8080/"), "b/wild:r"},
		{"IPv6 literal", req("GET", "http://[::1]:8080/"), "a/any:r"},
		{"a dot-led host is no wildcard label", req("GET", "http://.example.com/"), "a/any:r"},
	})
}

// TestHostFallback: hostname precedence comes before path precedence, and a
// host group without a matching rule falls back to less specific ones.
func TestHostFallback(t *testing.T) {
	rt := mustCompile(t, listener(),
		route("a/any", nil, rule("exact-x", exact("/x")), rule("root", prefix("/"))),
		route("b/wild", []string{"*.example.com"}, rule("exact-x", exact("/x")), rule("api", prefix("/api"))),
		route("c/exact", []string{"a.example.com"}, rule("root", prefix("/", method("POST"))), rule("web", prefix("/web"))),
	)
	runMatches(t, rt, []matchCase{
		{"exact host's prefix beats wildcard host's exact path", req("POST", "http://a.example.com/x"), "c/exact:root"},
		{"exact host without a matching rule falls back to the wildcard", req("GET", "http://a.example.com/x"), "b/wild:exact-x"},
		{"then to the wildcard's prefix", req("GET", "http://a.example.com/api/1"), "b/wild:api"},
		{"then to routes without hostname", req("GET", "http://a.example.com/other"), "a/any:root"},
		{"exact host's own rule", req("GET", "http://a.example.com/web"), "c/exact:web"},
		{"wildcard host", req("GET", "http://b.example.com/api"), "b/wild:api"},
		{"wildcard falls back", req("GET", "http://b.example.com/web"), "a/any:root"},
	})

	noAny := mustCompile(t, listener(), route("b/wild", []string{"*.example.com"}, rule("api", prefix("/api"))))
	runMatches(t, noAny, []matchCase{
		{"nothing matches: 404", req("GET", "http://a.example.com/web"), ""},
		{"other host: 404", req("GET", "http://other.org/api"), ""},
	})
}

func TestListenerHostnames(t *testing.T) {
	tests := []struct {
		name      string
		listener  []string
		route     []string
		match     []string // hosts served
		noMatch   []string // hosts not served
		groupHost string   // Match.Hostname for the first of match
	}{
		{
			name: "route without hostnames takes the listener's", listener: []string{"*.example.com"},
			match: []string{"a.example.com", "a.b.example.com"}, noMatch: []string{"example.com", "other.org"}, groupHost: "*.example.com",
		},
		{
			name: "exact route under a wildcard listener", listener: []string{"*.example.com"}, route: []string{"a.example.com"},
			match: []string{"a.example.com"}, noMatch: []string{"b.example.com"}, groupHost: "a.example.com",
		},
		{
			name: "wildcard route under an exact listener narrows to the listener's", listener: []string{"a.example.com"}, route: []string{"*.example.com"},
			match: []string{"a.example.com"}, noMatch: []string{"b.example.com"}, groupHost: "a.example.com",
		},
		{
			name: "wider route wildcard narrows to the listener's", listener: []string{"*.example.com"}, route: []string{"*.com"},
			match: []string{"a.example.com"}, noMatch: []string{"a.other.com", "example.com"}, groupHost: "*.example.com",
		},
		{
			name: "narrower route wildcard stays", listener: []string{"*.example.com"}, route: []string{"*.b.example.com"},
			match: []string{"a.b.example.com"}, noMatch: []string{"a.example.com", "b.example.com"}, groupHost: "*.b.example.com",
		},
		{
			name: "route hostnames outside the listener's are dropped", listener: []string{"*.example.com"}, route: []string{"a.example.com", "a.other.org"},
			match: []string{"a.example.com"}, noMatch: []string{"a.other.org"}, groupHost: "a.example.com",
		},
		{
			name: "no intersection serves nothing", listener: []string{"*.example.com"}, route: []string{"other.org"},
			noMatch: []string{"other.org", "a.example.com"},
		},
		{
			name: "several listener hostnames", listener: []string{"a.example.com", "b.example.org"},
			match: []string{"a.example.com", "b.example.org"}, noMatch: []string{"c.example.com"}, groupHost: "a.example.com",
		},
		{
			name: "listener without hostnames takes the route's", route: []string{"*.example.com"},
			match: []string{"a.example.com"}, noMatch: []string{"other.org"}, groupHost: "*.example.com",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rt := mustCompile(t, listener(tc.listener...), route("a/r", tc.route, rule("r", prefix("/"))))
			for i, h := range tc.match {
				m, ok := rt.Match(req("GET", "http://"+h+"/"))
				if !ok {
					t.Errorf("%s: no match, want one", h)
					continue
				}
				if i == 0 && m.Hostname != tc.groupHost {
					t.Errorf("%s: Hostname %q, want %q", h, m.Hostname, tc.groupHost)
				}
			}
			for _, h := range tc.noMatch {
				if m, ok := rt.Match(req("GET", "http://"+h+"/")); ok {
					t.Errorf("%s: matched %+v, want none", h, m)
				}
			}
		})
	}
}

func TestAttachment(t *testing.T) {
	other := route("a/other-listener", nil, rule("r", prefix("/")))
	other.Listeners = []string{"demo/gw/https"}
	tls := route("a/tls", nil, rule("r", prefix("/")))
	tls.Kind = pb.RouteKind_ROUTE_KIND_TLS
	tls.Name = "a/tls#tls"
	attached := route("b/attached", nil, rule("r", prefix("/api")))
	attached.Listeners = []string{"demo/gw/https", lname}

	rt := mustCompile(t, listener(), other, tls, nil, attached)
	runMatches(t, rt, []matchCase{
		{"route of another listener ignored", req("GET", "http://h/"), ""},
		{"attached route serves", req("GET", "http://h/api"), "b/attached:r"},
	})
	if n := len(rt.Rules()); n != 1 {
		t.Errorf("Rules() has %d rules, want 1", n)
	}
	if rt.Listener() != lname {
		t.Errorf("Listener() = %q", rt.Listener())
	}

	// A bad route that is not attached is not compiled, so not an error.
	bad := route("a/bad", nil, rule("r", regex("(")))
	bad.Listeners = []string{"demo/gw/https"}
	if _, err := Compile(listener(), []*pb.Route{bad}); err != nil {
		t.Errorf("Compile with an unattached bad route: %v", err)
	}
}

func TestPaths(t *testing.T) {
	rt := mustCompile(t, listener(),
		route("a/r", nil,
			rule("exact", exact("/exact")),
			rule("prefix", prefix("/foo")),
			rule("slash", prefix("/bar/")),
			rule("regex", regex(`/items/[0-9]+`)),
			rule("regex-alt", regex(`/a|/b`)),
		),
	)
	runMatches(t, rt, []matchCase{
		{"exact", req("GET", "http://h/exact"), "a/r:exact"},
		{"exact not with a slash", req("GET", "http://h/exact/"), ""},
		{"exact not a prefix", req("GET", "http://h/exact/x"), ""},
		{"exact is case-sensitive", req("GET", "http://h/Exact"), ""},
		{"prefix itself", req("GET", "http://h/foo"), "a/r:prefix"},
		{"prefix with slash", req("GET", "http://h/foo/"), "a/r:prefix"},
		{"prefix deeper", req("GET", "http://h/foo/bar"), "a/r:prefix"},
		{"prefix is not a string prefix", req("GET", "http://h/foobar"), ""},
		{"prefix is not shorter", req("GET", "http://h/fo"), ""},
		{"prefix is case-sensitive", req("GET", "http://h/Foo"), ""},
		{"trailing slash of the prefix ignored", req("GET", "http://h/bar"), "a/r:slash"},
		{"trailing-slash prefix deeper", req("GET", "http://h/bar/x"), "a/r:slash"},
		{"trailing-slash prefix not a string prefix", req("GET", "http://h/barx"), ""},
		{"regex", req("GET", "http://h/items/42"), "a/r:regex"},
		{"regex anchored at the end", req("GET", "http://h/items/42/x"), ""},
		{"regex anchored at the start", req("GET", "http://h/x/items/42"), ""},
		{"alternation anchored as a whole", req("GET", "http://h/b"), "a/r:regex-alt"},
		{"alternation anchored as a whole, not a prefix", req("GET", "http://h/bx"), ""},
		{"the decoded path is matched", req("GET", "http://h/foo%2Fx"), "a/r:prefix"},
		{"escaped letters are decoded", req("GET", "http://h/%65xact"), "a/r:exact"},
	})

	root := mustCompile(t, listener(), route("a/r", nil, rule("root", prefix("/"))))
	star := req("OPTIONS", "http://h/")
	star.URL.Path = "*"
	empty := req("GET", "http://h/")
	empty.URL.Path = ""
	runMatches(t, root, []matchCase{
		{"root matches root", req("GET", "http://h/"), "a/r:root"},
		{"root matches anything", req("GET", "http://h/a/b/c"), "a/r:root"},
		{"root matches OPTIONS *", star, "a/r:root"},
		{"root matches an empty path", empty, "a/r:root"},
	})

	// A rule without matches has the implicit PathPrefix "/"; a match
	// without a path too.
	implicit := mustCompile(t, listener(), route("a/r", nil, rule("none"), rule("nopath", &pb.RouteMatch{Method: "POST"})))
	runMatches(t, implicit, []matchCase{
		{"rule without matches", req("GET", "http://h/x"), "a/r:none"},
		{"match without path", req("POST", "http://h/x"), "a/r:nopath"},
	})
}

func TestConditions(t *testing.T) {
	rt := mustCompile(t, listener(), route("a/r", nil,
		rule("header", prefix("/h", header("x-env", "Prod"))),
		rule("header-re", prefix("/hre", headerRE("x-ver", `v[0-9]+`))),
		rule("header-empty", prefix("/hempty", header("x-empty", ""))),
		rule("host-header", prefix("/host", header("host", "h.example:8080"))),
		rule("query", prefix("/q", query("Tag", "a b"))),
		rule("query-re", prefix("/qre", queryRE("n", `[0-9]+`))),
		rule("method", prefix("/m", method("POST"))),
		rule("and", prefix("/and", method("PUT"), header("x-a", "1"), query("q", "1"))),
		rule("or", prefix("/or1"), prefix("/or2", method("DELETE"))),
		rule("dup-header", prefix("/duph", header("x-a", "1"), header("X-A", "2"))),
		rule("dup-query", prefix("/dupq", query("a", "1"), query("a", "2"))),
	))
	runMatches(t, rt, []matchCase{
		{"header", req("GET", "http://h/h", "X-Env", "Prod"), "a/r:header"},
		{"header name case-insensitive", req("GET", "http://h/h", "x-ENV", "Prod"), "a/r:header"},
		{"header value case-sensitive", req("GET", "http://h/h", "X-Env", "prod"), ""},
		{"header absent", req("GET", "http://h/h"), ""},
		{"repeated header is joined", req("GET", "http://h/h", "X-Env", "Prod", "X-Env", "Dev"), ""},
		{"header regex", req("GET", "http://h/hre", "X-Ver", "v12"), "a/r:header-re"},
		{"header regex anchored", req("GET", "http://h/hre", "X-Ver", "v12x"), ""},
		{"header regex on joined values", req("GET", "http://h/hre", "X-Ver", "v1", "X-Ver", "v2"), ""},
		{"empty value present", req("GET", "http://h/hempty", "X-Empty", ""), "a/r:header-empty"},
		{"empty value absent", req("GET", "http://h/hempty"), ""},
		{"Host header is Request.Host", req("GET", "http://h.example:8080/host"), "a/r:host-header"},
		{"Host header other", req("GET", "http://h.example/host"), ""},
		{"query decoded", req("GET", "http://h/q?Tag=a+b"), "a/r:query"},
		{"query percent-decoded", req("GET", "http://h/q?x=1&Tag=a%20b"), "a/r:query"},
		{"query name case-sensitive", req("GET", "http://h/q?tag=a+b"), ""},
		{"query first value counts", req("GET", "http://h/q?Tag=x&Tag=a+b"), ""},
		{"query first value matches", req("GET", "http://h/q?Tag=a+b&Tag=x"), "a/r:query"},
		{"query absent", req("GET", "http://h/q"), ""},
		{"query regex", req("GET", "http://h/qre?n=123"), "a/r:query-re"},
		{"query regex anchored", req("GET", "http://h/qre?n=12a"), ""},
		{"query pair with a bad escape skipped", req("GET", "http://h/qre?n=%zz&n=7"), "a/r:query-re"},
		{"method", req("POST", "http://h/m"), "a/r:method"},
		{"method other", req("GET", "http://h/m"), ""},
		{"all conditions", req("PUT", "http://h/and?q=1", "X-A", "1"), "a/r:and"},
		{"all conditions: method missing", req("POST", "http://h/and?q=1", "X-A", "1"), ""},
		{"all conditions: header missing", req("PUT", "http://h/and?q=1"), ""},
		{"all conditions: query missing", req("PUT", "http://h/and", "X-A", "1"), ""},
		{"either match: first", req("GET", "http://h/or1"), "a/r:or"},
		{"either match: second", req("DELETE", "http://h/or2"), "a/r:or"},
		{"either match: neither", req("GET", "http://h/or2"), ""},
		{"only the first entry of a header name counts", req("GET", "http://h/duph", "X-A", "1"), "a/r:dup-header"},
		{"the first entry of a header name still counts", req("GET", "http://h/duph", "X-A", "2"), ""},
		{"only the first entry of a query name counts", req("GET", "http://h/dupq?a=1"), "a/r:dup-query"},
	})

	joined := mustCompile(t, listener(), route("a/r", nil, rule("joined", prefix("/", header("x-env", "Prod,Dev")))))
	runMatches(t, joined, []matchCase{
		{"repeated header matches the joined value", req("GET", "http://h/", "X-Env", "Prod", "X-Env", "Dev"), "a/r:joined"},
		{"repeated header in the other order", req("GET", "http://h/", "X-Env", "Dev", "X-Env", "Prod"), ""},
		{"a single value with a comma", req("GET", "http://h/", "X-Env", "Prod,Dev"), "a/r:joined"},
	})
}

func TestJoinedEquals(t *testing.T) {
	tests := []struct {
		vals []string
		want string
		ok   bool
	}{
		{[]string{"a"}, "a", true},
		{[]string{"a", "b"}, "a,b", true},
		{[]string{"a", "b"}, "a,b,", false},
		{[]string{"a", "b"}, "a,", false},
		{[]string{"a", ""}, "a,", true},
		{[]string{"", ""}, ",", true},
		{[]string{"a", "b"}, "ab", false},
		{[]string{"a,b", "c"}, "a,b,c", true},
	}
	for _, tc := range tests {
		if g := joinedEquals(tc.vals, tc.want); g != tc.ok {
			t.Errorf("joinedEquals(%q, %q) = %v, want %v", tc.vals, tc.want, g, tc.ok)
		}
	}
}
