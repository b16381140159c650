package main

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// buildLog is a slog handler for the in-process controller: it keeps the
// "took" of every "snapshots built" debug record (one publisher run: list
// from the cache, build and publish every node's snapshot) and passes the
// records next is enabled for on to next.
type buildLog struct {
	next slog.Handler
	*buildTimes
}

type buildTimes struct {
	mu   sync.Mutex
	took []time.Duration
}

var _ slog.Handler = buildLog{}

func newBuildLog(next slog.Handler) buildLog { return buildLog{next: next, buildTimes: &buildTimes{}} }

func (h buildLog) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelDebug || h.next.Enabled(ctx, l)
}

func (h buildLog) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "snapshots built" {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "took" && a.Value.Kind() == slog.KindDuration {
				h.mu.Lock()
				h.took = append(h.took, a.Value.Duration())
				h.mu.Unlock()
				return false
			}
			return true
		})
	}
	if h.next.Enabled(ctx, r.Level) {
		return h.next.Handle(ctx, r)
	}
	return nil
}

func (h buildLog) WithAttrs(as []slog.Attr) slog.Handler {
	return buildLog{next: h.next.WithAttrs(as), buildTimes: h.buildTimes}
}

func (h buildLog) WithGroup(name string) slog.Handler {
	return buildLog{next: h.next.WithGroup(name), buildTimes: h.buildTimes}
}

// since returns the durations recorded after the first n.
func (t *buildTimes) since(n int) []time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.took[min(n, len(t.took)):])
}

func (t *buildTimes) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.took)
}
