package vip

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/novaedge/novaedge/agent/lease"
	"github.com/novaedge/novaedge/api/v1alpha1"
	"github.com/novaedge/novaedge/controller"
	"github.com/novaedge/novaedge/test/frr"
	"github.com/novaedge/novaedge/test/kubeenv"
)

// The controller-mode failover topology: one Ethernet segment (a bridge in
// its own namespace) with node-a 10.87.0.1, node-b 10.87.0.2, the client
// 10.87.0.3 and the test process itself, 10.87.0.254 on a veth pair into
// the root namespace: the agents reach the controller's gRPC server and,
// through a TCP forwarder, the envtest API server there. The VIP,
// 10.87.0.50, comes from a ProxyIPPool; the controller chooses its active
// node and standby from the Node objects and the agents' Leases.
const (
	cfNodeA  = "10.87.0.1"
	cfNodeB  = "10.87.0.2"
	cfClient = "10.87.0.3"
	cfHost   = "10.87.0.254"
	cfVIP    = "10.87.0.50"
	// cfGrace is --l2-failover-grace, the controller-mode default spelled
	// out: it must outlast the dead agent's Lease (lease.DefaultDuration,
	// which the agent binary does not let a flag shorten) plus the
	// controller's reaction, or the standby that took over yields before
	// the controller promotes it.
	cfGrace = 15 * time.Second
	// cfHold is how long a takeover is watched, as TestL2Failover does:
	// past the grace, so a missing promotion would show as the survivor
	// yielding.
	cfHold = 30 * time.Second
	// cfRound is the length of one ARP probing round, after each of which
	// the test looks at the agents' and the controller's state.
	cfRound = 300 * time.Millisecond
)

// hostLink connects the root namespace to the bridge br0 of sw with a veth
// pair named prefix-<random> on the host side (the peer is "ph" in sw),
// with host/24 on it, and deletes it in t.Cleanup (deleting sw would
// too, but the host side is removed by name first).
func hostLink(t *testing.T, sw *frr.NetNS, prefix, host string) string {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := prefix + "-" + hex.EncodeToString(b[:])
	frr.Run(t, frr.IPCmd, "link", "add", name, "type", "veth", "peer", "name", "ph", "netns", sw.Name)
	t.Cleanup(func() {
		out, err := exec.Command(frr.IPCmd, "link", "del", name).CombinedOutput()
		if err != nil && !strings.Contains(string(out), "Cannot find device") {
			t.Errorf("delete host link %s: %v: %s", name, err, out)
		}
	})
	frr.Run(t, frr.IPCmd, "addr", "add", host+"/24", "dev", name)
	frr.Run(t, frr.IPCmd, "link", "set", name, "up")
	sw.IP(t, "link", "set", "ph", "master", "br0")
	sw.IP(t, "link", "set", "ph", "up")
	return name
}

// forwardTCP accepts TCP connections on listenHost (any port) and relays
// each one to target, until t's cleanup closes the listener and every open
// connection. It returns the listening address. The agents use it to reach
// the envtest API server, which listens on the host's loopback only.
func forwardTCP(t *testing.T, listenHost, target string) string {
	t.Helper()
	lis, err := net.Listen("tcp", net.JoinHostPort(listenHost, "0"))
	if err != nil {
		t.Fatalf("forwarder: listen on %s: %v", listenHost, err)
	}
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		conns  = map[net.Conn]struct{}{}
		closed bool
	)
	// track registers c for the cleanup; false when the cleanup has run.
	track := func(c net.Conn) bool {
		mu.Lock()
		defer mu.Unlock()
		if closed {
			return false
		}
		conns[c] = struct{}{}
		return true
	}
	relay := func(in net.Conn) {
		defer wg.Done()
		defer func() { _ = in.Close() }()
		if !track(in) {
			return
		}
		out, err := net.DialTimeout("tcp", target, 10*time.Second)
		if err != nil {
			return // the client sees its connection close and retries
		}
		defer func() { _ = out.Close() }()
		if !track(out) {
			return
		}
		done := make(chan struct{}, 2)
		go func() { _, _ = io.Copy(out, in); done <- struct{}{} }()
		go func() { _, _ = io.Copy(in, out); done <- struct{}{} }()
		// Either side ending ends the relay: closing both (deferred)
		// unblocks the other copy.
		<-done
		_ = in.Close()
		_ = out.Close()
		<-done
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go relay(c)
		}
	}()
	t.Cleanup(func() {
		_ = lis.Close()
		mu.Lock()
		closed = true
		for c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return lis.Addr().String()
}

// agentKubeconfig writes a kubeconfig for the agent binaries: envtest's
// administrator credentials (the controlplane suite's agents renew their
// Leases with them too), with the server replaced by the forwarder at
// server. The API server's certificate names localhost, not the forwarder's
// address, so the kubeconfig asks for that name.
func agentKubeconfig(t *testing.T, env *kubeenv.Env, server string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(env.Kubeconfig)
	if err != nil {
		t.Fatalf("load envtest kubeconfig %s: %v", env.Kubeconfig, err)
	}
	if len(cfg.Clusters) == 0 {
		t.Fatalf("envtest kubeconfig %s names no cluster", env.Kubeconfig)
	}
	for _, c := range cfg.Clusters {
		c.Server = "https://" + server
		c.TLSServerName = "localhost"
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatalf("write agent kubeconfig: %v", err)
	}
	return path
}

// cfController is the controller, run in the test process.
type cfController struct {
	addr   string
	logs   *frr.SyncBuffer
	cancel context.CancelFunc
	done   chan error
}

// startCFController runs the controller for namespace ns (its Secrets and
// the agents' Leases) with its gRPC server on host, and stops it in
// t.Cleanup. Its timers are short (debounce, resync) so that a Lease's
// expiry is noticed soon after it happens.
func startCFController(t *testing.T, env *kubeenv.Env, ns, host string) *cfController {
	t.Helper()
	lis, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatalf("controller: listen on %s: %v", host, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &cfController{addr: lis.Addr().String(), logs: &frr.SyncBuffer{}, cancel: cancel, done: make(chan error, 1)}
	go func() {
		c.done <- controller.Serve(ctx, env.Config, controller.ServeOptions{
			Options: controller.Options{
				Namespace: ns, Identity: "c1",
				Debounce: 50 * time.Millisecond, Resync: 300 * time.Millisecond,
				Logger: slog.New(slog.NewTextHandler(c.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
			},
			Listener:   lis,
			Registerer: prometheus.NewRegistry(),
		})
	}()
	t.Cleanup(func() {
		c.cancel()
		select {
		case err := <-c.done:
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("controller: %v", err)
			}
		case <-time.After(frr.HangGuard):
			t.Errorf("controller did not stop within %v", frr.HangGuard)
		}
		if t.Failed() {
			t.Logf("controller log (tail):\n%s", cfTail(c.logs.String(), 12000))
		}
	})
	return c
}

// cfTail is the last n bytes of s: the end of a long log says why.
func cfTail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// agentTLSDir writes the agents' client certificate, from the Secret the
// controller creates at start, to a directory, as the DaemonSet mounts it.
func agentTLSDir(t *testing.T, env *kubeenv.Env, ns string) string {
	t.Helper()
	var s corev1.Secret
	frr.Eventually(t, "the agent TLS Secret", func() (bool, string) {
		err := env.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "novaedge-agent-tls"}, &s)
		return err == nil, fmt.Sprint(err)
	})
	dir := t.TempDir()
	for _, k := range []string{"ca.crt", "tls.crt", "tls.key"} {
		if err := os.WriteFile(filepath.Join(dir, k), s.Data[k], 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// cfAgent is how one node's agent binary runs in controller mode.
type cfAgent struct {
	ns   *frr.NetNS
	node string
	dir  string // state, admin socket
	args []string
}

func (a *cfAgent) sock() string { return filepath.Join(a.dir, "agent.sock") }

// start runs the agent; name labels it in failures. The process is stopped
// in t.Cleanup unless it already ended, and its log shown if t failed.
func (a *cfAgent) start(t *testing.T, bin, name string) *agentProc {
	t.Helper()
	p := &agentProc{log: &frr.SyncBuffer{}, exited: make(chan struct{})}
	p.cmd = a.ns.Command(bin, a.args...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start agent %s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.exited:
			case <-time.After(frr.HangGuard):
				t.Errorf("agent %s did not stop on SIGTERM: killed", name)
				_ = p.cmd.Process.Kill()
				<-p.exited
			}
		}
		if t.Failed() {
			t.Logf("agent %s log:\n%s", name, p.log.String())
		}
	})
	return p
}

// addReadyNode creates a Node that is Ready with addr as its InternalIP,
// the address the controller gives the other nodes of a VIP for heartbeats.
func addReadyNode(t *testing.T, env *kubeenv.Env, name, addr string) {
	t.Helper()
	ctx := context.Background()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := env.Client.Create(ctx, n); err != nil {
		t.Fatalf("create Node %s: %v", name, err)
	}
	now := metav1.Now()
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		LastHeartbeatTime: now, LastTransitionTime: now}}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: addr}}
	if err := env.Client.Status().Update(ctx, n); err != nil {
		t.Fatalf("set Node %s Ready: %v", name, err)
	}
}

// agentLease returns node's agent Lease, or nil.
func agentLease(env *kubeenv.Env, ns, node string) *coordinationv1.Lease {
	var l coordinationv1.Lease
	if err := env.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: lease.Name(node)}, &l); err != nil {
		return nil
	}
	return &l
}

// vipAssignment is the controller's assignment of the ProxyVIP, from its
// status.
func vipAssignment(t *testing.T, env *kubeenv.Env) (v1alpha1.ProxyVIPStatus, string) {
	var v v1alpha1.ProxyVIP
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: "l2-vip"}, &v); err != nil {
		return v1alpha1.ProxyVIPStatus{}, err.Error()
	}
	s := v.Status
	return s, fmt.Sprintf("address %q active %q standbys %v", s.Address, s.ActiveNode, s.StandbyNodes)
}

// probeRounds probes the VIP in rounds of cfRound, calling look after
// each round, until after has passed since look first said done (failing
// t when that takes longer than HangGuard). It adds the answers by MAC to
// answers and returns the number of rounds and of rounds without any
// answer (a measure, reported, not asserted).
func probeRounds(t *testing.T, p *arpProber, answers map[string]int, after time.Duration, look func() (done bool, why string)) (rounds, silent int) {
	t.Helper()
	vip := netip.MustParseAddr(cfVIP)
	deadline := time.Now().Add(frr.HangGuard)
	var until time.Time
	for until.IsZero() || time.Now().Before(until) {
		got := p.probe(t, vip, cfRound)
		rounds++
		n := 0
		for mac, c := range got {
			answers[mac] += c
			n += c
		}
		if n == 0 {
			silent++
		}
		ok, why := look()
		switch {
		case ok && until.IsZero():
			until = time.Now().Add(after)
		case !ok && until.IsZero() && time.Now().After(deadline):
			t.Fatalf("not reached within %v: %s", frr.HangGuard, why)
		}
	}
	return rounds, silent
}

// TestControllerFailover: the L2 failover of issue 6 with the controller.
// Two agent binaries in controller mode (node-a, node-b) follow an
// in-process controller on a real kube-apiserver; the controller assigns
// the pool VIP an active node and a standby; the agents watch each other
// with BFD heartbeats at the node addresses the controller gives them.
// Exactly one MAC answers the client's ARP requests: the active's; after
// SIGKILL of the active agent, the standby's, first by heartbeats and then
// by the controller's promotion once the dead agent's Lease expired; and
// still the survivor's when the killed agent comes back, as a standby.
func TestControllerFailover(t *testing.T) {
	frr.RequireRoot(t)
	bin := buildAgent(t)
	sw, members := segment(t, "nel2c", member{"a", cfNodeA}, member{"b", cfNodeB}, member{"c", cfClient})
	nsA, nsB, nsC := members[0], members[1], members[2]
	cp := startControlPlane(t, sw, "nel2c", cfHost)
	env, ns := cp.env, cp.ns
	ctx := context.Background()

	agents := map[string]*cfAgent{}
	macs := map[string]string{}
	for _, n := range []struct {
		ns         *frr.NetNS
		node, addr string
	}{{nsA, "node-a", cfNodeA}, {nsB, "node-b", cfNodeB}} {
		addReadyNode(t, env, n.node, n.addr)
		agents[n.node] = cp.agent(t, n.ns, n.node, "--bind-local-vips=false", "--l2-failover-grace", cfGrace.String())
		macs[n.node] = linkMAC(t, n.ns, "eth0")
	}
	procs := map[string]*agentProc{}
	for _, node := range []string{"node-a", "node-b"} {
		procs[node] = agents[node].start(t, bin, node)
	}
	prober := newARPProber(t, nsC, "eth0", netip.MustParseAddr(cfClient))

	// Both agents alive (fresh, healthy Leases: they got a snapshot)
	// before the VIP exists, so the controller places the active and
	// its standby at once.
	cp.waitHealthy(t, "node-a", "node-b")
	pool := &v1alpha1.ProxyIPPool{ObjectMeta: metav1.ObjectMeta{Name: "nel2c-pool"}, Spec: v1alpha1.ProxyIPPoolSpec{CIDRs: []string{cfVIP + "/32"}}}
	if err := env.Client.Create(ctx, pool); err != nil {
		t.Fatalf("create ProxyIPPool: %v", err)
	}
	vip := &v1alpha1.ProxyVIP{ObjectMeta: metav1.ObjectMeta{Name: "l2-vip"},
		Spec: v1alpha1.ProxyVIPSpec{Mode: v1alpha1.VIPModeL2ARP, PoolRef: &v1alpha1.LocalObjectRef{Name: pool.Name}}}
	if err := env.Client.Create(ctx, vip); err != nil {
		t.Fatalf("create ProxyVIP: %v", err)
	}

	var active, standby string
	t.Run("the controller assigns an active and a standby; the active answers", func(t *testing.T) {
		frr.Eventually(t, "ProxyVIP status: the pool address, an active node and the other as standby", func() (bool, string) {
			s, why := vipAssignment(t, env)
			ok := s.Address == cfVIP && (s.ActiveNode == "node-a" || s.ActiveNode == "node-b") && len(s.StandbyNodes) == 1 &&
				s.StandbyNodes[0] != s.ActiveNode && strings.HasPrefix(s.StandbyNodes[0], "node-")
			if ok {
				active, standby = s.ActiveNode, s.StandbyNodes[0]
			}
			return ok, why
		})
		settle(t, active+" active and answering, "+standby+" standing by with heartbeats up",
			want{agents[active].sock(), true, "active"}, want{agents[standby].sock(), false, "active " + active + " is up"})
		answers := prober.probe(t, netip.MustParseAddr(cfVIP), 3*time.Second)
		if answers[macs[active]] == 0 || len(answers) != 1 {
			t.Fatalf("ARP answers for %s by MAC: %v; want all from %s (%s, the active)", cfVIP, answers, macs[active], active)
		}
	})
	if active == "" {
		return
	}

	t.Run("SIGKILL of the active agent: the standby takes over, the controller promotes it", func(t *testing.T) {
		killed := time.Now()
		if err := procs[active].cmd.Process.Kill(); err != nil {
			t.Fatalf("SIGKILL %s's agent: %v", active, err)
		}
		<-procs[active].exited
		settle(t, standby+" took over by heartbeats", want{agents[standby].sock(), true, "standby took over"})
		tookOver := time.Since(killed)

		// From the takeover on, the survivor must keep deciding to
		// answer at every look (a promotion that came too late would
		// show as the grace ending: "the assignment still names it").
		var promoted time.Duration
		var yielded []string
		answers := map[string]int{}
		check := func() (bool, string) {
			v, why := l2VIPState(t, agents[standby].sock())
			if v == nil || !v.GetAnnounced() {
				yielded = append(yielded, why)
			}
			s, swhy := vipAssignment(t, env)
			if promoted == 0 && s.ActiveNode == standby && len(s.StandbyNodes) == 0 {
				promoted = time.Since(killed)
			}
			return true, why + "\n" + swhy
		}
		rounds, silent := probeRounds(t, prober, answers, cfHold, check)
		t.Logf("after SIGKILL of %s: %s took over by heartbeats after %v; the ProxyVIP status named it active after %v; "+
			"%d of %d ARP rounds of %v had no answer", active, standby, tookOver.Round(time.Millisecond),
			promoted.Round(time.Millisecond), silent, rounds, cfRound)
		if answers[macs[standby]] == 0 || len(answers) != 1 {
			t.Errorf("ARP answers for %s by MAC over %v: %v; want all from %s (%s, the survivor)", cfVIP, cfHold, answers, macs[standby], standby)
		}
		if len(yielded) > 0 {
			t.Errorf("%s stopped answering %d times after it took over; first status:\n%s", standby, len(yielded), yielded[0])
		}
		if promoted == 0 {
			s, why := vipAssignment(t, env)
			t.Errorf("ProxyVIP status never named %s active alone within %v of the takeover: %s (%+v)", standby, cfHold, why, s.Conditions)
		}
		if l := agentLease(env, ns, active); l == nil || lease.Fresh(l, time.Now()) {
			t.Errorf("%s's agent Lease %v: want it present and expired after the SIGKILL", active, l)
		}
		// The snapshot in the survivor's service names it active: the
		// controller's assignment, not the heartbeats, keeps it there.
		frr.Eventually(t, standby+" active by assignment", func() (bool, string) {
			st, err := vipStatus(t, agents[standby].sock())
			if err != nil {
				return false, err.Error()
			}
			for _, v := range st.GetVips() {
				if v.GetVip() == "l2-vip" {
					return v.GetAnnounced() && v.GetRole() == "ACTIVE" && v.GetReason() == "active, no standby" &&
						slices.Equal(v.GetAddresses(), []string{cfVIP}), fmt.Sprint(v)
				}
			}
			return false, fmt.Sprint(st)
		})
	})

	// What the restart showed of the survivor, for the last subtest.
	var rejoin struct {
		ran     bool
		yielded []string
	}
	t.Run("the killed agent restarts: a standby, by the controller's assignment", func(t *testing.T) {
		procs[active] = agents[active].start(t, bin, active+" (restarted)")
		rejoin.ran = true
		var claimed []string
		answers := map[string]int{}
		rounds, silent := probeRounds(t, prober, answers, 5*time.Second, func() (bool, string) {
			sv, why := l2VIPState(t, agents[standby].sock())
			if sv == nil || !sv.GetAnnounced() {
				rejoin.yielded = append(rejoin.yielded, why)
			}
			rv, rwhy := l2VIPState(t, agents[active].sock())
			if rv != nil && rv.GetAnnounced() {
				claimed = append(claimed, rwhy)
			}
			s, swhy := vipAssignment(t, env)
			ok := s.ActiveNode == standby && slices.Equal(s.StandbyNodes, []string{active}) &&
				sv != nil && sv.GetAnnounced() && sv.GetReason() == "active" &&
				rv != nil && !rv.GetAnnounced() && strings.Contains(rv.GetReason(), "active "+standby+" is up")
			return ok, swhy + "\nsurvivor " + standby + ": " + why + "\nrestarted " + active + ": " + rwhy
		})
		t.Logf("%s restarted: %d of %d ARP rounds of %v had no answer; %s reported itself not answering at %d looks",
			active, silent, rounds, cfRound, standby, len(rejoin.yielded))
		if answers[macs[standby]] == 0 || len(answers) != 1 {
			t.Errorf("ARP answers for %s by MAC while %s came back: %v; want all from %s (%s, the active)", cfVIP, active, answers, macs[standby], standby)
		}
		if len(claimed) > 0 {
			t.Errorf("%s, restarted, said it answers for the VIP at %d looks; first status:\n%s", active, len(claimed), claimed[0])
		}
		if s, why := vipAssignment(t, env); s.ActiveNode != standby || !slices.Equal(s.StandbyNodes, []string{active}) {
			t.Errorf("ProxyVIP status: %s; want %s active and %s its standby", why, standby, active)
		}
	})

	// A standby joining must not interrupt the active: the VIP would go
	// dark on every agent restart of its standby (a rolling upgrade).
	t.Run("the active keeps answering while its standby rejoins", func(t *testing.T) {
		if !rejoin.ran {
			t.Fatal("the restart did not run")
		}
		if len(rejoin.yielded) > 0 {
			t.Errorf("%s, the active, stopped answering while %s joined as its standby (%d looks); first status:\n%s",
				standby, active, len(rejoin.yielded), rejoin.yielded[0])
		}
	})
}
