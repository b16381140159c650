package datapath

import "testing"

func TestReservedCovers(t *testing.T) {
	tests := []struct {
		list   string
		lo, hi uint16
		want   bool
	}{
		{"", 10000, 32767, false},
		{"10000-32767", 10000, 32767, true},
		{"9999-32767", 10000, 32767, true}, // merged by the kernel with a neighbour
		{"5000,10000-32767", 10000, 32767, true},
		{"10000-20000", 10000, 32767, false},
		{"10000-20000,20001-32767", 10000, 32767, false}, // the kernel would have merged them
		{"12345", 12345, 12345, true},
		{"garbage", 10000, 32767, false},
	}
	for _, tt := range tests {
		if got := reservedCovers(tt.list, tt.lo, tt.hi); got != tt.want {
			t.Errorf("reservedCovers(%q, %d, %d) = %v, want %v", tt.list, tt.lo, tt.hi, got, tt.want)
		}
	}
}
