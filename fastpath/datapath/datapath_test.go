package datapath

import (
	"maps"
	"testing"
)

// TestMonotonic checks that a reading that missed packets in transit from
// a flow cache slot (rx 95 after 100) is reported as the last value, and
// that readings past it are reported as they are.
func TestMonotonic(t *testing.T) {
	last := map[string]uint64{}
	for i, tc := range []struct {
		reading, want map[string]uint64
	}{
		{map[string]uint64{"rx": 100, "tx": 90}, map[string]uint64{"rx": 100, "tx": 90}},
		{map[string]uint64{"rx": 95, "tx": 91}, map[string]uint64{"rx": 100, "tx": 91}},
		{map[string]uint64{"rx": 120, "tx": 91, "drop_fib": 1}, map[string]uint64{"rx": 120, "tx": 91, "drop_fib": 1}},
		{map[string]uint64{"rx": 120, "tx": 90, "drop_fib": 0}, map[string]uint64{"rx": 120, "tx": 91, "drop_fib": 1}},
	} {
		monotonic(last, tc.reading)
		if !maps.Equal(tc.reading, tc.want) {
			t.Errorf("reading %d reported as %v, want %v", i, tc.reading, tc.want)
		}
	}
}
