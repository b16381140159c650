package maglev

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
)

var update = flag.Bool("update", false, "rewrite testdata/golden.txt")

func TestNewBuilder(t *testing.T) {
	tests := []struct {
		name string
		m    uint32
		want uint32
		err  error
	}{
		{name: "default", m: 0, want: DefaultSize},
		{name: "65537", m: 65537, want: 65537},
		{name: "smallest prime", m: 2, want: 2},
		{name: "251", m: 251, want: 251},
		{name: "one", m: 1, err: ErrInvalidSize},
		{name: "composite", m: 65536, err: ErrInvalidSize},
		{name: "square of prime", m: 251 * 251, err: ErrInvalidSize},
		{name: "prime above max", m: 16777259, err: ErrInvalidSize},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := NewBuilder(tc.m)
			if !errors.Is(err, tc.err) {
				t.Fatalf("NewBuilder(%d) error %v, want %v", tc.m, err, tc.err)
			}
			if err == nil && b.Size() != tc.want {
				t.Fatalf("size %d, want %d", b.Size(), tc.want)
			}
		})
	}
}

func TestBuildErrors(t *testing.T) {
	tests := []struct {
		name string
		bs   []Backend
		err  error
	}{
		{name: "nil", bs: nil, err: ErrNoBackends},
		{name: "all zero weights", bs: []Backend{{Key: "a:1", ID: 1}, {Key: "b:1", ID: 2}}, err: ErrNoBackends},
		{name: "duplicate key", bs: []Backend{{Key: "a:1", Weight: 1, ID: 1}, {Key: "a:1", Weight: 1, ID: 2}}, err: ErrInvalidBackend},
		{name: "duplicate ID", bs: []Backend{{Key: "a:1", Weight: 1, ID: 7}, {Key: "b:1", Weight: 1, ID: 7}}, err: ErrInvalidBackend},
		{name: "duplicate large ID", bs: []Backend{{Key: "a:1", Weight: 1, ID: 1 << 31}, {Key: "b:1", Weight: 1, ID: 1 << 31}}, err: ErrInvalidBackend},
		{name: "empty key", bs: []Backend{{Key: "", Weight: 1, ID: 1}}, err: ErrInvalidBackend},
		{name: "more backends than slots", bs: backends(8, 0), err: ErrTooManyBackends},
		{name: "as many backends as slots", bs: backends(7, 0)},
		{name: "extra zero-weight backends", bs: append(backends(7, 0), Backend{Key: "z:1", ID: 99})},
	}
	b, err := NewBuilder(7)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tab, err := b.Build(tc.bs)
			if !errors.Is(err, tc.err) {
				t.Fatalf("Build error %v, want %v", err, tc.err)
			}
			if err == nil {
				checkTable(t, tab, tc.bs, 7)
			}
		})
	}
	// A failed build must leave the builder usable and unaffected.
	want, err := b.Build(backends(5, 0))
	if err != nil {
		t.Fatal(err)
	}
	fresh, _ := NewBuilder(7)
	got, err := fresh.Build(backends(5, 0))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Fatal("builder state leaked across failed builds")
	}
}

// reference builds a table without lineage the slow, obvious way: explicit
// permutation arrays, largest-remainder quotas, the documented rounds.
func reference(bs []Backend, m uint32) Table {
	bs = append([]Backend(nil), bs...)
	slices.SortFunc(bs, func(x, y Backend) int { return strings.Compare(x.Key, y.Key) })
	var total uint64
	for _, b := range bs {
		total += uint64(b.Weight)
	}
	quota := make([]uint64, len(bs))
	var given uint64
	for i, b := range bs {
		quota[i] = uint64(m) * uint64(b.Weight) / total
		given += quota[i]
	}
	order := make([]int, 0, len(bs))
	for i, b := range bs {
		if uint64(m)*uint64(b.Weight)%total != 0 {
			order = append(order, i)
		}
	}
	slices.SortStableFunc(order, func(x, y int) int {
		rx, ry := uint64(m)*uint64(bs[x].Weight)%total, uint64(m)*uint64(bs[y].Weight)%total
		switch {
		case rx > ry:
			return -1
		case rx < ry:
			return 1
		}
		return 0
	})
	for _, i := range order[:uint64(m)-given] {
		quota[i]++
	}
	perms := make([][]uint32, len(bs))
	for i, b := range bs {
		off := xxhash.NewWithSeed(offsetSeed)
		_, _ = off.WriteString(b.Key)
		sk := xxhash.NewWithSeed(skipSeed)
		_, _ = sk.WriteString(b.Key)
		o, s := off.Sum64()%uint64(m), sk.Sum64()%uint64(m-1)+1
		for j := range uint64(m) {
			perms[i] = append(perms[i], uint32((o+j*s)%uint64(m)))
		}
	}
	tab := make([]int64, m)
	for s := range tab {
		tab[s] = -1
	}
	var active []int
	var free uint64
	for i := range bs {
		if quota[i] > 0 {
			active = append(active, i)
			free += quota[i]
		}
	}
	rounds := (free + uint64(len(active)) - 1) / uint64(len(active))
	next := make([]int, len(bs))
	for r := range rounds {
		for _, i := range active {
			for range (r+1)*quota[i]/rounds - r*quota[i]/rounds {
				for tab[perms[i][next[i]]] >= 0 {
					next[i]++
				}
				tab[perms[i][next[i]]] = int64(bs[i].ID)
				next[i]++
			}
		}
	}
	out := make(Table, m)
	for s, id := range tab {
		out[s] = uint32(id)
	}
	return out
}

func TestBuildMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	tests := []struct {
		name    string
		m       uint32
		bs      []Backend
		weights func(int) uint32
	}{
		{name: "one backend", m: 13, bs: backends(1, 0)},
		{name: "equal 10 of 251", m: 251, bs: backends(10, 0)},
		{name: "equal 100 of 1009", m: 1009, bs: backends(100, 5)},
		{name: "weighted 50 of 4099", m: 4099, bs: backends(50, 0), weights: func(i int) uint32 { return uint32(1 + i%7) }},
		{name: "random weights 300 of 65537", m: 65537, bs: backends(300, 0), weights: func(int) uint32 { return r.Uint32N(1000) }},
		{name: "size 2", m: 2, bs: backends(2, 0)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.weights != nil {
				for i := range tc.bs {
					tc.bs[i].Weight = tc.weights(i)
				}
				tc.bs[0].Weight = max(tc.bs[0].Weight, 1)
			}
			b, err := NewBuilder(tc.m)
			if err != nil {
				t.Fatal(err)
			}
			got, err := b.Build(tc.bs)
			if err != nil {
				t.Fatal(err)
			}
			if want := reference(tc.bs, tc.m); !slices.Equal(got, want) {
				t.Fatalf("table differs from the reference in %d of %d slots", changed(got, want), tc.m)
			}
			checkTable(t, got, tc.bs, tc.m)
		})
	}
}

// TestWalkBatchMatchesWalk checks that walkBatch, which probes four
// positions at a time, claims the same slots as walk and the plain
// permutation and ends at the same position as walk, on tables filled to
// several levels down to a single free slot.
func TestWalkBatchMatchesWalk(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 18))
	for _, m := range []uint32{2, 3, 7, 251, DefaultSize} {
		for _, permille := range []uint32{0, 500, 900, 990, 1000} {
			t.Run(fmt.Sprintf("M=%d/taken=%d‰", m, permille), func(t *testing.T) {
				b, err := NewBuilder(m)
				if err != nil {
					t.Fatal(err)
				}
				free := max(m-uint32(uint64(m)*uint64(permille)/1000), 1)
				used := make([]uint64, (m+63)/64)
				for _, s := range r.Perm(int(m))[:m-free] {
					used[s>>6] |= 1 << (s & 63)
				}
				claims := min(free, 3)
				for range 20 {
					off, skip := r.Uint32N(m), 1+r.Uint32N(max(m-1, 1))
					q, step := b.fixedWalk(off, skip)
					var want []uint32 // the first free slots along the permutation
					for j := uint64(0); j < uint64(m) && uint32(len(want)) < claims; j++ {
						s := (uint64(off) + j*uint64(skip)) % uint64(m)
						if used[s>>6]&(1<<(s&63)) == 0 {
							want = append(want, uint32(s))
						}
					}
					type run struct {
						name string
						walk func(*filler, *walker, uint32)
					}
					var ends []uint64
					for _, rn := range []run{{"walk", (*filler).walk}, {"walkBatch", (*filler).walkBatch}} {
						f := filler{used: slices.Clone(used), out: make(Table, m), m: uint64(m)}
						w := walker{q: q, s: step, id: 7}
						rn.walk(&f, &w, claims)
						var got []uint32
						for s := range m {
							if f.out[s] == 7 {
								got = append(got, s)
							}
							if taken := f.used[s>>6]&(1<<(s&63)) != 0; taken != (used[s>>6]&(1<<(s&63)) != 0 || f.out[s] == 7) {
								t.Fatalf("%s: slot %d marked taken=%v, but it was neither taken nor claimed", rn.name, s, taken)
							}
						}
						slices.Sort(want)
						if !slices.Equal(got, want) {
							t.Fatalf("%s off %d skip %d: claimed %v, want %v", rn.name, off, skip, got, want)
						}
						ends = append(ends, w.q)
					}
					if ends[0] != ends[1] {
						t.Fatalf("off %d skip %d: walk ends at %#x, walkBatch at %#x", off, skip, ends[0], ends[1])
					}
				}
			})
		}
	}
}

func TestLookup(t *testing.T) {
	tab, err := Build(backends(100, 0))
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(3, 4))
	for range 1000 {
		h := r.Uint64()
		if got, want := tab.Lookup(h), tab[h%DefaultSize]; got != want {
			t.Fatalf("Lookup(%#x) = %d, want %d", h, got, want)
		}
	}
	if got := tab.Lookup(DefaultSize + 5); got != tab[5] {
		t.Fatalf("Lookup wraps wrong: %d, want %d", got, tab[5])
	}
}

func TestBalance(t *testing.T) {
	for _, n := range []int{10, 100, 1000} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			bs := backends(n, 0)
			tab, err := Build(bs)
			if err != nil {
				t.Fatal(err)
			}
			checkTable(t, tab, bs, DefaultSize)
			ratio := maxAvg(tab, n)
			t.Logf("N=%d max/avg %.4f", n, ratio)
			if ratio > 1.01 {
				t.Fatalf("max/avg %.4f > 1.01", ratio)
			}
		})
	}
}

func TestWeights(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	tests := []struct {
		name    string
		n       int
		weights func(i int) uint32
	}{
		{name: "1 to 10", n: 200, weights: func(i int) uint32 { return uint32(1 + i%10) }},
		{name: "one heavy", n: 100, weights: func(i int) uint32 { return map[bool]uint32{true: 1000, false: 1}[i == 0] }},
		{name: "max uint32", n: 50, weights: func(int) uint32 { return ^uint32(0) - r.Uint32N(1000) }},
		{name: "with zeros", n: 300, weights: func(i int) uint32 { return uint32(i % 3) }},
		{name: "random", n: 1000, weights: func(int) uint32 { return r.Uint32N(100000) + 1 }},
		{name: "tiny shares", n: 10, weights: func(i int) uint32 { return map[bool]uint32{true: 1 << 30, false: 1}[i == 0] }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bs := backends(tc.n, 0)
			for i := range bs {
				bs[i].Weight = tc.weights(i)
			}
			tab, err := Build(bs)
			if err != nil {
				t.Fatal(err)
			}
			checkTable(t, tab, bs, DefaultSize)
		})
	}
}

func TestDeterminism(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	bs := backends(1000, 0)
	for i := range bs {
		bs[i].Weight = 1 + r.Uint32N(5)
	}
	want, err := Build(bs)
	if err != nil {
		t.Fatal(err)
	}
	prevSet := backends(990, 20)
	prev, err := Build(prevSet)
	if err != nil {
		t.Fatal(err)
	}
	wantFrom, err := BuildFrom(prev, bs)
	if err != nil {
		t.Fatal(err)
	}
	reused, _ := NewBuilder(DefaultSize)
	for k := range 5 {
		t.Run(fmt.Sprintf("shuffle %d", k), func(t *testing.T) {
			in := shuffled(bs, r)
			snapshot := append([]Backend(nil), in...)
			fresh, _ := NewBuilder(DefaultSize)
			for _, b := range []*Builder{fresh, reused} {
				got, err := b.Build(in)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got, want) {
					t.Fatalf("Build of shuffled input differs in %d slots", changed(got, want))
				}
				got, err = b.BuildFrom(prev, in)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got, wantFrom) {
					t.Fatalf("BuildFrom of shuffled input differs in %d slots", changed(got, wantFrom))
				}
				// Interleave unrelated builds so stale scratch would show.
				if _, err := b.Build(backends(3+k, 5000)); err != nil {
					t.Fatal(err)
				}
			}
			if !slices.Equal(in, snapshot) {
				t.Fatal("Build modified its input")
			}
		})
	}
}

func TestBuildFromIgnoresForeignPrev(t *testing.T) {
	bs := backends(100, 0)
	want, err := Build(bs)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := NewBuilder(1009)
	small, err := other.Build(backends(100, 50))
	if err != nil {
		t.Fatal(err)
	}
	for _, prev := range []Table{nil, {}, small} {
		got, err := BuildFrom(prev, bs)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("BuildFrom with a prev of length %d differs from Build", len(prev))
		}
	}
	// A prev made only of unknown IDs is the same as no prev.
	got, err := BuildFrom(small[:0:0], bs)
	if err != nil || !slices.Equal(got, want) {
		t.Fatal("BuildFrom with an empty prev differs from Build")
	}
	unknown := make(Table, DefaultSize)
	for s := range unknown {
		unknown[s] = 1 << 30
	}
	if got, err := BuildFrom(unknown, bs); err != nil || !slices.Equal(got, want) {
		t.Fatal("BuildFrom with a prev of unknown IDs differs from Build")
	}
}

// TestRemoveOne proves property (a): removing one of 1000 backends moves
// that backend's slots and nothing else.
func TestRemoveOne(t *testing.T) {
	bs := backends(1000, 0)
	prev, err := Build(bs)
	if err != nil {
		t.Fatal(err)
	}
	pc := counts(prev)
	for _, victim := range []int{0, 1, 499, 500, 998, 999} {
		t.Run(fmt.Sprintf("remove %d", victim), func(t *testing.T) {
			rest := slices.Delete(slices.Clone(bs), victim, victim+1)
			next, err := BuildFrom(prev, rest)
			if err != nil {
				t.Fatal(err)
			}
			checkTable(t, next, rest, DefaultSize)
			checkLineage(t, prev, next)
			survivorMoves := 0
			for s := range prev {
				if prev[s] != bs[victim].ID && next[s] != prev[s] {
					survivorMoves++
				}
			}
			total := changed(prev, next)
			plain, err := Build(rest)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("lineage remaps %d slots (%.3f%%), the removed backend had %d; plain Maglev remaps %.3f%%; max/avg %.4f",
				total, 100*float64(total)/DefaultSize, pc[bs[victim].ID],
				100*float64(changed(prev, plain))/DefaultSize, maxAvg(next, len(rest)))
			if survivorMoves != 0 {
				t.Fatalf("%d slots of surviving backends moved", survivorMoves)
			}
			if total != pc[bs[victim].ID] {
				t.Fatalf("%d slots changed, want the removed backend's %d", total, pc[bs[victim].ID])
			}
			if float64(total) > 0.0015*DefaultSize {
				t.Fatalf("remapped %.3f%% > 0.15%%", 100*float64(total)/DefaultSize)
			}
		})
	}
}

// TestAddOne proves property (b): adding a backend moves only the slots of
// its new quota.
func TestAddOne(t *testing.T) {
	bs := backends(1000, 0)
	prev, err := Build(bs)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		add  Backend
	}{
		{name: "first key", add: Backend{Key: "0.0.0.0:1", Weight: 1, ID: 5000}},
		{name: "last key", add: Backend{Key: "99.9.9.9:1", Weight: 1, ID: 5001}},
		{name: "middle key", add: Backend{Key: keyFor(1<<16 | 1), Weight: 1, ID: 5002}},
		{name: "heavy", add: Backend{Key: "heavy:1", Weight: 10, ID: 5003}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			set := append(slices.Clone(bs), tc.add)
			next, err := BuildFrom(prev, set)
			if err != nil {
				t.Fatal(err)
			}
			checkTable(t, next, set, DefaultSize)
			checkLineage(t, prev, next)
			quota := counts(next)[tc.add.ID]
			total := changed(prev, next)
			t.Logf("adding %q remaps %d slots (%.3f%%), its quota %d", tc.add.Key, total, 100*float64(total)/DefaultSize, quota)
			if total != quota {
				t.Fatalf("%d slots changed, want the new backend's %d", total, quota)
			}
			for s := range next {
				if next[s] != prev[s] && next[s] != tc.add.ID {
					t.Fatalf("slot %d moved from %d to %d, not to the new backend", s, prev[s], next[s])
				}
			}
		})
	}
}

// TestChain proves property (c): balance and minimal churn hold through 50
// random additions and removals, each table built from the previous one.
func TestChain(t *testing.T) {
	tests := []struct {
		name     string
		weighted bool
		seed     uint64
	}{
		{name: "equal weights", seed: 11},
		{name: "equal weights 2", seed: 12},
		{name: "random weights", weighted: true, seed: 13},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(tc.seed, 0))
			weight := func() uint32 {
				if tc.weighted {
					return 1 + r.Uint32N(100)
				}
				return 1
			}
			set := backends(1000, 0)
			for i := range set {
				set[i].Weight = weight()
			}
			nextID := uint32(len(set))
			b, _ := NewBuilder(DefaultSize)
			tab, err := b.Build(set)
			if err != nil {
				t.Fatal(err)
			}
			worst, totalMoved, totalIdeal := 0.0, 0, 0
			for step := range 50 {
				prev := tab
				pc := counts(prev)
				var ideal int
				if r.IntN(2) == 0 {
					k := r.IntN(len(set))
					ideal = pc[set[k].ID]
					set = slices.Delete(set, k, k+1)
				} else {
					set = append(set, Backend{Key: keyFor(nextID + 1<<20), Weight: weight(), ID: nextID})
					nextID++
				}
				tab, err = b.BuildFrom(prev, shuffled(set, r))
				if err != nil {
					t.Fatal(err)
				}
				checkTable(t, tab, set, DefaultSize)
				checkLineage(t, prev, tab)
				moved := changed(prev, tab)
				if ideal == 0 { // an addition
					ideal = counts(tab)[nextID-1]
				}
				totalMoved += moved
				totalIdeal += ideal
				if !tc.weighted {
					// Equal weights: the busiest backend has ⌈M/N⌉ slots,
					// the optimum, and only the changed backend moves.
					n := len(set)
					mx := 0
					for _, c := range counts(tab) {
						mx = max(mx, c)
					}
					if want := (DefaultSize + n - 1) / n; mx != want {
						t.Fatalf("step %d: busiest backend has %d slots, want ⌈M/N⌉ = %d", step, mx, want)
					}
					worst = max(worst, maxAvg(tab, n))
					if moved != ideal {
						t.Fatalf("step %d: %d slots moved, want %d", step, moved, ideal)
					}
				}
			}
			t.Logf("after 50 steps: N=%d, worst max/avg %.4f, slots moved %d vs the changed backends' %d",
				len(set), worst, totalMoved, totalIdeal)
		})
	}
}

func TestWeightChange(t *testing.T) {
	bs := backends(1000, 0)
	prev, err := Build(bs)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		weight uint32
	}{
		{name: "drain", weight: 0},
		{name: "double", weight: 2},
		{name: "tenfold", weight: 10},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			set := slices.Clone(bs)
			set[42].Weight = tc.weight
			next, err := BuildFrom(prev, set)
			if err != nil {
				t.Fatal(err)
			}
			checkTable(t, next, set, DefaultSize)
			checkLineage(t, prev, next)
			d := counts(next)[42] - counts(prev)[42]
			t.Logf("weight 1→%d: %d slots moved, backend 42 changed by %d", tc.weight, changed(prev, next), d)
		})
	}
}

// TestGolden pins the bytes of a few tables, so that a change of hash,
// rounding or fill order (which would make nodes of different versions
// disagree) cannot go unnoticed. Refresh with -update.
func TestGolden(t *testing.T) {
	weighted := backends(257, 0)
	for i := range weighted {
		weighted[i].Weight = uint32(1 + i%5)
	}
	base := backends(1000, 0)
	prev, err := Build(base)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(21, 22))
	randomWeights := backends(1000, 0)
	for i := range randomWeights {
		randomWeights[i].Weight = 1 + r.Uint32N(1000)
	}
	reweighted := slices.Clone(base)
	for i := 0; i < len(reweighted); i += 37 {
		reweighted[i].Weight = uint32(i % 4) // 0 drains, 2 and 3 grow
	}
	cases := []struct {
		name string
		m    uint32 // 0: DefaultSize
		prev Table
		bs   []Backend
	}{
		{name: "equal-1000", bs: base},
		{name: "weighted-257", bs: weighted},
		{name: "lineage-remove-3", prev: prev, bs: base[3:]},
		{name: "lineage-add-weighted", prev: prev, bs: append(slices.Clone(base), weighted[0:10:10]...)[10:]},
		// Recorded before walkBatch was added, with the code of commit
		// ba414b2: they pin the sizes the benchmarks use, small and odd
		// table sizes, weights that make backends claim several slots a
		// round, and lineage with weight changes.
		{name: "equal-10", bs: backends(10, 0)},
		{name: "equal-100", bs: backends(100, 7)},
		{name: "random-weights-1000", bs: randomWeights},
		{name: "m251-equal-10", m: 251, bs: backends(10, 0)},
		{name: "m1009-weighted-257", m: 1009, bs: weighted},
		{name: "m4099-random-weights-300", m: 4099, bs: randomWeights[:300]},
		{name: "m16777213-equal-100", m: 16777213, bs: backends(100, 0)},
		{name: "lineage-reweight", prev: prev, bs: reweighted},
		{name: "lineage-remove-100", prev: prev, bs: base[100:]},
	}
	var got bytes.Buffer
	for _, c := range cases {
		bld, err := NewBuilder(c.m)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		tab, err := bld.BuildFrom(c.prev, c.bs)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		raw := make([]byte, 4*len(tab))
		for s, id := range tab {
			binary.LittleEndian.PutUint32(raw[4*s:], id)
		}
		sum := sha256.Sum256(raw)
		fmt.Fprintf(&got, "%s %s\n", c.name, hex.EncodeToString(sum[:]))
	}
	path := filepath.Join("testdata", "golden.txt")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("tables changed:\ngot\n%swant\n%s", got.Bytes(), want)
	}
}

func BenchmarkBuild(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			bs := backends(n, 0)
			bld, _ := NewBuilder(DefaultSize)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bld.Build(bs); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkBuildFrom(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("N=%d/remove-one", n), func(b *testing.B) {
			bs := backends(n, 0)
			bld, _ := NewBuilder(DefaultSize)
			prev, err := bld.Build(bs)
			if err != nil {
				b.Fatal(err)
			}
			rest := bs[1:]
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bld.BuildFrom(prev, rest); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
