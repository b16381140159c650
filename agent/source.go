package agent

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/novaedge/novaedge/agent/internal/fswatch"
	"github.com/novaedge/novaedge/diag"
	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/internal/digest"
	"github.com/novaedge/novaedge/loader"
	"github.com/novaedge/novaedge/manifest"
	"github.com/novaedge/novaedge/snapshot"
)

// Candidate is a configuration offered to the agent.
type Candidate struct {
	// Snapshot is the built configuration, without a version when the
	// source does not assign one (standalone files). Never nil.
	Snapshot *pb.ConfigSnapshot
	// Diagnostics of loading and building, with file positions where the
	// source has them, sorted.
	Diagnostics diag.List
	// Unavailable, when set, says why the source has no configuration to
	// offer (a controller out of reach); Snapshot is then empty and is not
	// served.
	Unavailable error
}

// Source offers configurations.
type Source interface {
	// Kind is "standalone" or "controller".
	Kind() string
	// Describe names where configuration comes from, for status and the
	// disk cache: paths, or the embedded default's name.
	Describe() []string
	// Load reads and builds the configuration now.
	Load() Candidate
	// Watch calls changed whenever the configuration may have changed,
	// until ctx ends, and once when it starts watching (a change may have
	// happened since the last Load). It returns nil when ctx ends.
	Watch(ctx context.Context, changed func()) error
}

// FileSource reads standalone configuration from YAML files and
// directories (a directory contributes its *.yaml and *.yml files), or from
// embedded bytes when Paths is empty.
type FileSource struct {
	// Paths are files and directories. Empty: Default is served.
	Paths []string
	// DefaultName and Default are the embedded configuration used without
	// Paths; DefaultName appears in diagnostics' positions.
	DefaultName string
	Default     []byte
	// Node is the node the snapshot is built for.
	Node snapshot.Node
	// Debounce is how long Watch waits after the last write to a file
	// that its writer has not closed yet (editors and tools write a file
	// in several steps) before reporting a change. Zero means 200ms.
	Debounce time.Duration
	// Settle is how long Watch waits after the last event when every
	// file written has been closed or renamed into place (an atomic save,
	// a ConfigMap update), so that a burst of such events is reported
	// once. Zero means 20ms; at most Debounce. A burst that begins with
	// a file renamed into place after a quiet Debounce is reported as soon
	// as Watch has built it, without waiting Settle (see Watch).
	Settle time.Duration
	// ProbeFailures, when set, returns the endpoints ("address:port") this
	// agent's active health checks find failing now: they are built into
	// the snapshot as UNHEALTHY (snapshot.Options.ProbeFailures), and
	// Watch reports a change when the set changes.
	ProbeFailures func() []string
	// ProbeInterval is how often Watch asks ProbeFailures. Zero means 1s.
	ProbeInterval time.Duration
	// HoldFiles (--watch=false) keeps the files as last read: Load builds
	// again from them (for a change of the probe failures) and reads the
	// files only after RequestRead, so that no reload but a requested one
	// applies a half-finished edit.
	HoldFiles bool

	// loadMu makes Loads one at a time: Watch starts one of its own
	// (prefetch) while a burst settles.
	loadMu sync.Mutex
	// memo carries the routes of one build into the next: the loader
	// gives a document whose bytes did not change as the same object, so
	// only changed routes are built again. It lets go of them after half
	// the loader's Hold: before the loader puts its objects to rest and
	// returns the memory freed to the system (which the memo's hold on
	// the routes' rules would otherwise keep: 12 MB with 5000 routes),
	// after which it would find none of them again.
	memo    snapshot.Memo
	mu      sync.Mutex
	lastSum digest.Sum
	last    *Candidate
	// failing is the probe failure set of the last Load, joined.
	failing string
	// held is what HoldFiles keeps of the last read; readReq asks the next
	// Load to read the files.
	held    *parsed
	readReq atomic.Bool
}

// parsed is the configuration as read from the files, before the build.
type parsed struct {
	res   *loader.Result
	diags diag.List
}

// RequestRead makes the next Load read the files, with HoldFiles too: the
// agent calls it for SIGHUP and novaedgectl reload.
func (s *FileSource) RequestRead() { s.readReq.Store(true) }

var _ Source = (*FileSource)(nil)

// Kind returns "standalone".
func (s *FileSource) Kind() string { return "standalone" }

// Describe returns the paths, or "embedded:<name>" for the default.
func (s *FileSource) Describe() []string {
	if len(s.Paths) == 0 {
		return []string{"embedded:" + s.DefaultName}
	}
	return slices.Clone(s.Paths)
}

// Load reads the files and builds the snapshot for Node. Problems are
// returned as diagnostics; the snapshot holds every resource without an
// error (snapshot.Build's rules).
func (s *FileSource) Load() Candidate {
	// Files whose bytes did not change give the same candidate without
	// parsing and validating them again: SIGHUP, a touch, the event Watch
	// reports when it starts, or the Load after Watch's own (prefetch)
	// cost a hash, not a build.
	s.loadMu.Lock()
	defer s.loadMu.Unlock()
	failing := s.failures()
	read := s.readReq.Swap(false)
	s.mu.Lock()
	held := s.held
	s.failing = strings.Join(failing, ",")
	s.mu.Unlock()
	if s.HoldFiles && held != nil && !read {
		return s.build(held, failing)
	}
	sum, ok := s.fingerprint(failing)
	s.mu.Lock()
	if ok && s.last != nil && sum == s.lastSum {
		c := *s.last
		s.mu.Unlock()
		return c
	}
	s.mu.Unlock()
	c := s.load(failing)
	if ok {
		s.mu.Lock()
		s.lastSum, s.last = sum, &c
		s.mu.Unlock()
	}
	return c
}

// failures returns ProbeFailures' set, sorted.
func (s *FileSource) failures() []string {
	if s.ProbeFailures == nil {
		return nil
	}
	f := slices.Clone(s.ProbeFailures())
	slices.Sort(f)
	return slices.Compact(f)
}

// WatchProbes calls changed whenever the probe failure set differs from
// the one the last Load built, until ctx ends. Watch runs it; a source
// whose files are not watched runs it alone.
func (s *FileSource) WatchProbes(ctx context.Context, changed func()) error {
	if s.ProbeFailures == nil {
		<-ctx.Done()
		return nil
	}
	t := time.NewTicker(cmp.Or(s.ProbeInterval, time.Second))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		now := strings.Join(s.failures(), ",")
		s.mu.Lock()
		differs := now != s.failing
		s.mu.Unlock()
		if differs {
			changed()
		}
	}
}

// fingerprint hashes the names and contents of the files Load reads; false
// when they cannot all be read (Load then reports why).
func (s *FileSource) fingerprint(failing []string) (digest.Sum, bool) {
	h := digest.New()
	_, _ = fmt.Fprintf(h, "%q", failing)
	if len(s.Paths) == 0 {
		_, _ = h.Write(s.Default)
	} else {
		files, err := manifest.Files(s.Paths...)
		if err != nil {
			return digest.Sum{}, false
		}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				return digest.Sum{}, false
			}
			_, _ = h.WriteString(f)
			_, _ = h.Write(data)
		}
	}
	return h.Sum(), true
}

func (s *FileSource) load(failing []string) Candidate {
	p := &parsed{}
	if len(s.Paths) == 0 {
		docs, d := manifest.Parse(s.DefaultName, s.Default)
		p.res, p.diags = loader.FromDocuments(docs)
		p.diags = append(d, p.diags...)
	} else {
		p.res, p.diags = loader.Load(s.Paths...)
	}
	if s.HoldFiles {
		s.mu.Lock()
		s.held = p
		s.mu.Unlock()
	}
	return s.build(p, failing)
}

// build builds the snapshot of what was read, with the probe failures.
func (s *FileSource) build(p *parsed, failing []string) Candidate {
	var probeFailures map[string]bool
	for _, e := range failing {
		if probeFailures == nil {
			probeFailures = map[string]bool{}
		}
		probeFailures[e] = true
	}
	if s.memo.Hold == 0 {
		s.memo.Hold = loader.Hold() / 2 // set before the first build uses it
	}
	snap, built := snapshot.Build(p.res.Input, snapshot.Options{Node: s.Node, ProbeFailures: probeFailures, Memo: &s.memo})
	p.res.Locate(built)
	diags := append(slices.Clone(p.diags), built...)
	diags.Sort()
	// The snapshot is served as built. Copying it into a heap freed of
	// the load's garbage first (encode, collect, decode) once saved 11 MB
	// of heap pages with 5000 routes; since loads keep only detached
	// documents and reuse unchanged ones, it saved 0.7 MB and cost a
	// fifth of a reload (perf/results/routes-2026-11-29T101816Z.md).
	return Candidate{Snapshot: snap, Diagnostics: diags}
}

// Watch watches the files' directories with inotify, so that editors that
// replace a file by renaming and Kubernetes ConfigMap volumes (which swap a
// "..data" symlink) are noticed, and calls changed once per burst of events:
// Settle after the last one when every file written was closed or renamed
// into place, else Debounce after the last write (see burst). While such a
// burst settles, Watch loads the files itself, so that the caller's Load
// after changed finds them built.
//
// A file renamed into place after a quiet Debounce is reported as soon as
// that load is done, as Envoy applies a file moved over its configuration:
// the rename is atomic, so the bytes read are a finished save, and an
// edit, a deploy or a ConfigMap update then serves without the Settle
// wait. Events during that load make it an ordinary burst. A tool that
// replaces several files one rename at a time has each rename served in
// turn, as before whenever the renames were further apart than Settle.
// Without Paths there is nothing to watch and Watch waits for ctx.
func (s *FileSource) Watch(ctx context.Context, changed func()) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	probesDone := make(chan struct{})
	go func() {
		defer close(probesDone)
		_ = s.WatchProbes(ctx, changed)
	}()
	defer func() { <-probesDone }()
	if len(s.Paths) == 0 {
		<-ctx.Done()
		return nil
	}
	w, err := fswatch.New()
	if err != nil {
		return fmt.Errorf("watch configuration: %w", err)
	}
	defer func() { _ = w.Close() }()

	files := map[string]bool{} // absolute file paths named on the command line
	dirs := map[string]bool{}  // directories named on the command line
	watched := map[string]bool{}
	for _, p := range s.Paths {
		abs, err := filepath.Abs(p)
		if err != nil {
			return fmt.Errorf("watch %s: %w", p, err)
		}
		dir := abs
		if fi, err := os.Stat(abs); err == nil && fi.IsDir() {
			dirs[abs] = true
		} else {
			files[abs] = true
			dir = filepath.Dir(abs)
		}
		if watched[dir] {
			continue
		}
		if err := w.Add(dir); err != nil {
			return fmt.Errorf("watch %s: %w", dir, err)
		}
		watched[dir] = true
	}
	// A change between the caller's first Load and the watches above would
	// go unnoticed: report one now, so the caller reads the files again.
	changed()

	relevant := func(name string) bool {
		base := filepath.Base(name)
		if files[name] || strings.HasPrefix(base, "..") {
			return true
		}
		ext := filepath.Ext(name)
		return dirs[filepath.Dir(name)] && (ext == ".yaml" || ext == ".yml")
	}

	b := burst{debounce: cmp.Or(s.Debounce, 200*time.Millisecond), writing: map[string]time.Time{}}
	b.settle = min(cmp.Or(s.Settle, 20*time.Millisecond), b.debounce)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()

	// While a burst of complete files settles, a Load of its own reads and
	// builds them (prefetch), so that the Load the caller makes once the
	// burst is reported finds the candidate ready (its fingerprint check)
	// instead of starting then: the settle no longer adds to the time a
	// change takes (3000 routes: the build takes longer than the settle).
	// A later event of the burst makes that prefetch wasted work, not a
	// wrong answer: the caller's Load sees other bytes and builds them.
	prefetched := make(chan struct{}, 1)
	prefetching, again := false, false
	// lead: the burst under way began with a rename into place after a
	// quiet Debounce and has had no other event, so it is reported once
	// its prefetch is built. lastEvent is when the last event came.
	lead := false
	var lastEvent time.Time
	prefetch := func() {
		if s.HoldFiles || len(b.writing) > 0 {
			return // what is read now is not what will be served
		}
		if prefetching {
			again = true
			return
		}
		prefetching = true
		go func() {
			s.Load()
			prefetched <- struct{}{}
		}()
	}
	defer func() {
		if prefetching {
			<-prefetched
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-prefetched:
			prefetching = false
			switch {
			case again:
				// Events came during it: read again, unless the burst
				// was reported meanwhile (the caller's Load reads then).
				again = false
				if !b.last.IsZero() {
					prefetch()
				}
			case lead && !b.last.IsZero():
				lead = false
				b.reset()
				timer.Stop()
				changed()
			}
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			// Overflow: events were lost, so re-read to be sure.
			if ev.Op != fswatch.Overflow && !relevant(ev.Name) {
				continue
			}
			now := time.Now()
			lead = b.last.IsZero() && ev.Op == fswatch.Moved && now.Sub(lastEvent) >= b.debounce && !s.HoldFiles
			lastEvent = now
			b.add(now, ev)
			timer.Reset(b.due().Sub(now))
			prefetch()
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			return fmt.Errorf("watch configuration: %w", err)
		case <-timer.C:
			if b.last.IsZero() {
				continue // a burst already reported
			}
			b.reset()
			changed()
		}
	}
}

// burst decides when a burst of file events has ended: Settle after the
// last event, but Debounce after the last write to a file that no writer
// has closed or renamed into place since (or after lost events), so that a
// file is not read half written.
type burst struct {
	settle, debounce time.Duration
	last             time.Time            // zero: no burst under way
	writing          map[string]time.Time // name → its last write
}

func (b *burst) add(now time.Time, ev fswatch.Event) {
	b.last = now
	switch ev.Op {
	case fswatch.Writing, fswatch.Overflow:
		b.writing[ev.Name] = now
	default:
		delete(b.writing, ev.Name)
	}
}

// due is when the burst is over unless another event comes.
func (b *burst) due() time.Time {
	t := b.last.Add(b.settle)
	for _, w := range b.writing {
		if d := w.Add(b.debounce); d.After(t) {
			t = d
		}
	}
	return t
}

func (b *burst) reset() {
	b.last = time.Time{}
	clear(b.writing)
}
