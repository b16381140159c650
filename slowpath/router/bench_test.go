package router

import (
	"fmt"
	"net/http"
	"testing"
)

// TestMatchDoesNotAllocate checks the common case (exact host or routes
// without hostnames, no regular expression, no query match, lower-case host)
// allocates nothing.
func TestMatchDoesNotAllocate(t *testing.T) {
	routes := manyRoutes(100, true)
	routes = append(routes, route("ns/wild", []string{"*.wild.example.com"}, rule("r", prefix("/"))))
	rt := mustCompile(t, listener(), routes...)
	tests := []struct {
		name string
		req  *http.Request
		want string
	}{
		{"exact host, prefix", req("GET", "http://host-5.example.com/web/page"), "ns/route-00005:web"},
		{"exact host, exact path", req("GET", "http://host-5.example.com/healthz"), "ns/route-00005:health"},
		{"exact host, method", req("GET", "http://host-5.example.com/api/x"), "ns/route-00005:api"},
		{"exact host, header", req("GET", "http://host-5.example.com/", "X-Canary", "1"), "ns/route-00005:canary"},
		{"host with port", req("GET", "http://host-5.example.com:8080/"), "ns/route-00005:web"},
		{"route without hostname", req("GET", "http://host-10.example.com/healthz"), "ns/route-00000:health"},
		{"unknown host falls to routes without hostname", req("GET", "http://nowhere.example.net/x"), "ns/route-00000:web"},
		{"wildcard host", req("GET", "http://a.b.wild.example.com/x"), "ns/wild:r"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if g := got(rt, tc.req); g != tc.want {
				t.Fatalf("matched %q, want %q", g, tc.want)
			}
			if n := testing.AllocsPerRun(200, func() { rt.Match(tc.req) }); n != 0 {
				t.Fatalf("Match allocates %v times per run", n)
			}
		})
	}

	miss := mustCompile(t, listener(), manyRoutes(10, false)...)
	r := req("GET", "http://nowhere.example.net/x")
	if n := testing.AllocsPerRun(200, func() { miss.Match(r) }); n != 0 {
		t.Fatalf("a 404 Match allocates %v times per run", n)
	}
}

// BenchmarkMatch: 3000 routes with exact hostnames, requests spread over
// the hosts.
func BenchmarkMatch(b *testing.B) {
	rt := mustCompile(b, listener(), manyRoutes(3000, false)...)
	for _, bc := range []struct {
		name string
		path string
		kv   []string
	}{
		{"prefix", "/web/page", nil},
		{"exact", "/healthz", nil},
		{"method", "/api/users", nil},
		{"header", "/", []string{"X-Canary", "1"}},
	} {
		reqs := make([]*http.Request, 1024)
		for i := range reqs {
			reqs[i] = req("GET", fmt.Sprintf("http://host-%d.example.com%s", (i*7919)%3000, bc.path), bc.kv...)
		}
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, ok := rt.Match(reqs[i&1023]); !ok {
					b.Fatal("no match")
				}
				i++
			}
		})
	}
}

// BenchmarkCompile: compile time of a listener with 3000 routes (4 rules,
// 5 matches each), the bulk of "time until a newly added route serves".
func BenchmarkCompile(b *testing.B) {
	routes := manyRoutes(3000, false)
	l := listener()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Compile(l, routes); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCompileFrom: compile time of the listener of BenchmarkCompile
// from its router before, with one route added or removed, as the standalone
// agent compiles after an edit (its build keeps the unchanged routes).
func BenchmarkCompileFrom(b *testing.B) {
	routes := manyRoutes(3001, false)
	fewer := routes[:3000:3000]
	l := listener()
	prev, err := Compile(l, routes)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		rs := routes
		if i%2 == 1 {
			rs = fewer
		}
		if prev, err = CompileFrom(prev, l, rs); err != nil {
			b.Fatal(err)
		}
	}
}
