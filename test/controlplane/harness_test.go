package controlplane_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/novaedge/novaedge/agent"
	"github.com/novaedge/novaedge/agent/lease"
	"github.com/novaedge/novaedge/controller"
	"github.com/novaedge/novaedge/controller/pki"
	"github.com/novaedge/novaedge/controller/stream"
	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/test/kubeenv"
)

func TestMain(m *testing.M) { os.Exit(kubeenv.Run(m)) }

// cluster is one test's slice of the shared API server: its namespace
// (controller Leases, agent Leases, mTLS Secrets) and the cluster-scoped
// objects it created, deleted at the end.
type cluster struct {
	t   *testing.T
	env *kubeenv.Env
	ns  string
	ctx context.Context
	// controllerConfig and agentConfig, when set, are what controllers and
	// agents' Lease renewers use instead of the administrator's access.
	controllerConfig *rest.Config
	agentConfig      *rest.Config
	// controllerOptions, when set, adjusts the options of the
	// controllers started after it is set.
	controllerOptions func(*controller.Options)
	// replicas are the controllers started, whose logs a timeout shows.
	mu       sync.Mutex
	replicas []*replica
}

func newCluster(t *testing.T) *cluster {
	env := kubeenv.Get(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return &cluster{t: t, env: env, ns: env.Namespace(t, "cp"), ctx: ctx}
}

// name makes a cluster-scoped name unique to this test.
func (c *cluster) name(s string) string { return c.ns + "-" + s }

// create creates obj and deletes it at the end of the test. Namespaced
// objects too: envtest runs no namespace controller, so a namespace's
// objects outlive it, and a Service of type LoadBalancer left behind would
// take addresses from the next run's pools (go test -count=2).
func (c *cluster) create(obj client.Object) {
	c.t.Helper()
	if err := c.env.Client.Create(c.ctx, obj); err != nil {
		c.t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
	}
	c.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := c.env.Client.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
			c.t.Errorf("delete %T %s: %v", obj, obj.GetName(), err)
		}
	})
}

// update applies mutate to the current version of obj, retrying conflicts.
func (c *cluster) update(obj client.Object, mutate func(), status bool) {
	c.t.Helper()
	for range 20 {
		if err := c.env.Client.Get(c.ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			c.t.Fatalf("get %s: %v", obj.GetName(), err)
		}
		mutate()
		var err error
		if status {
			err = c.env.Client.Status().Update(c.ctx, obj)
		} else {
			err = c.env.Client.Update(c.ctx, obj)
		}
		if err == nil {
			return
		}
		if !apierrors.IsConflict(err) {
			c.t.Fatalf("update %s: %v", obj.GetName(), err)
		}
	}
	c.t.Fatalf("update %s: conflicts did not stop", obj.GetName())
}

// addNode creates a Ready Node.
func (c *cluster) addNode(name string, labels map[string]string) *corev1.Node {
	c.t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	c.create(n)
	c.update(n, func() {
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	}, true)
	return n
}

// eventually polls cond until it holds; the deadline is generous because
// the machine is shared and noisy: this is not a timing assertion.
func (c *cluster) eventually(what string, cond func() (bool, string)) {
	c.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	last := ""
	for time.Now().Before(deadline) {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		time.Sleep(100 * time.Millisecond)
	}
	var logs strings.Builder
	c.mu.Lock()
	for _, r := range c.replicas {
		// Without the publisher's periodic build lines, which would fill
		// the tail.
		var kept []string
		for _, l := range strings.Split(r.logs.tail(1<<20), "\n") {
			if !strings.Contains(l, "snapshots built") {
				kept = append(kept, l)
			}
		}
		fmt.Fprintf(&logs, "\ncontroller %s log (tail):\n%s", r.name, strings.Join(kept[max(len(kept)-60, 0):], "\n"))
	}
	c.mu.Unlock()
	c.t.Fatalf("timed out waiting for %s; last seen: %s%s", what, last, logs.String())
}

// replica is one controller process (in-process here).
type replica struct {
	ctl    atomic.Pointer[controller.Controller]
	srv    atomic.Pointer[stream.Server]
	name   string
	addr   string
	cancel context.CancelFunc
	done   chan error
	logs   *syncBuffer
}

func (c *cluster) startController(name string) *replica {
	c.t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		c.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(c.ctx)
	r := &replica{name: name, addr: lis.Addr().String(), cancel: cancel, done: make(chan error, 1), logs: &syncBuffer{}}
	adjust := c.controllerOptions
	c.mu.Lock()
	c.replicas = append(c.replicas, r)
	c.mu.Unlock()
	go func() {
		cfg := c.env.Config
		if c.controllerConfig != nil {
			cfg = c.controllerConfig
		}
		opts := controller.ServeOptions{
			Options: controller.Options{
				Namespace: c.ns, Identity: name, LeaderElect: true,
				// A stopped leader releases its lease and a follower
				// polls every RetryPeriod, so failover is quick; the
				// renew deadline is the production default, or a loaded
				// CI machine makes the only replica lose its lead (and
				// stop) in the middle of a test.
				LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 300 * time.Millisecond,
				ServeClasslessServices: true,
				Debounce:               50 * time.Millisecond, Resync: 300 * time.Millisecond,
				Logger: slog.New(slog.NewTextHandler(r.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
			},
			Listener:   lis,
			Registerer: prometheus.NewRegistry(),
			Started: func(ctl *controller.Controller, srv *stream.Server) {
				r.srv.Store(srv)
				r.ctl.Store(ctl)
			},
		}
		if adjust != nil {
			adjust(&opts.Options)
		}
		r.done <- controller.Serve(ctx, cfg, opts)
	}()
	c.t.Cleanup(func() { r.stop(c.t) })
	return r
}

func (r *replica) stop(t *testing.T) {
	if r.cancel == nil {
		return
	}
	r.cancel()
	r.cancel = nil
	select {
	case err := <-r.done:
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("controller %s: %v\nlogs:\n%s", r.name, err, r.logs.tail(4000))
		}
	case <-time.After(60 * time.Second):
		t.Errorf("controller %s did not stop", r.name)
	}
}

// agents is what r's stream server knows of its agents.
func (r *replica) agents() []stream.AgentStatus {
	if s := r.srv.Load(); s != nil {
		return s.Agents()
	}
	return nil
}

// leader reports whether r leads, as the Lease says.
func (c *cluster) leader(r *replica) bool {
	ctl := r.ctl.Load()
	return ctl != nil && c.leaderIdentity() == ctl.Identity() && ctl.Leader()
}

// leaderIdentity returns the holder of the controller Lease.
func (c *cluster) leaderIdentity() string {
	var l coordinationv1.Lease
	if err := c.env.Client.Get(c.ctx, types.NamespacedName{Namespace: c.ns, Name: controller.LeaderLease}, &l); err != nil {
		return ""
	}
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// node is one agent: its liveness Lease and its snapshot pipeline, with an
// applier that records what it applied.
type node struct {
	// probeFailures ([]string) is what the agent reports as failing its
	// health checks.
	probeFailures atomic.Value
	name          string
	stateDir      string
	rec           *recorder
	agent         *agent.Agent
	cancel        context.CancelFunc
	done          chan struct{}
}

// startAgent runs an agent for node name connected to r.
func (c *cluster) startAgent(name string, r *replica, stateDir string, appliers ...agent.Applier) *node {
	c.t.Helper()
	tlsDir := c.agentTLS()
	tlsCfg, err := pki.ClientTLSConfig(tlsDir, "novaedge-controller."+c.ns+".svc")
	if err != nil {
		c.t.Fatal(err)
	}
	if stateDir == "" {
		stateDir = c.t.TempDir()
	}
	n := &node{name: name, stateDir: stateDir, rec: &recorder{}, done: make(chan struct{})}
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	src := &agent.ControllerSource{
		Address: r.addr, ServerName: "novaedge-controller." + c.ns + ".svc", TLS: tlsCfg, Node: name,
		AgentVersion: "test", Logger: log, FirstSnapshotWait: 20 * time.Second,
		MinBackoff: 50 * time.Millisecond, MaxBackoff: 500 * time.Millisecond,
	}
	a, err := agent.New(agent.Options{
		Source: src, Appliers: append([]agent.Applier{n.rec}, appliers...),
		StateDir: stateDir, NodeName: name, Version: "test", Logger: log,
		Registry: prometheus.NewRegistry(),
	})
	if err != nil {
		c.t.Fatal(err)
	}
	n.agent = a
	// The agent's report, plus the probe failures the test makes it
	// report (these agents run no slow path to probe with).
	report := func() lease.Report {
		rep := a.LeaseReport()
		if f, _ := n.probeFailures.Load().([]string); len(f) > 0 {
			rep.ProbeFailures = f
		}
		return rep
	}
	leaseConfig := c.env.Config
	if c.agentConfig != nil {
		leaseConfig = c.agentConfig
	}
	leaseClient, err := lease.NewClient(leaseConfig)
	if err != nil {
		c.t.Fatal(err)
	}
	renewer, err := lease.New(lease.Options{Client: leaseClient, Namespace: c.ns, Node: name, Duration: 2 * time.Second, Logger: log, Report: report})
	if err != nil {
		c.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(c.ctx)
	n.cancel = cancel
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); renewer.Run(ctx) }()
	go func() {
		defer wg.Done()
		if err := a.Run(ctx); err != nil {
			c.t.Errorf("agent %s: %v", name, err)
		}
	}()
	go func() { wg.Wait(); close(n.done) }()
	c.t.Cleanup(func() { n.stop() })
	return n
}

// stop ends the agent and its Lease renewals, as when the node dies.
func (n *node) stop() {
	n.cancel()
	<-n.done
}

// state is the snapshot in service on the agent, or nil.
func (n *node) state() *pb.ConfigSnapshot {
	if s := n.agent.State(); s != nil {
		return s.Snapshot
	}
	return nil
}

// agentTLS writes the agent's client certificate (from the Secret the
// controller created) to a directory, as the DaemonSet mounts it.
func (c *cluster) agentTLS() string {
	c.t.Helper()
	var s corev1.Secret
	c.eventually("the agent TLS Secret", func() (bool, string) {
		err := c.env.Client.Get(c.ctx, types.NamespacedName{Namespace: c.ns, Name: "novaedge-agent-tls"}, &s)
		return err == nil, fmt.Sprint(err)
	})
	dir := c.t.TempDir()
	for _, k := range []string{"ca.crt", "tls.crt", "tls.key"} {
		if err := os.WriteFile(filepath.Join(dir, k), s.Data[k], 0o600); err != nil {
			c.t.Fatal(err)
		}
	}
	return dir
}

// recorder is an applier that records the versions it applied; with fail
// set it rejects snapshots for which fail returns an error, standing in
// for a compile error of a real applier (the real ones compile every
// snapshot the builder produces).
type recorder struct {
	mu       sync.Mutex
	applied  []uint64
	failWith func(*pb.ConfigSnapshot) error
	// applyErr, when set, makes Apply fail after the switch, as an
	// applier that could not switch completely.
	applyErr error
}

func (r *recorder) Name() string { return "recorder" }

func (r *recorder) Compile(s *pb.ConfigSnapshot) (agent.Change, error) {
	r.mu.Lock()
	fail := r.failWith
	r.mu.Unlock()
	if fail != nil {
		if err := fail(s); err != nil {
			return nil, err
		}
	}
	v := s.GetVersion()
	return agent.ChangeFunc(func(context.Context) error {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.applied = append(r.applied, v)
		return r.applyErr
	}), nil
}

func (r *recorder) versions() []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.applied)
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) tail(n int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.b.String()
	if len(s) > n {
		s = s[len(s)-n:]
	}
	return s
}
