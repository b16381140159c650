package main

import (
	"context"
	"crypto/tls"
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
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/novaedge/novaedge/agent"
	"github.com/novaedge/novaedge/agent/lease"
	"github.com/novaedge/novaedge/api/v1alpha1"
	"github.com/novaedge/novaedge/controller"
	"github.com/novaedge/novaedge/controller/pki"
	"github.com/novaedge/novaedge/controller/stream"
	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/snapshot"
	"github.com/novaedge/novaedge/test/kubeenv"
)

// propConfig is one propagation measurement: how many Services exist and
// the controller's debounce.
type propConfig struct {
	Services int
	Debounce time.Duration
}

// propResult holds one configuration's samples, each measured from just
// before the EndpointSlice update call (t0).
type propResult struct {
	propConfig
	timings
}

// timings are the timings of one propagation measurement's samples, each
// from just before the API call that made the change (t0).
type timings struct {
	// Watch: until the baseline watch delivered the change's event.
	Watch []time.Duration
	// Applied: until the last of the agents switched to a snapshot holding
	// the change (the recording applier's Apply).
	Applied []time.Duration
	// Acked: until the controller had received the last of the agents'
	// ACKs for such a snapshot (the stream server's AppliedAt).
	Acked []time.Duration
	// Polled counts samples whose ACK time is a poll's time instead of
	// AppliedAt, because a later ACK had already replaced the one wanted
	// (an upper bound, within 1 ms of the ACK).
	Polled int
	// Builds are the controller's publisher runs during the samples
	// (list from the cache, build and publish every node's snapshot).
	Builds []time.Duration
	// Ready is the time from the controller's start until every agent ran
	// a snapshot with everything the API server held.
	Ready time.Duration
}

// add records one sample that began at t0.
func (s *timings) add(t0, watched, applied, acked time.Time, polled bool) {
	s.Watch = append(s.Watch, watched.Sub(t0))
	s.Applied = append(s.Applied, applied.Sub(t0))
	s.Acked = append(s.Acked, acked.Sub(t0))
	if polled {
		s.Polled++
	}
}

// N is the number of samples.
func (s *timings) N() int { return len(s.Acked) }

// propCluster is the API server of the propagation measurement with its
// Services, Nodes and the baseline informer.
type propCluster struct {
	env          *kubeenv.Env
	log          *slog.Logger
	ctlNS, svcNS string
	nodes        []string
	watch        *watchRecorder
	services     int // created so far
	probes       int // probe addresses handed out
}

const (
	propCtlNS  = "bench-cp"
	propSvcNS  = "bench-svc"
	serverName = "novaedge-controller." + propCtlNS + ".svc"
)

func newPropCluster(ctx context.Context, env *kubeenv.Env, log *slog.Logger) (*propCluster, error) {
	c := &propCluster{env: env, log: log, ctlNS: propCtlNS, svcNS: propSvcNS, nodes: []string{"bench-a", "bench-b", "bench-c"}}
	if err := createNamespaces(ctx, env, c.ctlNS, c.svcNS); err != nil {
		return nil, err
	}
	if err := createReadyNodes(ctx, env, c.nodes...); err != nil {
		return nil, err
	}
	// A /20: room for every Service of the largest size.
	pool := &v1alpha1.ProxyIPPool{ObjectMeta: metav1.ObjectMeta{Name: "bench-pool"}, Spec: v1alpha1.ProxyIPPoolSpec{CIDRs: []string{"10.96.0.0/20"}}}
	if err := env.Client.Create(ctx, pool); err != nil {
		return nil, fmt.Errorf("create the ProxyIPPool: %w", err)
	}
	w, err := startWatch(ctx, env, c.svcNS)
	if err != nil {
		return nil, err
	}
	c.watch = w
	return c, nil
}

func svcName(i int) string { return fmt.Sprintf("svc-%04d", i) }

// grow creates Services of type LoadBalancer (port 80) with one
// EndpointSlice each (one ready endpoint) until n exist.
func (c *propCluster) grow(ctx context.Context, n int) error {
	var objs []client.Object
	for i := c.services; i < n; i++ {
		objs = append(objs, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: c.svcNS, Name: svcName(i)},
			Spec: corev1.ServiceSpec{
				Type:  corev1.ServiceTypeLoadBalancer,
				Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}},
			},
		}, &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: c.svcNS, Name: svcName(i) + "-1", Labels: map[string]string{discoveryv1.LabelServiceName: svcName(i)}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(int32(8080)), Protocol: ptr(corev1.ProtocolTCP)}},
			Endpoints:   []discoveryv1.Endpoint{endpoint(fmt.Sprintf("10.10.%d.%d", i>>8, i&0xff), c.nodes[i%len(c.nodes)])},
		})
	}
	if err := createAll(ctx, c.env.Client, objs, 8); err != nil {
		return err
	}
	c.services = n
	return nil
}

func endpoint(addr, node string) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{
		Addresses: []string{addr}, NodeName: ptr(node),
		Conditions: discoveryv1.EndpointConditions{Ready: ptr(true), Serving: ptr(true), Terminating: ptr(false)},
	}
}

func ptr[T any](v T) *T { return &v }

// serviceBackend is the name of the snapshot backend of Service i's port.
func (c *propCluster) serviceBackend(i int) string {
	return snapshot.ServiceVIPName(c.svcNS, svcName(i)) + "/tcp-80"
}

// servedServices counts the Service backends in snap that have endpoints.
func (c *propCluster) servedServices(snap *pb.ConfigSnapshot) int {
	prefix := "Service/" + c.svcNS + "/"
	n := 0
	for _, b := range snap.GetCluster().GetBackends() {
		if strings.HasPrefix(b.GetName(), prefix) && len(b.GetEndpoints()) > 0 {
			n++
		}
	}
	return n
}

// hasEndpoint reports whether backend of snap has an endpoint at addr.
func hasEndpoint(snap *pb.ConfigSnapshot, backend, addr string) bool {
	for _, b := range snap.GetCluster().GetBackends() {
		if b.GetName() != backend {
			continue
		}
		return slices.ContainsFunc(b.GetEndpoints(), func(e *pb.Endpoint) bool { return e.GetAddress() == addr })
	}
	return false
}

// plane is an in-process controller (as the e2e tests run it) with three
// agents connected to it.
type plane struct {
	srv     atomic.Pointer[stream.Server]
	agents  []*benchAgent
	builds  buildLog
	started time.Time
	stop    func() error
}

// startPlane starts a controller with the given debounce and three agents.
func (c *propCluster) startPlane(ctx context.Context, debounce time.Duration) (_ *plane, err error) {
	ctx, cancel := context.WithCancel(ctx)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		cancel()
		return nil, fmt.Errorf("listen for the controller: %w", err)
	}
	p := &plane{started: time.Now(), builds: newBuildLog(c.log.Handler())}
	done := make(chan error, 1)
	go func() {
		done <- controller.Serve(ctx, c.env.Config, controller.ServeOptions{
			Options: controller.Options{
				Namespace: c.ctlNS, Identity: "bench", ServeClasslessServices: true,
				Debounce: debounce, Logger: slog.New(p.builds).With("component", "controller"),
			},
			Listener:   lis,
			Registerer: prometheus.NewRegistry(),
			Started:    func(_ *controller.Controller, s *stream.Server) { p.srv.Store(s) },
		})
	}()
	var tlsDir string
	p.stop = func() error {
		for _, a := range p.agents {
			a.stop()
		}
		if tlsDir != "" {
			_ = os.RemoveAll(tlsDir)
		}
		cancel()
		select {
		case e := <-done:
			if e != nil && !errors.Is(e, context.Canceled) {
				return fmt.Errorf("controller: %w", e)
			}
			return nil
		case <-time.After(time.Minute):
			return errors.New("the controller did not stop within a minute")
		}
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, p.stop())
		}
	}()
	tlsDir, err = c.agentTLS(ctx)
	if err != nil {
		return nil, err
	}
	tlsCfg, err := pki.ClientTLSConfig(tlsDir, serverName)
	if err != nil {
		return nil, fmt.Errorf("agent TLS: %w", err)
	}
	for _, n := range c.nodes {
		a, err := c.startAgent(ctx, n, lis.Addr().String(), tlsCfg)
		if err != nil {
			return nil, err
		}
		p.agents = append(p.agents, a)
	}
	return p, nil
}

// measure runs a controller (in process, as the e2e tests do) with three
// agents and takes samples updates of EndpointSlices, spaced by spacing.
func (c *propCluster) measure(ctx context.Context, cfg propConfig, samples int, spacing time.Duration) (_ *propResult, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	p, err := c.startPlane(ctx, cfg.Debounce)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, p.stop()) }()
	agents, srv, builds := p.agents, &p.srv, p.builds

	res := &propResult{propConfig: cfg}
	if err := c.waitReady(ctx, fmt.Sprintf("%d Services", cfg.Services), c.servedServices, cfg.Services, agents, srv); err != nil {
		return nil, err
	}
	res.Ready = time.Since(p.started)
	firstBuild := builds.count()

	for k := range samples {
		// Pairs of samples: add a fresh address to one Service's slice,
		// then remove it again, so every slice ends as it began.
		i := (k / 2 * 7919) % cfg.Services
		if k%2 == 0 {
			c.probes++
		}
		addr := fmt.Sprintf("10.128.%d.%d", c.probes>>8, c.probes&0xff)
		add := k%2 == 0
		backend := c.serviceBackend(i)
		for _, a := range agents {
			a.rec.arm(func(s *pb.ConfigSnapshot) bool { return hasEndpoint(s, backend, addr) == add })
		}
		var es discoveryv1.EndpointSlice
		key := types.NamespacedName{Namespace: c.svcNS, Name: svcName(i) + "-1"}
		if err := c.env.Client.Get(ctx, key, &es); err != nil {
			return nil, fmt.Errorf("get EndpointSlice %s: %w", key, err)
		}
		if add {
			es.Endpoints = append(es.Endpoints, endpoint(addr, c.nodes[0]))
		} else {
			es.Endpoints = slices.DeleteFunc(es.Endpoints, func(e discoveryv1.Endpoint) bool { return slices.Contains(e.Addresses, addr) })
		}
		t0 := time.Now()
		if err := c.env.Client.Update(ctx, &es); err != nil {
			return nil, fmt.Errorf("update EndpointSlice %s: %w", key, err)
		}
		tw, err := c.watch.wait(ctx, es.Name+"@"+es.ResourceVersion, fmt.Sprintf("update of EndpointSlice %s to resourceVersion %s", es.Name, es.ResourceVersion))
		if err != nil {
			return nil, err
		}
		applied, acked, polled, err := waitAcked(ctx, srv.Load(), agents)
		if err != nil {
			return nil, fmt.Errorf("sample %d (%s %s on %s): %w", k, map[bool]string{true: "add", false: "remove"}[add], addr, svcName(i), err)
		}
		res.add(t0, tw, applied, acked, polled)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(spacing):
		}
	}
	res.Builds = builds.since(firstBuild)
	return res, nil
}

// agentTLS writes the agent's client certificate, from the Secret the
// controller creates at its first start, to a new directory, as the
// DaemonSet mounts it.
func (c *propCluster) agentTLS(ctx context.Context) (string, error) {
	var s corev1.Secret
	key := types.NamespacedName{Namespace: c.ctlNS, Name: "novaedge-agent-tls"}
	deadline := time.Now().Add(time.Minute)
	for {
		err := c.env.Client.Get(ctx, key, &s)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("the controller did not create Secret %s within a minute: %w", key, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	dir, err := os.MkdirTemp("", "controlplane-bench-tls-")
	if err != nil {
		return "", fmt.Errorf("agent TLS directory: %w", err)
	}
	for _, k := range []string{"ca.crt", "tls.crt", "tls.key"} {
		if err := os.WriteFile(filepath.Join(dir, k), s.Data[k], 0o600); err != nil {
			_ = os.RemoveAll(dir)
			return "", fmt.Errorf("write agent TLS: %w", err)
		}
	}
	return dir, nil
}

// waitReady waits until every agent runs a snapshot serving all n things
// (what: "n Services"; served counts them in a snapshot) and the
// controller knows it (every agent in sync).
func (c *propCluster) waitReady(ctx context.Context, what string, served func(*pb.ConfigSnapshot) int, n int, agents []*benchAgent, srv *atomic.Pointer[stream.Server]) error {
	deadline := time.Now().Add(10 * time.Minute)
	last := ""
	for time.Now().Before(deadline) {
		var parts []string
		ready := true
		for _, a := range agents {
			got := 0
			if st := a.agent.State(); st != nil {
				got = served(st.Snapshot)
			}
			parts = append(parts, fmt.Sprintf("%s serves %d/%d", a.node, got, n))
			ready = ready && got == n
		}
		if s := srv.Load(); s != nil && ready {
			st := s.Agents()
			inSync := len(st) == len(agents)
			for _, a := range st {
				inSync = inSync && a.Connected && a.InSync
			}
			if inSync {
				return nil
			}
			parts = append(parts, "agents not all in sync")
		}
		if s := strings.Join(parts, ", "); s != last {
			c.log.Debug("waiting for the agents", "state", s)
			last = s
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("agents not serving all %s after 10 minutes: %s", what, last)
}

// waitAcked waits until the controller has every agent's ACK of a snapshot
// holding the armed change. It returns when the last agent applied it
// and when the controller received the last ACK.
func waitAcked(ctx context.Context, srv *stream.Server, agents []*benchAgent) (applied, acked time.Time, polled bool, _ error) {
	deadline := time.Now().Add(time.Minute)
	for {
		now := time.Now()
		applied, acked, polled = time.Time{}, time.Time{}, false
		complete := true
		status := map[string]stream.AgentStatus{}
		for _, st := range srv.Agents() {
			status[st.Node] = st
		}
		for _, a := range agents {
			v, at := a.rec.result()
			st := status[a.node]
			if v == 0 || at.IsZero() || st.AppliedVersion < v {
				complete = false
				break
			}
			applied = later(applied, at)
			if st.AppliedVersion == v {
				acked = later(acked, st.AppliedAt)
			} else {
				acked, polled = later(acked, now), true
			}
		}
		if complete {
			return applied, acked, polled, nil
		}
		if now.After(deadline) {
			var parts []string
			for _, a := range agents {
				v, _ := a.rec.result()
				parts = append(parts, fmt.Sprintf("%s: first matching version %d, controller saw applied %d", a.node, v, status[a.node].AppliedVersion))
			}
			return applied, acked, polled, fmt.Errorf("no ACK of the change from every agent within a minute: %s", strings.Join(parts, "; "))
		}
		select {
		case <-ctx.Done():
			return applied, acked, polled, ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// benchAgent is one in-process agent: the controller-mode pipeline with
// a recording applier, and its liveness Lease.
type benchAgent struct {
	node  string
	rec   *recorder
	agent *agent.Agent
	dir   string
	stop  func()
}

func (c *propCluster) startAgent(ctx context.Context, node, addr string, tlsCfg *tls.Config) (*benchAgent, error) {
	dir, err := os.MkdirTemp("", "controlplane-bench-agent-")
	if err != nil {
		return nil, fmt.Errorf("agent state directory: %w", err)
	}
	log := c.log.With("component", "agent", "node", node)
	src := &agent.ControllerSource{
		Address: addr, ServerName: serverName, TLS: tlsCfg, Node: node, AgentVersion: "bench", Logger: log,
		MinBackoff: 50 * time.Millisecond, MaxBackoff: 500 * time.Millisecond,
	}
	rec := &recorder{}
	a, err := agent.New(agent.Options{
		Source: src, Appliers: []agent.Applier{rec}, StateDir: dir, NodeName: node, Version: "bench",
		Logger: log, Registry: prometheus.NewRegistry(),
	})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("agent %s: %w", node, err)
	}
	leases, err := lease.NewClient(c.env.Config)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("agent %s lease client: %w", node, err)
	}
	renewer, err := lease.New(lease.Options{Client: leases, Namespace: c.ctlNS, Node: node, Logger: log})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("agent %s lease: %w", node, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { renewer.Run(ctx) })
	wg.Go(func() {
		if err := a.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
			c.log.Error("agent stopped", "node", node, "error", err)
		}
	})
	return &benchAgent{node: node, rec: rec, agent: a, dir: dir, stop: func() {
		cancel()
		wg.Wait()
		_ = os.RemoveAll(dir)
	}}, nil
}

// recorder is an applier that notes the first snapshot matching the armed
// probe and when it was applied. It stands in for the data-plane appliers,
// whose compile time is measured by their own benchmarks.
type recorder struct {
	cur atomic.Pointer[probe]
}

type probe struct {
	match   func(*pb.ConfigSnapshot) bool
	mu      sync.Mutex
	version uint64
	applied time.Time
}

var _ agent.Applier = (*recorder)(nil)

func (r *recorder) Name() string { return "bench-recorder" }

// arm starts a sample: the first snapshot for which match holds is noted.
func (r *recorder) arm(match func(*pb.ConfigSnapshot) bool) { r.cur.Store(&probe{match: match}) }

// result is the version of the first matching snapshot and when it was
// applied; zero until then.
func (r *recorder) result() (uint64, time.Time) {
	p := r.cur.Load()
	if p == nil {
		return 0, time.Time{}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.version, p.applied
}

func (r *recorder) Compile(s *pb.ConfigSnapshot) (agent.Change, error) {
	p := r.cur.Load()
	if p == nil {
		return agent.ChangeFunc(func(context.Context) error { return nil }), nil
	}
	p.mu.Lock()
	claimed := p.version == 0 && p.match(s)
	if claimed {
		p.version = s.GetVersion()
	}
	p.mu.Unlock()
	if !claimed {
		return agent.ChangeFunc(func(context.Context) error { return nil }), nil
	}
	return agent.ChangeFunc(func(context.Context) error {
		now := time.Now()
		p.mu.Lock()
		p.applied = now
		p.mu.Unlock()
		return nil
	}), nil
}

// watchRecorder is the baseline: a plain client-go informer on the
// EndpointSlices, noting when each update event arrives (by
// "name@resourceVersion").
type watchRecorder struct{ events }

func startWatch(ctx context.Context, env *kubeenv.Env, ns string) (*watchRecorder, error) {
	w := &watchRecorder{newEvents()}
	f := informers.NewSharedInformerFactoryWithOptions(env.Clientset, 0, informers.WithNamespace(ns))
	inf := f.Discovery().V1().EndpointSlices().Informer()
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) {
			if es, ok := obj.(*discoveryv1.EndpointSlice); ok {
				w.note(es.Name + "@" + es.ResourceVersion)
			}
		},
	}); err != nil {
		return nil, fmt.Errorf("baseline informer: %w", err)
	}
	f.Start(ctx.Done())
	for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return nil, fmt.Errorf("baseline informer for %v did not sync", typ)
		}
	}
	return w, nil
}

// events notes when keyed events arrived, for a sampler to wait on.
type events struct {
	mu      sync.Mutex
	seen    map[string]time.Time
	changed chan struct{} // closed and replaced on every event
}

func newEvents() events {
	return events{seen: map[string]time.Time{}, changed: make(chan struct{})}
}

// note records that the event key arrived now.
func (e *events) note(key string) {
	now := time.Now()
	e.mu.Lock()
	e.seen[key] = now
	close(e.changed)
	e.changed = make(chan struct{})
	e.mu.Unlock()
}

// wait returns when the event key arrived; what names it in the error
// when it does not within a minute.
func (e *events) wait(ctx context.Context, key, what string) (time.Time, error) {
	timeout := time.After(time.Minute)
	for {
		e.mu.Lock()
		at, ok := e.seen[key]
		ch := e.changed
		e.mu.Unlock()
		if ok {
			return at, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-timeout:
			return time.Time{}, fmt.Errorf("the baseline watch saw no %s within a minute", what)
		}
	}
}
