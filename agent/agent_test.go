package agent

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/novaedge/novaedge/deploy/examples"
	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/loader"
	"github.com/novaedge/novaedge/snapshot"
)

// waitFor polls cond until it holds; the deadline only bounds a broken
// test, nothing is measured.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// recorder is an Applier that keeps what it was asked to apply; failCompile
// and failApply make it fail.
type recorder struct {
	mu          sync.Mutex
	applied     []*pb.ConfigSnapshot
	failCompile error
	failApply   error
}

func (r *recorder) Name() string { return "recorder" }

func (r *recorder) Compile(snap *pb.ConfigSnapshot) (Change, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failCompile != nil {
		return nil, r.failCompile
	}
	fail := r.failApply
	return ChangeFunc(func(context.Context) error {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.applied = append(r.applied, snap)
		return fail
	}), nil
}

func (r *recorder) versions() []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []uint64
	for _, s := range r.applied {
		out = append(out, s.GetVersion())
	}
	return out
}

// syncBuffer is a log destination safe for the agent's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// writeConfig writes the standalone example, with each old→new
// replacement applied, to path.
func writeConfig(t *testing.T, path string, replace ...string) {
	t.Helper()
	data := string(examples.Standalone)
	for i := 0; i+1 < len(replace); i += 2 {
		if !strings.Contains(data, replace[i]) {
			t.Fatalf("the standalone example has no %q to replace", replace[i])
		}
		data = strings.Replace(data, replace[i], replace[i+1], 1)
	}
	// Replace the file as editors do, by renaming a new one over it.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

type harness struct {
	agent *Agent
	rec   *recorder
	logs  *syncBuffer
	stop  func()
}

func startAgent(t *testing.T, src Source, stateDir string, appliers ...Applier) *harness {
	t.Helper()
	h := newAgentHarness(t, src, stateDir, appliers...)
	waitFor(t, "the first configuration", func() bool { return h.agent.State() != nil })
	return h
}

// newAgentHarness runs an agent without waiting for a configuration.
func newAgentHarness(t *testing.T, src Source, stateDir string, appliers ...Applier) *harness {
	t.Helper()
	h := &harness{rec: &recorder{}, logs: &syncBuffer{}}
	a, err := New(Options{
		Source:   src,
		Appliers: append([]Applier{h.rec}, appliers...),
		// As the command sets it: strict for files, not for a controller.
		StrictReload: src.Kind() != "controller",
		StateDir:     stateDir,
		NodeName:     "node-a",
		Version:      "test",
		Logger:       slog.New(slog.NewTextHandler(h.logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	h.agent = a
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	h.stop = func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	t.Cleanup(func() {
		if ctx.Err() == nil {
			h.stop()
		}
	})
	return h
}

func fileSource(path string) *FileSource {
	return &FileSource{Paths: []string{path}, Node: snapshot.Node{Name: "node-a"}, Debounce: 20 * time.Millisecond}
}

// TestBadEditKeepsLastGoodConfig is the acceptance test of standalone
// reloads: an invalid edit is rejected with its file:line and field, the
// previous configuration keeps serving, and the fix is applied without a
// restart, all noticed through inotify.
func TestBadEditKeepsLastGoodConfig(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "standalone.yaml")
	writeConfig(t, path)
	h := startAgent(t, fileSource(path), filepath.Join(dir, "state"))
	a := h.agent

	first := a.State()
	if first == nil || first.Snapshot.GetVersion() != 1 || len(first.Diagnostics) != 0 {
		t.Fatalf("first state = %+v, want version 1 without diagnostics", first)
	}

	// Port 70000: rejected by the CRD schema.
	writeConfig(t, path, "port: 18082\n  healthCheck", "port: 70000\n  healthCheck")
	waitFor(t, "the bad edit to be rejected", func() bool { return a.Rejected() != nil })
	r := a.Rejected()
	if a.State() != first {
		t.Fatalf("the state changed after a rejected edit: version %d", a.State().Snapshot.GetVersion())
	}
	if !r.Diagnostics.HasErrors() || !strings.Contains(r.Err.Error(), "still serving version 1") {
		t.Fatalf("rejection = %v, diagnostics %v", r.Err, r.Diagnostics)
	}
	found := false
	for _, d := range r.Diagnostics.Errors() {
		if d.Field == "spec.endpoints[0].port" && d.Resource.Name == "demo-web-canary" && d.Pos.File == path && d.Pos.Line > 0 {
			found = true
		}
	}
	if !found {
		t.Fatalf("no error naming demo-web-canary spec.endpoints[0].port at %s:line in %v", path, r.Diagnostics)
	}
	if logs := h.logs.String(); !strings.Contains(logs, "spec.endpoints[0].port") || !strings.Contains(logs, "last good configuration keeps serving") {
		t.Fatalf("the rejection was not logged with its field:\n%s", logs)
	}

	// The fix: a real change (another canary port) is applied as version 2.
	writeConfig(t, path, "port: 18082\n  healthCheck", "port: 18083\n  healthCheck")
	waitFor(t, "the fix to be applied", func() bool { return a.State().Snapshot.GetVersion() == 2 })
	if a.Rejected() != nil {
		t.Fatalf("rejection not cleared after the fix: %v", a.Rejected().Err)
	}
	if got := h.rec.versions(); len(got) != 2 || got[0] != 1 || got[1] != 2 {
		t.Fatalf("applier saw versions %v, want [1 2]", got)
	}
	if !strings.Contains(snapshotText(a.State().Snapshot), "18083") {
		t.Fatal("version 2 does not contain the fixed port")
	}

	// An explicit reload of the same files changes nothing.
	out, err := a.Reload(context.Background(), "test")
	if err != nil || !out.Applied || !out.Unchanged || out.Version != 2 {
		t.Fatalf("Reload = %+v, %v; want applied, unchanged, version 2", out, err)
	}
}

func snapshotText(s *pb.ConfigSnapshot) string {
	var b strings.Builder
	for _, be := range s.GetCluster().GetBackends() {
		for _, ep := range be.GetEndpoints() {
			b.WriteString(ep.String())
		}
	}
	return b.String()
}

// TestDirectorySource: a file added to a watched directory is read.
func TestDirectorySource(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "conf.d")
	if err := os.Mkdir(cfg, 0o755); err != nil {
		t.Fatal(err)
	}
	writeConfig(t, filepath.Join(cfg, "base.yaml"))
	src := &FileSource{Paths: []string{cfg}, Node: snapshot.Node{Name: "node-a"}, Debounce: 20 * time.Millisecond}
	h := startAgent(t, src, "")
	backends := func() int { return len(h.agent.State().Snapshot.GetCluster().GetBackends()) }
	if backends() != 3 {
		t.Fatalf("backends = %d, want 3", backends())
	}
	extra := `apiVersion: novaedge.io/v1alpha1
kind: ProxyBackend
metadata:
  name: extra
  namespace: demo
spec:
  endpoints:
    - address: 127.0.0.1
      port: 18090
`
	// Not a YAML file: ignored by the source and the watcher.
	if err := os.WriteFile(filepath.Join(cfg, "notes.txt"), []byte("kind: nonsense"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfg, "extra.yml"), []byte(extra), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the new file to be read", func() bool { return backends() == 4 })
}

// TestStartWithErrors: at start, a configuration with errors is replaced by
// the cached last good one of the same files and node; without a cache,
// its valid part is served and its errors are reported with it.
func TestStartWithErrors(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "standalone.yaml")
	state := filepath.Join(dir, "state")
	writeConfig(t, path)
	h := startAgent(t, fileSource(path), state)
	goodHash := h.agent.State().Snapshot.GetContentHash()
	h.stop()

	// A route to a missing backend: demo/tcp-echo is left out by the build.
	writeConfig(t, path, "        - name: demo-tcp\n", "        - name: missing\n")

	t.Run("restored from cache", func(t *testing.T) {
		h := startAgent(t, fileSource(path), state)
		s := h.agent.State()
		if s == nil || !s.Restored || s.Snapshot.GetContentHash() != goodHash || s.Snapshot.GetVersion() != 1 {
			t.Fatalf("state = %+v, want the cached version 1 restored", s)
		}
		if r := h.agent.Rejected(); r == nil || !strings.Contains(r.Err.Error(), "serving the last good configuration (version 1") {
			t.Fatalf("rejection = %+v", r)
		}
		// Fixing the file applies it as the next version.
		writeConfig(t, path)
		out, err := h.agent.Reload(context.Background(), "test")
		if err != nil || !out.Applied || out.Version != 1 {
			// Same content as the cache: applied, same version.
			t.Fatalf("Reload = %+v, %v", out, err)
		}
		if s := h.agent.State(); s.Restored || h.agent.Rejected() != nil {
			t.Fatalf("after the fix: restored=%v rejected=%v", s.Restored, h.agent.Rejected())
		}
		h.stop()
		writeConfig(t, path, "        - name: demo-tcp\n", "        - name: missing\n")
	})

	t.Run("another node does not restore it", func(t *testing.T) {
		src := fileSource(path)
		src.Node.Name = "node-b"
		h := &harness{}
		a, err := New(Options{Source: src, StrictReload: true, StateDir: state, NodeName: "node-b"})
		if err != nil {
			t.Fatal(err)
		}
		h.agent = a
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- a.Run(ctx) }()
		waitFor(t, "the first configuration", func() bool { return a.State() != nil })
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		if a.State().Restored {
			t.Fatal("a cache written for node-a was restored on node-b")
		}
	})

	t.Run("no cache: the valid part", func(t *testing.T) {
		h := startAgent(t, fileSource(path), filepath.Join(dir, "empty-state"))
		s := h.agent.State()
		if s == nil || s.Restored || !s.Diagnostics.HasErrors() {
			t.Fatalf("state = %+v, want the valid part with its errors", s)
		}
		// The route keeps the dangling ref's share, answered with an error
		// (snapshot.Build's rule); the error names the field.
		found := false
		for _, d := range s.Diagnostics.Errors() {
			found = found || (d.Resource.Name == "tcp-echo" && d.Field == "spec.rules[0].backendRefs[0].name" && d.Pos.Line > 0)
		}
		if !found {
			t.Fatalf("no error for demo/tcp-echo spec.rules[0].backendRefs[0].name in %v", s.Diagnostics)
		}
		// A further bad reload is rejected: strict once something serves.
		out, err := h.agent.Reload(context.Background(), "test")
		if err != nil || out.Applied || out.Err == nil {
			t.Fatalf("Reload = %+v, %v; want rejected", out, err)
		}
	})
}

// TestCompileErrorRejects: an applier that cannot compile a snapshot
// rejects it; an applier that cannot apply completely is reported but the
// snapshot is in service.
func TestCompileErrorRejects(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "standalone.yaml")
	writeConfig(t, path)
	h := startAgent(t, fileSource(path), "")
	a := h.agent

	h.rec.mu.Lock()
	h.rec.failCompile = errors.New("no room in the VIP table")
	h.rec.mu.Unlock()
	writeConfig(t, path, "port: 18082\n  healthCheck", "port: 18083\n  healthCheck")
	out, err := a.Reload(context.Background(), "test")
	if err != nil || out.Applied || out.Version != 1 || !strings.Contains(out.Err.Error(), "compile recorder: no room in the VIP table") {
		t.Fatalf("Reload = %+v, %v", out, err)
	}
	if a.State().Snapshot.GetVersion() != 1 {
		t.Fatal("a snapshot that did not compile was put in service")
	}

	h.rec.mu.Lock()
	h.rec.failCompile = nil
	h.rec.failApply = errors.New("interface down")
	h.rec.mu.Unlock()
	out, err = a.Reload(context.Background(), "test")
	if err != nil || !out.Applied || out.Version != 2 {
		t.Fatalf("Reload = %+v, %v", out, err)
	}
	if s := a.State(); len(s.ApplyErrors) != 1 || s.ApplyErrors[0] != "recorder: interface down" {
		t.Fatalf("ApplyErrors = %q", s.ApplyErrors)
	}
}

// TestCache covers the disk cache's own checks.
func TestCache(t *testing.T) {
	dir := t.TempDir()
	c := &cache{dir: dir}
	if e, err := c.load(); e != nil || err != nil {
		t.Fatalf("empty cache: %v, %v", e, err)
	}
	snap := (&FileSource{DefaultName: "x.yaml", Default: examples.Standalone, Node: snapshot.Node{Name: "n"}}).Load().Snapshot
	snap.Version = 7
	snap.ContentHash = snapshot.ContentHash(snap)
	if err := c.store(&cacheEntry{Source: "standalone", Origin: []string{"a"}, Node: "n", Snapshot: snap}); err != nil {
		t.Fatal(err)
	}
	e, err := c.load()
	if err != nil || e.Snapshot.GetVersion() != 7 || e.Snapshot.GetContentHash() != snap.ContentHash {
		t.Fatalf("load = %+v, %v", e, err)
	}
	fi, err := os.Stat(c.path())
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("cache file mode = %v, %v; want 0600 (it may hold secrets)", fi.Mode(), err)
	}

	tests := []struct {
		name  string
		write func() error
	}{
		{"not JSON", func() error { return os.WriteFile(c.path(), []byte("{"), 0o600) }},
		{"bad protobuf", func() error { return os.WriteFile(c.path(), []byte(`{"snapshot":"/////w=="}`), 0o600) }},
		{"hash mismatch", func() error {
			bad := proto.CloneOf(snap)
			bad.ContentHash = "0000"
			return c.store(&cacheEntry{Source: "standalone", Node: "n", Snapshot: bad})
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.write(); err != nil {
				t.Fatal(err)
			}
			if _, err := c.load(); err == nil || !strings.Contains(err.Error(), c.path()) {
				t.Fatalf("load of a cache with %s: %v, want an error naming the file", tc.name, err)
			}
		})
	}
}

// TestFileSourceSkipsUnchangedFiles: reading unchanged files again returns
// the previous candidate without building it again; a changed byte builds
// anew.
func TestFileSourceSkipsUnchangedFiles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	writeConfig(t, path)
	src := fileSource(path)
	first := src.Load()
	if again := src.Load(); again.Snapshot != first.Snapshot {
		t.Fatal("unchanged files were built again")
	}
	writeConfig(t, path, "port: 18082\n  healthCheck", "port: 18083\n  healthCheck")
	if changed := src.Load(); changed.Snapshot == first.Snapshot {
		t.Fatal("a changed file was not read")
	}
}

// TestShallowCopy: the copy has every field of the original, shares its
// content, and setting its top-level fields leaves the original as it was.
func TestShallowCopy(t *testing.T) {
	orig := (&FileSource{DefaultName: "x.yaml", Default: examples.Standalone, Node: snapshot.Node{Name: "n"}}).Load().Snapshot
	orig.Version = 3
	orig.Diagnostics = []*pb.Diagnostic{{Message: "kept"}}
	orig.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 1))
	fields := orig.ProtoReflect().Descriptor().Fields()
	for i := range fields.Len() {
		if fd := fields.Get(i); !orig.ProtoReflect().Has(fd) {
			t.Fatalf("test snapshot leaves %s unset; set it so the copy is checked", fd.Name())
		}
	}
	want := proto.CloneOf(orig)

	cp := shallowCopy(orig)
	if !proto.Equal(cp, want) {
		t.Fatalf("copy differs from the original:\n%v\nwant\n%v", cp, want)
	}
	if cp.GetCluster() != orig.GetCluster() || cp.GetNode() != orig.GetNode() {
		t.Error("the copy does not share the original's cluster and node")
	}
	cp.Version, cp.ContentHash, cp.Diagnostics = 4, "other", nil
	if !proto.Equal(orig, want) {
		t.Error("setting the copy's top-level fields changed the original")
	}
}

// TestAppliedSnapshotSharesCandidate: the agent publishes the source's
// snapshot content without copying it, and without changing the source's
// candidate, which the source hands out again while files are unchanged.
func TestAppliedSnapshotSharesCandidate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	writeConfig(t, path)
	src := fileSource(path)
	h := startAgent(t, src, "")
	cand := src.Load() // unchanged files: the candidate the agent applied
	st := h.agent.State()
	if st.Snapshot == cand.Snapshot || st.Snapshot.GetCluster() != cand.Snapshot.GetCluster() {
		t.Error("the state should be a new snapshot sharing the candidate's cluster")
	}
	if cand.Snapshot.GetVersion() != 0 || st.Snapshot.GetVersion() == 0 {
		t.Errorf("versions: candidate %d, state %d; want 0 and the applied version", cand.Snapshot.GetVersion(), st.Snapshot.GetVersion())
	}
	if got := snapshot.ContentHash(cand.Snapshot); cand.Snapshot.GetContentHash() != got {
		t.Errorf("candidate's content hash %s, its content hashes to %s", cand.Snapshot.GetContentHash(), got)
	}
}

// TestFileSourceBuildsWhatBuildBuilds: the snapshot a FileSource offers is
// the one snapshot.Build makes from the files.
func TestFileSourceBuildsWhatBuildBuilds(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	writeConfig(t, path)
	src := fileSource(path)
	got := src.Load()
	res, _ := loader.Load(path)
	want, _ := snapshot.Build(res.Input, snapshot.Options{Node: src.Node})
	if len(want.GetCluster().GetRoutes()) == 0 {
		t.Fatal("the example builds no route; the comparison would prove little")
	}
	if !proto.Equal(got.Snapshot, want) {
		t.Errorf("FileSource snapshot differs from snapshot.Build's:\n%v\nwant\n%v", got.Snapshot, want)
	}
	if got.Snapshot.GetContentHash() != want.GetContentHash() {
		t.Errorf("content hash %s, want %s", got.Snapshot.GetContentHash(), want.GetContentHash())
	}
}

// TestMemoryReleasedAfterQuietReloads: reloads in a burst leave their
// memory to the next (releasing it made the next reload fault its pages in
// again); it goes back to the system once, when reloads have been quiet
// for releaseAfter.
func TestMemoryReleasedAfterQuietReloads(t *testing.T) {
	var releases atomic.Int32
	oldAfter, oldFree := releaseAfter, freeOSMemory
	releaseAfter, freeOSMemory = time.Second, func() { releases.Add(1) }
	t.Cleanup(func() { releaseAfter, freeOSMemory = oldAfter, oldFree })

	path := filepath.Join(t.TempDir(), "c.yaml")
	writeConfig(t, path)
	src := fileSource(path)
	src.HoldFiles = true // no watcher: only the reloads below
	h := startAgent(t, src, "")
	waitFor(t, "the start's release", func() bool { return releases.Load() >= 1 })
	time.Sleep(2 * releaseAfter) // the reload a watcher's start may have made
	base := releases.Load()
	for range 3 {
		if _, err := h.agent.Reload(context.Background(), "test"); err != nil {
			t.Fatal(err)
		}
	}
	if got := releases.Load() - base; got != 0 {
		t.Fatalf("%d releases during a burst of reloads, want none", got)
	}
	waitFor(t, "the release after the burst", func() bool { return releases.Load() > base })
	time.Sleep(2 * releaseAfter)
	if got := releases.Load() - base; got != 1 {
		t.Errorf("%d releases after a burst of reloads, want 1", got)
	}
}
