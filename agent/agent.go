package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/novaedge/novaedge/agent/lease"
	"github.com/novaedge/novaedge/diag"
	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/kernel"
	"github.com/novaedge/novaedge/snapshot"
)

// ErrNotRunning is returned by Reload when Run has not started or has ended.
var ErrNotRunning = errors.New("agent is not running")

// Applier turns snapshots into running state for one part of the node (VIP
// addresses, the slow path's listeners, the fast path's maps).
type Applier interface {
	// Name identifies the applier in logs, errors and metrics.
	Name() string
	// Compile checks snap and builds what Apply switches to, without
	// changing anything that runs. An error rejects the whole snapshot.
	Compile(snap *pb.ConfigSnapshot) (Change, error)
}

// Change is a compiled snapshot, ready to be switched to.
type Change interface {
	// Apply switches to the compiled state. An error means the switch was
	// incomplete: the snapshot is in service, and the error is reported
	// (status, metrics) until a later Apply succeeds.
	Apply(ctx context.Context) error
}

// ChangeFunc adapts a function to Change.
type ChangeFunc func(ctx context.Context) error

// Apply calls f.
func (f ChangeFunc) Apply(ctx context.Context) error { return f(ctx) }

// State is the configuration in service. It is never modified once
// published; a change publishes a new State.
type State struct {
	// Snapshot in service, with its version and diagnostics.
	Snapshot *pb.ConfigSnapshot
	// Diagnostics of the served configuration: warnings, and errors of
	// resources that were left out (possible only for the first
	// configuration after a start, see Options.StrictReload).
	Diagnostics diag.List
	// AppliedAt is when it was switched to.
	AppliedAt time.Time
	// Restored is true when Snapshot is the last good configuration read
	// back from the state directory, because the configuration the agent
	// read at start had errors.
	Restored bool
	// ApplyErrors are appliers that could not switch completely, as
	// "name: error".
	ApplyErrors []string
}

// version returns the version in service, 0 for a nil State.
func (s *State) version() uint64 {
	if s == nil {
		return 0
	}
	return s.Snapshot.GetVersion()
}

// Rejection is the last configuration that was not applied.
type Rejection struct {
	Diagnostics diag.List
	Err         error
	At          time.Time
}

// Outcome is the result of a reload.
type Outcome struct {
	// Applied is true when the configuration read is in service: a new
	// version, or the same content as before (Unchanged).
	Applied   bool
	Unchanged bool
	// Version in service afterwards.
	Version uint64
	// Err says why the configuration was rejected (Applied is false).
	Err error
}

// Options configure an Agent.
type Options struct {
	// Source offers configurations. Required.
	Source Source
	// Appliers switch the node to a snapshot, in this order.
	Appliers []Applier
	// StrictReload rejects a configuration with any error once a
	// configuration is in service, so a bad edit never takes a resource
	// away. The first configuration after a start is served without its
	// bad resources (or replaced by the cached last good one, see
	// StateDir). The standalone agent sets it. A controller's snapshots
	// have been decided on: their error diagnostics name resources the
	// controller left out (and reported in their status), so one bad
	// resource in the cluster must not stop every update; controller mode
	// leaves it off and NACKs only what fails to compile.
	StrictReload bool
	// StateDir keeps the last applied snapshot across restarts. Empty: no
	// cache.
	StateDir string
	// NodeName is the node's name, for status.
	NodeName string
	// Version is the agent's version, for status and metrics.
	Version string
	// Features are the kernel features probed at start.
	Features []kernel.Feature
	// BoundAddresses lists the Local VIP addresses bound on the host, for
	// status. Nil: none.
	BoundAddresses func() []string
	// Registry receives the agent's metrics. Nil: a new registry with the
	// Go and process collectors.
	Registry *prometheus.Registry
	// Logger logs changes and problems. Nil: discard.
	Logger *slog.Logger
	// Now returns the time. Nil: time.Now.
	Now func() time.Time
	// Pprof serves Go's profiles under /debug/pprof/ on the ops server.
	// Off by default: profiles reveal internals and cost CPU on request.
	Pprof bool
}

// Agent runs the pipeline.
type Agent struct {
	opts    Options
	log     *slog.Logger
	now     func() time.Time
	started time.Time
	cache   *cache
	// cacheW writes the cache while Run runs (cacheWriter).
	cacheW   *cacheWriter
	metrics  *metrics
	state    atomic.Pointer[State]
	rejected atomic.Pointer[Rejection]
	reqs     chan request

	// Owned by the Run goroutine.
	lastVersion uint64
	// restoredFrom says which cached configuration serves while
	// State.Restored, for the rejections of later reloads.
	restoredFrom string
	// release returns memory to the system once reloads have been quiet
	// for releaseAfter (releaseLater).
	release *time.Timer

	runMu   sync.Mutex
	running bool
	done    chan struct{}
}

type request struct {
	reason string
	reply  chan Outcome
}

// New returns an agent; Run starts it.
func New(opts Options) (*Agent, error) {
	if opts.Source == nil {
		return nil, errors.New("agent: no configuration source")
	}
	a := &Agent{
		opts: opts,
		log:  opts.Logger,
		now:  opts.Now,
		reqs: make(chan request),
		done: make(chan struct{}),
	}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	if a.now == nil {
		a.now = time.Now
	}
	a.started = a.now()
	reg := opts.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	m, err := newMetrics(reg, opts.Version, opts.Features)
	if err != nil {
		return nil, err
	}
	a.metrics = m
	if opts.StateDir != "" {
		a.cache = &cache{dir: opts.StateDir}
	}
	return a, nil
}

// State returns the configuration in service, or nil before the first.
func (a *Agent) State() *State { return a.state.Load() }

// Rejected returns the last rejected configuration, or nil when the last
// attempt succeeded.
func (a *Agent) Rejected() *Rejection { return a.rejected.Load() }

// LeaseReport is what the agent's liveness Lease tells the controller: not
// healthy without a configuration in service, or when an applier could not
// switch completely (the node would serve a VIP it cannot forward).
func (a *Agent) LeaseReport() lease.Report {
	st := a.State()
	switch {
	case st == nil:
		return lease.Report{Reason: "no configuration in service"}
	case len(st.ApplyErrors) > 0:
		return lease.Report{Reason: "apply failed: " + strings.Join(st.ApplyErrors, "; "), AppliedVersion: st.Snapshot.GetVersion()}
	}
	return lease.Report{Healthy: true, AppliedVersion: st.Snapshot.GetVersion()}
}

// Ready reports whether a configuration is in service.
func (a *Agent) Ready() bool { return a.state.Load() != nil }

// Registry returns the registry the agent's metrics are in.
func (a *Agent) Registry() *prometheus.Registry { return a.metrics.reg }

// Run loads the configuration, applies it, then applies every change the
// source reports and every Reload, one at a time, until ctx ends. It
// returns nil when ctx ends.
func (a *Agent) Run(ctx context.Context) error {
	a.runMu.Lock()
	if a.running {
		a.runMu.Unlock()
		return errors.New("agent: Run called twice")
	}
	a.running = true
	a.runMu.Unlock()
	defer close(a.done)
	if a.cache != nil {
		a.cacheW = startCacheWriter(a.cache.store, a.log)
		// Run returns once the last applied configuration is on disk.
		defer a.cacheW.close()
	}

	a.start(ctx)

	changeReason := "files changed"
	if a.opts.Source.Kind() == "controller" {
		changeReason = "snapshot from the controller"
	}
	changes := make(chan struct{}, 1)
	watchCtx, stopWatch := context.WithCancel(ctx)
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		err := a.opts.Source.Watch(watchCtx, func() {
			select {
			case changes <- struct{}{}:
			default: // a reload is already pending; it reads the latest files
			}
		})
		if err != nil {
			a.log.Error("configuration changes are no longer noticed; reload with SIGHUP or novaedgectl reload", "error", err)
		}
	}()
	defer func() {
		stopWatch()
		<-watchDone
		if a.release != nil {
			a.release.Stop()
		}
	}()

	for {
		select {
		case <-ctx.Done():
			return nil
		case <-changes:
			a.reload(ctx, changeReason)
		case req := <-a.reqs:
			req.reply <- a.reload(ctx, req.reason)
		}
	}
}

// Reload reads the configuration now and applies it, as when the source
// reports a change; reason is logged. It waits for the outcome.
func (a *Agent) Reload(ctx context.Context, reason string) (Outcome, error) {
	if r, ok := a.opts.Source.(interface{ RequestRead() }); ok {
		// A requested reload reads the files even when they are held.
		r.RequestRead()
	}
	req := request{reason: reason, reply: make(chan Outcome, 1)}
	select {
	case a.reqs <- req:
	case <-a.done:
		return Outcome{}, ErrNotRunning
	case <-ctx.Done():
		return Outcome{}, ctx.Err()
	}
	select {
	case out := <-req.reply:
		return out, nil
	case <-ctx.Done():
		return Outcome{}, ctx.Err()
	}
}

// start applies the first configuration: the source's, or the cached last
// good one when the source's has errors and the cache was written for the
// same source and node.
func (a *Agent) start(ctx context.Context) {
	defer releaseMemory()
	var cached *cacheEntry
	if a.cache != nil {
		c, err := a.cache.load()
		switch {
		case err != nil:
			a.log.Warn("ignoring the cached configuration", "error", err)
		case c != nil:
			cached = c
			a.lastVersion = c.Snapshot.GetVersion()
		}
	}
	cand := a.opts.Source.Load()
	if cand.Unavailable != nil {
		a.startUnavailable(ctx, cand, cached)
		return
	}
	errs := cand.Diagnostics.Errors()
	if len(errs) > 0 && a.opts.StrictReload && cached != nil && cached.matches(a.opts.Source, a.opts.NodeName) {
		a.logProblems(errs)
		a.restoredFrom = fmt.Sprintf("serving the last good configuration (version %d, applied %s) from %s",
			cached.Snapshot.GetVersion(), cached.AppliedAt.Format(time.RFC3339), a.cache.path())
		err := fmt.Errorf("configuration has %s; %s", count(len(errs), "error"), a.restoredFrom)
		a.log.Error("configuration rejected; serving the last good configuration from the state directory", "errors", len(errs),
			"version", cached.Snapshot.GetVersion(), "file", a.cache.path())
		// Rejected before the state is published, so whoever sees the
		// restored state also sees why.
		a.reject(cand.Diagnostics, err)
		restored := Candidate{Snapshot: cached.Snapshot, Diagnostics: diagsFromProto(cached.Snapshot.GetDiagnostics())}
		out := a.switchTo(ctx, restored, "restored from cache", true)
		a.report(restored, out)
		if out.Err != nil {
			a.log.Error("the cached configuration does not apply either; serving the valid part of the files", "error", out.Err)
			a.report(cand, a.switchTo(ctx, cand, "start", false))
			return
		}
		a.report(cand, Outcome{Version: out.Version, Err: err})
		return
	}
	if len(errs) > 0 {
		a.logProblems(errs)
		a.log.Warn("serving the configuration without the resources that have errors; fix them and reload", "errors", len(errs))
	}
	a.report(cand, a.switchTo(ctx, cand, "start", false))
}

// startUnavailable starts without a configuration from the source (a
// controller out of reach): from the cache when it was written for the same
// source and node, else with nothing in service (not ready) until the
// source offers one.
func (a *Agent) startUnavailable(ctx context.Context, cand Candidate, cached *cacheEntry) {
	if cached == nil || !cached.matches(a.opts.Source, a.opts.NodeName) {
		err := fmt.Errorf("no configuration yet: %w; nothing is served until one arrives", cand.Unavailable)
		a.log.Error("no configuration to serve and none cached for this source and node", "error", cand.Unavailable)
		a.reject(nil, err)
		return
	}
	a.restoredFrom = fmt.Sprintf("serving the last good configuration (version %d, applied %s) from %s",
		cached.Snapshot.GetVersion(), cached.AppliedAt.Format(time.RFC3339), a.cache.path())
	err := fmt.Errorf("%w; %s", cand.Unavailable, a.restoredFrom)
	a.log.Error("no configuration from the source; serving the last good configuration from the state directory",
		"error", cand.Unavailable, "version", cached.Snapshot.GetVersion(), "file", a.cache.path())
	a.reject(nil, err)
	restored := Candidate{Snapshot: cached.Snapshot, Diagnostics: diagsFromProto(cached.Snapshot.GetDiagnostics())}
	out := a.switchTo(ctx, restored, "restored from cache", true)
	// The source learns what runs (a controller is told on subscribing).
	a.report(restored, out)
	if out.Err != nil {
		a.log.Error("the cached configuration does not apply; nothing is served until the source offers one", "error", out.Err)
	}
}

// report tells a source that answers for its candidates (OutcomeReporter)
// what became of cand.
func (a *Agent) report(cand Candidate, out Outcome) {
	if r, ok := a.opts.Source.(OutcomeReporter); ok {
		r.Report(cand.Snapshot, out, cand.Diagnostics)
	}
}

// reload reads the source and applies what it offers.
func (a *Agent) reload(ctx context.Context, reason string) Outcome {
	defer a.releaseLater()
	cand := a.opts.Source.Load()
	if cand.Unavailable != nil {
		// Nothing offered: whatever serves keeps serving.
		cur := a.state.Load()
		a.log.Warn("no configuration from the source; nothing changes", "reason", reason, "error", cand.Unavailable)
		if cur == nil {
			return Outcome{Err: cand.Unavailable}
		}
		return Outcome{Version: cur.Snapshot.GetVersion(), Err: cand.Unavailable}
	}
	out := a.take(ctx, cand, reason)
	a.report(cand, out)
	return out
}

// take applies cand unless it has errors and a configuration serves.
func (a *Agent) take(ctx context.Context, cand Candidate, reason string) Outcome {
	cur := a.state.Load()
	if errs := cand.Diagnostics.Errors(); len(errs) > 0 && a.opts.StrictReload && cur != nil {
		a.logProblems(errs)
		err := fmt.Errorf("configuration has %s; still serving version %d", count(len(errs), "error"), cur.Snapshot.GetVersion())
		if cur.Restored {
			// Say again where the serving configuration came from: the
			// watcher's first reload would otherwise hide it.
			err = fmt.Errorf("configuration has %s; %s", count(len(errs), "error"), a.restoredFrom)
		}
		a.log.Error("configuration rejected; the last good configuration keeps serving", "reason", reason,
			"errors", len(errs), "version", cur.Snapshot.GetVersion())
		a.reject(cand.Diagnostics, err)
		return Outcome{Version: cur.Snapshot.GetVersion(), Err: err}
	}
	return a.switchTo(ctx, cand, reason, false)
}

// switchTo compiles cand with every applier and, if all succeed, applies
// and publishes it.
func (a *Agent) switchTo(ctx context.Context, cand Candidate, reason string, restored bool) Outcome {
	cur := a.state.Load()
	snap := shallowCopy(cand.Snapshot)
	if snap.GetContentHash() == "" {
		// snapshot.Build sets it, and ControllerSource sets what the
		// controller sent or computes it: hashing 3000 routes again cost
		// 8 ms of each reload.
		snap.ContentHash = snapshot.ContentHash(snap)
	}
	snap.Diagnostics = diagsToProto(cand.Diagnostics)

	if cur != nil && cur.Snapshot.GetContentHash() == snap.GetContentHash() && !restored {
		// Same configuration; diagnostics (positions, warnings) may differ.
		a.rejected.Store(nil)
		if slices.Equal(cur.Diagnostics, cand.Diagnostics) && !cur.Restored {
			a.metrics.observe(cur, "unchanged")
			return Outcome{Applied: true, Unchanged: true, Version: cur.Snapshot.GetVersion()}
		}
		next := *cur
		next.Snapshot = shallowCopy(cur.Snapshot)
		next.Snapshot.Diagnostics = snap.Diagnostics
		next.Diagnostics = cand.Diagnostics
		next.Restored = false
		a.state.Store(&next)
		a.rejected.Store(nil)
		a.metrics.observe(&next, "unchanged")
		a.log.Debug("configuration unchanged", "reason", reason, "version", cur.Snapshot.GetVersion())
		return Outcome{Applied: true, Unchanged: true, Version: cur.Snapshot.GetVersion()}
	}

	switch {
	case restored:
		// Keep the cached version.
	case snap.GetVersion() == 0:
		// Standalone: count applied configurations. A rejected one uses
		// no number, so versions in service have no gaps.
		snap.Version = a.lastVersion + 1
	case cur != nil && snap.GetVersion() <= cur.Snapshot.GetVersion():
		err := fmt.Errorf("snapshot version %d is not newer than version %d in service", snap.GetVersion(), cur.Snapshot.GetVersion())
		a.reject(cand.Diagnostics, err)
		return Outcome{Version: cur.Snapshot.GetVersion(), Err: err}
	}

	changes := make([]Change, 0, len(a.opts.Appliers))
	for _, ap := range a.opts.Appliers {
		c, err := ap.Compile(snap)
		if err != nil {
			err = fmt.Errorf("compile %s: %w", ap.Name(), err)
			a.log.Error("configuration rejected", "reason", reason, "error", err)
			a.reject(cand.Diagnostics, err)
			return Outcome{Version: cur.version(), Err: err}
		}
		changes = append(changes, c)
	}
	a.lastVersion = max(a.lastVersion, snap.GetVersion())
	next := &State{Snapshot: snap, Diagnostics: cand.Diagnostics, AppliedAt: a.now(), Restored: restored}
	for i, c := range changes {
		if err := c.Apply(ctx); err != nil {
			name := a.opts.Appliers[i].Name()
			a.log.Error("could not apply the configuration completely", "applier", name, "version", snap.GetVersion(), "error", err)
			a.metrics.applyErrors.WithLabelValues(name).Inc()
			next.ApplyErrors = append(next.ApplyErrors, name+": "+err.Error())
		}
	}
	a.state.Store(next)
	if !restored {
		a.rejected.Store(nil)
	}
	a.metrics.observe(next, "applied")
	if a.cacheW != nil && !restored {
		a.cacheW.put(&cacheEntry{
			Source: a.opts.Source.Kind(), Origin: a.opts.Source.Describe(), Node: a.opts.NodeName,
			AppliedAt: next.AppliedAt, Snapshot: snap,
		})
	}
	plan := snap.GetCluster().GetPlan()
	a.log.Info("configuration applied", "reason", reason, "version", snap.GetVersion(),
		"hash", shortHash(snap.GetContentHash()), "listeners", len(snap.GetCluster().GetListeners()),
		"routes", len(snap.GetCluster().GetRoutes()), "backends", len(snap.GetCluster().GetBackends()),
		"plan", len(plan), "warnings", len(cand.Diagnostics.Warnings()), "errors", len(cand.Diagnostics.Errors()))
	return Outcome{Applied: true, Version: snap.GetVersion()}
}

// shallowCopy returns a new snapshot whose fields are those of s, sharing
// its cluster, node and lists. The agent only sets top-level fields
// (version, hash, diagnostics) of the snapshots it publishes, and nothing
// modifies a snapshot's content, so a shallow copy is enough to leave the
// source's snapshot as it was: a deep copy would double the memory a
// configuration takes while the source keeps its last candidate (about 1 kB
// per route) and cost a copy of every route on each reload.
func shallowCopy(s *pb.ConfigSnapshot) *pb.ConfigSnapshot {
	out := &pb.ConfigSnapshot{}
	dst := out.ProtoReflect()
	src := s.ProtoReflect()
	src.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		dst.Set(fd, v)
		return true
	})
	if u := src.GetUnknown(); len(u) > 0 {
		dst.SetUnknown(u)
	}
	return out
}

// reject records a configuration that was not applied.
func (a *Agent) reject(diags diag.List, err error) {
	a.rejected.Store(&Rejection{Diagnostics: diags, Err: err, At: a.now()})
	a.metrics.rejected()
}

// logProblems logs each error once, in the one-line form users grep for.
func (a *Agent) logProblems(errs diag.List) {
	for _, d := range errs {
		a.log.Error("configuration error", "problem", d.String())
	}
}

func diagsToProto(l diag.List) []*pb.Diagnostic {
	out := make([]*pb.Diagnostic, 0, len(l))
	for _, d := range l {
		out = append(out, snapshot.DiagnosticToProto(d))
	}
	return out
}

func diagsFromProto(ps []*pb.Diagnostic) diag.List {
	out := make(diag.List, 0, len(ps))
	for _, p := range ps {
		out = append(out, snapshot.DiagnosticFromProto(p))
	}
	return out
}

func count(n int, word string) string {
	if n == 1 {
		return fmt.Sprintf("1 %s", word)
	}
	return fmt.Sprintf("%d %ss", n, word)
}

func shortHash(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// planCounts returns how many plan entries each path serves.
func planCounts(snap *pb.ConfigSnapshot) (fast, slow int) {
	for _, e := range snap.GetCluster().GetPlan() {
		switch e.GetPath() {
		case pb.DataPath_DATA_PATH_FAST:
			fast++
		case pb.DataPath_DATA_PATH_SLOW:
			slow++
		}
	}
	return fast, slow
}

// sortedCopy returns a sorted copy of s.
func sortedCopy(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

// releaseAfter is how long after the last reload its memory goes back to
// the system. Returning it at once made the next reload fault its pages in
// again: 13-17 ms of a 3000-route reload (perf/routescale, A/B).
var releaseAfter = 5 * time.Second

// releaseLater calls releaseMemory once reloads have been quiet for
// releaseAfter. Called by the Run goroutine.
func (a *Agent) releaseLater() {
	if a.release == nil {
		a.release = time.AfterFunc(releaseAfter, releaseMemory)
		return
	}
	a.release.Reset(releaseAfter)
}

// releaseMemory returns memory to the OS after a configuration was read:
// loading and validating a large configuration allocates several times what
// the result keeps (5000 routes: a peak over 150 MB for 30 MB kept), and
// the Go runtime would hold the peak until long after. Loads are rare, so
// the forced collection costs little.
func releaseMemory() { freeOSMemory() }

// freeOSMemory is debug.FreeOSMemory; tests count its calls.
var freeOSMemory = debug.FreeOSMemory
