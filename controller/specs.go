package controller

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/novaedge/novaedge/api/v1alpha1"
)

// specCache keeps the spec of each ProxyRoute as first listed at its
// generation, and gives later lists of the same generation that spec, so
// that builds see an unchanged route's rules as the same objects and take
// the route from their snapshot.Memo instead of building it again. Every
// List from the cache deep-copies the objects; without this, no route
// would ever be found in the Memo. With the status subresource, a route's
// generation changes with every change of its spec, and nothing here
// modifies a listed route's spec (the decider writes status only).
type specCache struct {
	mu     sync.Mutex
	routes map[types.UID]keptSpec
}

type keptSpec struct {
	generation int64
	spec       v1alpha1.ProxyRouteSpec
}

// stabilize gives each of routes the spec kept for its generation, and
// keeps what it lists for the next call (routes gone are forgotten).
func (s *specCache) stabilize(routes []v1alpha1.ProxyRoute) {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := make(map[types.UID]keptSpec, len(routes))
	for i := range routes {
		r := &routes[i]
		if r.UID == "" || r.Generation == 0 {
			continue // not from an API server: nothing says when it changed
		}
		if k, ok := s.routes[r.UID]; ok && k.generation == r.Generation {
			r.Spec = k.spec
		}
		next[r.UID] = keptSpec{generation: r.Generation, spec: r.Spec}
	}
	s.routes = next
}
