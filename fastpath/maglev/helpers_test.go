package maglev

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// backends returns n backends of weight 1 with IDs firstID, firstID+1, …
// and keys derived from the IDs.
func backends(n int, firstID uint32) []Backend {
	bs := make([]Backend, n)
	for i := range bs {
		id := firstID + uint32(i)
		bs[i] = Backend{Key: keyFor(id), Weight: 1, ID: id}
	}
	return bs
}

func keyFor(id uint32) string {
	return fmt.Sprintf("10.%d.%d.%d:8080", id>>16&0xff, id>>8&0xff, id&0xff)
}

func shuffled(bs []Backend, r *rand.Rand) []Backend {
	out := append([]Backend(nil), bs...)
	r.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// counts returns the number of slots per ID.
func counts(t Table) map[uint32]int {
	c := make(map[uint32]int)
	for _, id := range t {
		c[id]++
	}
	return c
}

// changed returns the number of slots whose owner differs.
func changed(a, b Table) int {
	n := 0
	for s := range a {
		if a[s] != b[s] {
			n++
		}
	}
	return n
}

// checkTable fails unless every slot of tab belongs to a member of bs of
// non-zero weight and every member owns its share of m slots within one
// slot (|count·W − m·w| < W).
func checkTable(t testing.TB, tab Table, bs []Backend, m uint32) {
	t.Helper()
	if len(tab) != int(m) {
		t.Fatalf("table length %d, want %d", len(tab), m)
	}
	var total uint64
	byID := make(map[uint32]Backend, len(bs))
	for _, b := range bs {
		total += uint64(b.Weight)
		byID[b.ID] = b
	}
	c := counts(tab)
	for id := range c {
		b, ok := byID[id]
		if !ok {
			t.Fatalf("slot owned by ID %d, not a member", id)
		}
		if b.Weight == 0 {
			t.Fatalf("zero-weight backend %q owns %d slots", b.Key, c[id])
		}
	}
	for _, b := range bs {
		got := uint64(c[b.ID]) * total
		want := uint64(m) * uint64(b.Weight)
		diff := got - want
		if want > got {
			diff = want - got
		}
		if diff >= total {
			t.Fatalf("backend %q (weight %d of %d) owns %d slots, ideal %.3f", b.Key, b.Weight, total, c[b.ID],
				float64(want)/float64(total))
		}
	}
}

// checkLineage fails unless next changed no slot of prev needlessly: a
// member that gained slots kept all of its previous ones, a member that
// lost slots lost only previous ones, and the number of changed slots is
// Σ max(0, previous count − new count).
func checkLineage(t testing.TB, prev, next Table) {
	t.Helper()
	pc, nc := counts(prev), counts(next)
	minimal := 0
	for id, c := range pc {
		if d := c - nc[id]; d > 0 {
			minimal += d
		}
	}
	for s := range prev {
		p, n := prev[s], next[s]
		if p == n {
			continue
		}
		if nc[p] >= pc[p] {
			t.Fatalf("slot %d moved from ID %d, which went from %d to %d slots", s, p, pc[p], nc[p])
		}
		if pc[n] >= nc[n] && pc[n] > 0 {
			t.Fatalf("slot %d moved to ID %d, which went from %d to %d slots", s, n, pc[n], nc[n])
		}
	}
	if got := changed(prev, next); got != minimal {
		t.Fatalf("%d slots changed, minimal %d", got, minimal)
	}
}

func maxAvg(tab Table, n int) float64 {
	mx := 0
	for _, c := range counts(tab) {
		mx = max(mx, c)
	}
	return float64(mx) * float64(n) / float64(len(tab))
}
