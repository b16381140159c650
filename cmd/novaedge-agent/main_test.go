package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/novaedge/novaedge/controller/stream"
	"github.com/novaedge/novaedge/controller/stream/streamtest"
	"github.com/novaedge/novaedge/deploy/examples"
	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

func runArgs(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestUsage(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		code   int
		stdout string // substring
		stderr string // substring
	}{
		{"help", []string{"--help"}, 0, "Standalone mode (--standalone)", ""},
		{"help on controller mode", []string{"--help"}, 0, "Controller mode (--controller host:port)", ""},
		{"no mode", nil, 2, "", "one of --standalone (configuration files) or --controller host:port (follow a controller) is required"},
		{"both modes", []string{"--standalone", "--controller", "c:9443"}, 2, "", "--standalone and --controller are exclusive"},
		{"controller without port", []string{"--controller", "novaedge-controller"}, 2, "", `--controller "novaedge-controller": want host:port`},
		{"controller with config", []string{"--controller", "c:9443", "--config", "x.yaml"}, 2, "", "--config is for --standalone"},
		{"controller dry run", []string{"--controller", "c:9443", "--dry-run"}, 2, "", "--dry-run checks --standalone configuration files"},
		{"controller without TLS files", []string{"--controller", "c:9443", "--controller-tls-dir", "/nonexistent-tls"}, 1, "", "--controller-tls-dir: "},
		{"controller TLS files named", []string{"--controller", "c:9443", "--controller-tls-dir", "/nonexistent-tls"}, 1, "", "/nonexistent-tls/ca.crt"},
		{"bad log level", []string{"--standalone", "--log-level", "loud"}, 2, "", `--log-level "loud"`},
		{"bad log format", []string{"--standalone", "--log-format", "xml"}, 2, "", `--log-format "xml"`},
		{"router id not IPv4", []string{"--standalone", "--router-id", "fd00::1"}, 2, "", `--router-id "fd00::1": must be an IPv4 address`},
		{"router id not an address", []string{"--standalone", "--router-id", "node-a"}, 2, "", `--router-id "node-a": must be an IPv4 address`},
		{"zero l2 lease", []string{"--standalone", "--l2-lease-ttl", "0s"}, 2, "", "--l2-lease-ttl 0s: must be positive"},
		{"negative failover grace", []string{"--standalone", "--l2-failover-grace", "-1s"}, 2, "", "--l2-failover-grace -1s: must not be negative"},
		{"bgp port out of range", []string{"--standalone", "--bgp-listen-port", "70000"}, 2, "", "--bgp-listen-port 70000: must be 0-65535"},
		{"lease shorter than 3s", []string{"--standalone", "--node-lease-duration", "2s"}, 2, "", "--node-lease-duration 2s: must be whole seconds, at least 3s"},
		{"lease in fractions", []string{"--standalone", "--node-lease-duration", "4500ms"}, 2, "", "--node-lease-duration 4.5s: must be whole seconds"},
		{"heartbeat port 0", []string{"--standalone", "--l2-heartbeat-port", "0"}, 2, "", "--l2-heartbeat-port 0: must be 1-65535"},
		{"empty frr vty dir", []string{"--standalone", "--frr-vty-dir", ""}, 2, "", "--frr-vty-dir: must not be empty"},
		{"empty vtysh", []string{"--standalone", "--frr-vtysh", ""}, 2, "", "--frr-vtysh: must not be empty"},
		{"ospf uplink not a name", []string{"--standalone", "--ospf-uplinks", "eth0,eth/1"}, 2, "", `--ospf-uplinks "eth/1": not an interface name`},
		{"unknown flag", []string{"--nope"}, 2, "", "unknown flag: --nope"},
		{"argument", []string{"--standalone", "file.yaml"}, 2, "", "unknown command"},
		{"dry run of the default", []string{"--standalone", "--dry-run"}, 0, "demo-vip  127.0.10.1:9000/tcp  FAST", ""},
		{"dry run of a missing file", []string{"--standalone", "--dry-run", "--config", "/nonexistent.yaml"}, 1, "/nonexistent.yaml", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errb := runArgs(tc.args...)
			if code != tc.code || !strings.Contains(out, tc.stdout) || !strings.Contains(errb, tc.stderr) {
				t.Errorf("exit %d (want %d)\nstdout %q (want %q)\nstderr %q (want %q)", code, tc.code, out, tc.stdout, errb, tc.stderr)
			}
		})
	}
}

func TestHelpExplainsEveryFlag(t *testing.T) {
	cmd := newCommand(&bytes.Buffer{}, &bytes.Buffer{})
	_, out, _ := runArgs("--help")
	n := 0
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		n++
		if len(f.Usage) < 20 {
			t.Errorf("--%s has no real explanation: %q", f.Name, f.Usage)
		}
		if !strings.Contains(out, "--"+f.Name) {
			t.Errorf("--help does not show --%s", f.Name)
		}
	})
	if n < 12 {
		t.Fatalf("only %d flags visited", n)
	}
}

// TestDryRunInvalidExample: the four acceptance mistakes are reported in
// one run, each naming its resource and field, and the exit status is 1.
func TestDryRunInvalidExample(t *testing.T) {
	code, out, _ := runArgs("--standalone", "--dry-run", "--config", "../../deploy/examples/invalid/standalone-broken.yaml")
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s", code, out)
	}
	for _, want := range []string{
		"ProxyRoute demo/web: spec.hostname",
		"ProxyRoute demo/tcp-echo: spec.rules[0].backendRefs[0].name",
		"ProxyIPPool demo-pool: spec.cidrs[0]",
		"ProxyBackend demo/demo-web-canary: spec.endpoints[0].port",
		"4 errors",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("dry run output lacks %q:\n%s", want, out)
		}
	}
}

// The end-to-end tests below run the real binary as root in a network
// namespace of their own, so the Local VIP is bound there and never on this
// host's interfaces.

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

func agentBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "novaedge-agent-test")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "novaedge-agent")
		if out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		_ = os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

// netns creates a network namespace with lo up and removes it at cleanup.
func netns(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test runs the agent in a network namespace and needs root: run make test as root")
	}
	name := fmt.Sprintf("nvt-agent-%d-%d", os.Getpid(), time.Now().UnixNano()%1e6)
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v\n%s", name, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v\n%s", name, err, out)
		}
	})
	if out, err := exec.Command("ip", "-n", name, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("lo up in %s: %v\n%s", name, err, out)
	}
	return name
}

// agentProc is a running novaedge-agent.
type agentProc struct {
	cmd    *exec.Cmd
	logs   *lockedBuffer
	client pb.AgentAdminClient
	sock   string
	done   chan error
	// exited is closed once the process has exited (after done got its
	// result), so cleanups need not read cmd.ProcessState, which the
	// waiting goroutine writes.
	exited chan struct{}
}

// watch waits for the started process in the background.
func (p *agentProc) watch() {
	p.exited = make(chan struct{})
	go func() {
		p.done <- p.cmd.Wait()
		close(p.exited)
	}()
}

// kill ends the process unless it has exited, and logs how it ended if
// nobody took its result.
func (p *agentProc) kill(t *testing.T) {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	<-p.exited
	select {
	case err := <-p.done:
		if err != nil {
			t.Logf("agent stopped: %v", err)
		}
	default:
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func startAgent(t *testing.T, ns string, args ...string) *agentProc {
	t.Helper()
	return startAgentIn(t, ns, t.TempDir(), true, args...)
}

// startAgentIn starts an agent whose admin socket, state and handoff
// socket are in dir; with waitReady it returns once the admin API says
// ready.
func startAgentIn(t *testing.T, ns, dir string, waitReady bool, args ...string) *agentProc {
	t.Helper()
	return startAgentWith(t, []string{"ip", "netns", "exec", ns}, dir, waitReady, args...)
}

// startAgentWith starts the agent under the launcher command (which puts
// it into a namespace).
func startAgentWith(t *testing.T, launcher []string, dir string, waitReady bool, args ...string) *agentProc {
	t.Helper()
	sock := filepath.Join(dir, "agent.sock")
	full := append(append(launcher[1:], agentBinary(t), "--standalone",
		"--admin-socket", sock, "--metrics-addr", "127.0.0.1:9090", "--state-dir", filepath.Join(dir, "state"),
		"--handoff-socket", filepath.Join(dir, "handoff.sock")), args...)
	p := &agentProc{cmd: exec.Command(launcher[0], full...), logs: &lockedBuffer{}, sock: sock, done: make(chan error, 1)}
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.watch()
	t.Cleanup(func() { p.kill(t) })
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	p.client = pb.NewAgentAdminClient(conn)
	if waitReady {
		p.waitStatus(t, "the agent to be ready", func(st *pb.AgentStatus) bool { return st.GetReady() })
	}
	return p
}

// waitStatus polls the admin API until cond holds; the deadline only
// bounds a broken test.
func (p *agentProc) waitStatus(t *testing.T, what string, cond func(*pb.AgentStatus) bool) *pb.AgentStatus {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case err := <-p.done:
			t.Fatalf("the agent exited (%v) while waiting for %s; its log:\n%s", err, what, p.logs.String())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := p.client.Status(ctx, &pb.StatusRequest{})
		cancel()
		if err == nil && cond(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s (last status %v, error %v); the agent's log:\n%s", what, st, err, p.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitLog waits until the agent's log holds every one of parts. The log
// reaches the test through a pipe and a copying goroutine, so a line the
// agent wrote before its status changed may arrive after the test saw the
// status.
func (p *agentProc) waitLog(t *testing.T, what string, parts ...string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		logs := p.logs.String()
		missing := ""
		for _, s := range parts {
			if !strings.Contains(logs, s) {
				missing = s
				break
			}
		}
		if missing == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent's log does not name %s (%q is missing):\n%s", what, missing, logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// servesPort reports whether the served snapshot has a backend endpoint on
// port. The tests tell configurations apart by content, not by version:
// the standalone agent also builds a new snapshot when its health checks
// change an endpoint's state (the example's backends are not running).
func (p *agentProc) servesPort(t *testing.T, port uint32) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	snap, err := p.client.GetSnapshot(ctx, &pb.GetSnapshotRequest{})
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	for _, b := range snap.GetCluster().GetBackends() {
		for _, e := range b.GetEndpoints() {
			if e.GetPort() == port {
				return true
			}
		}
	}
	return false
}

func (p *agentProc) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.done:
		if err != nil {
			t.Fatalf("the agent exited with %v after SIGTERM; its log:\n%s", err, p.logs.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the agent did not stop after SIGTERM; its log:\n%s", p.logs.String())
	}
}

func addrsOnLo(t *testing.T, ns string) string {
	t.Helper()
	out, err := exec.Command("ip", "-n", ns, "-br", "addr", "show", "dev", "lo").CombinedOutput()
	if err != nil {
		t.Fatalf("ip addr in %s: %v\n%s", ns, err, out)
	}
	return string(out)
}

func writeFile(t *testing.T, path string, data string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestStandaloneAgentProcess is the acceptance test of the standalone
// agent as users run it: the embedded-default configuration in a file, the
// Local VIP bound, an invalid edit rejected and logged while the previous
// configuration keeps serving, the fix applied without a restart, and the
// VIP left in place on SIGTERM.
func TestStandaloneAgentProcess(t *testing.T) {
	ns := netns(t)
	cfg := filepath.Join(t.TempDir(), "standalone.yaml")
	good := string(examples.Standalone)
	writeFile(t, cfg, good)
	p := startAgent(t, ns, "--config", cfg, "--node-name", "edge-1")

	st := p.waitStatus(t, "a configuration in service", func(st *pb.AgentStatus) bool { return st.GetAppliedVersion() >= 1 })
	if st.GetNodeName() != "edge-1" || len(st.GetBoundAddresses()) != 1 || st.GetBoundAddresses()[0] != "127.0.10.1/32 on lo" {
		t.Fatalf("status = %v", st)
	}
	if !strings.Contains(addrsOnLo(t, ns), "127.0.10.1/32") {
		t.Fatalf("127.0.10.1/32 is not bound on lo in %s: %s", ns, addrsOnLo(t, ns))
	}

	// The invalid edit: an unknown field.
	bad := strings.Replace(good, "  mode: Local\n", "  mode: Local\n  color: blue\n", 1)
	writeFile(t, cfg, bad)
	st = p.waitStatus(t, "the rejection", func(st *pb.AgentStatus) bool { return st.GetLastError() != "" })
	if !st.GetReady() {
		t.Fatalf("after the bad edit: %v", st)
	}
	p.waitLog(t, "the file:line and field of the bad edit", cfg+":", "ProxyVIP demo-vip: spec.color")

	// The fix, with a real change: a second address for the VIP's
	// interface list is not in the example, so change a backend port.
	fixed := strings.Replace(good, "port: 18082\n  healthCheck", "port: 18083\n  healthCheck", 1)
	writeFile(t, cfg, fixed)
	p.waitStatus(t, "the fix", func(st *pb.AgentStatus) bool { return st.GetLastError() == "" && p.servesPort(t, 18083) })

	p.stop(t)
	if !strings.Contains(addrsOnLo(t, ns), "127.0.10.1/32") {
		t.Fatal("the VIP was removed on SIGTERM; it must stay so a restart does not drop traffic")
	}
	if _, err := os.Stat(p.sock); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("admin socket left behind: %v", err)
	}
}

// TestSIGHUPReload: with --watch=false, a change is applied on SIGHUP only.
func TestSIGHUPReload(t *testing.T) {
	ns := netns(t)
	cfg := filepath.Join(t.TempDir(), "standalone.yaml")
	good := string(examples.Standalone)
	writeFile(t, cfg, good)
	p := startAgent(t, ns, "--config", cfg, "--watch=false")
	writeFile(t, cfg, strings.Replace(good, "port: 18082\n  healthCheck", "port: 18083\n  healthCheck", 1))
	// Without a signal nothing changes; give inotify a chance to prove it.
	time.Sleep(300 * time.Millisecond)
	if p.servesPort(t, 18083) {
		t.Fatal("the change was applied without SIGHUP")
	}
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	p.waitStatus(t, "the change after SIGHUP", func(*pb.AgentStatus) bool { return p.servesPort(t, 18083) })
	// The log line follows the switch; wait for it.
	p.waitStatus(t, "the reload's log line", func(*pb.AgentStatus) bool { return strings.Contains(p.logs.String(), "reason=SIGHUP") })
	p.stop(t)
}

// TestControllerModeProcess: the agent binary in controller mode connects
// with the TLS files of --controller-tls-dir, applies what the controller
// publishes for its node and ACKs it, and stops cleanly. The snapshots have
// no listeners or VIPs, so the agent binds nothing on this host.
func TestControllerModeProcess(t *testing.T) {
	tlsCfg := streamtest.NewTLS(t)
	dir := t.TempDir()
	tlsDir := filepath.Join(dir, "tls")
	if err := os.Mkdir(tlsDir, 0o700); err != nil {
		t.Fatal(err)
	}
	tlsCfg.WriteClientDir(t, tlsDir)
	srv := stream.NewServer(stream.Options{})
	run := streamtest.Serve(t, srv, tlsCfg.Server, "")
	content := func(port uint32) *pb.ConfigSnapshot {
		return &pb.ConfigSnapshot{Cluster: &pb.ClusterConfig{Backends: []*pb.Backend{{
			Name: "demo/web", Endpoints: []*pb.Endpoint{{Address: "127.0.0.1", Port: port, Weight: 1}},
		}}}}
	}
	applied := func() uint64 {
		for _, st := range srv.Agents() {
			if st.Node == "edge-1" {
				return st.AppliedVersion
			}
		}
		return 0
	}
	waitApplied := func(what string, v uint64) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for applied() != v {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s (version %d)", what, v)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	srv.Publish("edge-1", content(18081))
	v1 := srv.Agents()[0].PublishedVersion

	// The liveness Lease needs the Kubernetes API: without one the agent
	// says so and how to run without it.
	var out, errb bytes.Buffer
	code := runAgent([]string{"--controller", run.Addr, "--controller-tls-dir", tlsDir, "--node-name", "edge-1",
		"--kubeconfig", filepath.Join(dir, "missing.kubeconfig"), "--fastpath", "off", "--metrics-addr", "", "--handoff-socket", "", "--admin-socket", ""}, &out, &errb)
	if code == 0 || !strings.Contains(errb.String(), "the agent's Lease needs the Kubernetes API (--kubeconfig") ||
		!strings.Contains(errb.String(), "--node-lease=false") {
		t.Fatalf("without a kubeconfig: exit %d, stderr %q", code, errb.String())
	}

	sock := filepath.Join(dir, "agent.sock")
	p := &agentProc{logs: &lockedBuffer{}, sock: sock, done: make(chan error, 1)}
	// No API server here: no Lease (the controller tests cover it).
	p.cmd = exec.Command(agentBinary(t), "--controller", run.Addr, "--controller-tls-dir", tlsDir, "--node-name", "edge-1", "--node-lease=false",
		"--fastpath", "off", "--bind-local-vips=false", "--metrics-addr", "", "--handoff-socket", "",
		"--admin-socket", sock, "--state-dir", filepath.Join(dir, "state"))
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.watch()
	t.Cleanup(func() {
		p.kill(t)
		if t.Failed() {
			t.Logf("the agent's log:\n%s", p.logs.String())
		}
	})
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	p.client = pb.NewAgentAdminClient(conn)

	waitApplied("the ACK of the first snapshot", v1)
	st := p.waitStatus(t, "the first snapshot in service", func(st *pb.AgentStatus) bool { return st.GetAppliedVersion() == v1 })
	if st.GetSource() != "controller" || !strings.Contains(st.GetControllerAddress(), run.Addr) || st.GetNodeName() != "edge-1" {
		t.Fatalf("status = %v", st)
	}

	srv.Publish("edge-1", content(18082))
	v2 := srv.Agents()[0].PublishedVersion
	waitApplied("the ACK of the second snapshot", v2)
	p.stop(t)
}

// runAgent runs the command in-process (the variable holding the test's
// controller shadows run where it is called).
func runAgent(args []string, stdout, stderr io.Writer) int {
	return run(context.Background(), args, stdout, stderr)
}
