package lb

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"

	"github.com/cespare/xxhash/v2"

	"github.com/novaedge/novaedge/slowpath/endpoint"
)

var _ Balancer = (*ringHash)(nil)

// ringHash is consistent hashing on a ring, like Envoy's ring_hash: endpoint
// i owns the points xxhash("<addr>_0"), xxhash("<addr>_1"), … and a key goes
// to the owner of the first point at or after it, wrapping around.
//
// Endpoint i gets max(1, weight_i × 2^k) points (rounded up for negative
// k), with k the smallest integer that makes the ring at least
// RingMinSize, lowered while it would exceed RingMaxSize. Envoy scales
// weights by an arbitrary real factor instead; rounding the scale to a
// power of two means adding or removing an endpoint rarely changes the
// other endpoints' points, so only the keys of the endpoint that changed
// move. A ring therefore holds between RingMinSize and about twice that
// many points. Since the points of "<addr>_j" do not depend on the point
// count, a change of k keeps each endpoint's existing points and adds or
// removes some, which still moves only a share of the keys.
//
// The ring depends only on the set of {address, weight}.
type ringHash struct {
	pool
	hashes []uint64 // sorted
	owners []uint32 // owners[j] owns hashes[j]
}

func ringBounds(o Options) (lo, hi int) {
	lo, hi = o.RingMinSize, o.RingMaxSize
	if lo == 0 {
		lo = DefaultRingMinSize
	}
	if hi == 0 {
		hi = DefaultRingMaxSize
	}
	return lo, hi
}

// ringScaleMin and ringScaleMax bound the exponent k: 2^-40 makes every
// uint32 weight one point, 2^40 exceeds any sane ring.
const (
	ringScaleMin = -40
	ringScaleMax = 40
)

// ringPoints is the number of points of an endpoint of weight w at scale
// 2^k, saturating well above any ring size.
func ringPoints(w uint32, k int) uint64 {
	if k < 0 {
		s := uint(-k)
		return max(1, (uint64(w)+(1<<s)-1)>>s)
	}
	if uint64(w) > (1<<62)>>uint(k) {
		return 1 << 62
	}
	return uint64(w) << uint(k)
}

func ringSize(weights []uint32, k int) uint64 {
	var n uint64
	for _, w := range weights {
		n = min(n+ringPoints(w, k), 1<<62)
	}
	return n
}

func newRingHash(p pool, opts Options) (*ringHash, error) {
	r := &ringHash{pool: p}
	n := len(p.eps)
	if n == 0 {
		return r, nil
	}
	lo, hi := ringBounds(opts)
	if n > hi {
		return nil, fmt.Errorf("ring max size %d below the %d targets: %w", hi, n, ErrInvalidOptions)
	}
	k := ringScaleMin
	for k < ringScaleMax && ringSize(p.weights, k) < uint64(lo) && ringSize(p.weights, k+1) <= uint64(hi) {
		k++
	}
	type point struct {
		hash   uint64
		owner  uint32
		serial uint32
	}
	points := make([]point, 0, ringSize(p.weights, k))
	var buf []byte
	for i, ep := range p.eps {
		cnt := ringPoints(p.weights[i], k)
		for j := range cnt {
			buf = strconv.AppendUint(append(append(buf[:0], ep.Addr...), '_'), j, 10)
			points = append(points, point{hash: xxhash.Sum64(buf), owner: uint32(i), serial: uint32(j)})
		}
	}
	// Owners are sorted by address, so breaking hash ties by owner then
	// serial keeps the ring a function of the set.
	slices.SortFunc(points, func(a, b point) int {
		return cmp.Or(cmp.Compare(a.hash, b.hash), cmp.Compare(a.owner, b.owner), cmp.Compare(a.serial, b.serial))
	})
	r.hashes = make([]uint64, len(points))
	r.owners = make([]uint32, len(points))
	for j, pt := range points {
		r.hashes[j], r.owners[j] = pt.hash, pt.owner
	}
	return r, nil
}

// lookup returns the index of the first point at or after h, wrapping.
func (r *ringHash) lookup(h uint64) int {
	lo, hi := 0, len(r.hashes)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if r.hashes[m] < h {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == len(r.hashes) {
		return 0
	}
	return lo
}

func (r *ringHash) Pick(req *Request) *endpoint.Endpoint {
	c := newCtx(req)
	if req == nil || !req.HasHash {
		return r.pickRandom(&c)
	}
	if len(r.eps) == 0 {
		return nil
	}
	j := r.lookup(mix(req.Hash))
	ep := r.eps[r.owners[j]]
	if c.fine(ep) {
		return ep
	}
	v := r.view(&c)
	if !v.any {
		return nil
	}
	// Walk on to the next acceptable owner, as Envoy does; in panic mode
	// the key's own endpoint is acceptable even when unavailable.
	for k := range len(r.hashes) {
		ep = r.eps[r.owners[(j+k)%len(r.hashes)]]
		if v.accepts(&c, ep) {
			return ep
		}
	}
	// Every endpoint owns a point, so this is reached only when health
	// changed during the walk.
	return fallbackScan(&r.pool, &c, &v, int(r.owners[j]))
}

// fallbackScan returns the first acceptable endpoint at or after start,
// or nil.
func fallbackScan(p *pool, c *ctx, v *view, start int) *endpoint.Endpoint {
	n := len(p.eps)
	for k := range n {
		if ep := p.eps[(start+k)%n]; v.accepts(c, ep) {
			return ep
		}
	}
	return nil
}

// sortedByAddr returns targets sorted by address, the order hash policies
// build in so that their structures depend on the set only.
func sortedByAddr(targets []Target) []Target {
	s := slices.Clone(targets)
	slices.SortFunc(s, func(a, b Target) int { return cmp.Compare(a.EP.Addr, b.EP.Addr) })
	return s
}
