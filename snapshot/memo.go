package snapshot

import (
	"slices"
	"sync"
	"time"

	"github.com/novaedge/novaedge/api/v1alpha1"
	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

// Memo carries the HTTP routes one build made into the next build with the
// same Memo (Options.Memo), so that a build of thousands of routes of which
// one changed does not make every route again: with 3000 routes, making
// their rules was most of a build's time and allocations.
//
// A route is taken from the memo, instead of built, only when the next
// build would build the same:
//   - its spec.rules are the same array as when it was built (an object
//     that changed is a new object: decoded again by the loader, or
//     replaced in an informer's cache; callers must not modify an object
//     of an Input in place between builds that share a Memo);
//   - its name, namespace and hostnames are equal, and so are the policies
//     its policyRefs resolve to now (none of its rules has policyRefs);
//   - it attaches to the same listeners, all HTTP (attachment is resolved
//     again on every build: it depends on gateways and namespaces);
//   - every backend its rules name (backendRefs, mirrors) still exists;
//   - building it gave no diagnostic at all, so there is none to repeat.
//
// These are everything the HTTP form of a route reads besides the route
// itself (builder.httpRules); TestMemoIsBuild checks it against Build
// without a Memo over sequences of edits. The routes taken are shared by
// the snapshots of both builds, which is safe because nothing modifies a
// built snapshot. A Memo holds only what the last build used or made. It
// may be shared by builds of different inputs and nodes (one at a time).
type Memo struct {
	// Hold, when not zero, is how long the memo keeps what the last build
	// used or made: after Hold without a build it lets go of it, so a
	// process at rest does not keep the routes' objects for a next build
	// that may never come (the standalone agent's loader drops its own
	// after a quiet spell, which makes the memo's useless anyway).
	Hold time.Duration

	mu sync.Mutex
	// last is what the last build used or made; next is being filled by
	// the build under way. Keyed by the address of the route's first
	// rule, which the entry's rules hold, so that the address cannot be
	// freed and reused by another route while the entry exists.
	last, next map[*v1alpha1.RouteRule]*memoRoute
	// routes finds the entries of next by the route they hold, for the
	// content hash (routeRecord).
	routes   map[*pb.Route]*memoRoute
	recalled int // routes taken from the memo, for tests
	// lastBuild and timer serve Hold.
	lastBuild time.Time
	timer     *time.Timer
}

type memoRoute struct {
	rules     []v1alpha1.RouteRule
	ns, name  string
	hostnames []string // as the spec lists them
	policies  []string // the route's resolved policies
	backends  []string // every backend its rules name
	out       *pb.Route
	// record is out's record in the cluster part's encoding, made by the
	// first build that hashed it (routeRecord).
	record []byte
}

// begin starts a build's use of m, which end finishes: builds that share
// a Memo run one at a time.
func (m *Memo) begin() {
	m.mu.Lock()
	m.next = make(map[*v1alpha1.RouteRule]*memoRoute, len(m.last))
	m.routes = make(map[*pb.Route]*memoRoute, len(m.last))
}

func (m *Memo) end() {
	m.last, m.next, m.routes = m.next, nil, nil
	if m.Hold > 0 {
		m.lastBuild = time.Now()
		if m.timer == nil {
			m.timer = time.AfterFunc(m.Hold, m.release)
		}
	}
	m.mu.Unlock()
}

// release lets go of what the last build left once Hold has passed since
// it, or waits for the rest of Hold.
func (m *Memo) release() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if left := m.Hold - time.Since(m.lastBuild); left > 0 {
		m.timer.Reset(left)
		return
	}
	m.last, m.timer = nil, nil
}

// keep puts e in the next generation.
func (m *Memo) keep(e *memoRoute) {
	m.next[&e.rules[0]] = e
	m.routes[e.out] = e
}

// routeRecord returns rt's record in the cluster part's encoding, kept in
// the memo when rt came from it: encoding 3000 routes to hash them was
// most of what a build with a Memo had left to do.
func (b *builder) routeRecord(rt *pb.Route) []byte {
	m := b.opts.Memo
	if m == nil {
		return routeRecord(rt)
	}
	e := m.routes[rt]
	if e == nil {
		return routeRecord(rt)
	}
	if e.record == nil {
		e.record = routeRecord(rt)
	}
	return e.record
}

// recall returns the route the memo holds for rt when the build would
// make the same (see Memo), or nil.
func (b *builder) recall(rt *v1alpha1.ProxyRoute, ns string, policies []string, atts []attachment) *pb.Route {
	m := b.opts.Memo
	if m == nil || len(rt.Spec.Rules) == 0 {
		return nil
	}
	e := m.last[&rt.Spec.Rules[0]]
	if e == nil || len(e.rules) != len(rt.Spec.Rules) || e.ns != ns || e.name != rt.Name ||
		!slices.Equal(e.hostnames, rt.Spec.Hostnames) || !slices.Equal(e.policies, policies) ||
		len(atts) != len(e.out.Listeners) {
		return nil
	}
	for _, a := range atts {
		if a.l.routeKind() != pb.RouteKind_ROUTE_KIND_HTTP || !slices.Contains(e.out.Listeners, a.l.pb.Name) {
			return nil
		}
	}
	for _, name := range e.backends {
		if b.backends[name] == nil {
			return nil
		}
	}
	m.keep(e)
	m.recalled++
	return e.out
}

// remember keeps out, the HTTP route just built from rt without a
// diagnostic, for the next build.
func (b *builder) remember(rt *v1alpha1.ProxyRoute, ns string, policies []string, out *pb.Route) {
	m := b.opts.Memo
	if m == nil || len(rt.Spec.Rules) == 0 {
		return
	}
	e := &memoRoute{rules: rt.Spec.Rules, ns: ns, name: rt.Name, hostnames: rt.Spec.Hostnames, policies: policies, out: out}
	for i := range rt.Spec.Rules {
		if len(rt.Spec.Rules[i].PolicyRefs) > 0 {
			return // resolved per build; not worth keeping
		}
	}
	for _, r := range out.Rules {
		for _, wb := range r.Backends {
			e.backends = append(e.backends, wb.Backend)
		}
		for _, f := range r.Filters {
			if mr := f.GetRequestMirror(); mr != nil {
				e.backends = append(e.backends, mr.Backend)
			}
		}
	}
	m.keep(e)
}
