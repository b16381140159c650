package snapshot

import (
	"github.com/novaedge/novaedge/ipam"
)

// AcceptedPools returns the ProxyIPPools of in that a build accepts (valid,
// not overlapping an older pool), parsed, oldest first. The controller
// allocates from exactly these, so its decisions and the builder's checks
// never disagree.
func AcceptedPools(in *Input) []*ipam.Pool {
	b := newBuilder(in, Options{})
	b.buildPools()
	var out []*ipam.Pool
	for _, p := range b.pools {
		if p.accepted {
			out = append(out, p.pool)
		}
	}
	return out
}
