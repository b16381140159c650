package controller

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/novaedge/novaedge/api/v1alpha1"
)

// specCache gives each ProxyRoute listed from the informer cache a spec of
// its own that stays the same object for as long as the cache holds the
// same object, so that builds see an unchanged route's rules as the same
// objects and take the route from their snapshot.Memo instead of building
// it again. Routes are listed without the cache's deep copy (which would
// give every build new objects, found in no Memo); own copies what a build
// may write (metadata and status: the decider sets conditions on them) on
// every list, and the spec only when the cache's object changed. An object
// the cache received again (an update, a relist after a CRD change that
// altered defaults) is a new object there even with the same generation,
// so its spec is copied again.
type specCache struct {
	mu     sync.Mutex
	routes map[types.UID]keptSpec
}

type keptSpec struct {
	// from is the cached object's rules: the entry holds them, so their
	// address, by which the object is recognized, cannot be reused while
	// it is here.
	from []v1alpha1.RouteRule
	spec v1alpha1.ProxyRouteSpec
}

// own makes routes, listed without a deep copy, the caller's: a copy of
// their metadata and status, and their spec as kept for the cached object
// they came from. Routes gone are forgotten.
func (s *specCache) own(routes []v1alpha1.ProxyRoute) {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := make(map[types.UID]keptSpec, len(routes))
	for i := range routes {
		r := &routes[i]
		r.ObjectMeta = *r.ObjectMeta.DeepCopy()
		r.Status = *r.Status.DeepCopy()
		k, ok := s.routes[r.UID]
		if !ok || !sameArray(k.from, r.Spec.Rules) {
			k = keptSpec{from: r.Spec.Rules, spec: *r.Spec.DeepCopy()}
		}
		r.Spec = k.spec
		if r.UID != "" && len(k.from) > 0 {
			next[r.UID] = k
		}
	}
	s.routes = next
}

// sameArray reports whether a and b are the same elements of one array.
func sameArray(a, b []v1alpha1.RouteRule) bool {
	return len(a) > 0 && len(a) == len(b) && &a[0] == &b[0]
}
