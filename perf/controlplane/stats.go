package main

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// summary describes a set of durations.
type summary struct {
	N             int
	P50, P99, Max time.Duration
}

// summarize returns the nearest-rank percentiles of ds; ds is not modified.
// With fewer than 100 samples p99 is the largest sample.
func summarize(ds []time.Duration) summary {
	if len(ds) == 0 {
		return summary{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return summary{N: len(s), P50: percentile(s, 0.50), P99: percentile(s, 0.99), Max: s[len(s)-1]}
}

// percentile returns the nearest-rank q-quantile (0 < q <= 1) of sorted:
// the smallest sample with at least q of the samples at or below it.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(rank, 0), len(sorted)-1)]
}

// median is the 0.5 nearest-rank quantile of ds.
func median(ds []time.Duration) time.Duration { return summarize(ds).P50 }

// ratio formats a/b as "12.3×"; "n/a" when b is zero.
func ratio(a, b time.Duration) string {
	if b <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f×", float64(a)/float64(b))
}

// ms formats d in milliseconds with a precision that suits its size.
func ms(d time.Duration) string {
	f := float64(d) / float64(time.Millisecond)
	switch {
	case f >= 10000:
		return fmt.Sprintf("%.1f s", f/1000)
	case f >= 100:
		return fmt.Sprintf("%.0f ms", f)
	case f >= 10:
		return fmt.Sprintf("%.1f ms", f)
	default:
		return fmt.Sprintf("%.2f ms", f)
	}
}

// mib formats a byte count in MiB.
func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
