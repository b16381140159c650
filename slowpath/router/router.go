package router

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

// Router is the compiled, immutable router of one listener. It is safe for
// concurrent use.
type Router struct {
	listener string
	exact    map[string]*group // by hostname
	wildcard map[string]*group // by ".suffix" of "*.suffix"
	any      *group            // routes that accept every host
	rules    []*Rule
	// headers: a match tests a header field other than Host.
	headers bool

	// compiled is what Compile made of each route, for CompileFrom; port
	// and https are the listener's, which a route's filters depend on.
	compiled map[*pb.Route]*compiledRoute
	port     uint32
	https    bool
}

// compiledRoute is what Compile made of one route: its normalized
// hostnames, its rules and their entries. Shared by the routers compiled
// from one another and never modified: the entries may be a group's, which
// its router sorted before it served, so a router taking them copies them.
type compiledRoute struct {
	hosts   []string
	rules   []Rule
	entries []entry
}

// group holds the entries of the routes whose effective hostnames include
// one hostname, in precedence order.
type group struct {
	hostname string // "" for any host
	entries  []entry
}

// Rule is one compiled rule of a route. Its fields must not be modified.
type Rule struct {
	// Route is the route's name, "<namespace>/<name>".
	Route string
	// Name is the rule's name; it may be empty.
	Name string
	// Index is the rule's position in the route.
	Index int
	// Backends with their weights as given. When they are empty or their
	// weights are all zero (TotalWeight == 0) the proxy answers 500, as
	// Gateway API specifies, unless the rule redirects.
	Backends []Backend
	// TotalWeight is the sum of the backends' weights.
	TotalWeight uint64
	// Retry is nil when the rule does not retry.
	Retry *pb.RetryPolicy
	// Timeouts is nil when the snapshot sets none.
	Timeouts *pb.RouteTimeouts
	// Policies are the names of the policies applied, in order.
	Policies []string
	// Filters are the rule's compiled filters.
	Filters Filters
}

// Backend is one weighted backend of a rule.
type Backend struct {
	// Name is "<namespace>/<name>".
	Name string
	// Weight is relative to the rule's other backends; zero takes no
	// requests.
	Weight uint32
}

// Match is the result of Router.Match.
type Match struct {
	// Rule is the selected rule.
	Rule *Rule
	// PrefixLen is the length of the request path's part that the
	// PathPrefix match covered (the prefix without trailing slashes: 0 for
	// "/"), which ReplacePrefixMatch replaces; 0 for other path matches.
	PrefixLen int
	// MatchIndex is the position of the match in the rule's matches (0 for
	// a rule without matches).
	MatchIndex int
	// Hostname is the effective hostname that selected the route: exact,
	// "*.suffix", or "" for a route that accepts any host.
	Hostname string
}

// Error is an error in one route, returned (joined with the others) by
// Compile.
type Error struct {
	// Route is the route's name.
	Route string
	// Rule is the index of the rule, or -1 for an error in the route itself.
	Rule int
	// RuleName is the rule's name, if any.
	RuleName string
	// Field is the offending field, relative to the rule (or the route when
	// Rule is -1), such as "matches[1].path".
	Field string
	// Err says what is wrong.
	Err error
}

// Error formats the error as
// "route <name> rule <index> (<rule name>): <field>: <problem>".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("route ")
	b.WriteString(e.Route)
	if e.Rule >= 0 {
		fmt.Fprintf(&b, " rule %d", e.Rule)
		if e.RuleName != "" {
			fmt.Fprintf(&b, " (%s)", e.RuleName)
		}
	}
	b.WriteString(": ")
	b.WriteString(e.Field)
	b.WriteString(": ")
	b.WriteString(e.Err.Error())
	return b.String()
}

// Unwrap returns the problem, for errors.Is and errors.As.
func (e *Error) Unwrap() error { return e.Err }

// Compile builds the router of one listener from the routes attached to it:
// those of kind HTTP whose Listeners name l; the others are ignored. The
// input order of the routes breaks precedence ties. Bad input is an error
// naming the route, the rule and the field of each problem (*Error values
// joined; listener errors are plain errors); no Router is returned then, so
// the caller keeps serving its previous one. An unspecified match type means
// Gateway API's default: PathPrefix for paths, Exact for headers and query
// parameters; a match without a path is PathPrefix "/". Compile is
// deterministic and does not modify its arguments; Rule shares their pb
// messages.
func Compile(l *pb.Listener, routes []*pb.Route) (*Router, error) {
	return CompileFrom(nil, l, routes)
}

// CompileFrom is Compile, taking from prev, a router compiled before for a
// listener of the same port and scheme, what it made of the routes it was
// given too: the same *pb.Route values, which nothing modifies (snapshots
// are immutable; a standalone agent's build takes unchanged routes from
// its last build, snapshot.Memo). A route compiles once, not on every
// snapshot: with 3000 routes, compiling their rules was most of Compile's
// time. The result is what Compile gives (TestCompileFromIsCompile).
func CompileFrom(prev *Router, l *pb.Listener, routes []*pb.Route) (*Router, error) {
	if l == nil {
		return nil, errors.New("compile router: nil listener")
	}
	var errs []error
	listenerHosts := make([]string, 0, len(l.GetHostnames()))
	for i, h := range l.GetHostnames() {
		n, err := normalizeHostname(h)
		if err != nil {
			errs = append(errs, fmt.Errorf("listener %s: hostnames[%d] %q: %w", l.GetName(), i, h, err))
			continue
		}
		listenerHosts = append(listenerHosts, n)
	}
	listenerHosts = dedupe(listenerHosts)
	listenerHTTPS := l.GetProtocol() == pb.Protocol_PROTOCOL_HTTPS || l.GetProtocol() == pb.Protocol_PROTOCOL_HTTP3
	c := compiler{port: l.GetPort(), https: listenerHTTPS}
	var done map[*pb.Route]*compiledRoute
	if prev != nil && prev.port == c.port && prev.https == c.https {
		done = prev.compiled
	}
	c.size(l, routes, done)

	rt := &Router{listener: l.GetName(), exact: map[string]*group{}, wildcard: map[string]*group{},
		compiled: make(map[*pb.Route]*compiledRoute, len(routes)), port: c.port, https: c.https}
	if n := cap(c.rules); n > 0 {
		rt.rules = make([]*Rule, 0, n)
	}
	groups := map[string]*group{}
	var order []string // hostnames in first-seen order, so building is deterministic
	for ri, r := range routes {
		if !attached(r, l) {
			continue
		}
		var routeHosts []string
		var rules []Rule
		var entries []entry
		if cr := done[r]; cr != nil {
			routeHosts, rules = cr.hosts, cr.rules
			entries = take(&c.entries, len(cr.entries))
			copy(entries, cr.entries)
			for j := range entries {
				entries[j].route = int32(ri)
			}
			rt.compiled[r] = cr
		} else {
			routeHosts = take(&c.hosts, len(r.GetHostnames()))[:0]
			bad := false
			for i, h := range r.GetHostnames() {
				n, err := normalizeHostname(h)
				if err != nil {
					errs = append(errs, &Error{Route: r.GetName(), Rule: -1, Field: fmt.Sprintf("hostnames[%d]", i), Err: fmt.Errorf("%q: %w", h, err)})
					bad = true
					continue
				}
				routeHosts = append(routeHosts, n)
			}
			var rerrs []error
			rules, entries, rerrs = c.route(r, ri)
			if bad || len(rerrs) > 0 {
				errs = append(errs, rerrs...)
				continue
			}
			cr := &take(&c.compiled, 1)[0]
			*cr = compiledRoute{hosts: routeHosts, rules: rules, entries: entries}
			rt.compiled[r] = cr
		}
		for i := range rules {
			rt.rules = append(rt.rules, &rules[i])
		}
		for i := range entries {
			for _, h := range entries[i].conds().headers {
				rt.headers = rt.headers || !h.host
			}
		}
		for i, h := range effectiveHostnames(listenerHosts, routeHosts) {
			g := groups[h]
			if g == nil {
				g = &group{hostname: h}
				groups[h] = g
				order = append(order, h)
				if i == 0 {
					// The common case of a route alone on its hostname
					// takes the route's entries without a copy; capped, so
					// that another route's append copies them.
					g.entries = entries[:len(entries):len(entries)]
					continue
				}
			}
			g.entries = append(g.entries, entries...)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	for _, h := range order {
		g := groups[h]
		slices.SortStableFunc(g.entries, func(a, b entry) int { return compareEntries(&a, &b) })
		switch {
		case h == "":
			rt.any = g
		case isWildcard(h):
			rt.wildcard[h[1:]] = g
		default:
			rt.exact[h] = g
		}
	}
	return rt, nil
}

// attached reports whether Compile takes route r for listener l.
func attached(r *pb.Route, l *pb.Listener) bool {
	return r != nil && r.GetKind() == pb.RouteKind_ROUTE_KIND_HTTP && slices.Contains(r.GetListeners(), l.GetName())
}

// Listener returns the name of the listener the router was compiled for.
func (rt *Router) Listener() string { return rt.listener }

// Rules returns the compiled rules of every attached route, in route and
// rule order. The slice is shared and must not be modified.
func (rt *Router) Rules() []*Rule { return rt.rules }

// MatchesHeaders reports whether a match of the router tests a header
// field other than Host: without one, Match reads only the request's
// method, host, path and query, and an empty Request.Header will do.
func (rt *Router) MatchesHeaders() bool { return rt.headers }

// Match finds the rule for a request (see the package comment for the
// semantics); ok is false when no rule matches, which the proxy answers with
// 404. Match does not allocate unless the host has upper-case letters or a
// query parameter, a regular expression or a repeated header is matched.
func (rt *Router) Match(r *http.Request) (m Match, ok bool) {
	host := r.Host
	if host == "" && r.URL != nil {
		host = r.URL.Host
	}
	host = requestHost(host)
	path := requestPath(r)
	if g := rt.exact[host]; g != nil {
		if m, ok = g.match(r, path); ok {
			return m, true
		}
	}
	if len(rt.wildcard) > 0 {
		// Suffixes from the longest: the most specific wildcard first. The
		// wildcard label must not be empty, hence i from 1.
		for i := 1; i < len(host); i++ {
			if host[i] != '.' {
				continue
			}
			if g := rt.wildcard[host[i:]]; g != nil {
				if m, ok = g.match(r, path); ok {
					return m, true
				}
			}
		}
	}
	if rt.any != nil {
		return rt.any.match(r, path)
	}
	return Match{}, false
}

func (g *group) match(r *http.Request, path string) (Match, bool) {
	for i := range g.entries {
		e := &g.entries[i]
		if n, ok := e.matches(r, path); ok {
			return Match{Rule: e.rule, PrefixLen: n, MatchIndex: int(e.matchIdx), Hostname: g.hostname}, true
		}
	}
	return Match{}, false
}
