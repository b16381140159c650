package maglev

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
	"testing"
)

// testSizes are table sizes at the edges of what the fixed-point and
// division tricks must handle: the smallest primes, the default and the
// largest prime below MaxSize.
var testSizes = []uint32{2, 3, 251, DefaultSize, 16777213}

// TestFixedWalk checks that the fixed-point walk yields (off + j·skip)
// mod M at the start, the middle and the very end (j = M−1) of
// permutations with extreme and random offsets and skips, where the
// rounding error of the fixed-point step is largest.
func TestFixedWalk(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, m := range testSizes {
		t.Run(fmt.Sprintf("M=%d", m), func(t *testing.T) {
			b, err := NewBuilder(m)
			if err != nil {
				t.Fatal(err)
			}
			type walk struct{ off, skip uint32 }
			walks := []walk{{0, 1}, {m - 1, 1}, {0, max(m-1, 1)}, {m - 1, max(m-1, 1)}}
			for range 20 {
				walks = append(walks, walk{r.Uint32N(m), 1 + r.Uint32N(max(m-1, 1))})
			}
			var js []uint64
			for j := uint64(0); j < uint64(m); j++ {
				if j < 3 || j+3 >= uint64(m) || j%(uint64(m)/7+1) == 0 {
					js = append(js, j)
				}
			}
			for _, w := range walks {
				q, s := b.fixedWalk(w.off, w.skip)
				for _, j := range js {
					got, _ := bits.Mul64(q+j*s, uint64(m))
					if want := (uint64(w.off) + j*uint64(w.skip)) % uint64(m); got != want {
						t.Fatalf("off %d skip %d: slot(%d) = %d, want %d", w.off, w.skip, j, got, want)
					}
				}
			}
		})
	}
}

// TestTailKeys checks that claimTail's fixed-point keys order the slots as
// their positions in the permutation do.
func TestTailKeys(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, m := range testSizes {
		t.Run(fmt.Sprintf("M=%d", m), func(t *testing.T) {
			b, err := NewBuilder(m)
			if err != nil {
				t.Fatal(err)
			}
			for range 20 {
				p := &perm{off: r.Uint32N(m), skip: 1 + r.Uint32N(max(m-1, 1))}
				inv := uint64(b.inverse(p))
				if m > 2 && uint64(p.skip)*inv%uint64(m) != 1 {
					t.Fatalf("inverse of %d is %d", p.skip, inv)
				}
				v, exact := b.fixed(uint32(inv))
				if !exact {
					v++
				}
				base := (uint64(m) - uint64(p.off)) * v
				// Slots at the first, middle and last positions must give
				// increasing keys.
				var js []uint64
				for _, j := range []uint64{0, 1, 2, 3, uint64(m) / 2, uint64(m) - 2, uint64(m) - 1} {
					if j < uint64(m) && (len(js) == 0 || j > js[len(js)-1]) {
						js = append(js, j)
					}
				}
				var prevKey uint64
				for n, j := range js {
					s := (uint64(p.off) + j*uint64(p.skip)) % uint64(m)
					key := s*v + base
					if n > 0 && key <= prevKey {
						t.Fatalf("off %d skip %d: key of position %d (%#x) not above the previous (%#x)", p.off, p.skip, j, key, prevKey)
					}
					prevKey = key
				}
			}
		})
	}
}

func TestDivisor(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	ds := []uint64{1, 2, 3, 251, DefaultSize - 1, DefaultSize, 16777212, 16777213, 1 << 32, 1<<56 - 5}
	for range 10 {
		ds = append(ds, 1+r.Uint64N(1<<56))
	}
	for _, d := range ds {
		t.Run(fmt.Sprintf("d=%d", d), func(t *testing.T) {
			v := newDivisor(d)
			xs := []uint64{0, 1, d - 1, d, d + 1, 1<<57 - 1, (1<<57 - 1) / d * d, (1<<57-1)/d*d - 1}
			for range 1000 {
				xs = append(xs, r.Uint64N(1<<57))
			}
			for _, x := range xs {
				if x >= 1<<57 {
					continue
				}
				if q, rem := v.divMod(x); q != x/d || rem != x%d {
					t.Fatalf("divMod(%d) = %d, %d, want %d, %d", x, q, rem, x/d, x%d)
				}
			}
			if d >= 1<<24 {
				return
			}
			for _, x := range []uint64{0, ^uint64(0), 1 << 63, r.Uint64(), r.Uint64(), r.Uint64()} {
				if got := v.mod(x); got != x%d {
					t.Fatalf("mod(%d) = %d, want %d", x, got, x%d)
				}
			}
		})
	}
}
