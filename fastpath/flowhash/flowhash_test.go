package flowhash

import (
	"net/netip"
	"testing"
)

// The program's agreement with Hash is tested in package fastpath through
// BPF_PROG_TEST_RUN; these tests pin the function's own properties.

func TestHashIgnoresV4Mapping(t *testing.T) {
	a := Flow{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"), SrcPort: 1, DstPort: 2, Proto: 6}
	b := a
	b.Src = netip.AddrFrom16(a.Src.As16())
	if Hash(a) != Hash(b) {
		t.Fatalf("IPv4 and v4-mapped forms hash differently")
	}
}

func TestHashSpreads(t *testing.T) {
	// Consecutive source ports (the common case for one client) must land
	// in all of 16 buckets, roughly evenly.
	var buckets [16]int
	for p := uint16(1024); p < 1024+1600; p++ {
		f := Flow{Src: netip.MustParseAddr("192.0.2.7"), Dst: netip.MustParseAddr("198.51.100.1"), SrcPort: p, DstPort: 443, Proto: 6}
		buckets[Hash(f)%16]++
	}
	for i, n := range buckets {
		if n < 50 || n > 150 {
			t.Errorf("bucket %d got %d of 1600 flows (expected about 100): %v", i, n, buckets)
		}
	}
}

func TestHashSensitiveToEveryField(t *testing.T) {
	base := Flow{Src: netip.MustParseAddr("2001:db8::1"), Dst: netip.MustParseAddr("2001:db8::2"), SrcPort: 1000, DstPort: 80, Proto: 6}
	variants := map[string]func(*Flow){
		"src":   func(f *Flow) { f.Src = netip.MustParseAddr("2001:db8::3") },
		"dst":   func(f *Flow) { f.Dst = netip.MustParseAddr("2001:db8::4") },
		"sport": func(f *Flow) { f.SrcPort++ },
		"dport": func(f *Flow) { f.DstPort++ },
		"proto": func(f *Flow) { f.Proto = 17 },
	}
	for name, change := range variants {
		t.Run(name, func(t *testing.T) {
			f := base
			change(&f)
			if Hash(f) == Hash(base) {
				t.Errorf("changing %s does not change the hash", name)
			}
		})
	}
}
