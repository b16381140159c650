package fastpath

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestModMagic checks the multiply-and-shift the program uses instead of
// hash % maglev_size against the division, for the default size, the sizes
// tests load, and divisors at the ends of the 32-bit range: at every
// multiple of the divisor and its neighbours near 0 and near 2^32 (where
// the error term is largest), and at random hashes.
func TestModMagic(t *testing.T) {
	for _, tc := range []struct {
		name   string
		d      uint32
		wantOK bool
	}{
		{"default 65537", 65537, true},
		{"test size 251", 251, true},
		{"small prime 3", 3, true},
		{"smallest 2", 2, true},
		{"largest 32-bit prime", 4294967291, true},
		{"one: no magic", 1, false},
		{"zero: no magic", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, s, ok := modMagic(tc.d)
			if ok != tc.wantOK {
				t.Fatalf("modMagic(%d) ok = %v, want %v", tc.d, ok, tc.wantOK)
			}
			if !ok {
				if m != 0 {
					t.Errorf("modMagic(%d) = %d without ok; the program must divide (magic 0)", tc.d, m)
				}
				return
			}
			if m >= 1<<32 {
				t.Fatalf("magic %d of %d does not fit 32 bits: hash*magic could overflow", m, tc.d)
			}
			check := func(n uint32) {
				if q := uint32((uint64(n) * m) >> s); q != n/tc.d {
					t.Fatalf("d=%d n=%d: (n*%d)>>%d = %d, want %d", tc.d, n, m, s, q, n/tc.d)
				}
			}
			d := uint64(tc.d)
			var top uint64 // the 1000 multiples of d below 2^32
			if 1000*d < math.MaxUint32 {
				top = math.MaxUint32 - 1000*d
			}
			for _, base := range []uint64{0, top} {
				for k := uint64(0); k <= 1000; k++ {
					for _, n := range []uint64{base + k*d - 1, base + k*d, base + k*d + 1, base + k*d + d - 1} {
						if n <= math.MaxUint32 {
							check(uint32(n))
						}
					}
				}
			}
			check(math.MaxUint32)
			r := rand.New(rand.NewPCG(1, uint64(tc.d)))
			for range 200000 {
				check(r.Uint32())
			}
		})
	}
}
