// Command routescale measures how the slow path scales with routes:
//
//   - time until a newly added route serves, with 3000 routes configured:
//     in process (snapshot compile + switch + first request, the part a
//     controller-driven agent pays) and end to end in a standalone agent
//     (file write → inotify → YAML validation → build → switch → first
//     request);
//   - resident memory of novaedge-agent with 5000 routes, beside the same
//     agent with one route, soon after it serves and at rest.
//
// Run by hack/bench.sh (make bench). Only 127.0.0.1 is used.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/internal/benchconfig"
	"github.com/novaedge/novaedge/perf/internal/proc"
	"github.com/novaedge/novaedge/slowpath"
	"github.com/novaedge/novaedge/slowpath/sockets"
)

func main() {
	out := flag.String("out", "perf/results", "directory for the report")
	agent := flag.String("agent", "bin/novaedge-agent", "novaedge-agent binary")
	reps := flag.Int("reps", 20, "end-to-end route additions to time in a burst of edits")
	gap := flag.Duration("gap", time.Second, "pause between the route additions of the burst")
	quietReps := flag.Int("quiet-reps", 3, "end-to-end route additions to time after a quiet spell (each waits quietGap; 0 skips them)")
	only := flag.String("only", "", "run only this part: inprocess, e2e or rss (the report is then printed, not written)")
	profile := flag.String("profile", "", "write a CPU profile of the standalone agent, taken over the end-to-end route additions, to this file (the agent then serves --pprof on 127.0.0.1:19521)")
	flag.Parse()
	log.SetFlags(0)

	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }))
	defer backend.Close()

	var b strings.Builder
	stamp := time.Now().UTC().Format("2006-01-02T150405Z")
	fmt.Fprintf(&b, "# Route scale, %s\n\n", stamp)

	run := func(part string) bool { return *only == "" || *only == part }
	if run("inprocess") {
		inproc, err := inProcess(backend.Listener.Addr().String(), 3000, 50)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Fprintf(&b, "## Time until a new route serves, 3000 routes, in process\n\nCompile the snapshot with one more route, switch, first request with the new Host answered (50 times):\n\n%s\n\n", inproc)
		log.Print("in process: ", inproc)
	}
	if run("e2e") {
		e2e, err := standalone(*agent, backend.Listener.Addr().String(), 3000, *reps, *gap, *profile)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Fprintf(&b, "## Time until a new route serves, 3000 routes, standalone agent end to end\n\nWrite the YAML file with one more ProxyRoute until the first request with its Host is answered. The new file is written under another name and renamed into place, an atomic save: the edits come more than the watcher's debounce apart, so each rename is served as soon as the watcher has loaded and built it, without its settle (not the debounce it keeps for files still open for writing); the load checks only the documents whose bytes changed, and the build takes every route that did not change from the last build (snapshot.Memo).\n\nIn a burst of edits, %s apart (%d times), while the loader holds what it made of every document:\n\n%s\n\n", *gap, *reps, e2e)
		log.Print("standalone, burst: ", e2e)
		if *quietReps > 0 {
			quiet, err := standalone(*agent, backend.Listener.Addr().String(), 3000, *quietReps, quietGap, "")
			if err != nil {
				log.Fatal(err)
			}
			fmt.Fprintf(&b, "The first edit after a quiet spell of %s (%d times): the loader has dropped its validator and put what it made of the documents to rest (the JSON of each valid object), and the runtime has returned the memory of the last load to the system:\n\n%s\n\n", quietGap, *quietReps, quiet)
			log.Print("standalone, after a quiet spell: ", quiet)
		}
	}
	if !run("rss") {
		fmt.Print(b.String())
		return
	}

	one, err := rss(*agent, backend.Listener.Addr().String(), 1)
	if err != nil {
		log.Fatal(err)
	}
	many, err := rss(*agent, backend.Listener.Addr().String(), 5000)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Fprintf(&b, "## Resident memory of novaedge-agent\n\nVmRSS is RssAnon (heap, stacks: what the agent allocates) plus RssFile (pages of the binary it mapped: code and read-only data of every linked library, shared with the page cache and clean, so reclaimable). FilePmdMapped is the part of RssFile the kernel mapped in whole 2 MiB folios (large page-cache folios, kernel 6.x): touching one byte of such a stretch of the binary counts all 2 MiB. Each agent is sampled %v after it first served (the CRD validator of its configuration load still held) and again %v after (released: the agent at rest).\n\n| routes | sampled | VmRSS | RssAnon | RssFile | FilePmdMapped | startup until ready |\n|---|---|---|---|---|---|---|\n| 1 | %s |\n| 1 | %s |\n| 5000 | %s |\n| 5000 | %s |\n",
		sampleEarly, sampleRest, one[0], one[1], many[0], many[1])
	log.Printf("RSS: 1 route %s, at rest %s; 5000 routes %s, at rest %s", one[0], one[1], many[0], many[1])

	if err := os.MkdirAll(*out, 0o755); err != nil {
		log.Fatal(err)
	}
	path := filepath.Join(*out, "routes-"+stamp+".md")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		log.Fatal(err)
	}
	log.Printf("report: %s", path)
}

func host(i int) string { return benchconfig.Host(i) }

func snapshot(port uint16, backend string, n int) *pb.ConfigSnapshot {
	ap := netip.MustParseAddrPort(backend)
	l := &pb.Listener{Name: "bench/gw/http", Gateway: "bench/gw", Addresses: []string{"127.0.0.1"}, Port: uint32(port), Protocol: pb.Protocol_PROTOCOL_HTTP}
	c := &pb.ClusterConfig{Listeners: []*pb.Listener{l}, Backends: []*pb.Backend{{
		Name: "bench/be", Endpoints: []*pb.Endpoint{{Address: ap.Addr().String(), Port: uint32(ap.Port()), Weight: 1, State: pb.EndpointState_ENDPOINT_STATE_HEALTHY}},
	}}}
	for i := range n {
		name := fmt.Sprintf("bench/r%05d", i)
		c.Routes = append(c.Routes, &pb.Route{Name: name, Kind: pb.RouteKind_ROUTE_KIND_HTTP, Hostnames: []string{host(i)}, Listeners: []string{l.Name},
			Rules: []*pb.RouteRule{{
				Matches:  []*pb.RouteMatch{{Path: &pb.StringMatch{Type: pb.MatchType_MATCH_TYPE_PREFIX, Value: "/api"}}, {Path: &pb.StringMatch{Type: pb.MatchType_MATCH_TYPE_EXACT, Value: "/"}}},
				Backends: []*pb.WeightedBackend{{Backend: "bench/be", Weight: 1}},
			}}})
		l.Routes = append(l.Routes, name)
	}
	return &pb.ConfigSnapshot{Version: uint64(n), Cluster: c}
}

func get(addr, hostname string) (int, error) {
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/api/x", nil)
	req.Host = hostname
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return 0, err
	}
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

func percentiles(ds []time.Duration) string {
	slices.Sort(ds)
	p := func(q float64) time.Duration { return ds[min(len(ds)-1, int(q*float64(len(ds))))] }
	return fmt.Sprintf("p50 %s, p99 %s, max %s (n=%d)", p(0.5).Round(10*time.Microsecond), p(0.99).Round(10*time.Microsecond), ds[len(ds)-1].Round(10*time.Microsecond), len(ds))
}

func inProcess(backend string, n, reps int) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	key := sockets.Key{Network: "tcp", Addr: netip.MustParseAddrPort(ln.Addr().String())}
	set := sockets.NewSet()
	if err := set.Adopt(&sockets.Socket{Key: key, Listener: ln}); err != nil {
		return "", err
	}
	p := slowpath.New(slowpath.Options{Sockets: set})
	defer p.Close()
	apply := func(s *pb.ConfigSnapshot) error {
		ch, err := p.Compile(s)
		if err != nil {
			return err
		}
		return ch.Apply(context.Background())
	}
	if err := apply(snapshot(key.Addr.Port(), backend, n)); err != nil {
		return "", err
	}
	var ds []time.Duration
	for i := range reps {
		s := snapshot(key.Addr.Port(), backend, n+i+1)
		start := time.Now()
		if err := apply(s); err != nil {
			return "", err
		}
		code, err := get(ln.Addr().String(), host(n+i))
		if err != nil {
			return "", fmt.Errorf("new route %d: %w", n+i, err)
		}
		if code != 200 {
			return "", fmt.Errorf("new route %d: status %d", n+i, code)
		}
		ds = append(ds, time.Since(start))
	}
	return percentiles(ds), nil
}

// yamlConfig is a standalone configuration with n routes.
func yamlConfig(port int, backend string, n int) string {
	return benchconfig.YAML(benchconfig.Options{
		VIP: netip.MustParseAddr("127.0.0.1"), Backend: netip.MustParseAddrPort(backend), Ports: []int{port}, Routes: n,
	})
}

func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}

type agentProc struct {
	cmd  *exec.Cmd
	dir  string
	addr string
}

// quietGap is the pause before each route addition after a quiet spell:
// longer than the loader's validatorHold (30 s).
const quietGap = 35 * time.Second

// profilePort is where the agent serves its profiles with -profile.
const profilePort = 19521

func startAgent(bin, backend string, n int, profile bool) (*agentProc, time.Duration, error) {
	dir, err := os.MkdirTemp("", "novaedge-routescale")
	if err != nil {
		return nil, 0, err
	}
	port := freePort()
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte(yamlConfig(port, backend, n)), 0o644); err != nil {
		return nil, 0, err
	}
	a := &agentProc{dir: dir, addr: "127.0.0.1:" + strconv.Itoa(port)}
	metrics := ""
	if profile {
		metrics = "127.0.0.1:" + strconv.Itoa(profilePort)
	}
	a.cmd = exec.Command(bin, "--standalone", "--config", cfg, "--admin-socket", filepath.Join(dir, "a.sock"), "--metrics-addr", metrics,
		"--state-dir", dir, "--handoff-socket", "", "--bind-local-vips=false", "--log-level", "warn",
		// Loopback only: the fast path would attach XDP to this host's
		// default-route interface.
		"--fastpath", "off")
	if profile {
		a.cmd.Args = append(a.cmd.Args, "--pprof")
	}
	logf, _ := os.Create(filepath.Join(dir, "agent.log"))
	a.cmd.Stdout, a.cmd.Stderr = logf, logf
	start := time.Now()
	if err := a.cmd.Start(); err != nil {
		return nil, 0, err
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if code, err := get(a.addr, host(0)); err == nil && code == 200 {
			return a, time.Since(start), nil
		}
		if time.Now().After(deadline) {
			a.stop()
			return nil, 0, fmt.Errorf("agent with %d routes not serving after 2 minutes (log %s)", n, filepath.Join(dir, "agent.log"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (a *agentProc) stop() {
	_ = proc.Terminate(a.cmd.Process)
	_ = a.cmd.Wait()
	_ = os.RemoveAll(a.dir)
}

// The resident memory samples: soon after the agent serves, and once it is
// at rest (loader.validatorHold, 30 s, has passed since its configuration
// load).
const (
	sampleEarly = 2 * time.Second
	sampleRest  = 40 * time.Second
)

// rss starts an agent with n routes and returns its memory at sampleEarly
// and sampleRest after it first served, as table cells.
func rss(bin, backend string, n int) ([2]string, error) {
	var out [2]string
	a, startup, err := startAgent(bin, backend, n, false)
	if err != nil {
		return out, err
	}
	defer a.stop()
	ready := time.Now()
	for i, at := range []time.Duration{sampleEarly, sampleRest} {
		time.Sleep(time.Until(ready.Add(at)))
		cells, err := memory(a.cmd.Process.Pid)
		if err != nil {
			return out, err
		}
		out[i] = at.String() + " | " + cells + " | " + startup.Round(time.Millisecond).String()
	}
	return out, nil
}

// memory returns pid's VmRSS, RssAnon, RssFile and FilePmdMapped as table
// cells.
func memory(pid int) (string, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "", err
	}
	fields := map[string]string{}
	for _, line := range strings.Split(string(raw), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			fields[k] = strings.TrimSpace(v)
		}
	}
	rollup, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(rollup), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && k == "FilePmdMapped" {
			fields[k] = strings.TrimSpace(v)
		}
	}
	var cols []string
	for _, k := range []string{"VmRSS", "RssAnon", "RssFile", "FilePmdMapped"} {
		if fields[k] == "" {
			return "", fmt.Errorf("no %s for pid %d", k, pid)
		}
		cols = append(cols, fields[k])
	}
	return strings.Join(cols, " | "), nil
}

func standalone(bin, backend string, n, reps int, gap time.Duration, profile string) (string, error) {
	a, _, err := startAgent(bin, backend, n, profile != "")
	if err != nil {
		return "", err
	}
	defer a.stop()
	if profile != "" {
		// The profile spans the route additions (about 0.1-0.4 s each);
		// idle time adds no samples, so a longer span is harmless.
		done := make(chan error, 1)
		secs := max(2, int((time.Duration(reps) * (gap + 500*time.Millisecond)).Seconds()))
		go func() { done <- fetchProfile(secs, profile) }()
		time.Sleep(100 * time.Millisecond)
		defer func() {
			if err := <-done; err != nil {
				log.Printf("profile: %v", err)
			} else {
				log.Printf("profile: %s", profile)
			}
		}()
	}
	port, _ := strconv.Atoi(a.addr[strings.LastIndexByte(a.addr, ':')+1:])
	var ds []time.Duration
	for i := range reps {
		time.Sleep(gap)
		cfg := yamlConfig(port, backend, n+i+1)
		tmp := filepath.Join(a.dir, "config.yaml.tmp")
		if err := os.WriteFile(tmp, []byte(cfg), 0o644); err != nil {
			return "", err
		}
		start := time.Now()
		if err := os.Rename(tmp, filepath.Join(a.dir, "config.yaml")); err != nil {
			return "", err
		}
		deadline := start.Add(time.Minute)
		for {
			if code, err := get(a.addr, host(n+i)); err == nil && code == 200 {
				break
			}
			if time.Now().After(deadline) {
				return "", fmt.Errorf("route %d not served a minute after the file changed", n+i)
			}
			time.Sleep(2 * time.Millisecond)
		}
		ds = append(ds, time.Since(start))
	}
	return percentiles(ds), nil
}

// fetchProfile writes the agent's CPU profile over the next secs seconds
// to path.
func fetchProfile(secs int, path string) error {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/profile?seconds=%d", profilePort, secs))
	if err != nil {
		return fmt.Errorf("fetch agent CPU profile: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("fetch agent CPU profile: %s", resp.Status)
	}
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("fetch agent CPU profile: %w", err)
	}
	return os.WriteFile(path, raw, 0o644)
}
