package digest

import (
	"bytes"
	"fmt"
	"testing"
)

func sum(pieces ...string) Sum {
	d := New()
	for _, p := range pieces {
		_, _ = d.WriteString(p)
	}
	return d.Sum()
}

func TestSum(t *testing.T) {
	long := string(bytes.Repeat([]byte("kind: ProxyRoute\n"), 100))
	huge := string(bytes.Repeat([]byte("kind: ProxyRoute\n"), 1000))
	for _, tc := range []struct {
		name string
		a, b []string
		same bool
	}{
		{"same pieces", []string{"a.yaml", long}, []string{"a.yaml", long}, true},
		{"one byte differs", []string{long}, []string{long[:len(long)-2] + "x\n"}, false},
		{"one byte more", []string{long}, []string{long + " "}, false},
		{"pieces swapped", []string{"a.yaml", huge}, []string{huge, "a.yaml"}, false},
		{"a large piece, one byte differs", []string{"a.yaml", huge}, []string{"a.yaml", huge[:len(huge)-2] + "x\n"}, false},
		{"a large piece, one byte more", []string{huge}, []string{huge + " "}, false},
		{"a large piece, same bytes", []string{"a.yaml", huge}, []string{"a.yaml", huge}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := sum(tc.a...) == sum(tc.b...); got != tc.same {
				t.Errorf("equal digests: %v, want %v", got, tc.same)
			}
		})
	}
	// Both halves are used: a digest whose halves were equal would have
	// one hash written twice.
	if s := sum(long); s[0] == s[1] {
		t.Errorf("the two hashes agree (%x): one seed used twice", s[0])
	}
	for _, p := range []string{long, huge} {
		d := New()
		_, _ = d.Write([]byte(p))
		if d.Sum() != sum(p) {
			t.Errorf("Write and WriteString of the same %d bytes differ", len(p))
		}
	}
}

// BenchmarkHash: a configuration file of 3000 routes (about 1 MB, one
// piece) and one of its documents (about 300 bytes).
func BenchmarkHash(b *testing.B) {
	for _, size := range []int{1 << 20, 300} {
		p := bytes.Repeat([]byte{'x'}, size)
		b.Run(fmt.Sprintf("bytes=%d", size), func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				d := New()
				_, _ = d.WriteString("config.yaml")
				_, _ = d.Write(p)
				d.Sum()
			}
		})
	}
}
