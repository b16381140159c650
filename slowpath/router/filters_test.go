package router

import (
	"crypto/tls"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

// withFilters compiles one route with one rule (prefix match p) carrying fs,
// on a listener of the given port and protocol, and matches r against it.
func withFilters(t *testing.T, port uint32, proto pb.Protocol, p string, r *http.Request, fs ...*pb.RouteFilter) (*Rule, Match) {
	t.Helper()
	l := listener()
	l.Port, l.Protocol = port, proto
	ru := rule("r", prefix(p))
	ru.Filters = fs
	rt := mustCompile(t, l, route("a/r", nil, ru))
	m, ok := rt.Match(r)
	if !ok {
		t.Fatalf("%s does not match prefix %s", r.URL, p)
	}
	return m.Rule, m
}

func reqHeaderFilter(set, add [][2]string, remove ...string) *pb.RouteFilter {
	return &pb.RouteFilter{Filter: &pb.RouteFilter_RequestHeaderModifier{RequestHeaderModifier: headerMod(set, add, remove)}}
}

func respHeaderFilter(set, add [][2]string, remove ...string) *pb.RouteFilter {
	return &pb.RouteFilter{Filter: &pb.RouteFilter_ResponseHeaderModifier{ResponseHeaderModifier: headerMod(set, add, remove)}}
}

func headerMod(set, add [][2]string, remove []string) *pb.HeaderModifier {
	hm := &pb.HeaderModifier{Remove: remove}
	for _, kv := range set {
		hm.Set = append(hm.Set, &pb.HeaderValue{Name: kv[0], Value: kv[1]})
	}
	for _, kv := range add {
		hm.Add = append(hm.Add, &pb.HeaderValue{Name: kv[0], Value: kv[1]})
	}
	return hm
}

func rewriteFilter(host, typ, value string) *pb.RouteFilter {
	u := &pb.URLRewrite{Hostname: host}
	if typ != "" {
		u.Path = &pb.PathModifier{Type: typ, Value: value}
	}
	return &pb.RouteFilter{Filter: &pb.RouteFilter_UrlRewrite{UrlRewrite: u}}
}

func redirectFilter(rr *pb.RequestRedirect) *pb.RouteFilter {
	return &pb.RouteFilter{Filter: &pb.RouteFilter_RequestRedirect{RequestRedirect: rr}}
}

func mirrorFilter(backend string, percent uint32) *pb.RouteFilter {
	return &pb.RouteFilter{Filter: &pb.RouteFilter_RequestMirror{RequestMirror: &pb.RequestMirror{Backend: backend, Percent: percent}}}
}

func TestHeaderModifiers(t *testing.T) {
	tests := []struct {
		name   string
		set    [][2]string
		add    [][2]string
		remove []string
		in     http.Header
		want   http.Header
	}{
		{
			name: "set replaces every value",
			set:  [][2]string{{"x-env", "prod"}},
			in:   http.Header{"X-Env": {"a", "b"}, "Keep": {"1"}},
			want: http.Header{"X-Env": {"prod"}, "Keep": {"1"}},
		},
		{
			name: "set creates",
			set:  [][2]string{{"X-New", "1"}},
			in:   http.Header{},
			want: http.Header{"X-New": {"1"}},
		},
		{
			name: "add appends",
			add:  [][2]string{{"x-trace", "gw"}},
			in:   http.Header{"X-Trace": {"client"}},
			want: http.Header{"X-Trace": {"client", "gw"}},
		},
		{
			name:   "remove deletes every value, name case-insensitive",
			remove: []string{"x-secret"},
			in:     http.Header{"X-Secret": {"a", "b"}, "Keep": {"1"}},
			want:   http.Header{"Keep": {"1"}},
		},
		{
			name: "set then add on one name keeps both",
			set:  [][2]string{{"x-a", "set"}},
			add:  [][2]string{{"x-a", "add"}},
			in:   http.Header{"X-A": {"old"}},
			want: http.Header{"X-A": {"set", "add"}},
		},
		{
			name:   "remove comes before add",
			add:    [][2]string{{"x-a", "add"}},
			remove: []string{"x-a"},
			in:     http.Header{"X-A": {"old"}},
			want:   http.Header{"X-A": {"add"}},
		},
		{
			name:   "remove comes before set",
			set:    [][2]string{{"x-a", "set"}},
			remove: []string{"X-A"},
			in:     http.Header{"X-A": {"old"}},
			want:   http.Header{"X-A": {"set"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ru, _ := withFilters(t, 80, pb.Protocol_PROTOCOL_HTTP, "/", req("GET", "http://h/"),
				reqHeaderFilter(tc.set, tc.add, tc.remove...), respHeaderFilter(tc.set, tc.add, tc.remove...))
			reqH, respH := tc.in.Clone(), tc.in.Clone()
			ru.Filters.ApplyRequestHeaders(reqH)
			ru.Filters.ApplyResponseHeaders(respH)
			if d := cmp.Diff(tc.want, reqH); d != "" {
				t.Errorf("request headers (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.want, respH); d != "" {
				t.Errorf("response headers (-want +got):\n%s", d)
			}
		})
	}

	t.Run("request and response filters are separate", func(t *testing.T) {
		ru, _ := withFilters(t, 80, pb.Protocol_PROTOCOL_HTTP, "/", req("GET", "http://h/"),
			reqHeaderFilter([][2]string{{"x-req", "1"}}, nil), respHeaderFilter([][2]string{{"x-resp", "1"}}, nil))
		reqH, respH := http.Header{}, http.Header{}
		ru.Filters.ApplyRequestHeaders(reqH)
		ru.Filters.ApplyResponseHeaders(respH)
		if d := cmp.Diff(http.Header{"X-Req": {"1"}}, reqH); d != "" {
			t.Errorf("request (-want +got):\n%s", d)
		}
		if d := cmp.Diff(http.Header{"X-Resp": {"1"}}, respH); d != "" {
			t.Errorf("response (-want +got):\n%s", d)
		}
	})

	t.Run("no filter leaves headers alone", func(t *testing.T) {
		ru, _ := withFilters(t, 80, pb.Protocol_PROTOCOL_HTTP, "/", req("GET", "http://h/"))
		h := http.Header{"A": {"1"}}
		ru.Filters.ApplyRequestHeaders(h)
		ru.Filters.ApplyResponseHeaders(h)
		if d := cmp.Diff(http.Header{"A": {"1"}}, h); d != "" {
			t.Errorf("(-want +got):\n%s", d)
		}
	})

	t.Run("ApplyRequest moves Host into Request.Host", func(t *testing.T) {
		r := req("GET", "http://h/", "X-A", "1")
		ru, _ := withFilters(t, 80, pb.Protocol_PROTOCOL_HTTP, "/", r,
			reqHeaderFilter([][2]string{{"host", "backend.internal"}}, [][2]string{{"x-a", "2"}}))
		ru.Filters.ApplyRequest(r)
		if r.Host != "backend.internal" {
			t.Errorf("Host = %q", r.Host)
		}
		if d := cmp.Diff(http.Header{"X-A": {"1", "2"}}, r.Header); d != "" {
			t.Errorf("headers (-want +got):\n%s", d)
		}
	})
}

func TestRewrite(t *testing.T) {
	tests := []struct {
		name     string
		match    string // PathPrefix of the rule
		path     string // request path
		host     string // rewrite hostname
		typ      string
		value    string
		wantPath string
		wantHost string
		changed  bool
	}{
		// Gateway API's ReplacePrefixMatch table, row by row.
		{name: "spec 1", match: "/foo", path: "/foo/bar", typ: "ReplacePrefixMatch", value: "/xyz", wantPath: "/xyz/bar"},
		{name: "spec 2", match: "/foo", path: "/foo/bar", typ: "ReplacePrefixMatch", value: "/xyz/", wantPath: "/xyz/bar"},
		{name: "spec 3", match: "/foo/", path: "/foo/bar", typ: "ReplacePrefixMatch", value: "/xyz", wantPath: "/xyz/bar"},
		{name: "spec 4", match: "/foo/", path: "/foo/bar", typ: "ReplacePrefixMatch", value: "/xyz/", wantPath: "/xyz/bar"},
		{name: "spec 5", match: "/foo", path: "/foo", typ: "ReplacePrefixMatch", value: "/xyz", wantPath: "/xyz"},
		{name: "spec 6", match: "/foo", path: "/foo/", typ: "ReplacePrefixMatch", value: "/xyz", wantPath: "/xyz/"},
		{name: "spec 7", match: "/foo", path: "/foo/bar", typ: "ReplacePrefixMatch", value: "", wantPath: "/bar"},
		{name: "spec 8", match: "/foo", path: "/foo/", typ: "ReplacePrefixMatch", value: "", wantPath: "/"},
		{name: "spec 9", match: "/foo", path: "/foo", typ: "ReplacePrefixMatch", value: "", wantPath: "/"},
		{name: "spec 10", match: "/foo", path: "/foo/", typ: "ReplacePrefixMatch", value: "/", wantPath: "/"},
		{name: "spec 11", match: "/foo", path: "/foo", typ: "ReplacePrefixMatch", value: "/", wantPath: "/"},
		// More.
		{name: "slash replacement keeps the rest", match: "/foo", path: "/foo/bar/baz", typ: "ReplacePrefixMatch", value: "/", wantPath: "/bar/baz"},
		{name: "root prefix prepends", match: "/", path: "/a/b", typ: "ReplacePrefixMatch", value: "/v2", wantPath: "/v2/a/b"},
		{name: "root prefix with root replacement", match: "/", path: "/a", typ: "ReplacePrefixMatch", value: "/", wantPath: "/a"},
		{name: "root prefix on root", match: "/", path: "/", typ: "ReplacePrefixMatch", value: "/v2", wantPath: "/v2/"},
		{name: "deeper replacement", match: "/api/v1", path: "/api/v1/users", typ: "ReplacePrefixMatch", value: "/internal", wantPath: "/internal/users"},
		{name: "full path", match: "/foo", path: "/foo/bar", typ: "ReplaceFullPath", value: "/other", wantPath: "/other"},
		{name: "full path root", match: "/", path: "/anything", typ: "ReplaceFullPath", value: "/", wantPath: "/"},
		{name: "hostname only", match: "/", path: "/a", host: "backend.internal", wantPath: "/a", wantHost: "backend.internal"},
		{name: "hostname and path", match: "/foo", path: "/foo/x", host: "b.internal", typ: "ReplacePrefixMatch", value: "/bar", wantPath: "/bar/x", wantHost: "b.internal"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := req("GET", "http://h.example:8080"+tc.path+"?q=1")
			ru, m := withFilters(t, 80, pb.Protocol_PROTOCOL_HTTP, tc.match, r, rewriteFilter(tc.host, tc.typ, tc.value))
			path, host, changed := ru.Filters.Rewrite(r, m)
			wantHost := tc.wantHost
			if wantHost == "" {
				wantHost = "h.example:8080"
			}
			if path != tc.wantPath || host != wantHost || !changed {
				t.Fatalf("Rewrite = %q, %q, %v; want %q, %q, true", path, host, changed, tc.wantPath, wantHost)
			}
			if !ru.Filters.HasRewrite() || ru.Filters.HasRedirect() {
				t.Fatal("HasRewrite/HasRedirect wrong")
			}
		})
	}

	t.Run("no rewrite", func(t *testing.T) {
		r := req("GET", "http://h.example/a%2Fb")
		ru, m := withFilters(t, 80, pb.Protocol_PROTOCOL_HTTP, "/", r)
		path, host, changed := ru.Filters.Rewrite(r, m)
		if path != "/a/b" || host != "h.example" || changed {
			t.Fatalf("Rewrite = %q, %q, %v", path, host, changed)
		}
	})
}

func TestRedirect(t *testing.T) {
	tests := []struct {
		name       string
		port       uint32 // listener port
		proto      pb.Protocol
		match      string
		target     string
		tls        bool
		rr         *pb.RequestRedirect
		wantLoc    string
		wantStatus int
	}{
		{
			name: "scheme to https omits 443, keeps query", port: 80, match: "/", target: "http://a.example.com/p/q?x=1&y=%20",
			rr: &pb.RequestRedirect{Scheme: "https"}, wantLoc: "https://a.example.com/p/q?x=1&y=%20", wantStatus: 302,
		},
		{
			name: "scheme change on a non-default listener port still uses the scheme's port", port: 8080, match: "/", target: "http://a.example.com:8080/p",
			rr: &pb.RequestRedirect{Scheme: "https", StatusCode: 301}, wantLoc: "https://a.example.com/p", wantStatus: 301,
		},
		{
			name: "scheme http omits 80", port: 8443, proto: pb.Protocol_PROTOCOL_HTTPS, match: "/", target: "https://a.example.com:8443/p", tls: true,
			rr: &pb.RequestRedirect{Scheme: "http"}, wantLoc: "http://a.example.com/p", wantStatus: 302,
		},
		{
			name: "no scheme, no port: the listener's port", port: 8080, match: "/", target: "http://a.example.com:8080/p",
			rr: &pb.RequestRedirect{Hostname: "b.example.com"}, wantLoc: "http://b.example.com:8080/p", wantStatus: 302,
		},
		{
			name: "no scheme, listener on 80: no port", port: 80, match: "/", target: "http://a.example.com/p",
			rr: &pb.RequestRedirect{Hostname: "b.example.com"}, wantLoc: "http://b.example.com/p", wantStatus: 302,
		},
		{
			name: "no scheme, listener without port: the Host's port", port: 0, match: "/", target: "http://a.example.com:9000/p",
			rr: &pb.RequestRedirect{Hostname: "b.example.com"}, wantLoc: "http://b.example.com:9000/p", wantStatus: 302,
		},
		{
			name: "TLS request keeps https", port: 443, proto: pb.Protocol_PROTOCOL_HTTPS, match: "/", target: "https://a.example.com/p", tls: true,
			rr: &pb.RequestRedirect{Hostname: "b.example.com"}, wantLoc: "https://b.example.com/p", wantStatus: 302,
		},
		{
			name: "HTTPS listener without TLS state still https", port: 443, proto: pb.Protocol_PROTOCOL_HTTPS, match: "/", target: "http://a.example.com/p",
			rr: &pb.RequestRedirect{Path: &pb.PathModifier{Type: "ReplaceFullPath", Value: "/x"}}, wantLoc: "https://a.example.com/x", wantStatus: 302,
		},
		{
			name: "explicit port", port: 80, match: "/", target: "http://a.example.com/p",
			rr: &pb.RequestRedirect{Scheme: "https", Port: 8443}, wantLoc: "https://a.example.com:8443/p", wantStatus: 302,
		},
		{
			name: "explicit well-known port omitted", port: 8080, match: "/", target: "http://a.example.com:8080/p",
			rr: &pb.RequestRedirect{Scheme: "https", Port: 443}, wantLoc: "https://a.example.com/p", wantStatus: 302,
		},
		{
			name: "explicit port, no scheme", port: 80, match: "/", target: "http://a.example.com/p",
			rr: &pb.RequestRedirect{Port: 8081}, wantLoc: "http://a.example.com:8081/p", wantStatus: 302,
		},
		{
			name: "full path, query kept", port: 80, match: "/old", target: "http://a.example.com/old/x?k=v",
			rr:      &pb.RequestRedirect{Path: &pb.PathModifier{Type: "ReplaceFullPath", Value: "/new page"}, StatusCode: 308},
			wantLoc: "http://a.example.com/new%20page?k=v", wantStatus: 308,
		},
		{
			name: "prefix path", port: 80, match: "/old", target: "http://a.example.com/old/x/y?k=v",
			rr:      &pb.RequestRedirect{Path: &pb.PathModifier{Type: "ReplacePrefixMatch", Value: "/new"}, StatusCode: 303},
			wantLoc: "http://a.example.com/new/x/y?k=v", wantStatus: 303,
		},
		{
			name: "prefix path to root", port: 80, match: "/old", target: "http://a.example.com/old",
			rr:      &pb.RequestRedirect{Path: &pb.PathModifier{Type: "ReplacePrefixMatch", Value: "/"}, StatusCode: 307},
			wantLoc: "http://a.example.com/", wantStatus: 307,
		},
		{
			name: "path kept escaped as received", port: 80, match: "/", target: "http://a.example.com/a%2Fb%20c",
			rr: &pb.RequestRedirect{Scheme: "https"}, wantLoc: "https://a.example.com/a%2Fb%20c", wantStatus: 302,
		},
		{
			name: "IPv6 request host", port: 8080, match: "/", target: "http://[::1]:8080/p",
			rr: &pb.RequestRedirect{Scheme: "https"}, wantLoc: "https://[::1]/p", wantStatus: 302,
		},
		{
			name: "request host's case kept, port dropped", port: 80, match: "/", target: "http://A.Example.com:80/p",
			rr: &pb.RequestRedirect{Scheme: "https"}, wantLoc: "https://A.Example.com/p", wantStatus: 302,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := req("GET", tc.target)
			if !tc.tls {
				r.TLS = nil
			} else if r.TLS == nil {
				r.TLS = &tls.ConnectionState{}
			}
			proto := tc.proto
			if proto == pb.Protocol_PROTOCOL_UNSPECIFIED {
				proto = pb.Protocol_PROTOCOL_HTTP
			}
			ru, m := withFilters(t, tc.port, proto, tc.match, r, redirectFilter(tc.rr))
			loc, status, ok := ru.Filters.Redirect(r, m)
			if !ok || loc != tc.wantLoc || status != tc.wantStatus {
				t.Fatalf("Redirect = %q, %d, %v; want %q, %d, true", loc, status, ok, tc.wantLoc, tc.wantStatus)
			}
			if !ru.Filters.HasRedirect() {
				t.Fatal("HasRedirect false")
			}
		})
	}

	t.Run("no redirect", func(t *testing.T) {
		r := req("GET", "http://h/")
		ru, m := withFilters(t, 80, pb.Protocol_PROTOCOL_HTTP, "/", r)
		if loc, status, ok := ru.Filters.Redirect(r, m); ok {
			t.Fatalf("Redirect = %q, %d, true", loc, status)
		}
	})
}

func TestMirrorsAndPassThrough(t *testing.T) {
	ru := rule("r", prefix("/"))
	ru.Filters = []*pb.RouteFilter{mirrorFilter("demo/shadow", 10), mirrorFilter("demo/audit", 100)}
	ru.Backends = []*pb.WeightedBackend{{Backend: "demo/a", Weight: 3}, {Backend: "demo/b", Weight: 0}, {Backend: "demo/c", Weight: 1}}
	ru.Retry = &pb.RetryPolicy{MaxRetries: 2}
	ru.Timeouts = &pb.RouteTimeouts{RequestMs: 1500}
	ru.Policies = []string{"demo/jwt", "demo/rl"}
	rt := mustCompile(t, listener(), route("a/r", nil, ru), route("b/empty", nil, &pb.RouteRule{Name: "none", Matches: []*pb.RouteMatch{exact("/none")}}))

	m, ok := rt.Match(req("GET", "http://h/x"))
	if !ok {
		t.Fatal("no match")
	}
	if d := cmp.Diff([]Mirror{{Backend: "demo/shadow", Percent: 10}, {Backend: "demo/audit", Percent: 100}}, m.Rule.Filters.Mirrors()); d != "" {
		t.Errorf("mirrors (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]Backend{{"demo/a", 3}, {"demo/b", 0}, {"demo/c", 1}}, m.Rule.Backends); d != "" {
		t.Errorf("backends (-want +got):\n%s", d)
	}
	if m.Rule.TotalWeight != 4 {
		t.Errorf("TotalWeight = %d, want 4", m.Rule.TotalWeight)
	}
	if m.Rule.Retry != ru.Retry || m.Rule.Timeouts != ru.Timeouts {
		t.Error("Retry or Timeouts not passed through")
	}
	if d := cmp.Diff([]string{"demo/jwt", "demo/rl"}, m.Rule.Policies); d != "" {
		t.Errorf("policies (-want +got):\n%s", d)
	}
	if m.Rule.Route != "a/r" || m.Rule.Name != "r" || m.Rule.Index != 0 {
		t.Errorf("rule identity %q %q %d", m.Rule.Route, m.Rule.Name, m.Rule.Index)
	}

	m, ok = rt.Match(req("GET", "http://h/none"))
	if !ok || m.Rule.TotalWeight != 0 || len(m.Rule.Backends) != 0 || m.Rule.Filters.Mirrors() != nil {
		t.Errorf("rule without backends: %+v, %v", m, ok)
	}
}
