package maglev

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strings"

	"github.com/cespare/xxhash/v2"
)

const (
	// DefaultSize is the table size M used when none is given: the prime
	// 65537, about 65 slots per backend at 1000 backends.
	DefaultSize = 65537
	// MaxSize bounds the table size; it keeps every product of a size and
	// a 32-bit weight or slot count within 64 bits and a table within
	// 64 MiB.
	MaxSize = 1 << 24

	// Seeds of the two hashes of a backend key ("offsetmg", "skipmagl").
	offsetSeed = 0x6f66667365746d67
	skipSeed   = 0x736b69706d61676c

	// denseIDLimit is the largest ID looked up through a slice rather than
	// a map; fast-path IDs are small backend indices.
	denseIDLimit = 1 << 22
)

var (
	// ErrInvalidSize reports a table size that is not a prime in [2, MaxSize].
	ErrInvalidSize = errors.New("invalid maglev table size")
	// ErrNoBackends reports a backend set that is empty or has only zero
	// weights.
	ErrNoBackends = errors.New("no backends with a non-zero weight")
	// ErrInvalidBackend reports an empty or duplicate key or a duplicate ID.
	ErrInvalidBackend = errors.New("invalid backend")
	// ErrTooManyBackends reports more backends of non-zero weight than
	// table slots.
	ErrTooManyBackends = errors.New("more backends than table slots")
)

// Backend is one member of the set a table is built from.
type Backend struct {
	// Key is the backend's stable identity, "address:port"; it seeds the
	// backend's permutation and orders backends. It must be non-empty and
	// unique in a set.
	Key string
	// Weight is the backend's relative share of slots; 0 means the
	// backend gets no slots (it drains).
	Weight uint32
	// ID is what the table stores for the backend's slots: the fast path's
	// backend index. It must be unique in a set and, for BuildFrom to keep
	// slots, stable across builds.
	ID uint32
}

// Table maps a slot to the ID of the backend that owns it; its length is
// the table size M.
type Table []uint32

// Lookup returns the ID of the backend owning slot hash mod M, as the BPF
// program computes it. It panics on an empty Table, which Build never
// returns.
func (t Table) Lookup(hash uint64) uint32 {
	return t[hash%uint64(len(t))]
}

// Builder builds tables of one size, reusing its scratch space between
// builds so that a rebuild allocates little besides the returned Table. A
// Builder is not safe for concurrent use.
type Builder struct {
	m uint32

	bs      []Backend        // the input, sorted by key
	keys    []sortKey        // for sortByKey
	idDense []int32          // ID → index+1 (0: absent), for small IDs
	idMap   map[uint32]int32 // ID → index+1, when some ID is large
	tally   []uint32         // tally[i+1]: slots backend i owns in prev; tally[0]: slots of non-members
	owner   []uint32         // owner[s]: index+1 of the backend owning prev[s], 0 if none
	state   []uint8          // what keep does with the slots of backend index+1
	quota   []uint32
	need    []uint32 // slots still to claim
	rem     []uint64 // remainder of the quota division
	rank    []int32
	perms   []perm
	used    []uint64 // occupied slots, one bit each
	tail    []uint32 // the free slots, once few are left
	over    []overSlot
	walkers []walker
	digest  xxhash.Digest
	mod     divisor // by M
	skips   divisor // by M−1, for the skips
	q64     uint64  // ⌊2^64/M⌋, for fixed
	r64     uint64  // 2^64 mod M
}

// perm is a backend's permutation: slot(j) = (off + j·skip) mod M.
type perm struct {
	off  uint32
	skip uint32 // 0 until computed
	inv  uint32 // skip⁻¹ mod M; 0 until computed
}

// walker is a backend's state during the fill. The fields a claim needs
// sit together, so that a claim reads one small struct rather than one
// cache line in each of half a dozen per-backend slices.
type walker struct {
	q    uint64 // next position along the permutation, in fixed point (see fixedWalk)
	s    uint64 // skip in fixed point
	id   uint32
	per  uint32 // ⌊need/R⌋: slots claimed in every round
	frac uint32 // need mod R
	acc  uint32 // r·frac mod R before round r
	idx  int32  // index in b.bs
}

// overSlot is a slot of an over-quota backend, with its position in that
// backend's permutation.
type overSlot struct {
	owner int32
	pos   uint32
	slot  uint32
}

// What keep does with the previous slots of a backend.
const (
	slotFree = iota // not a member, or a member without quota: free the slots
	slotKeep        // within its quota: keep every slot
	slotOver        // over its quota: keep the earliest in its permutation
)

// NewBuilder returns a Builder of tables of size m; 0 means DefaultSize.
// The size must be a prime no larger than MaxSize.
func NewBuilder(m uint32) (*Builder, error) {
	if m == 0 {
		m = DefaultSize
	}
	if m > MaxSize || !isPrime(m) {
		return nil, fmt.Errorf("size %d is not a prime in [2, %d]: %w", m, MaxSize, ErrInvalidSize)
	}
	q64, r64 := bits.Div64(1, 0, uint64(m))
	return &Builder{m: m, mod: newDivisor(uint64(m)), skips: newDivisor(uint64(m - 1)), q64: q64, r64: r64}, nil
}

// Size returns the table size M.
func (b *Builder) Size() uint32 { return b.m }

// Build returns a table of DefaultSize for backends, without lineage.
func Build(backends []Backend) (Table, error) {
	return BuildFrom(nil, backends)
}

// BuildFrom returns a table of DefaultSize for backends that keeps the
// slots of prev whose owners stay (see Builder.BuildFrom).
func BuildFrom(prev Table, backends []Backend) (Table, error) {
	b, err := NewBuilder(DefaultSize)
	if err != nil {
		return nil, err
	}
	return b.BuildFrom(prev, backends)
}

// Build returns a new table for backends, without lineage. The result
// depends only on the set of backends, not on their order.
func (b *Builder) Build(backends []Backend) (Table, error) {
	return b.BuildFrom(nil, backends)
}

// BuildFrom returns a new table for backends that changes as few slots of
// prev as the new quotas allow: a slot keeps its owner if a backend with
// that ID is still a member and within its quota. A nil prev, or one whose
// length is not the builder's size, gives the same table as Build. The
// result depends only on prev and the set of backends.
func (b *Builder) BuildFrom(prev Table, backends []Backend) (Table, error) {
	if err := b.load(backends); err != nil {
		return nil, err
	}
	defer b.unindex()
	if len(prev) != int(b.m) {
		prev = nil
	}
	clear(b.tally)
	if prev != nil {
		b.count(prev)
	}
	b.quotas()
	var out Table
	if prev != nil {
		// A kept slot keeps prev's ID and the fill writes every free slot,
		// so the table starts as a copy of prev; Clone, unlike make, does
		// not zero the memory first.
		out = slices.Clone(prev)
		b.keep()
	} else {
		out = make(Table, b.m)
		clear(b.used)
		copy(b.need, b.quota)
	}
	b.fill(out)
	return out, nil
}

// load validates backends and sorts a copy of them by key into b.bs,
// sizing the scratch space and indexing IDs.
func (b *Builder) load(backends []Backend) error {
	b.sortByKey(backends)
	n := len(b.bs)
	var live, maxID uint32
	for i, be := range b.bs {
		if be.Key == "" {
			return fmt.Errorf("backend with ID %d has an empty key: %w", be.ID, ErrInvalidBackend)
		}
		if i > 0 && b.bs[i-1].Key == be.Key {
			return fmt.Errorf("duplicate key %q: %w", be.Key, ErrInvalidBackend)
		}
		if be.Weight > 0 {
			live++
		}
		maxID = max(maxID, be.ID)
	}
	if live == 0 {
		return fmt.Errorf("%d backends: %w", n, ErrNoBackends)
	}
	if live > b.m {
		return fmt.Errorf("%d backends of non-zero weight for %d slots: %w", live, b.m, ErrTooManyBackends)
	}
	b.tally = grow(b.tally, n+1)
	b.state = grow(b.state, n+1)
	b.quota = grow(b.quota, n)
	b.need = grow(b.need, n)
	b.rem = grow(b.rem, n)
	b.perms = grow(b.perms, n)
	b.used = grow(b.used, int(b.m+63)/64)
	clear(b.perms)
	if maxID < denseIDLimit {
		b.idMap = nil
		b.idDense = grow(b.idDense, int(maxID)+1)
		for i, be := range b.bs {
			if j := b.idDense[be.ID]; j != 0 {
				// Undo what was set so the slice stays all zero.
				for _, prior := range b.bs[:i] {
					b.idDense[prior.ID] = 0
				}
				return fmt.Errorf("duplicate ID %d (keys %q and %q): %w",
					be.ID, b.bs[j-1].Key, be.Key, ErrInvalidBackend)
			}
			b.idDense[be.ID] = int32(i) + 1
		}
		return nil
	}
	b.idMap = make(map[uint32]int32, n)
	for i, be := range b.bs {
		if j, dup := b.idMap[be.ID]; dup {
			return fmt.Errorf("duplicate ID %d (keys %q and %q): %w", be.ID, b.bs[j-1].Key, be.Key, ErrInvalidBackend)
		}
		b.idMap[be.ID] = int32(i) + 1
	}
	return nil
}

// sortByKey sets b.bs to backends sorted by key.
//
// It sorts the keys' first 16 bytes as two integers and compares whole
// strings only where those are equal: most comparisons are then two
// integer compares rather than a call comparing strings, which takes
// about 40% off the sort. An unstable sort is enough: a build with two
// equal keys fails, and unique keys have only one order.
func (b *Builder) sortByKey(backends []Backend) {
	b.keys = b.keys[:0]
	for i, be := range backends {
		var buf [16]byte
		copy(buf[:], be.Key)
		b.keys = append(b.keys, sortKey{
			hi: binary.BigEndian.Uint64(buf[:8]),
			lo: binary.BigEndian.Uint64(buf[8:]),
			i:  int32(i),
		})
	}
	slices.SortFunc(b.keys, func(x, y sortKey) int {
		switch {
		case x.hi != y.hi:
			return cmp.Compare(x.hi, y.hi)
		case x.lo != y.lo:
			return cmp.Compare(x.lo, y.lo)
		}
		// The zero padding makes "a" and "a\x00" equal here, so this is
		// needed for short keys too.
		return strings.Compare(backends[x.i].Key, backends[y.i].Key)
	})
	b.bs = b.bs[:0]
	for _, k := range b.keys {
		b.bs = append(b.bs, backends[k.i])
	}
}

// sortKey is a backend's key's first 16 bytes, big-endian and padded with
// zeros, and the backend's index in the input.
type sortKey struct {
	hi, lo uint64
	i      int32
}

// unindex clears the dense ID index so the next build starts from zeros
// without clearing the whole slice.
func (b *Builder) unindex() {
	if b.idMap != nil {
		return
	}
	for _, be := range b.bs {
		b.idDense[be.ID] = 0
	}
}

// count records in b.owner the backend owning each slot of prev and in
// b.tally how many slots each backend owns, so that keep reads the owner
// instead of looking each ID up a second time.
func (b *Builder) count(prev Table) {
	b.owner = grow(b.owner, len(prev))
	owner, tally := b.owner[:len(prev)], b.tally
	if b.idMap != nil {
		for s, id := range prev {
			k := b.idMap[id] // 0 when absent
			owner[s] = uint32(k)
			tally[k]++
		}
		return
	}
	dense := b.idDense
	for s, id := range prev {
		var k int32
		if id < uint32(len(dense)) {
			k = dense[id]
		}
		owner[s] = uint32(k)
		// Non-members land in tally[0]: no branch on membership, which
		// is as unpredictable as the IDs are mixed.
		tally[k]++
	}
}

// quotas sets b.quota: the floor of each backend's share, plus one for
// the backends first in rounding order until the shares add up to M.
func (b *Builder) quotas() {
	var total uint64
	for _, be := range b.bs {
		total += uint64(be.Weight)
	}
	m := uint64(b.m)
	left := m
	b.rank = b.rank[:0]
	byTotal := newDivisor(total)
	for i, be := range b.bs {
		// m ≤ 2^24 and the weight < 2^32: the product fits in 56 bits.
		q, r := byTotal.divMod(m * uint64(be.Weight))
		b.quota[i], b.rem[i] = uint32(q), r
		left -= q
		if b.rem[i] > 0 {
			b.rank = append(b.rank, int32(i))
		}
	}
	if left == 0 {
		return
	}
	// The fractional parts add up to left, each below 1, so at least left
	// backends have one. Lineage first: a backend that already owns more
	// than its floor keeps the extra slot instead of moving it. Then the
	// largest remainder, then the key (the index).
	count := b.tally[1:]
	slices.SortFunc(b.rank, func(x, y int32) int {
		sx, sy := count[x] > b.quota[x], count[y] > b.quota[y]
		if sx != sy {
			if sx {
				return -1
			}
			return 1
		}
		if b.rem[x] != b.rem[y] {
			if b.rem[x] > b.rem[y] {
				return -1
			}
			return 1
		}
		return int(x) - int(y)
	})
	for _, i := range b.rank[:left] {
		b.quota[i]++
	}
}

// perm returns backend i's permutation, computing it on first use: a
// rebuild that moves few slots hashes only the few backends involved.
func (b *Builder) perm(i int) *perm {
	p := &b.perms[i]
	if p.skip != 0 {
		return p
	}
	key := b.bs[i].Key
	b.digest.ResetWithSeed(offsetSeed)
	_, _ = b.digest.WriteString(key)
	p.off = uint32(b.mod.mod(b.digest.Sum64()))
	b.digest.ResetWithSeed(skipSeed)
	_, _ = b.digest.WriteString(key)
	p.skip = 1
	if b.m > 2 {
		p.skip = uint32(b.skips.mod(b.digest.Sum64())) + 1
	}
	return p
}

// inverse returns skip⁻¹ mod M for permutation p, computing it on first
// use.
func (b *Builder) inverse(p *perm) uint32 {
	if p.inv == 0 {
		// Fermat: M is prime.
		p.inv = uint32(b.powMod(uint64(p.skip), uint64(b.m)-2))
	}
	return p.inv
}

// keep marks used the slots of prev (recorded in b.owner) whose owners stay
// within their quotas and sets every backend's need. An over-quota backend
// keeps the slots earliest in its permutation. The table is already a copy
// of prev, so kept slots need no write.
func (b *Builder) keep() {
	n := len(b.bs)
	count, state := b.tally[1:], b.state
	state[0] = slotFree
	for i := range n {
		c, q := count[i], b.quota[i]
		switch {
		case q == 0:
			state[i+1], b.need[i] = slotFree, 0
		case c <= q:
			state[i+1], b.need[i] = slotKeep, q-c
		default:
			// Lowered to 0 below as the kept slots are chosen.
			state[i+1], b.need[i] = slotOver, q
		}
	}
	b.over = b.over[:0]
	m := int(b.m)
	owner := b.owner[:m]
	for w := range b.used {
		// Build each bitmap word in a register, shifting the slots in
		// from the top down: setting bits in memory slot by slot would
		// chain every slot on the previous store, and a shift by s&63
		// would tie up the shift-count register.
		var word uint64
		for s := min(w*64+64, m) - 1; s >= w*64; s-- {
			k := owner[s]
			st := state[k]
			word = word<<1 | uint64(st&slotKeep)
			if st == slotOver {
				b.over = append(b.over, overSlot{owner: int32(k) - 1, slot: uint32(s)})
			}
		}
		b.used[w] = word
	}
	if len(b.over) == 0 {
		return
	}
	mm := uint64(b.m)
	for k := range b.over {
		o := &b.over[k]
		p := b.perm(int(o.owner))
		// Position j solves off + j·skip ≡ slot (mod M).
		o.pos = uint32(b.mulMod(uint64(o.slot)+mm-uint64(p.off), uint64(b.inverse(p))))
	}
	slices.SortFunc(b.over, func(x, y overSlot) int {
		if x.owner != y.owner {
			return int(x.owner) - int(y.owner)
		}
		return int(x.pos) - int(y.pos)
	})
	for _, o := range b.over {
		if b.need[o.owner] > 0 {
			b.used[o.slot>>6] |= 1 << (o.slot & 63)
			b.need[o.owner]--
		}
	}
}

// fill gives every free slot of out to the backends still short of their
// quotas, in population rounds along their permutations.
func (b *Builder) fill(out Table) {
	ws := b.walkers[:0]
	var free uint32 // ≤ M
	for i, d := range b.need {
		if d == 0 {
			continue
		}
		p := b.perm(i)
		q, s := b.fixedWalk(p.off, p.skip)
		ws = append(ws, walker{q: q, s: s, id: b.bs[i].ID, per: d, idx: int32(i)})
		free += d
	}
	b.walkers = ws
	b.tail = b.tail[:0] // claimTail lists the free slots when it finds it empty
	if free == 0 {
		return
	}
	rounds := (free + uint32(len(ws)) - 1) / uint32(len(ws))
	// In round r a backend claims ⌊(r+1)·d/R⌋ − ⌊r·d/R⌋ slots, which is
	// ⌊d/R⌋ plus one when (r·(d mod R)) mod R + d mod R reaches R. Keeping
	// that sum per backend (claims) replaces two 64-bit divisions per
	// backend and round by an add and a compare.
	for k := range ws {
		ws[k].per, ws[k].frac = ws[k].per/rounds, ws[k].per%rounds
	}
	f := filler{used: b.used, out: out, m: uint64(b.m), crowded: uint32(uint64(b.m) * 3 / 4), packed: uint32(uint64(b.m) * 3 / 16)}
	r, free := f.walkRounds(ws, rounds, free)
	// The last claims, one at a time: walking while many slots are free,
	// scanning the free slots once few are.
	for ; r < rounds; r++ {
		for k := range ws {
			w := &ws[k]
			for c := w.claims(rounds); c > 0; c-- {
				// The tail comes first: once claimTail has listed the
				// free slots, every claim must go through that list.
				switch {
				case free <= tailSlots:
					b.claimTail(out, w)
				case free > f.packed && free <= f.crowded:
					f.walkBatch(w, 1)
				default:
					f.walk(w, 1)
				}
				free--
			}
		}
	}
}

// claims returns the number of slots w claims in the next of R rounds.
func (w *walker) claims(rounds uint32) uint32 {
	acc, c := w.acc+w.frac, w.per
	if acc >= rounds {
		acc -= rounds
		c++
	}
	w.acc = acc
	return c
}

// filler holds what a walk along a permutation needs.
type filler struct {
	used []uint64
	out  Table
	m    uint64
	// walkBatch rather than walk while crowded ≥ free > packed, that is
	// while between a quarter and 13/16 of the table is taken (see
	// walkBatch).
	crowded, packed uint32
}

// walkRounds runs whole rounds from the first on while a round cannot
// bring the free slots below tailSlots, and returns the next round and the
// number of free slots left.
func (f *filler) walkRounds(ws []walker, rounds, free uint32) (uint32, uint32) {
	var most uint32 // the most slots a round claims
	for k := range ws {
		most += ws[k].per + 1
	}
	for r := range rounds {
		if free < tailSlots+most {
			return r, free
		}
		if free > f.crowded {
			// Most claims take the first slot they probe: claim it
			// here, where it costs a multiplication and a load, and
			// call walk only for the rest.
			used, out, m := f.used, f.out, f.m
			for k := range ws {
				w := &ws[k]
				c := w.claims(rounds)
				if c == 1 {
					pos, _ := bits.Mul64(w.q, m)
					if word := used[pos>>6]; word&(1<<(pos&63)) == 0 {
						used[pos>>6] = word | 1<<(pos&63)
						out[pos] = w.id
						w.q += w.s
						free--
						continue
					}
				}
				f.walk(w, c)
				free -= c
			}
			continue
		}
		if free <= f.packed {
			// Most probes hit a taken slot: walk's branch is right.
			for k := range ws {
				c := ws[k].claims(rounds)
				f.walk(&ws[k], c)
				free -= c
			}
			continue
		}
		// Free and taken slots are both common: probe in fours.
		for k := range ws {
			c := ws[k].claims(rounds)
			f.walkBatch(&ws[k], c)
			free -= c
		}
	}
	return rounds, free
}

// walk gives w's backend the next c free slots along its permutation.
//
// It is kept out of line: inlined into the loops over the rounds, it
// leaves the compiler short of registers, and the values it then keeps
// on the stack are reloaded on every step of the permutation.
//
//go:noinline
func (f *filler) walk(w *walker, c uint32) {
	used, out, m := f.used, f.out, f.m
	q, s, id := w.q, w.s, w.id
	for ; c > 0; c-- {
		pos, _ := bits.Mul64(q, m)
		for used[pos>>6]&(1<<(pos&63)) != 0 {
			q += s
			pos, _ = bits.Mul64(q, m)
		}
		used[pos>>6] |= 1 << (pos & 63)
		out[pos] = id
		q += s
	}
	w.q = q
}

// walkBatch is walk for a table filled part way: it probes the next
// four positions at once and takes the first free one (the lowest clear
// bit of busy), which is the slot walk would find.
//
// walk's loop branches once per probe on whether the slot is taken. While
// between a quarter and 13/16 of the table is taken, that branch goes
// either way often enough that its mispredictions set the pace. Four
// probes without a branch between them cost more multiplications and
// loads, which run in parallel, and the one branch left, on whether all
// four are taken, is mostly right. Outside that window walk's own branch
// is mostly right and its loop is cheaper per probe (measured: batching
// from the start, or to the end, was slower). Probes past the slot found
// are discarded, so probing positions beyond the end of the permutation
// (j ≥ M) does no harm: the fixed-point slot of any q is below M, and
// only the first free probe is taken.
//
//go:noinline
func (f *filler) walkBatch(w *walker, c uint32) {
	used, out, m := f.used, f.out, f.m
	q, s := w.q, w.s
	for ; c > 0; c-- {
		for {
			q1 := q + s
			q2 := q1 + s
			q3 := q2 + s
			p0, _ := bits.Mul64(q, m)
			p1, _ := bits.Mul64(q1, m)
			p2, _ := bits.Mul64(q2, m)
			p3, _ := bits.Mul64(q3, m)
			busy := used[p0>>6]>>(p0&63)&1 |
				used[p1>>6]>>(p1&63)&1<<1 |
				used[p2>>6]>>(p2&63)&1<<2 |
				used[p3>>6]>>(p3&63)&1<<3
			if busy != 15 {
				q += uint64(bits.TrailingZeros64(^busy)) * s
				break
			}
			q = q3 + s
		}
		pos, _ := bits.Mul64(q, m)
		used[pos>>6] |= 1 << (pos & 63)
		out[pos] = w.id
		q += s
	}
	w.q = q
}

// fixedWalk returns the start q and the step s of the walk along the
// permutation slot(j) = (off + j·skip) mod M in fixed point: slot(j) is
// the integer part of q_j·M/2^64, where q_j = q + j·s mod 2^64.
//
// The plain walk adds skip and subtracts M when the sum reaches M; that
// compare-and-subtract (or the branch it replaces) sits on the chain of
// dependent steps and sets the pace of the whole fill. In fixed point
// the wrap around M is the free overflow of a uint64, a step is a single
// addition, and the multiplication that yields the slot is off that
// chain.
//
// Exactness: s = ⌊skip·2^64/M⌋ is at most 1 below skip·2^64/M, and q
// starts at ⌈off·2^64/M⌉ + 2^32. So for every j < M ≤ 2^24, q_j exceeds
// the exact slot(j)·2^64/M by more than 0 and at most 2^32+1, which is
// less than 2^-7 of a slot's 2^64/M ≥ 2^40: the integer part is slot(j).
// A walk never reaches j = M: every slot before its position is taken,
// so a backend still short of its quota finds a free one before.
func (b *Builder) fixedWalk(off, skip uint32) (q, s uint64) {
	q, exact := b.fixed(off)
	if !exact {
		q++
	}
	s, _ = b.fixed(skip)
	return q + 1<<32, s
}

// fixed returns ⌊x·2^64/M⌋ for x < M, and whether it is exact. With
// 2^64 = q64·M + r64 it is x·q64 + ⌊x·r64/M⌋, where x·r64 < 2^48: no
// 128-bit division.
func (b *Builder) fixed(x uint32) (uint64, bool) {
	q, r := b.mod.divMod(uint64(x) * b.r64)
	return uint64(x)*b.q64 + q, r == 0
}

// tailSlots is the number of free slots below which a claim scans the free
// slots rather than walking the permutation: walking costs about M/free
// probes, scanning about free multiplications, and both find the same slot.
const tailSlots = 192

// claimTail gives w's backend the free slot earliest in its permutation.
// Every slot of the permutation before the walk's position is taken, so
// this is the slot the walk would find.
//
// The position of slot s in the permutation is j = (s − off)·skip⁻¹ mod
// M. Scaled to fixed point, j·2^64/M is (s + M − off)·v mod 2^64 with
// v = ⌈skip⁻¹·2^64/M⌉, give or take less than 2M: one multiplication per
// free slot instead of a reduction modulo M. Positions 2^64/M ≥ 2^40
// apart stay in order under so small an excess (v exceeds the exact
// value by less than 1, times s + M − off < 2M), so the smallest product
// is the earliest position.
func (b *Builder) claimTail(out Table, w *walker) {
	if len(b.tail) == 0 {
		// First tail claim: list the free slots.
		for i, word := range b.used {
			for x := ^word; x != 0; x &= x - 1 {
				if s := uint32(i*64 + bits.TrailingZeros64(x)); s < b.m {
					b.tail = append(b.tail, s)
				}
			}
		}
	}
	p := &b.perms[w.idx]
	m := uint64(b.m)
	v, exact := b.fixed(b.inverse(p))
	if !exact {
		v++
	}
	base := (m - uint64(p.off)) * v
	best, bestKey := 0, ^uint64(0)
	for k, s := range b.tail {
		if key := uint64(s)*v + base; key < bestKey {
			best, bestKey = k, key
		}
	}
	s := b.tail[best]
	b.tail[best] = b.tail[len(b.tail)-1]
	b.tail = b.tail[:len(b.tail)-1]
	b.used[s>>6] |= 1 << (s & 63)
	out[s] = w.id
}

// mulMod returns x·y mod M for x < 2M and y < M.
func (b *Builder) mulMod(x, y uint64) uint64 {
	_, r := b.mod.divMod(x * y) // < 2^49
	return r
}

// powMod returns x^e mod M.
func (b *Builder) powMod(x, e uint64) uint64 {
	r := uint64(1) % uint64(b.m)
	for ; e > 0; e >>= 1 {
		if e&1 == 1 {
			r = b.mulMod(r, x)
		}
		x = b.mulMod(x, x)
	}
	return r
}

// divisor divides by a fixed d without a DIV instruction, which takes
// tens of cycles: for x < 2^57 the quotient estimate ⌊x·⌊(2^64−1)/d⌋/2^64⌋
// errs by less than 2x/2^64 < 2^-6, so it is exact or one short, and one
// compare corrects it.
type divisor struct {
	d, inv uint64
	p32    uint64 // 2^32 mod d
}

func newDivisor(d uint64) divisor {
	return divisor{d: d, inv: ^uint64(0) / d, p32: (1 << 32) % d}
}

// divMod returns x/d and x mod d for x < 2^57.
func (v divisor) divMod(x uint64) (q, r uint64) {
	q, _ = bits.Mul64(x, v.inv)
	r = x - q*v.d
	if r >= v.d {
		q++
		r -= v.d
	}
	return q, r
}

// mod returns x mod d for any x, when d < 2^24: x = h·2^32 + l is
// congruent to h·(2^32 mod d) + l, which is below 2^57.
func (v divisor) mod(x uint64) uint64 {
	_, r := v.divMod(x>>32*v.p32 + x&(1<<32-1))
	return r
}

// grow returns s resized to n, reusing its array when large enough.
func grow[T any](s []T, n int) []T {
	if cap(s) >= n {
		return s[:n]
	}
	return make([]T, n)
}

// isPrime reports whether n is prime, by trial division (n ≤ MaxSize).
func isPrime(n uint32) bool {
	if n < 2 {
		return false
	}
	for d := uint32(2); d*d <= n; d++ {
		if n%d == 0 {
			return false
		}
	}
	return true
}
