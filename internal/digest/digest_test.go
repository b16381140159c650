package digest

import (
	"bytes"
	"testing"
)

func sum(parts ...string) Sum {
	d := New()
	for _, p := range parts {
		_, _ = d.WriteString(p)
	}
	return d.Sum()
}

func TestSum(t *testing.T) {
	long := string(bytes.Repeat([]byte("kind: ProxyRoute\n"), 100))
	for _, tc := range []struct {
		name string
		a, b []string
		same bool
	}{
		{"same bytes", []string{long}, []string{long}, true},
		{"same bytes written in other pieces", []string{long[:7], long[7:300], long[300:]}, []string{long}, true},
		{"one byte differs", []string{long}, []string{long[:len(long)-2] + "x\n"}, false},
		{"one byte more", []string{long}, []string{long + " "}, false},
		{"empty and a zero byte", []string{""}, []string{"\x00"}, false},
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
	d := New()
	_, _ = d.Write([]byte(long))
	if d.Sum() != sum(long) {
		t.Error("Write and WriteString of the same bytes differ")
	}
}
