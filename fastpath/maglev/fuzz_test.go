package maglev

import (
	"errors"
	"fmt"
	"testing"
)

// fuzzSizes are the table sizes the fuzzer picks from; small primes make
// crowded tables and the edge cases of the rounds.
var fuzzSizes = []uint32{2, 3, 7, 13, 61, 251, 1009, 4099}

// fuzzSet decodes a backend set from data: each 4-byte record is a key
// byte, a weight byte and a 2-byte ID, so duplicates and zero weights
// occur often.
func fuzzSet(data []byte) []Backend {
	var bs []Backend
	for ; len(data) >= 4; data = data[4:] {
		bs = append(bs, Backend{
			Key:    fmt.Sprintf("10.0.0.%d:80", data[0]),
			Weight: uint32(data[1]) * uint32(data[1]&7+1),
			ID:     uint32(data[2]) | uint32(data[3])<<8,
		})
	}
	return bs
}

func FuzzBuild(f *testing.F) {
	f.Add(uint8(0), []byte{1, 1, 0, 0, 2, 1, 1, 0, 3, 5, 2, 0}, []byte{1, 1, 0, 0, 4, 9, 3, 0})
	f.Add(uint8(3), []byte{1, 0, 0, 0}, []byte{1, 1, 0, 0})
	f.Add(uint8(7), []byte{9, 200, 9, 9, 8, 1, 8, 8, 7, 255, 7, 7}, []byte{9, 1, 9, 9, 7, 255, 7, 7, 6, 3, 6, 6})
	f.Add(uint8(2), []byte{1, 1, 0, 0, 1, 2, 1, 0}, []byte{})
	f.Fuzz(func(t *testing.T, sizeSel uint8, first, second []byte) {
		m := fuzzSizes[int(sizeSel)%len(fuzzSizes)]
		b, err := NewBuilder(m)
		if err != nil {
			t.Fatal(err)
		}
		var prev Table
		for _, data := range [][]byte{first, second} {
			bs := fuzzSet(data)
			tab, err := b.BuildFrom(prev, bs)
			if err != nil {
				if !errors.Is(err, ErrNoBackends) && !errors.Is(err, ErrInvalidBackend) && !errors.Is(err, ErrTooManyBackends) {
					t.Fatalf("unexpected error %v", err)
				}
				continue
			}
			checkTable(t, tab, bs, m)
			if prev != nil {
				checkLineage(t, prev, tab)
			}
			fresh, _ := NewBuilder(m)
			again, err := fresh.BuildFrom(prev, bs)
			if err != nil {
				t.Fatal(err)
			}
			if changed(tab, again) != 0 {
				t.Fatal("a fresh builder built a different table")
			}
			prev = tab
		}
	})
}
