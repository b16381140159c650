// Command httpbench measures the slow path against baselines in one run:
// small keep-alive HTTP/1.1 responses (wrk) over plain TCP and over TLS,
// and HTTP/2 with prior knowledge (h2load) sent directly to the backend,
// through nginx, through HAProxy and through novaedge-agent, each proxy
// configured with the same single route (and, for TLS, the same
// certificate) and pinned to its own core, the load generator and the
// backend to another. Four Go baselines run from this binary itself: a
// plain httputil.ReverseProxy (the floor) and the three proxies of
// perf/internal/baseproxy: a minimal one-thread epoll loop (the ceiling of
// a Go proxy), the same with a goroutine per connection (what that design
// costs) and a lean proxy doing the HTTP work NovaEdge cannot skip on
// header fields kept as read (what a path without http.Request could
// reach). It
// writes a Markdown report and a JSON file to -out.
//
// Run by hack/bench.sh (make bench), which installs nginx, haproxy, wrk and
// h2load and builds bin/novaedge-agent first. Only 127.0.0.1 is used.
package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/novaedge/novaedge/perf/internal/baseproxy"
	"github.com/novaedge/novaedge/perf/internal/proc"
)

// Ports, all on 127.0.0.1.
const (
	backendPort = 19500
	nginxH1     = 19501
	haproxyH1   = 19502
	novaH1      = 19503
	novaBase    = 19505 // -baseline-agent
	novaOps     = 19520 // the agent's ops server with -profile
	nginxH2     = 19511
	haproxyH2   = 19512
	plainRP     = 19504
	epollRP     = 19506 // the one-thread epoll proxy (perf/internal/baseproxy)
	goroutineRP = 19507 // the same with a goroutine per connection
	leanRP      = 19508 // perf/internal/baseproxy
	nginxTLS    = 19521
	haproxyTLS  = 19522
	novaTLS     = 19523
	novaBaseTLS = 19525
)

type result struct {
	Target      string  `json:"target"`
	Protocol    string  `json:"protocol"`
	RPS         float64 `json:"rps"`
	P50ms       float64 `json:"p50_ms,omitempty"`
	P99ms       float64 `json:"p99_ms,omitempty"`
	MeanMs      float64 `json:"mean_ms,omitempty"`
	Requests    float64 `json:"requests"`
	CPUSeconds  float64 `json:"proxy_cpu_seconds"`
	CPUusPerReq float64 `json:"proxy_cpu_us_per_request"`
	// The user-space share of CPUusPerReq: the proxy's own code, apart
	// from the kernel's socket work, which depends on how often peers
	// sleep and must be woken.
	UserUsPerReq float64 `json:"proxy_user_us_per_request"`
	Errors       string  `json:"errors,omitempty"`
	// Every round's rate and CPU per request, in round order (the
	// fields above are the median round's).
	RoundsRPS   []float64 `json:"rounds_rps,omitempty"`
	RoundsCPUus []float64 `json:"rounds_cpu_us_per_request,omitempty"`
}

// median is the round with the median rate (the lower of the middle two
// for an even count), with every round's rate and CPU per request.
func median(rs []result) result {
	sorted := slices.Clone(rs)
	slices.SortStableFunc(sorted, func(a, b result) int { return cmp.Compare(a.RPS, b.RPS) })
	m := sorted[(len(sorted)-1)/2]
	m.RoundsRPS, m.RoundsCPUus = nil, nil
	for _, r := range rs {
		m.RoundsRPS = append(m.RoundsRPS, r.RPS)
		m.RoundsCPUus = append(m.RoundsCPUus, r.CPUusPerReq)
		if r.Errors != "" && m.Errors == "" {
			m.Errors = r.Errors // an error in any round shows
		}
	}
	return m
}

func main() {
	var (
		out      = flag.String("out", "perf/results", "directory for the report")
		agent    = flag.String("agent", "bin/novaedge-agent", "novaedge-agent binary")
		duration = flag.Duration("duration", 5*time.Second, "length of each measurement")
		conns    = flag.Int("connections", 64, "concurrent connections (wrk), clients (h2load: connections/4 with 16 streams each)")
	)
	profile := flag.String("profile", "", "write a CPU profile of novaedge-agent, taken while wrk runs against it, to this file (the agent then runs with --pprof on 127.0.0.1:19520)")
	profileH2 := flag.String("profile-h2", "", "like -profile, taken while h2load runs against the agent")
	baseAgent := flag.String("baseline-agent", "", "a second novaedge-agent binary (say, built from the commit before a change) measured in the same run as target novaedge-base")
	reps := flag.Int("reps", 3, "rounds: every target and protocol is measured this many times, round after round; the report gives the median round")
	only := flag.String("targets", "", "comma-separated targets to measure (direct, nginx, haproxy, novaedge, novaedge-base, httputil.ReverseProxy, go-epoll, go-goroutines, go-lean); empty: all")
	serveRP := flag.String("serve-reverse-proxy", "", "internal: serve a plain httputil.ReverseProxy on this address (the harness runs itself this way as a baseline)")
	serveEpoll := flag.String("serve-epoll-proxy", "", "internal: serve the minimal one-thread epoll proxy (perf/internal/baseproxy) on this address")
	serveGoroutines := flag.String("serve-goroutine-proxy", "", "internal: serve the minimal proxy with a goroutine per connection (perf/internal/baseproxy) on this address")
	serveLean := flag.String("serve-lean-proxy", "", "internal: serve the lean proxy (perf/internal/baseproxy) on this address")
	flag.Parse()
	log.SetFlags(0)
	if *serveRP != "" {
		log.Fatal(plainReverseProxy(*serveRP))
	}
	if *serveEpoll != "" {
		log.Fatal(baseproxy.Serve(*serveEpoll, "127.0.0.1:"+strconv.Itoa(backendPort)))
	}
	if *serveGoroutines != "" {
		log.Fatal(baseproxy.ServeGoroutines(*serveGoroutines, "127.0.0.1:"+strconv.Itoa(backendPort)))
	}
	if *serveLean != "" {
		log.Fatal(baseproxy.ServeLean(*serveLean, "127.0.0.1:"+strconv.Itoa(backendPort)))
	}
	if runtime.NumCPU() < 2 {
		log.Fatal("httpbench needs at least 2 CPUs: one for the proxy, one for the load generator and backend")
	}
	for _, tool := range []string{"nginx", "haproxy", "wrk", "h2load", "taskset"} {
		if _, err := exec.LookPath(tool); err != nil {
			log.Fatalf("%s is missing: run hack/install-deps.sh --bench", tool)
		}
	}
	tmp, err := os.MkdirTemp("", "novaedge-bench")
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = os.RemoveAll(tmp) }()

	var procs []*exec.Cmd
	stopAll := func() {
		for _, p := range procs {
			_ = proc.Terminate(p.Process)
			_, _ = p.Process.Wait()
		}
		procs = nil
	}
	defer stopAll()
	// fail stops every process started (log.Fatal would skip the defers).
	fail := func(format string, args ...any) {
		stopAll()
		log.Fatalf(format, args...)
	}
	start := func(name string, core int, env []string, args ...string) *exec.Cmd {
		cmd := exec.Command("taskset", append([]string{"-c", strconv.Itoa(core)}, args...)...)
		cmd.Env = append(os.Environ(), env...)
		logf, err := os.Create(filepath.Join(tmp, name+".log"))
		if err != nil {
			log.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			fail("start %s: %v", name, err)
		}
		procs = append(procs, cmd)
		return cmd
	}

	for _, port := range []int{backendPort, nginxH1, nginxH2, haproxyH1, haproxyH2, novaH1, novaBase, plainRP, epollRP, goroutineRP, leanRP, novaOps, nginxTLS, haproxyTLS, novaTLS, novaBaseTLS} {
		if c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second); err == nil {
			_ = c.Close()
			log.Fatalf("port %d is in use (another benchmark running?)", port)
		}
	}

	// The backend: nginx answering a small body, on the generator's core.
	writeFile(tmp, "backend.conf", fmt.Sprintf(`worker_processes 1; daemon off; pid %[1]s/backend.pid; error_log %[1]s/backend.err;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 1000000;
  server { listen 127.0.0.1:%[2]d; location / { return 200 "hello from backend\n"; } } }
`, tmp, backendPort))
	start("backend", 0, nil, "nginx", "-c", filepath.Join(tmp, "backend.conf"), "-e", filepath.Join(tmp, "backend.err"))

	// One certificate for every TLS listener (ECDSA P-256, TLS 1.3 with
	// AES-GCM in practice: what the proxies negotiate with wrk).
	certPEM, keyPEM, err := benchCert()
	if err != nil {
		fail("certificate: %v", err)
	}
	writeFile(tmp, "cert.pem", string(certPEM))
	writeFile(tmp, "key.pem", string(keyPEM))
	writeFile(tmp, "haproxy.pem", string(certPEM)+string(keyPEM))

	writeFile(tmp, "nginx.conf", fmt.Sprintf(`worker_processes 1; daemon off; pid %[1]s/nginx.pid; error_log %[1]s/nginx.err;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 1000000; http2_max_requests 1000000;
  upstream be { server 127.0.0.1:%[2]d; keepalive 128; }
  server { listen 127.0.0.1:%[3]d; listen 127.0.0.1:%[4]d http2; listen 127.0.0.1:%[5]d ssl;
    ssl_certificate %[1]s/cert.pem; ssl_certificate_key %[1]s/key.pem;
    location / { proxy_pass http://be; proxy_http_version 1.1; proxy_set_header Connection ""; } } }
`, tmp, backendPort, nginxH1, nginxH2, nginxTLS))
	nginx := start("nginx", 1, nil, "nginx", "-c", filepath.Join(tmp, "nginx.conf"), "-e", filepath.Join(tmp, "nginx.err"))

	writeFile(tmp, "haproxy.cfg", fmt.Sprintf(`global
  nbthread 1
  maxconn 4000
defaults
  mode http
  timeout connect 5s
  timeout client 60s
  timeout server 60s
  http-reuse always
frontend fe
  bind 127.0.0.1:%d
  bind 127.0.0.1:%d proto h2
  bind 127.0.0.1:%d ssl crt %s alpn http/1.1
  default_backend be
backend be
  server s1 127.0.0.1:%d
`, haproxyH1, haproxyH2, haproxyTLS, filepath.Join(tmp, "haproxy.pem"), backendPort))
	haproxy := start("haproxy", 1, nil, "haproxy", "-f", filepath.Join(tmp, "haproxy.cfg"), "-db")

	// startAgent runs an agent binary with the bench route on port (and
	// over TLS on tlsPort), its state in a directory of its own.
	startAgent := func(name, bin string, port, tlsPort int, extra ...string) *exec.Cmd {
		dir := filepath.Join(tmp, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			fail("%v", err)
		}
		writeFile(dir, "novaedge.yaml", fmt.Sprintf(`apiVersion: novaedge.io/v1alpha1
kind: ProxyVIP
metadata: {name: bench}
spec: {address: 127.0.0.1/32, mode: Local, ports: [%[1]d, %[3]d]}
---
apiVersion: novaedge.io/v1alpha1
kind: ProxyGateway
metadata: {name: bench, namespace: bench}
spec:
  vipRef: bench
  listeners:
    - {name: http, port: %[1]d, protocol: HTTP}
    - {name: https, port: %[3]d, protocol: HTTPS, tls: {secretRef: {name: bench-cert}}}
---
apiVersion: v1
kind: Secret
metadata: {name: bench-cert, namespace: bench}
type: kubernetes.io/tls
data: {tls.crt: %[4]s, tls.key: %[5]s}
---
apiVersion: novaedge.io/v1alpha1
kind: ProxyRoute
metadata: {name: all, namespace: bench}
spec:
  rules: [{backendRefs: [{name: backend}]}]
---
apiVersion: novaedge.io/v1alpha1
kind: ProxyBackend
metadata: {name: backend, namespace: bench}
spec:
  lbPolicy: RoundRobin
  endpoints: [{address: 127.0.0.1, port: %[2]d}]
`, port, backendPort, tlsPort, base64.StdEncoding.EncodeToString(certPEM), base64.StdEncoding.EncodeToString(keyPEM)))
		args := []string{bin, "--standalone", "--config", filepath.Join(dir, "novaedge.yaml"),
			"--admin-socket", filepath.Join(dir, "agent.sock"), "--metrics-addr", "", "--state-dir", dir, "--handoff-socket", "",
			"--bind-local-vips=false", "--watch=false", "--log-level", "warn",
			// The slow path over loopback is measured; the fast path would
			// attach XDP to this host's default-route interface.
			"--fastpath", "off"}
		return start(name, 1, []string{"GOMAXPROCS=1"}, append(args, extra...)...)
	}
	var profArgs []string
	if *profile != "" || *profileH2 != "" {
		profArgs = []string{"--pprof", "--metrics-addr", "127.0.0.1:" + strconv.Itoa(novaOps)}
	}
	nova := startAgent("novaedge", *agent, novaH1, novaTLS, profArgs...)
	var base *exec.Cmd
	if *baseAgent != "" {
		base = startAgent("novaedge-base", *baseAgent, novaBase, novaBaseTLS)
	}

	self, err := os.Executable()
	if err != nil {
		fail("%v", err)
	}
	rp := start("reverseproxy", 1, []string{"GOMAXPROCS=1"}, self, "-serve-reverse-proxy", "127.0.0.1:"+strconv.Itoa(plainRP))
	ep := start("epollproxy", 1, []string{"GOMAXPROCS=1"}, self, "-serve-epoll-proxy", "127.0.0.1:"+strconv.Itoa(epollRP))
	gp := start("goroutineproxy", 1, []string{"GOMAXPROCS=1"}, self, "-serve-goroutine-proxy", "127.0.0.1:"+strconv.Itoa(goroutineRP))
	lp := start("leanproxy", 1, []string{"GOMAXPROCS=1"}, self, "-serve-lean-proxy", "127.0.0.1:"+strconv.Itoa(leanRP))

	ports := []int{backendPort, nginxH1, nginxH2, haproxyH1, haproxyH2, novaH1, plainRP, epollRP, goroutineRP, leanRP, nginxTLS, haproxyTLS, novaTLS}
	if base != nil {
		ports = append(ports, novaBase, novaBaseTLS)
	}
	for _, port := range ports {
		if err := waitPort(port, 20*time.Second); err != nil {
			fail("port %d: %v (logs in %s)", port, err, tmp)
		}
	}

	type target struct {
		name        string
		h1, h2, tls int       // ports; 0: not measured
		cmd         *exec.Cmd // nil: direct
	}
	targets := []target{
		{"direct", backendPort, 0, 0, nil},
		{"nginx", nginxH1, nginxH2, nginxTLS, nginx},
		{"haproxy", haproxyH1, haproxyH2, haproxyTLS, haproxy},
		{"novaedge", novaH1, novaH1, novaTLS, nova},
		// The floor any proxy built on net/http starts from.
		{"httputil.ReverseProxy", plainRP, 0, 0, rp},
		// The ceiling of a Go proxy on this machine (perf/internal/baseproxy).
		{"go-epoll", epollRP, 0, 0, ep},
		// The same with a goroutine per connection: the cost of that design.
		{"go-goroutines", goroutineRP, 0, 0, gp},
		// The HTTP work NovaEdge cannot skip, on header fields kept as read.
		{"go-lean", leanRP, 0, 0, lp},
	}
	if base != nil {
		// Right after novaedge, so both see the machine in the same state.
		targets = slices.Insert(targets, 4, target{"novaedge-base", novaBase, novaBase, novaBaseTLS, base})
	}
	// Each target and protocol is measured -reps times, the rounds one
	// after the other, so that every round sees the machine in about the
	// same state for all targets; the report gives each one's median
	// round and every round's rate.
	type measurement struct {
		t     target
		proto string // http/1.1, https/1.1 or h2c
	}
	var plan []measurement
	for _, t := range targets {
		if *only != "" && !slices.Contains(strings.Split(*only, ","), t.name) {
			continue
		}
		plan = append(plan, measurement{t, "http/1.1"})
		if t.tls != 0 {
			plan = append(plan, measurement{t, "https/1.1"})
		}
		if t.h2 != 0 {
			plan = append(plan, measurement{t, "h2c"})
		}
	}
	measure := func(m measurement, round int) result {
		var (
			r        result
			err      error
			profPath string
		)
		switch m.proto {
		case "http/1.1":
			// Warm up connection pools and caches.
			_, _ = runWrk("http", m.t.h1, time.Second, *conns)
			profPath = *profile
		case "https/1.1":
			// Keep-alive connections, so the handshakes are few and the
			// cost is the records' (with wrk's warm-up).
			_, _ = runWrk("https", m.t.tls, time.Second, *conns)
		case "h2c":
			profPath = *profileH2
		}
		var prof chan error
		if profPath != "" && m.t.cmd == nova && round == 0 {
			// The profile covers the first round's measurement but its
			// first and last half second, when the load starts and stops.
			prof = make(chan error, 1)
			go func() { prof <- fetchProfile(novaOps, max(*duration-time.Second, time.Second), profPath) }()
		}
		cpu0, user0 := treeCPU(m.t.cmd)
		switch m.proto {
		case "http/1.1":
			r, err = runWrk("http", m.t.h1, *duration, *conns)
		case "https/1.1":
			r, err = runWrk("https", m.t.tls, *duration, *conns)
		case "h2c":
			r, err = runH2load(m.t.h2, *duration, *conns)
		}
		cpu1, user1 := treeCPU(m.t.cmd)
		if prof != nil {
			if err := <-prof; err != nil {
				log.Printf("profile: %v", err)
			} else {
				log.Printf("profile: %s", profPath)
			}
		}
		r.Target, r.Protocol = m.t.name, m.proto
		if err != nil {
			r.Errors = err.Error()
		}
		r.CPUSeconds = cpu1 - cpu0
		if r.Requests > 0 && m.t.cmd != nil {
			r.CPUusPerReq = r.CPUSeconds / r.Requests * 1e6
			r.UserUsPerReq = (user1 - user0) / r.Requests * 1e6
		}
		lat := fmt.Sprintf("p50 %6.3f ms  p99 %6.3f ms", r.P50ms, r.P99ms)
		if m.proto == "h2c" {
			lat = fmt.Sprintf("mean %6.3f ms              ", r.MeanMs)
		}
		log.Printf("round %d  %-13s %-9s %10.0f req/s  %s  %5.1f µs CPU/req (user %5.1f) %s", round+1, m.t.name, m.proto, r.RPS, lat, r.CPUusPerReq, r.UserUsPerReq, r.Errors)
		return r
	}
	rounds := make([][]result, len(plan))
	for round := range max(*reps, 1) {
		for i, m := range plan {
			rounds[i] = append(rounds[i], measure(m, round))
		}
	}
	results := make([]result, len(plan))
	for i, rs := range rounds {
		results[i] = median(rs)
	}
	if err := writeReport(*out, results, *duration, *conns); err != nil {
		fail("%v", err)
	}
}

// fetchProfile writes a CPU profile of d from the agent's ops server on
// port to path.
func fetchProfile(port int, d time.Duration, path string) error {
	time.Sleep(500 * time.Millisecond)
	c := &http.Client{Timeout: d + 10*time.Second}
	resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/profile?seconds=%d", port, int(d.Seconds())))
	if err != nil {
		return fmt.Errorf("fetch agent CPU profile: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("fetch agent CPU profile: %s", resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write agent CPU profile: %w", err)
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		_ = f.Close()
		return fmt.Errorf("write agent CPU profile: %w", err)
	}
	return f.Close()
}

func writeFile(dir, name, content string) {
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		log.Fatal(err)
	}
}

func waitPort(port int, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second)
		if err == nil {
			return c.Close()
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// treeCPU returns the user+system and the user CPU seconds of cmd's
// process and its children (nginx's worker), read from /proc.
func treeCPU(cmd *exec.Cmd) (total, user float64) {
	if cmd == nil {
		return 0, 0
	}
	var walk func(pid int)
	walk = func(pid int) {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return
		}
		// Fields after the parenthesised command name.
		s := string(raw)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		ut, _ := strconv.ParseFloat(f[11], 64)
		st, _ := strconv.ParseFloat(f[12], 64)
		total += (ut + st) / 100 // USER_HZ
		user += ut / 100
		kids, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
		for _, k := range strings.Fields(string(kids)) {
			if n, err := strconv.Atoi(k); err == nil {
				walk(n)
			}
		}
	}
	walk(cmd.Process.Pid)
	return total, user
}

var (
	reqPerSec = regexp.MustCompile(`Requests/sec:\s+([\d.]+)`)
	pct       = regexp.MustCompile(`(?m)^\s+(50|99)(?:\.000)?%\s+([\d.]+)(us|ms|s)`)
	total     = regexp.MustCompile(`(\d+) requests in`)
	h2rps     = regexp.MustCompile(`finished in [\d.]+\w+, ([\d.]+) req/s`)
	h2done    = regexp.MustCompile(`requests: \d+ total, \d+ started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored`)
	h2mean    = regexp.MustCompile(`time for request:\s+\S+\s+\S+\s+([\d.]+)(us|ms|s)`)
)

func toMs(v string, unit string) float64 {
	f, _ := strconv.ParseFloat(v, 64)
	switch unit {
	case "us":
		return f / 1000
	case "s":
		return f * 1000
	}
	return f
}

func runWrk(scheme string, port int, d time.Duration, conns int) (result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d+30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "taskset", "-c", "0", "wrk", "-t1", "-c"+strconv.Itoa(conns), "-d"+strconv.Itoa(int(d.Seconds()))+"s",
		"--latency", scheme+"://127.0.0.1:"+strconv.Itoa(port)+"/").CombinedOutput()
	var r result
	if err != nil {
		return r, fmt.Errorf("wrk: %w: %s", err, out)
	}
	s := string(out)
	if m := reqPerSec.FindStringSubmatch(s); m != nil {
		r.RPS, _ = strconv.ParseFloat(m[1], 64)
	}
	if m := total.FindStringSubmatch(s); m != nil {
		r.Requests, _ = strconv.ParseFloat(m[1], 64)
	}
	for _, m := range pct.FindAllStringSubmatch(s, -1) {
		if m[1] == "50" {
			r.P50ms = toMs(m[2], m[3])
		} else {
			r.P99ms = toMs(m[2], m[3])
		}
	}
	if strings.Contains(s, "Non-2xx") || strings.Contains(s, "Socket errors") {
		sc := bufio.NewScanner(strings.NewReader(s))
		for sc.Scan() {
			if l := sc.Text(); strings.Contains(l, "Non-2xx") || strings.Contains(l, "Socket errors") {
				return r, errors.New(strings.TrimSpace(l))
			}
		}
	}
	return r, nil
}

func runH2load(port int, d time.Duration, conns int) (result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d+30*time.Second)
	defer cancel()
	clients := max(conns/4, 1)
	out, err := exec.CommandContext(ctx, "taskset", "-c", "0", "h2load", "-t1", "-c"+strconv.Itoa(clients), "-m16",
		"-D", strconv.Itoa(int(d.Seconds())), "http://127.0.0.1:"+strconv.Itoa(port)+"/").CombinedOutput()
	var r result
	if err != nil {
		return r, fmt.Errorf("h2load: %w: %s", err, out)
	}
	s := string(out)
	if m := h2rps.FindStringSubmatch(s); m != nil {
		r.RPS, _ = strconv.ParseFloat(m[1], 64)
	}
	if m := h2mean.FindStringSubmatch(s); m != nil {
		r.MeanMs = toMs(m[1], m[2])
	}
	if m := h2done.FindStringSubmatch(s); m != nil {
		r.Requests, _ = strconv.ParseFloat(m[2], 64)
		if m[3] != "0" || m[4] != "0" {
			return r, fmt.Errorf("h2load: %s failed, %s errored", m[3], m[4])
		}
	}
	return r, nil
}

// perRound is a[i]/b[i] for each round both have.
func perRound(a, b []float64) []float64 {
	var q []float64
	for i := range min(len(a), len(b)) {
		if b[i] > 0 {
			q = append(q, a[i]/b[i])
		}
	}
	return q
}

// list formats each value with format, comma-separated.
func list(vs []float64, format string) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = fmt.Sprintf(format, v)
	}
	return strings.Join(s, ", ")
}

func writeReport(dir string, rs []result, d time.Duration, conns int) error {
	rounds := 0
	if len(rs) > 0 {
		rounds = len(rs[0].RoundsRPS)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	stamp := time.Now().UTC().Format("2006-01-02T150405Z")
	raw, _ := json.MarshalIndent(rs, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "http-"+stamp+".json"), append(raw, '\n'), 0o644); err != nil {
		return err
	}
	find := func(target, proto string) *result {
		for i := range rs {
			if rs[i].Target == target && rs[i].Protocol == proto {
				return &rs[i]
			}
		}
		return nil
	}
	var b strings.Builder
	host, _ := os.Hostname()
	fmt.Fprintf(&b, "# HTTP proxy benchmark, %s\n\nMachine %s, %d CPUs, %s. Each proxy pinned to CPU 1 (one worker/thread; novaedge with GOMAXPROCS=1); wrk/h2load and the nginx backend on CPU 0. %d rounds of %s per target and protocol, one round after the other; each row is the round with the median rate, the last column every round's rate. %d connections (h2load: %d clients × 16 streams). Response: 19 bytes. https/1.1: keep-alive HTTP/1.1 over TLS (one ECDSA P-256 certificate for every proxy; the backend is plain HTTP).\n\n",
		stamp, host, runtime.NumCPU(), runtime.Version(), rounds, d, conns, max(conns/4, 1))
	for _, proto := range []string{"http/1.1", "https/1.1", "h2c"} {
		ha := find("haproxy", proto)
		fmt.Fprintf(&b, "## %s\n\n| target | req/s | vs HAProxy | p50 ms | p99 ms | mean ms | proxy CPU µs/req | of it user | errors | rounds (req/s) |\n|---|---|---|---|---|---|---|---|---|---|\n", proto)
		for _, r := range rs {
			if r.Protocol != proto {
				continue
			}
			ratio := "-"
			if ha != nil && ha.RPS > 0 {
				ratio = fmt.Sprintf("%.2f", r.RPS/ha.RPS)
			}
			fmt.Fprintf(&b, "| %s | %.0f | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.Target, r.RPS, ratio, num(r.P50ms), num(r.P99ms), num(r.MeanMs), num(r.CPUusPerReq), num(r.UserUsPerReq), r.Errors, list(r.RoundsRPS, "%.0f"))
		}
		b.WriteString("\n")
	}
	if nv, ha := find("novaedge", "http/1.1"), find("haproxy", "http/1.1"); nv != nil && ha != nil && ha.RPS > 0 && ha.P99ms > 0 {
		fmt.Fprintf(&b, "NovaEdge / HAProxy: throughput %.2f×, p99 %.2f× (goal ≥ 1.0× and ≤ 1.2×); throughput in each round %s, its CPU per request / HAProxy's in each round %s.\n",
			nv.RPS/ha.RPS, nv.P99ms/ha.P99ms, list(perRound(nv.RoundsRPS, ha.RoundsRPS), "%.2f×"), list(perRound(nv.RoundsCPUus, ha.RoundsCPUus), "%.2f×"))
	}
	if nv, bs := find("novaedge", "http/1.1"), find("novaedge-base", "http/1.1"); nv != nil && bs != nil && bs.RPS > 0 && bs.CPUusPerReq > 0 {
		fmt.Fprintf(&b, "NovaEdge / baseline agent (-baseline-agent): throughput %.2f×, CPU per request %.2f× (user space %.2f×).\n", nv.RPS/bs.RPS, nv.CPUusPerReq/bs.CPUusPerReq, nv.UserUsPerReq/max(bs.UserUsPerReq, 1e-9))
	}
	if nv, rp := find("novaedge", "http/1.1"), find("httputil.ReverseProxy", "http/1.1"); nv != nil && rp != nil && rp.RPS > 0 {
		fmt.Fprintf(&b, "NovaEdge / plain httputil.ReverseProxy: throughput %.2f×.\n", nv.RPS/rp.RPS)
	}
	if ep, ha := find("go-epoll", "http/1.1"), find("haproxy", "http/1.1"); ep != nil && ha != nil && ha.RPS > 0 {
		fmt.Fprintf(&b, "The one-thread epoll proxy in Go (perf/internal/baseproxy: forwards heads unchanged, no routing, no header handling) / HAProxy: throughput %.2f×; the ceiling of a Go proxy on this machine.\n", ep.RPS/ha.RPS)
	}
	if gp, ha := find("go-goroutines", "http/1.1"), find("haproxy", "http/1.1"); gp != nil && ha != nil && ha.RPS > 0 {
		fmt.Fprintf(&b, "The same minimal proxy with a goroutine per connection / HAProxy: throughput %.2f×; what a goroutine per connection costs before any HTTP work.\n", gp.RPS/ha.RPS)
	}
	if lp, ha := find("go-lean", "http/1.1"), find("haproxy", "http/1.1"); lp != nil && ha != nil && ha.RPS > 0 {
		fmt.Fprintf(&b, "The lean proxy (perf/internal/baseproxy: every field scanned, routed by slowpath/router, hop-by-hop fields dropped, forwarding fields and a request ID added, on fields kept as read) / HAProxy: throughput %.2f×; what a NovaEdge path without http.Request and http.Header could reach.\n", lp.RPS/ha.RPS)
	}
	path := filepath.Join(dir, "http-"+stamp+".md")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return err
	}
	log.Printf("report: %s", path)
	return nil
}

func num(f float64) string {
	if f == 0 {
		return "-"
	}
	return strconv.FormatFloat(f, 'f', 3, 64)
}

// plainReverseProxy is the baseline of a Go proxy: httputil.ReverseProxy
// with a pooled transport and nothing else.
func plainReverseProxy(addr string) error {
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(&url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(backendPort)})
		},
		Transport: &http.Transport{MaxIdleConnsPerHost: 256},
	}
	return http.ListenAndServe(addr, rp)
}
