package lb

import (
	"cmp"
	"container/heap"
	"fmt"
	"math/bits"
	"slices"

	"github.com/cespare/xxhash/v2"

	"github.com/novaedge/novaedge/slowpath/endpoint"
)

var _ Balancer = (*maglev)(nil)

// maglev is Maglev consistent hashing (Eisenbud et al., NSDI 2016): a
// lookup table of prime size M is filled from per-endpoint permutations
// (offset + j × skip) mod M, with offset and skip hashed from the
// endpoint's address, and a key goes to the endpoint of slot key mod M.
//
// Weights: endpoint i gets a quota of exactly 1 + ⌊(M−n) × w_i / W⌋ slots
// (largest remainders rounded up), so every endpoint is reachable and
// shares follow the weights to within a slot. Endpoints take turns by
// stride scheduling: the next turn is the endpoint with the smallest
// (filled+1)/quota, ties to the smaller address. With equal weights that is
// the paper's round-robin order.
//
// Determinism: the turns are taken in address order and all arithmetic is
// integer, so the table depends only on the set of {address, weight} and is
// identical on every node and architecture.
//
// Unavailable endpoints: a key whose slot's endpoint is unacceptable is
// rehashed with up to maglevRehashes other seeds, which spreads an
// endpoint's keys over the others by their table shares, then the table is
// scanned on from its slot. Keys of acceptable endpoints never move, and a
// key returns to its endpoint when it recovers.
type maglev struct {
	pool
	m   uint64
	t16 []uint16 // the table when there are at most 65536 targets
	t32 []uint32 // the table otherwise
}

const (
	// maglevRehashes bounds the rehashes of a key whose endpoint is
	// unacceptable before scanning; with half the endpoints down, the
	// chance that all fail is 2^-8.
	maglevRehashes = 8
	// Seeds of the two hashes of an address.
	maglevOffsetSeed = 0x6f66667365746d67 // "offsetmg"
	maglevSkipSeed   = 0x736b69706d61676c // "skipmagl"
	// rehashStep is added per rehash before mixing (2^64 / golden ratio).
	rehashStep = 0x9e3779b97f4a7c15
)

func newMaglev(p pool, opts Options) (*maglev, error) {
	m := opts.MaglevTableSize
	if m == 0 {
		m = DefaultMaglevTableSize
	}
	n := len(p.eps)
	if uint64(n) > m {
		return nil, fmt.Errorf("maglev table size %d below the %d targets: %w", m, n, ErrInvalidOptions)
	}
	g := &maglev{pool: p, m: m}
	if n == 0 {
		return g, nil
	}
	table := buildMaglev(p, m)
	if n <= 1<<16 {
		g.t16 = make([]uint16, m)
		for s, i := range table {
			g.t16[s] = uint16(i)
		}
	} else {
		g.t32 = table
	}
	return g, nil
}

// maglevQuotas splits m slots by weight: 1 each, the rest by largest
// remainder, ties to the smaller index.
func maglevQuotas(weights []uint32, m uint64) []uint64 {
	n := uint64(len(weights))
	var total uint64
	for _, w := range weights {
		total += uint64(w)
	}
	rest := m - n
	q := make([]uint64, n)
	rem := make([]uint64, n)
	given := n
	for i, w := range weights {
		// rest < 2^24 and w < 2^32: the product fits.
		share := rest * uint64(w)
		q[i], rem[i] = 1+share/total, share%total
		given += q[i] - 1
	}
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	// Largest remainder first; the stable sort keeps ties in index order.
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(rem[b], rem[a]) })
	for _, i := range order[:m-given] {
		q[i]++
	}
	return q
}

// buildMaglev fills the table with indices into p.eps.
func buildMaglev(p pool, m uint64) []uint32 {
	n := len(p.eps)
	quota := maglevQuotas(p.weights, m)
	pos := make([]uint64, n)
	skip := make([]uint64, n)
	for i, ep := range p.eps {
		d := xxhash.NewWithSeed(maglevOffsetSeed)
		_, _ = d.WriteString(ep.Addr)
		pos[i] = d.Sum64() % m
		d.ResetWithSeed(maglevSkipSeed)
		_, _ = d.WriteString(ep.Addr)
		skip[i] = d.Sum64()%(max(m-1, 1)) + 1
	}
	const empty = ^uint32(0)
	table := make([]uint32, m)
	for s := range table {
		table[s] = empty
	}
	t := &turns{quota: quota, filled: make([]uint64, n)}
	for i := range n {
		t.idx = append(t.idx, i)
	}
	heap.Init(t)
	for range m {
		i := t.idx[0]
		for table[pos[i]] != empty {
			pos[i] = (pos[i] + skip[i]) % m
		}
		table[pos[i]] = uint32(i)
		pos[i] = (pos[i] + skip[i]) % m
		t.filled[i]++
		if t.filled[i] == quota[i] {
			heap.Pop(t)
		} else {
			heap.Fix(t, 0)
		}
	}
	return table
}

// turns is a min-heap of endpoint indices ordered by (filled+1)/quota, then
// index: stride scheduling in exact integer arithmetic.
type turns struct {
	idx           []int
	quota, filled []uint64
}

func (t *turns) Len() int { return len(t.idx) }

func (t *turns) Less(a, b int) bool {
	i, j := t.idx[a], t.idx[b]
	// (filled_i+1)/quota_i < (filled_j+1)/quota_j; both sides < 2^48.
	l, r := (t.filled[i]+1)*t.quota[j], (t.filled[j]+1)*t.quota[i]
	if l != r {
		return l < r
	}
	return i < j
}

func (t *turns) Swap(a, b int) { t.idx[a], t.idx[b] = t.idx[b], t.idx[a] }

func (t *turns) Push(x any) { t.idx = append(t.idx, x.(int)) }

func (t *turns) Pop() any {
	x := t.idx[len(t.idx)-1]
	t.idx = t.idx[:len(t.idx)-1]
	return x
}

func (g *maglev) at(slot uint64) int {
	if g.t16 != nil {
		return int(g.t16[slot])
	}
	return int(g.t32[slot])
}

func (g *maglev) slot(h uint64) uint64 {
	s, _ := bits.Mul64(h, g.m)
	return s
}

func (g *maglev) Pick(req *Request) *endpoint.Endpoint {
	c := newCtx(req)
	if req == nil || !req.HasHash {
		return g.pickRandom(&c)
	}
	if len(g.eps) == 0 {
		return nil
	}
	h := mix(req.Hash)
	s := g.slot(h)
	ep := g.eps[g.at(s)]
	if c.fine(ep) {
		return ep
	}
	v := g.view(&c)
	if !v.any {
		return nil
	}
	if v.accepts(&c, ep) {
		return ep
	}
	for k := uint64(1); k <= maglevRehashes; k++ {
		if e := g.eps[g.at(g.slot(mix(h+k*rehashStep)))]; v.accepts(&c, e) {
			return e
		}
	}
	for k := uint64(1); k < g.m; k++ {
		if e := g.eps[g.at((s+k)%g.m)]; v.accepts(&c, e) {
			return e
		}
	}
	return fallbackScan(&g.pool, &c, &v, g.at(s))
}
