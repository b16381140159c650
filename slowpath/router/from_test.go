package router

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"regexp"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

// sameRouter fails unless got and want are the same router (what each
// compiled of each route aside).
func sameRouter(t *testing.T, what string, got, want *Router) {
	t.Helper()
	diff := cmp.Diff(want, got,
		cmp.Exporter(func(reflect.Type) bool { return true }),
		cmpopts.IgnoreFields(Router{}, "compiled"),
		cmp.Comparer(func(a, b *regexp.Regexp) bool {
			return (a == nil) == (b == nil) && (a == nil || a.String() == b.String())
		}),
		protocmp.Transform())
	if diff != "" {
		t.Fatalf("%s: CompileFrom differs from Compile (-Compile +CompileFrom):\n%s", what, diff)
	}
}

// TestCompileFromIsCompile: a router compiled from the last one gives
// what Compile gives, along a random sequence of route sets in which
// routes are added, removed, replaced by changed copies and reordered
// (their order breaks precedence ties), and the listener's port changes
// (redirect filters depend on it, so nothing is taken then).
func TestCompileFromIsCompile(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	hosts := []string{"a.example.com", "b.example.com", "*.example.com", ""}
	fresh := func(i int) *pb.Route {
		var hs []string
		if h := hosts[rng.IntN(len(hosts))]; h != "" {
			hs = []string{h}
		}
		rules := []*pb.RouteRule{rule("web", prefix("/"))}
		switch rng.IntN(4) {
		case 0:
			rules = append(rules, rule("api", prefix("/api", method("GET")), exact("/api/v2")))
		case 1:
			rules = append(rules, rule("canary", prefix("/", header("x-canary", "1"))))
		case 2:
			r := rule("moved", regex("/old/.*"))
			r.Filters = []*pb.RouteFilter{{Filter: &pb.RouteFilter_RequestRedirect{RequestRedirect: &pb.RequestRedirect{Scheme: "https", StatusCode: 301}}}}
			rules = append(rules, r)
		}
		return route(fmt.Sprintf("ns/r%03d", i), hs, rules...)
	}
	var routes []*pb.Route
	for i := range 40 {
		routes = append(routes, fresh(i))
	}
	l := listener()
	prev, err := Compile(l, routes)
	if err != nil {
		t.Fatal(err)
	}
	taken := 0
	for step := range 200 {
		routes = slices.Clone(routes)
		var what string
		switch rng.IntN(6) {
		case 0:
			what = "a route added"
			routes = append(routes, fresh(100+step))
		case 1:
			i := rng.IntN(len(routes))
			what = "route " + routes[i].GetName() + " removed"
			routes = slices.Delete(routes, i, i+1)
		case 2:
			i := rng.IntN(len(routes))
			what = "route " + routes[i].GetName() + " replaced"
			routes[i] = fresh(i)
		case 3:
			i := rng.IntN(len(routes))
			what = "route " + routes[i].GetName() + " copied unchanged"
			routes[i] = proto.Clone(routes[i]).(*pb.Route)
		case 4:
			what = "routes reordered"
			rng.Shuffle(len(routes), func(i, j int) { routes[i], routes[j] = routes[j], routes[i] })
		case 5:
			what = "the listener's port changed"
			l = proto.Clone(l).(*pb.Listener)
			l.Port = uint32(80 + rng.IntN(2)*8000)
		}
		want, err := Compile(l, routes)
		if err != nil {
			t.Fatalf("step %d (%s): %v", step, what, err)
		}
		got, err := CompileFrom(prev, l, routes)
		if err != nil {
			t.Fatalf("step %d (%s): %v", step, what, err)
		}
		sameRouter(t, fmt.Sprintf("step %d (%s)", step, what), got, want)
		for r, cr := range got.compiled {
			if prev.compiled[r] == cr {
				taken++
			}
		}
		prev = got
	}
	if taken == 0 {
		t.Fatal("no route was taken from the router before: the test checks nothing")
	}
	t.Logf("%d compiled routes taken from the router before", taken)
}
