package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

// TestCacheWriter: a write under way does not hold up put, the entries put
// meanwhile are replaced by the last one, close writes what is pending
// even when it comes while a write is under way, and a failed write is
// logged.
func TestCacheWriter(t *testing.T) {
	// The writer's choice between a pending write and close is the
	// runtime's: twenty rounds try both.
	for round := range 20 {
		var mu sync.Mutex
		var written []uint64
		started := make(chan uint64, 10)
		release := map[uint64]chan struct{}{1: make(chan struct{}), 3: make(chan struct{})}
		store := func(e *cacheEntry) error {
			v := e.Snapshot.GetVersion()
			started <- v
			if c := release[v]; c != nil {
				<-c // a slow write
			}
			mu.Lock()
			defer mu.Unlock()
			written = append(written, v)
			if v == 5 {
				return errors.New("disk full")
			}
			return nil
		}
		logs := &syncBuffer{}
		w := startCacheWriter(store, slog.New(slog.NewTextHandler(logs, nil)))
		entry := func(v uint64) *cacheEntry { return &cacheEntry{Snapshot: &pb.ConfigSnapshot{Version: v}} }

		w.put(entry(1))
		if v := <-started; v != 1 {
			t.Fatalf("round %d: the writer started with version %d, want 1", round, v)
		}
		done := make(chan struct{})
		go func() {
			// While version 1 is being written.
			w.put(entry(2))
			w.put(entry(3))
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("put waited for the write under way")
		}
		close(release[1])
		if v := <-started; v != 3 {
			t.Fatalf("round %d: the writer went on with version %d, want 3 (the last put)", round, v)
		}
		// While version 3 is being written: 4, then 5, then close.
		w.put(entry(4))
		w.put(entry(5))
		closed := make(chan struct{})
		go func() {
			w.close()
			close(closed)
		}()
		time.Sleep(time.Millisecond) // let close begin (not needed for the outcome)
		close(release[3])
		<-closed

		mu.Lock()
		got := fmt.Sprint(written)
		mu.Unlock()
		if got != "[1 3 5]" {
			t.Fatalf("round %d: written %s, want [1 3 5]", round, got)
		}
		if !strings.Contains(logs.String(), "could not keep the configuration on disk") || !strings.Contains(logs.String(), "disk full") {
			t.Fatalf("round %d: the failed write was not logged: %s", round, logs.String())
		}
	}
}

// TestCacheAfterReloads: after a quick series of reloads, the state
// directory holds the last applied configuration once Run has returned,
// although the agent writes it after the switch.
func TestCacheAfterReloads(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "standalone.yaml")
	state := filepath.Join(dir, "state")
	writeConfig(t, path)
	h := startAgent(t, fileSource(path), state)
	var last *State
	for i := range 8 { // maxRetries goes up to 10
		writeConfig(t, path, "maxRetries: 1", fmt.Sprintf("maxRetries: %d", i+2))
		out, err := h.agent.Reload(context.Background(), "test")
		if err != nil || !out.Applied || out.Unchanged {
			t.Fatalf("reload %d: %+v, %v", i, out, err)
		}
		last = h.agent.State()
	}
	h.stop()
	e, err := (&cache{dir: state}).load()
	if err != nil || e == nil {
		t.Fatalf("cache: %v, %v", e, err)
	}
	if e.Snapshot.GetVersion() != last.Snapshot.GetVersion() || e.Snapshot.GetContentHash() != last.Snapshot.GetContentHash() {
		t.Fatalf("cache holds version %d (%s), want the last applied %d (%s)", e.Snapshot.GetVersion(), shortHash(e.Snapshot.GetContentHash()),
			last.Snapshot.GetVersion(), shortHash(last.Snapshot.GetContentHash()))
	}
}
