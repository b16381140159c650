package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/novaedge/novaedge/api/v1alpha1"
	"github.com/novaedge/novaedge/perf/internal/proc"
	"github.com/novaedge/novaedge/test/kubeenv"
)

// procMem is the memory of a process from /proc/<pid>/status, in bytes.
type procMem struct {
	RSS, HWM int64 // VmRSS, VmHWM (peak resident set)
}

// parseStatus reads VmRSS and VmHWM from the text of /proc/<pid>/status.
func parseStatus(text string) (procMem, error) {
	var m procMem
	found := 0
	for line := range strings.Lines(text) {
		key, rest, ok := strings.Cut(line, ":")
		if !ok || (key != "VmRSS" && key != "VmHWM") {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) != 2 || fields[1] != "kB" {
			return procMem{}, fmt.Errorf("%s: want \"<n> kB\", got %q", key, strings.TrimSpace(rest))
		}
		kb, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return procMem{}, fmt.Errorf("%s: %w", key, err)
		}
		if key == "VmRSS" {
			m.RSS = kb << 10
		} else {
			m.HWM = kb << 10
		}
		found++
	}
	if found != 2 {
		return procMem{}, errors.New("VmRSS or VmHWM missing (is the process a zombie?)")
	}
	return m, nil
}

// ctlProc is a novaedge-controller process whose JSON log is read for its
// snapshot builds.
type ctlProc struct {
	cmd    *exec.Cmd
	exited chan struct{}
	err    error // of Wait, once exited is closed

	mu     sync.Mutex
	builds []build
	tail   []string // the last log lines, for errors
}

// build is one "snapshots built" log line: when the build started and
// ended (by this process's clock) and for how many nodes.
type build struct {
	start, end time.Time
	nodes      int
}

// startController runs bin against env, deciding alone (no leader
// election), logging at debug level as JSON. The process gets SIGKILL if
// this one dies (setpriv --pdeathsig), so a failed run leaves none behind.
func startController(bin string, env *kubeenv.Env, ns string) (*ctlProc, error) {
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("novaedge-controller binary: %w (build it: go build -o bin/ ./cmd/novaedge-controller, or pass -controller)", err)
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		return nil, fmt.Errorf("find setpriv (util-linux), used so the controller dies with the benchmark: %w", err)
	}
	cmd := exec.Command(setpriv, "--pdeathsig", "KILL", "--", bin,
		"--kubeconfig", env.Kubeconfig, "--namespace", ns, "--pod-name", "bench",
		"--grpc-addr", "127.0.0.1:0", "--metrics-addr", "0", "--health-addr", "0",
		"--leader-elect=false", "--log-level", "debug", "--log-format", "json")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, fmt.Errorf("controller stderr: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	p := &ctlProc{cmd: cmd, exited: make(chan struct{})}
	go func() {
		p.read(stderr)
		p.err = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

func (p *ctlProc) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		now := time.Now()
		line := sc.Text()
		var rec struct {
			Msg   string          `json:"msg"`
			Nodes int             `json:"nodes"`
			Took  json.RawMessage `json:"took"`
		}
		p.mu.Lock()
		p.tail = append(p.tail, line)
		if len(p.tail) > 20 {
			p.tail = p.tail[1:]
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "snapshots built" {
			took := parseTook(rec.Took)
			p.builds = append(p.builds, build{start: now.Add(-took), end: now, nodes: rec.Nodes})
		}
		p.mu.Unlock()
	}
}

// parseTook reads a duration slog's JSON handler wrote: nanoseconds as a
// number (or a Go duration string).
func parseTook(raw json.RawMessage) time.Duration {
	var ns int64
	if json.Unmarshal(raw, &ns) == nil {
		return time.Duration(ns)
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if d, err := time.ParseDuration(s); err == nil {
			return d
		}
	}
	return 0
}

// waitBuild waits for a build of nodes nodes that started after since,
// then until no build ended for quiet (0: returns at that first build). It
// returns the first such build and how many builds it saw.
func (p *ctlProc) waitBuild(ctx context.Context, since time.Time, nodes int, quiet, timeout time.Duration) (build, int, error) {
	deadline := time.Now().Add(timeout)
	for {
		p.mu.Lock()
		var first *build
		count := 0
		var lastEnd time.Time
		for i := range p.builds {
			b := p.builds[i]
			if b.end.After(since) {
				count++
				lastEnd = b.end
			}
			if first == nil && b.start.After(since) && b.nodes == nodes {
				first = &b
			}
		}
		tail := strings.Join(p.tail, "\n")
		p.mu.Unlock()
		if first != nil && time.Since(lastEnd) >= quiet {
			return *first, count, nil
		}
		select {
		case <-p.exited:
			return build{}, 0, fmt.Errorf("the controller exited (%w); its last log lines:\n%s", p.err, tail)
		case <-ctx.Done():
			return build{}, 0, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			state := "no build of the wanted kind yet"
			if first != nil {
				state = fmt.Sprintf("still building (%d builds since)", count)
			}
			return build{}, 0, fmt.Errorf("controller not settled after %s: %s; its last log lines:\n%s", timeout, state, tail)
		}
	}
}

func (p *ctlProc) mem() (procMem, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return procMem{}, fmt.Errorf("controller memory: %w", err)
	}
	return parseStatus(string(b))
}

// stop ends the controller with SIGTERM (SIGKILL after 30 s).
func (p *ctlProc) stop() error {
	select {
	case <-p.exited:
		return p.err
	default:
	}
	if err := proc.Terminate(p.cmd.Process); err != nil {
		return fmt.Errorf("terminate the controller: %w", err)
	}
	select {
	case <-p.exited:
		return nil // exit status after SIGTERM is of no interest
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
		return errors.New("the controller ignored SIGTERM for 30 s and was killed")
	}
}

// memResult is the controller's memory at one configuration and empty.
type memResult struct {
	Scale   scale
	Objects int
	Workers int
	// Create is how long creating the objects took.
	Create time.Duration
	// Empty: the controller with no NovaEdge objects, after its first
	// build settled.
	Empty procMem
	// Loaded: the same process at the first build that started after the
	// last create, and Later after LaterWait more.
	Loaded, Later procMem
	LaterWait     time.Duration
	// LoadedBuild is how long that build took (3 nodes) and Builds how
	// many builds the process made while the objects were created.
	LoadedBuild time.Duration
	Builds      int
	// Fresh: a new process started with the objects in place, at its
	// first build, FreshReady after its start.
	Fresh      procMem
	FreshReady time.Duration
	// Conditions counts the routes with an Accepted condition at the end,
	// of Routes, Elapsed after the objects were created.
	Conditions int
	Elapsed    time.Duration
}

const memNS = "bench-system"

// measureMemory runs the controller binary with an empty cluster, creates
// s's objects while it runs, and reads its memory afterwards; then a fresh
// process with everything in place.
func measureMemory(ctx context.Context, env *kubeenv.Env, bin string, s scale, workers int, laterWait time.Duration, logf func(string, ...any)) (_ *memResult, err error) {
	const nodes = 3
	if err := createNamespaces(ctx, env, memNS, s.Namespace); err != nil {
		return nil, err
	}
	if err := createReadyNodes(ctx, env, "mem-a", "mem-b", "mem-c"); err != nil {
		return nil, err
	}
	objs := s.clientObjects()
	res := &memResult{Scale: s, Objects: len(objs), Workers: workers, LaterWait: laterWait}

	p, err := startController(bin, env, memNS)
	if err != nil {
		return nil, err
	}
	defer func() {
		if p != nil {
			err = errors.Join(err, p.stop())
		}
	}()
	started := time.Now()
	if _, _, err := p.waitBuild(ctx, started, nodes, 5*time.Second, 2*time.Minute); err != nil {
		return nil, fmt.Errorf("empty cluster: %w", err)
	}
	if res.Empty, err = p.mem(); err != nil {
		return nil, err
	}
	logf("empty cluster: controller RSS %s; creating %d objects with %d workers", mib(res.Empty.RSS), len(objs), workers)

	createStart := time.Now()
	if err := createAll(ctx, env.Client, objs, workers); err != nil {
		return nil, err
	}
	created := time.Now()
	res.Create = created.Sub(createStart)
	logf("created %d objects in %s (%.0f/s)", len(objs), res.Create.Round(time.Millisecond), float64(len(objs))/res.Create.Seconds())

	b, _, err := p.waitBuild(ctx, created, nodes, 0, 5*time.Minute)
	if err != nil {
		return nil, fmt.Errorf("after creating the objects: %w", err)
	}
	if res.Loaded, err = p.mem(); err != nil {
		return nil, err
	}
	res.LoadedBuild = b.end.Sub(b.start)
	p.mu.Lock()
	for _, x := range p.builds {
		if x.end.After(createStart) && !x.start.After(created) {
			res.Builds++
		}
	}
	p.mu.Unlock()
	logf("loaded: RSS %s after the first build following the last create (took %s)", mib(res.Loaded.RSS), res.LoadedBuild.Round(time.Millisecond))
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(laterWait):
	}
	if res.Later, err = p.mem(); err != nil {
		return nil, err
	}
	logf("loaded: RSS %s after %s more", mib(res.Later.RSS), laterWait)
	err = p.stop()
	p = nil
	if err != nil {
		return nil, err
	}

	p, err = startController(bin, env, memNS)
	if err != nil {
		return nil, err
	}
	started = time.Now()
	if _, _, err := p.waitBuild(ctx, started, nodes, 0, 5*time.Minute); err != nil {
		return nil, fmt.Errorf("fresh controller with the objects in place: %w", err)
	}
	res.FreshReady = time.Since(started)
	if res.Fresh, err = p.mem(); err != nil {
		return nil, err
	}
	logf("fresh process: RSS %s at its first build, %s after start", mib(res.Fresh.RSS), res.FreshReady.Round(time.Millisecond))

	var routes v1alpha1.ProxyRouteList
	if err := env.Client.List(ctx, &routes); err != nil {
		return nil, fmt.Errorf("list ProxyRoutes: %w", err)
	}
	res.Elapsed = time.Since(created)
	for _, r := range routes.Items {
		for _, c := range r.Status.Conditions {
			if c.Type == "Accepted" {
				res.Conditions++
				break
			}
		}
	}
	return res, nil
}
