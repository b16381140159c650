package router

import (
	"net/http"
	"net/http/httptest"
	"testing"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

// lname is the listener of most tests.
const lname = "demo/gw/http"

func listener(hosts ...string) *pb.Listener {
	return &pb.Listener{Name: lname, Gateway: "demo/gw", Port: 80, Protocol: pb.Protocol_PROTOCOL_HTTP, Hostnames: hosts}
}

func route(name string, hosts []string, rules ...*pb.RouteRule) *pb.Route {
	return &pb.Route{Name: name, Kind: pb.RouteKind_ROUTE_KIND_HTTP, Hostnames: hosts, Rules: rules, Listeners: []string{lname}}
}

// rule makes a rule named name with the given matches and one backend.
func rule(name string, matches ...*pb.RouteMatch) *pb.RouteRule {
	return &pb.RouteRule{Name: name, Matches: matches, Backends: []*pb.WeightedBackend{{Backend: "demo/" + name, Weight: 1}}}
}

type matchOpt func(*pb.RouteMatch)

func pathMatch(t pb.MatchType, v string, opts ...matchOpt) *pb.RouteMatch {
	m := &pb.RouteMatch{Path: &pb.StringMatch{Type: t, Value: v}}
	for _, o := range opts {
		o(m)
	}
	return m
}

func prefix(v string, opts ...matchOpt) *pb.RouteMatch {
	return pathMatch(pb.MatchType_MATCH_TYPE_PREFIX, v, opts...)
}

func exact(v string, opts ...matchOpt) *pb.RouteMatch {
	return pathMatch(pb.MatchType_MATCH_TYPE_EXACT, v, opts...)
}

func regex(v string, opts ...matchOpt) *pb.RouteMatch {
	return pathMatch(pb.MatchType_MATCH_TYPE_REGEX, v, opts...)
}

func method(m string) matchOpt { return func(rm *pb.RouteMatch) { rm.Method = m } }

func header(name, value string) matchOpt {
	return func(rm *pb.RouteMatch) {
		rm.Headers = append(rm.Headers, &pb.StringMatch{Type: pb.MatchType_MATCH_TYPE_EXACT, Name: name, Value: value})
	}
}

func headerRE(name, re string) matchOpt {
	return func(rm *pb.RouteMatch) {
		rm.Headers = append(rm.Headers, &pb.StringMatch{Type: pb.MatchType_MATCH_TYPE_REGEX, Name: name, Value: re})
	}
}

func query(name, value string) matchOpt {
	return func(rm *pb.RouteMatch) {
		rm.QueryParams = append(rm.QueryParams, &pb.StringMatch{Type: pb.MatchType_MATCH_TYPE_EXACT, Name: name, Value: value})
	}
}

func queryRE(name, re string) matchOpt {
	return func(rm *pb.RouteMatch) {
		rm.QueryParams = append(rm.QueryParams, &pb.StringMatch{Type: pb.MatchType_MATCH_TYPE_REGEX, Name: name, Value: re})
	}
}

// req builds a server-side request; target is an absolute URL whose host
// becomes Request.Host; kv are header name/value pairs.
func req(method, target string, kv ...string) *http.Request {
	r := httptest.NewRequest(method, target, nil)
	for i := 0; i+1 < len(kv); i += 2 {
		r.Header.Add(kv[i], kv[i+1])
	}
	return r
}

func mustCompile(t testing.TB, l *pb.Listener, routes ...*pb.Route) *Router {
	t.Helper()
	rt, err := Compile(l, routes)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	return rt
}

// got names the rule a request matched as "<route>:<rule name>", "" when
// none.
func got(rt *Router, r *http.Request) string {
	m, ok := rt.Match(r)
	if !ok {
		return ""
	}
	return m.Rule.Route + ":" + m.Rule.Name
}
