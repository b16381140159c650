// Package gctune sizes the Go garbage collector's target to a fixed
// memory headroom instead of a fixed ratio.
//
// With GOGC=100 the heap may grow by as much as is live before the next
// collection. The agent's live heap is small when it has few routes
// (a few MiB), so under load it collected every few MiB of garbage, and
// garbage collection took about a sixth of the slow path's CPU. With a
// headroom the heap may grow by at least that many bytes: GOGC is raised
// while the live heap is small and stays at 100 once the live heap is as
// large as the headroom, so that memory with many routes is what it
// would be without tuning.
package gctune

import (
	"context"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// Options configure the tuner.
type Options struct {
	// Headroom is how many bytes the heap may grow past the live heap
	// before a collection, at least.
	Headroom uint64
	// MaxPercent caps GOGC (default 400).
	MaxPercent int
	// Interval is how often the live heap is read (default 500 ms).
	Interval time.Duration
	// OnChange, if set, is told each GOGC the tuner sets.
	OnChange func(percent int)
}

// Percent is the GOGC giving at least headroom bytes of growth over live,
// between 100 and maxPercent.
func Percent(live, headroom uint64, maxPercent int) int {
	if live == 0 {
		return maxPercent
	}
	p := headroom * 100 / live
	switch {
	case p < 100:
		return 100
	case p > uint64(maxPercent):
		return maxPercent
	}
	return int(p)
}

// Run tunes GOGC until ctx ends, then restores it. It does nothing when
// the GOGC environment variable is set (the operator chose) or the
// headroom is zero.
func Run(ctx context.Context, opts Options) {
	if os.Getenv("GOGC") != "" || opts.Headroom == 0 {
		return
	}
	if opts.MaxPercent < 100 {
		opts.MaxPercent = 400
	}
	if opts.Interval <= 0 {
		opts.Interval = 500 * time.Millisecond
	}
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	current := debug.SetGCPercent(100)
	defer debug.SetGCPercent(current)
	current = 100
	t := time.NewTicker(opts.Interval)
	defer t.Stop()
	for {
		metrics.Read(sample)
		if sample[0].Value.Kind() == metrics.KindUint64 {
			if p := Percent(sample[0].Value.Uint64(), opts.Headroom, opts.MaxPercent); p != current {
				debug.SetGCPercent(p)
				current = p
				if opts.OnChange != nil {
					opts.OnChange(p)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
