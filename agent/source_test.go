package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/novaedge/novaedge/agent/internal/fswatch"
	"github.com/novaedge/novaedge/deploy/examples"
	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/snapshot"
)

const probedBackend = `apiVersion: novaedge.io/v1alpha1
kind: ProxyBackend
metadata:
  name: web
  namespace: demo
spec:
  endpoints:
    - address: 10.0.0.1
      port: 80
    - address: 10.0.0.2
      port: 80
`

func endpointStates(snap *pb.ConfigSnapshot) map[string]pb.EndpointState {
	out := map[string]pb.EndpointState{}
	for _, b := range snap.GetCluster().GetBackends() {
		for _, e := range b.GetEndpoints() {
			out[e.GetAddress()] = e.GetState()
		}
	}
	return out
}

// TestFileSourceProbeFailures: the agent's own probe failures make those
// endpoints UNHEALTHY in the standalone snapshot, and WatchProbes reports
// a change exactly when the failing set differs from the last Load's.
func TestFileSourceProbeFailures(t *testing.T) {
	var mu sync.Mutex
	failing := []string{}
	var reads atomic.Int64 // calls of ProbeFailures, by Load and by WatchProbes
	src := &FileSource{DefaultName: "probed.yaml", Default: []byte(probedBackend), Node: snapshot.Node{Name: "n"},
		ProbeInterval: 10 * time.Millisecond,
		ProbeFailures: func() []string {
			reads.Add(1)
			mu.Lock()
			defer mu.Unlock()
			return append([]string(nil), failing...)
		}}
	set := func(f ...string) {
		mu.Lock()
		failing = f
		mu.Unlock()
	}
	if st := endpointStates(src.Load().Snapshot); st["10.0.0.1"] != pb.EndpointState_ENDPOINT_STATE_HEALTHY || st["10.0.0.2"] != pb.EndpointState_ENDPOINT_STATE_HEALTHY {
		t.Fatalf("no failures: states %v", st)
	}

	changes := make(chan struct{}, 16)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.WatchProbes(ctx, func() { changes <- struct{}{} }) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()

	set("10.0.0.2:80")
	select {
	case <-changes:
	case <-time.After(time.Minute):
		t.Fatal("no change reported for a new failure")
	}
	st := endpointStates(src.Load().Snapshot)
	if st["10.0.0.1"] != pb.EndpointState_ENDPOINT_STATE_HEALTHY || st["10.0.0.2"] != pb.EndpointState_ENDPOINT_STATE_UNHEALTHY {
		t.Fatalf("10.0.0.2 failing: states %v", st)
	}
	// Drain what raced with the Load; the same set is no change. A round
	// of WatchProbes that read the failures before the Load compares them
	// with the set before it and may report the change after the Load
	// returned: wait until a round that began after the Load (a later
	// ProbeFailures call, only WatchProbes makes them now) shows that the
	// earlier rounds are over, however slow the machine.
	loaded := reads.Load()
	waitFor(t, "a WatchProbes round after the Load", func() bool { return reads.Load() != loaded })
	for len(changes) > 0 {
		<-changes
	}
	time.Sleep(100 * time.Millisecond)
	if n := len(changes); n != 0 {
		t.Fatalf("%d changes reported with the failing set unchanged since the last Load", n)
	}
	set()
	select {
	case <-changes:
	case <-time.After(time.Minute):
		t.Fatal("no change reported for a recovery")
	}
	if st := endpointStates(src.Load().Snapshot); st["10.0.0.2"] != pb.EndpointState_ENDPOINT_STATE_HEALTHY {
		t.Fatalf("recovered: states %v", st)
	}
}

// TestFileSourceHoldFiles: with HoldFiles (--watch=false), a reload for a
// health change builds from the files as last read, so an edit in progress
// is not applied; RequestRead (SIGHUP, novaedgectl reload) reads them.
func TestFileSourceHoldFiles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "backend.yaml")
	if err := os.WriteFile(path, []byte(probedBackend), 0o644); err != nil {
		t.Fatal(err)
	}
	var failing []string
	src := &FileSource{Paths: []string{path}, Node: snapshot.Node{Name: "n"}, HoldFiles: true,
		ProbeFailures: func() []string { return failing }}
	src.Load()
	edited := strings.Replace(probedBackend, "10.0.0.2", "10.0.0.3", 1)
	if err := os.WriteFile(path, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	failing = []string{"10.0.0.1:80"}
	st := endpointStates(src.Load().Snapshot)
	if st["10.0.0.1"] != pb.EndpointState_ENDPOINT_STATE_UNHEALTHY || st["10.0.0.2"] != pb.EndpointState_ENDPOINT_STATE_HEALTHY || len(st) != 2 {
		t.Fatalf("health reload while files are held: %v, want the files as first read with 10.0.0.1 unhealthy", st)
	}
	src.RequestRead()
	st = endpointStates(src.Load().Snapshot)
	if _, ok := st["10.0.0.3"]; !ok || st["10.0.0.1"] != pb.EndpointState_ENDPOINT_STATE_UNHEALTHY {
		t.Fatalf("requested read: %v, want the edited file with 10.0.0.1 still unhealthy", st)
	}
}

func TestBurstDue(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	type ev struct {
		at   int // ms
		name string
		op   fswatch.Op
	}
	for _, tc := range []struct {
		name   string
		events []ev
		due    int // ms
	}{
		{"a file renamed into place", []ev{{0, "/c/a.yaml", fswatch.Complete}}, 20},
		{"written, then closed", []ev{{0, "/c/a.yaml", fswatch.Writing}, {5, "/c/a.yaml", fswatch.Writing}, {7, "/c/a.yaml", fswatch.Complete}}, 27},
		{"written, still open", []ev{{0, "/c/a.yaml", fswatch.Writing}, {5, "/c/a.yaml", fswatch.Writing}}, 205},
		{"one file complete, another still open", []ev{{0, "/c/b.yaml", fswatch.Writing}, {10, "/c/a.yaml", fswatch.Complete}}, 200},
		{"a half-written file renamed away", []ev{{0, "/c/.tmp", fswatch.Writing}, {3, "/c/.tmp", fswatch.Gone}}, 23},
		{"events lost", []ev{{0, "", fswatch.Overflow}, {1, "/c/a.yaml", fswatch.Complete}}, 200},
		{"removed", []ev{{0, "/c/a.yaml", fswatch.Gone}}, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := burst{settle: 20 * time.Millisecond, debounce: 200 * time.Millisecond, writing: map[string]time.Time{}}
			for _, e := range tc.events {
				b.add(ms(e.at), fswatch.Event{Name: e.name, Op: e.op})
			}
			if got := b.due(); !got.Equal(ms(tc.due)) {
				t.Errorf("due %v after the first event, want %v", got.Sub(t0), ms(tc.due).Sub(t0))
			}
			b.reset()
			b.add(ms(1000), fswatch.Event{Name: "/c/a.yaml", Op: fswatch.Complete})
			if got := b.due(); !got.Equal(ms(1020)) {
				t.Errorf("after reset: due %v, want 1.02s", got.Sub(t0))
			}
		})
	}
}

// watch runs src.Watch until the test ends; the channel gets a value per
// reported change.
func watch(t *testing.T, src *FileSource) <-chan struct{} {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	changes := make(chan struct{}, 16)
	done := make(chan error, 1)
	go func() { done <- src.Watch(ctx, func() { changes <- struct{}{} }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Watch: %v", err)
		}
	})
	return changes
}

// TestWatchSettlesCompleteFiles: with a debounce far longer than the test,
// a configuration saved atomically (renamed into place) and one written in
// place and closed are each reported at once, while a file its writer holds
// open is not reported before the writer closes it.
func TestWatchSettlesCompleteFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "standalone.yaml")
	if err := os.WriteFile(path, []byte("# empty\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	changes := watch(t, &FileSource{Paths: []string{path}, Debounce: time.Hour})
	expect := func(what string) {
		t.Helper()
		select {
		case <-changes:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no change reported", what)
		}
	}
	expect("the first report after the watches are set")

	tmp := filepath.Join(dir, ".standalone.yaml.tmp")
	if err := os.WriteFile(tmp, []byte("# saved atomically\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	expect("an atomic save")

	if err := os.WriteFile(path, []byte("# rewritten in place\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	expect("a rewrite in place, closed")

	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("# half of it\n"); err != nil {
		t.Fatal(err)
	}
	// A negative check: the report must not come while the file is open.
	select {
	case <-changes:
		t.Fatal("a file still open for writing was reported")
	case <-time.After(300 * time.Millisecond):
	}
	if _, err := f.WriteString("# the rest\n"); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	expect("the file closed")
	select {
	case <-changes:
		t.Fatal("one burst was reported twice")
	case <-time.After(100 * time.Millisecond):
	}
}

// TestWatchConfigMapSwap: a file mounted from a Kubernetes ConfigMap is a
// link through "..data" to a timestamped directory, and an update swaps
// "..data" to a new directory (kubelet's atomic writer). The swap is
// reported at once, not after the debounce, and the file then reads as
// the new version.
func TestWatchConfigMapSwap(t *testing.T) {
	dir := t.TempDir()
	version := func(name, content string) {
		t.Helper()
		ts := filepath.Join(dir, name)
		if err := os.Mkdir(ts, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ts, "config.yaml"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(name, filepath.Join(dir, "..data_tmp")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	version("..2026_11_29_10_00_00.1", "# one\n")
	path := filepath.Join(dir, "config.yaml")
	if err := os.Symlink(filepath.Join("..data", "config.yaml"), path); err != nil {
		t.Fatal(err)
	}
	changes := watch(t, &FileSource{Paths: []string{path}, Debounce: time.Hour})
	for _, what := range []string{"the first report after the watches are set", "the swap"} {
		if what == "the swap" {
			version("..2026_11_29_10_05_00.2", "# two\n")
		}
		select {
		case <-changes:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no change reported", what)
		}
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "# two\n" {
		t.Fatalf("config.yaml reads %q, %v", b, err)
	}
}

// TestWatchPrefetches: while a burst of complete files settles, Watch
// builds them, so the Load made once the burst is reported returns that
// candidate without building again; a file still open for writing is not
// read. The settle is an hour, so the only report during the test is the
// one for the first save, a rename after a quiet spell (which Watch makes
// once its own Load has built it), and only Watch's Load can have built
// what Load returns.
func TestWatchPrefetches(t *testing.T) {
	src, path, first, changes := watchedExample(t)
	cached := func() *pb.ConfigSnapshot { return lastBuilt(src) }
	waitBuilt := func(what string, old *pb.ConfigSnapshot) *pb.ConfigSnapshot {
		t.Helper()
		return waitBuilt(t, what, src, func(s *pb.ConfigSnapshot) bool { return s != old })
	}

	writeConfig(t, path, "port: 18082\n  healthCheck", "port: 18083\n  healthCheck")
	built := waitBuilt("an atomic save", first.Snapshot)
	if built.GetContentHash() == first.Snapshot.GetContentHash() {
		t.Fatal("the build after the save has the old content")
	}
	select {
	case <-changes:
	case <-time.After(10 * time.Second):
		t.Fatal("a rename after a quiet spell was not reported once built")
	}
	if got := src.Load(); got.Snapshot != built {
		t.Error("Load built the saved files again instead of returning what Watch built")
	}

	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(string(examples.Standalone[:len(examples.Standalone)/2])); err != nil {
		t.Fatal(err)
	}
	// A negative check: a half-written file must not be read.
	time.Sleep(300 * time.Millisecond)
	if cached() != built {
		t.Fatal("a file still open for writing was read")
	}
	if _, err := f.Write(examples.Standalone[len(examples.Standalone)/2:]); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	again := waitBuilt("the file closed", built)
	if again.GetContentHash() != first.Snapshot.GetContentHash() {
		t.Error("the build after the close is not the example's")
	}
	select {
	case <-changes:
		t.Fatal("a change was reported before the hour-long settle")
	default:
	}
}

// TestWatchLeads: a file renamed into place after a quiet spell is reported
// as soon as Watch has built it, without the settle (an hour here, so the
// report can come from nothing else), and Load then returns that build. A
// rename soon after it, within the debounce, starts an ordinary burst: it
// is built but waits out the settle.
func TestWatchLeads(t *testing.T) {
	src, path, first, changes := watchedExample(t)

	writeConfig(t, path, "port: 18082\n  healthCheck", "port: 18083\n  healthCheck")
	select {
	case <-changes:
	case <-time.After(10 * time.Second):
		t.Fatal("a rename after a quiet spell was not reported before the settle")
	}
	saved := src.Load()
	if saved.Snapshot.GetContentHash() == first.Snapshot.GetContentHash() {
		t.Fatal("Load after the report returns the configuration before the save")
	}

	writeConfig(t, path)
	waitBuilt(t, "the second save", src, func(s *pb.ConfigSnapshot) bool {
		return s.GetContentHash() == first.Snapshot.GetContentHash()
	})
	// A negative check: the second save came within the debounce of the
	// first, so its report waits for the hour-long settle.
	select {
	case <-changes:
		t.Fatal("a rename within the debounce of the last event was reported before the settle")
	case <-time.After(300 * time.Millisecond):
	}
}

// lastBuilt is the snapshot src's last Load built.
func lastBuilt(src *FileSource) *pb.ConfigSnapshot {
	src.mu.Lock()
	defer src.mu.Unlock()
	return src.last.Snapshot
}

// waitBuilt waits until src's last build is one done says it is, and
// returns it; it fails the test after 10 s.
func waitBuilt(t *testing.T, what string, src *FileSource, done func(*pb.ConfigSnapshot) bool) *pb.ConfigSnapshot {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !done(lastBuilt(src)) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not built while the burst settles", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return lastBuilt(src)
}

// watchedExample writes the standalone example, loads it with a debounce
// and a settle of an hour, and watches it: it returns the source, the
// file, the first load and the reports after the one Watch makes when its
// watches are set.
func watchedExample(t *testing.T) (*FileSource, string, Candidate, <-chan struct{}) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "standalone.yaml")
	writeConfig(t, path)
	src := &FileSource{Paths: []string{path}, Node: snapshot.Node{Name: "node-a"}, Debounce: time.Hour, Settle: time.Hour}
	first := src.Load()
	if first.Diagnostics.HasErrors() {
		t.Fatalf("the example has errors: %v", first.Diagnostics)
	}
	changes := watch(t, src)
	<-changes
	return src, path, first, changes
}
