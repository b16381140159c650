package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/snapshot"
)

// cacheFileName is the last applied snapshot in the state directory.
const cacheFileName = "snapshot.json"

// cache keeps the last applied snapshot on disk, so that a restart with a
// broken configuration (or, with a controller, without one) still has the
// last good one, and so that versions keep increasing across restarts.
type cache struct {
	dir string
}

// cacheEntry is the file's content. The snapshot is stored as its binary
// protobuf encoding (base64 in JSON) so that nothing is lost in conversion.
type cacheEntry struct {
	// Source, Origin and Node say what the snapshot was built from: it is
	// restored only for the same source, paths and node.
	Source    string    `json:"source"`
	Origin    []string  `json:"origin"`
	Node      string    `json:"node"`
	AppliedAt time.Time `json:"appliedAt"`
	Encoded   []byte    `json:"snapshot"`

	Snapshot *pb.ConfigSnapshot `json:"-"`
}

func (c *cache) path() string { return filepath.Join(c.dir, cacheFileName) }

// load returns the cached entry, nil when there is none.
func (c *cache) load() (*cacheEntry, error) {
	raw, err := os.ReadFile(c.path())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read cached snapshot: %w", err)
	}
	var e cacheEntry
	if err := json.Unmarshal(raw, &e); err != nil {
		return nil, fmt.Errorf("cached snapshot %s: %w", c.path(), err)
	}
	e.Snapshot = &pb.ConfigSnapshot{}
	if err := proto.Unmarshal(e.Encoded, e.Snapshot); err != nil {
		return nil, fmt.Errorf("cached snapshot %s: %w", c.path(), err)
	}
	if got := snapshot.ContentHash(e.Snapshot); got != e.Snapshot.GetContentHash() {
		return nil, fmt.Errorf("cached snapshot %s: content hash %s does not match its content (%s)", c.path(), e.Snapshot.GetContentHash(), got)
	}
	return &e, nil
}

// store writes e atomically: a crash leaves the old file or the new one.
func (c *cache) store(e *cacheEntry) error {
	enc, err := proto.MarshalOptions{Deterministic: true}.Marshal(e.Snapshot)
	if err != nil {
		return fmt.Errorf("encode snapshot: %w", err)
	}
	e.Encoded = enc
	raw, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("encode cache entry: %w", err)
	}
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	tmp, err := os.CreateTemp(c.dir, cacheFileName+".tmp*")
	if err != nil {
		return fmt.Errorf("write cached snapshot: %w", err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if _, err := tmp.Write(raw); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("write cached snapshot: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("write cached snapshot: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write cached snapshot: %w", err)
	}
	if err := os.Rename(tmp.Name(), c.path()); err != nil {
		return fmt.Errorf("write cached snapshot: %w", err)
	}
	return nil
}

// matches reports whether the entry was written for src on node.
func (e *cacheEntry) matches(src Source, node string) bool {
	return e.Source == src.Kind() && e.Node == node && slices.Equal(e.Origin, src.Describe())
}

// cacheWriter writes the configurations the agent applies to its cache
// after the switch, on a goroutine of its own, so that neither serving a
// new configuration nor acknowledging it to the controller waits for the
// disk: encoding and syncing 3000 routes took 5 ms of each change, and
// the controller's ACK waited for it. Only the latest configuration is
// written; one applied while a write is under way waits for it, and those
// in between are never written. A crash within those milliseconds leaves
// the configuration before on disk, as a crash before the write did.
type cacheWriter struct {
	store func(*cacheEntry) error
	log   *slog.Logger

	mu      sync.Mutex
	pending *cacheEntry

	wake chan struct{} // capacity 1: a write is pending
	stop chan struct{}
	done chan struct{}
}

// startCacheWriter starts a writer that writes with store.
func startCacheWriter(store func(*cacheEntry) error, log *slog.Logger) *cacheWriter {
	w := &cacheWriter{store: store, log: log, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	return w
}

// put hands e to the writer in place of any entry still waiting.
func (w *cacheWriter) put(e *cacheEntry) {
	w.mu.Lock()
	w.pending = e
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// close writes what is pending and stops the writer.
func (w *cacheWriter) close() {
	close(w.stop)
	<-w.done
}

func (w *cacheWriter) run() {
	defer close(w.done)
	for {
		select {
		case <-w.wake:
			w.write()
		case <-w.stop:
			w.write()
			return
		}
	}
}

func (w *cacheWriter) write() {
	w.mu.Lock()
	e := w.pending
	w.pending = nil
	w.mu.Unlock()
	if e == nil {
		return
	}
	if err := w.store(e); err != nil {
		w.log.Warn("could not keep the configuration on disk; a restart with a broken configuration will have nothing to fall back to", "error", err)
	}
}
