package maglev

import (
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
	idDense []int32          // ID → index+1 (0: absent), for small IDs
	idMap   map[uint32]int32 // ID → index, when some ID is large
	count   []uint32         // slots owned in the previous table
	quota   []uint32
	need    []uint32 // slots still to claim
	rem     []uint64 // remainder of the quota division
	rank    []int32
	offset  []uint32
	skip    []uint32 // 0 until the permutation is computed
	next    []uint32 // next slot along the permutation
	used    []uint64 // occupied slots, one bit each
	inv     []uint32 // skip⁻¹ mod M; 0 until computed
	tail    []uint32 // the free slots, once few are left
	over    []overSlot
	active  []int32
	digest  xxhash.Digest
	barrett uint64 // ⌊(2^64−1)/M⌋, for mulMod
}

// overSlot is a slot of an over-quota backend, with its position in that
// backend's permutation.
type overSlot struct {
	owner int32
	pos   uint32
	slot  uint32
}

// NewBuilder returns a Builder of tables of size m; 0 means DefaultSize.
// The size must be a prime no larger than MaxSize.
func NewBuilder(m uint32) (*Builder, error) {
	if m == 0 {
		m = DefaultSize
	}
	if m > MaxSize || !isPrime(m) {
		return nil, fmt.Errorf("size %d is not a prime in [2, %d]: %w", m, MaxSize, ErrInvalidSize)
	}
	return &Builder{m: m, barrett: ^uint64(0) / uint64(m)}, nil
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
	n := len(b.bs)
	for i := range n {
		b.count[i] = 0
	}
	for _, id := range prev {
		if i := b.index(id); i >= 0 {
			b.count[i]++
		}
	}
	b.quotas()
	out := make(Table, b.m)
	clear(b.used)
	for i := range n {
		b.need[i] = b.quota[i]
	}
	if prev != nil {
		b.keep(prev, out)
	}
	b.fill(out)
	return out, nil
}

// load validates backends and sorts a copy of them by key into b.bs,
// sizing the scratch space and indexing IDs.
func (b *Builder) load(backends []Backend) error {
	b.bs = append(b.bs[:0], backends...)
	// Keys are unique (checked below), so the order is total and the same
	// everywhere; the stable sort is belt and braces.
	slices.SortStableFunc(b.bs, func(x, y Backend) int { return strings.Compare(x.Key, y.Key) })
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
	b.count = grow(b.count, n)
	b.quota = grow(b.quota, n)
	b.need = grow(b.need, n)
	b.rem = grow(b.rem, n)
	b.offset = grow(b.offset, n)
	b.skip = grow(b.skip, n)
	b.next = grow(b.next, n)
	b.used = grow(b.used, int(b.m+63)/64)
	b.inv = grow(b.inv, n)
	for i := range n {
		b.skip[i], b.inv[i] = 0, 0
	}
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
			return fmt.Errorf("duplicate ID %d (keys %q and %q): %w", be.ID, b.bs[j].Key, be.Key, ErrInvalidBackend)
		}
		b.idMap[be.ID] = int32(i)
	}
	return nil
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

// index returns the position in b.bs of the backend with the given ID, or
// -1 if there is none.
func (b *Builder) index(id uint32) int {
	if b.idMap != nil {
		if i, ok := b.idMap[id]; ok {
			return int(i)
		}
		return -1
	}
	if int(id) < len(b.idDense) {
		return int(b.idDense[id]) - 1
	}
	return -1
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
	for i, be := range b.bs {
		// m ≤ 2^24 and the weight < 2^32: the product fits.
		share := m * uint64(be.Weight)
		b.quota[i] = uint32(share / total)
		b.rem[i] = share % total
		left -= uint64(b.quota[i])
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
	slices.SortFunc(b.rank, func(x, y int32) int {
		sx, sy := b.count[x] > b.quota[x], b.count[y] > b.quota[y]
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

// perm computes backend i's permutation if it has not been yet.
func (b *Builder) perm(i int) {
	if b.skip[i] != 0 {
		return
	}
	key := b.bs[i].Key
	b.digest.ResetWithSeed(offsetSeed)
	_, _ = b.digest.WriteString(key)
	off := uint32(b.digest.Sum64() % uint64(b.m))
	b.digest.ResetWithSeed(skipSeed)
	_, _ = b.digest.WriteString(key)
	var skip uint32 = 1
	if b.m > 2 {
		skip = uint32(b.digest.Sum64()%uint64(b.m-1)) + 1
	}
	b.offset[i], b.skip[i], b.next[i] = off, skip, off
}

// keep copies into out the slots of prev whose owners stay within their
// quotas, marks them used and lowers the owners' needs. An over-quota
// backend keeps the slots earliest in its permutation.
func (b *Builder) keep(prev, out Table) {
	b.over = b.over[:0]
	for s, id := range prev {
		i := b.index(id)
		if i < 0 || b.quota[i] == 0 {
			continue
		}
		if b.count[i] > b.quota[i] {
			b.over = append(b.over, overSlot{owner: int32(i), slot: uint32(s)})
			continue
		}
		b.take(out, uint32(s), i)
	}
	if len(b.over) == 0 {
		return
	}
	m := uint64(b.m)
	for k := range b.over {
		o := &b.over[k]
		i := int(o.owner)
		if b.skip[i] == 0 {
			b.perm(i)
			// skip⁻¹ mod M by Fermat (M is prime).
			b.inv[i] = uint32(b.powMod(uint64(b.skip[i]), m-2))
		}
		// Position j solves offset + j·skip ≡ slot (mod M).
		d := (uint64(o.slot) + m - uint64(b.offset[i])) % m
		o.pos = uint32(b.mulMod(d, uint64(b.inv[i])))
	}
	slices.SortFunc(b.over, func(x, y overSlot) int {
		if x.owner != y.owner {
			return int(x.owner) - int(y.owner)
		}
		return int(x.pos) - int(y.pos)
	})
	for _, o := range b.over {
		if b.need[o.owner] > 0 {
			b.take(out, o.slot, int(o.owner))
		}
	}
}

// take gives slot s to backend i.
func (b *Builder) take(out Table, s uint32, i int) {
	out[s] = b.bs[i].ID
	b.used[s>>6] |= 1 << (s & 63)
	b.need[i]--
}

// fill gives every free slot of out to the backends still short of their
// quotas, in population rounds along their permutations.
func (b *Builder) fill(out Table) {
	b.active = b.active[:0]
	var free uint64
	for i := range b.bs {
		if b.need[i] > 0 {
			b.active = append(b.active, int32(i))
			free += uint64(b.need[i])
			b.perm(i)
			b.next[i] = b.offset[i]
		}
	}
	if free == 0 {
		return
	}
	rounds := (free + uint64(len(b.active)) - 1) / uint64(len(b.active))
	// need is not lowered here: it is each backend's total for the rounds.
	for r := range rounds {
		for _, i := range b.active {
			d := uint64(b.need[i])
			c := (r+1)*d/rounds - r*d/rounds
			for ; c > 0; c-- {
				if free <= tailSlots {
					b.claimTail(out, int(i), free)
				} else {
					b.claimWalk(out, int(i))
				}
				free--
			}
		}
	}
}

// tailSlots is the number of free slots below which a claim scans the free
// slots rather than walking the permutation: walking costs about M/free
// probes, scanning about free multiplications, and both find the same slot.
const tailSlots = 256

// claimWalk gives backend i the next free slot along its permutation.
func (b *Builder) claimWalk(out Table, i int) {
	m, used := b.m, b.used
	pos, skip := b.next[i], b.skip[i]
	back := m - skip // pos + skip − m, computed without the wrap test
	for {
		w := used[pos>>6]&(1<<(pos&63)) != 0
		nxt := pos + skip
		if nxt >= m {
			nxt = pos - back
		}
		if !w {
			used[pos>>6] |= 1 << (pos & 63)
			out[pos] = b.bs[i].ID
			b.next[i] = nxt
			return
		}
		pos = nxt
	}
}

// claimTail gives backend i the free slot earliest in its permutation,
// found among the free slots by their positions j = (s − offset)·skip⁻¹
// mod M. Every slot of the permutation before b.next[i] is taken, so this
// is the slot claimWalk would find.
func (b *Builder) claimTail(out Table, i int, free uint64) {
	if uint64(len(b.tail)) != free {
		// First tail claim: list the free slots.
		b.tail = b.tail[:0]
		for w, word := range b.used {
			for x := ^word; x != 0; x &= x - 1 {
				if s := uint32(w*64 + bits.TrailingZeros64(x)); s < b.m {
					b.tail = append(b.tail, s)
				}
			}
		}
	}
	m := uint64(b.m)
	if b.inv[i] == 0 {
		b.inv[i] = uint32(b.powMod(uint64(b.skip[i]), m-2))
	}
	inv, off := uint64(b.inv[i]), uint64(b.offset[i])
	best, bestPos := 0, m
	for k, s := range b.tail {
		d := uint64(s) + m - off
		if d >= m {
			d -= m
		}
		if p := b.mulMod(d, inv); p < bestPos {
			best, bestPos = k, p
		}
	}
	s := b.tail[best]
	b.tail[best] = b.tail[len(b.tail)-1]
	b.tail = b.tail[:len(b.tail)-1]
	b.used[s>>6] |= 1 << (s & 63)
	out[s] = b.bs[i].ID
}

// mulMod returns x·y mod M for x, y < M by Barrett reduction (no
// division): x·y < 2^48, so the estimated quotient is at most one short.
func (b *Builder) mulMod(x, y uint64) uint64 {
	p := x * y
	q, _ := bits.Mul64(p, b.barrett)
	r := p - q*uint64(b.m)
	if r >= uint64(b.m) {
		r -= uint64(b.m)
	}
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
