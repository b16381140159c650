package controller

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/source"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/novaedge/novaedge/api/v1alpha1"
	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/snapshot"
)

// LeaderLease is the name of the leader-election Lease in the controller's
// namespace. Its leaseTransitions count is the term in snapshot versions.
const LeaderLease = "novaedge-controller"

// Publisher receives each node's snapshot; controller/stream's Server is
// one. Publish stamps the version and must not block.
type Publisher interface {
	Publish(node string, snap *pb.ConfigSnapshot)
}

// Options configure a Controller.
type Options struct {
	// Namespace holds the leader Lease, the agents' Leases and the mTLS
	// Secrets.
	Namespace string
	// Identity names this replica in the leader Lease and in Events.
	Identity string
	// LeaderElect: without it this replica decides alone (one replica
	// only, e.g. tests and small clusters).
	LeaderElect bool
	// LeaseDuration, RenewDeadline and RetryPeriod of leader election;
	// zero: 15s, 10s, 2s.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// ServeClasslessServices also serves Services of type LoadBalancer
	// without spec.loadBalancerClass.
	ServeClasslessServices bool
	// Publisher gets the snapshots; nil: built and dropped (decide only).
	Publisher Publisher
	// Subscribed lists the nodes whose agents are connected, so a node
	// without a Node object (or one not in the cache yet) gets a
	// snapshot too. Optional.
	Subscribed func() []string
	// MetricsAddr and HealthAddr are the HTTP addresses of /metrics and of
	// /healthz and /readyz; "0" or empty: none.
	MetricsAddr, HealthAddr string
	// Debounce coalesces bursts of changes: the first change after a
	// quiet spell of this long starts a run at once, later ones wait this
	// long and share a run; zero: 100ms.
	Debounce time.Duration
	// Resync is how often the leader re-checks agent Leases, whose expiry
	// produces no event; zero: 1s.
	Resync time.Duration
	// DisableMaglevLineage turns the shared Maglev lineages off: the
	// leader persists none and no replica reads them, so snapshots carry
	// no PlanEntry.lineage and nodes build plain Maglev tables. Existing
	// lineage ConfigMaps are left alone. Zero: on.
	DisableMaglevLineage bool

	Logger *slog.Logger
}

// Controller is the control plane of one replica.
type Controller struct {
	opts Options
	log  *slog.Logger
	mgr  manager.Manager

	identity string
	kick     func() // asks the publisher to rebuild (a new agent subscribed)
	recorder events.EventRecorder
	metrics  *metrics
	now      func() time.Time
	// lineageDecoder keeps the decoded Maglev lineage ConfigMaps.
	lineageDecoder lineageDecoder
	// specs and memo let a build take the routes that did not change
	// since the last build from it (snapshot.Memo).
	specs specCache
	memo  snapshot.Memo
}

// Scheme is the runtime scheme of every kind the controller reads.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1alpha1.AddToScheme, gatewayv1.Install} {
		if err := add(s); err != nil {
			return nil, fmt.Errorf("build scheme: %w", err)
		}
	}
	return s, nil
}

// New sets up a controller against the API server of cfg.
func New(cfg *rest.Config, opts Options) (*Controller, error) {
	if opts.Namespace == "" {
		return nil, errors.New("controller: namespace is required")
	}
	opts.Debounce = orDuration(opts.Debounce, 100*time.Millisecond)
	opts.Resync = orDuration(opts.Resync, time.Second)
	opts.LeaseDuration = orDuration(opts.LeaseDuration, 15*time.Second)
	opts.RenewDeadline = orDuration(opts.RenewDeadline, 10*time.Second)
	opts.RetryPeriod = orDuration(opts.RetryPeriod, 2*time.Second)
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.Identity != "" {
		log = log.With("replica", opts.Identity)
	}
	scheme, err := Scheme()
	if err != nil {
		return nil, err
	}
	metricsAddr := opts.MetricsAddr
	if metricsAddr == "" {
		metricsAddr = "0"
	}
	healthAddr := opts.HealthAddr
	if healthAddr == "" {
		healthAddr = "0"
	}
	// The Lease names the replica that leads (its pod name, from
	// Identity) plus a random part, so two processes of one name (a hung
	// one and its replacement) never both believe they lead.
	identity := cmp.Or(opts.Identity, "novaedge-controller") + "_" + string(uuid.NewUUID())[:8]
	lock, err := leaderLock(cfg, opts.Namespace, identity)
	if err != nil {
		return nil, err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                              scheme,
		Logger:                              logr.FromSlogHandler(log.Handler()),
		LeaderElection:                      opts.LeaderElect,
		LeaderElectionID:                    LeaderLease,
		LeaderElectionNamespace:             opts.Namespace,
		LeaderElectionReleaseOnCancel:       true,
		LeaderElectionResourceLockInterface: lock,
		LeaseDuration:                       &opts.LeaseDuration,
		RenewDeadline:                       &opts.RenewDeadline,
		RetryPeriod:                         &opts.RetryPeriod,
		Metrics:                             metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress:              healthAddr,
		Cache: cache.Options{
			ByObject: map[client.Object]cache.ByObject{
				// Only this namespace's Leases: the leader's and the agents'.
				&coordinationv1.Lease{}: {Namespaces: map[string]cache.Config{opts.Namespace: {}}},
				// Only the Maglev lineage ConfigMaps, not every ConfigMap
				// of the cluster.
				&corev1.ConfigMap{}: {
					Namespaces: map[string]cache.Config{opts.Namespace: {}},
					Label:      labels.SelectorFromSet(labels.Set{LabelMaglevLineage: "true"}),
				},
			},
			DefaultTransform: cache.TransformStripManagedFields(),
		},
	})
	if err != nil {
		return nil, fmt.Errorf("controller manager: %w", err)
	}
	c := &Controller{
		opts: opts, log: log, mgr: mgr, identity: identity,
		recorder: mgr.GetEventRecorder("novaedge-controller"),
		metrics:  newMetrics(crmetrics.Registry),
		now:      time.Now,
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	if err := c.setup(); err != nil {
		return nil, err
	}
	return c, nil
}

func orDuration(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// Run runs the controller until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	return c.mgr.Start(ctx)
}

// Kick asks for the snapshots to be built and published again, e.g. when an
// agent subscribes for a node the controller has not published for.
func (c *Controller) Kick() {
	if c.kick != nil {
		c.kick()
	}
}

// Identity is this replica's holder identity in the leader Lease.
func (c *Controller) Identity() string { return c.identity }

// leaderLock is the leader-election Lease lock of the replica identity.
func leaderLock(cfg *rest.Config, namespace, identity string) (resourcelock.Interface, error) {
	cfg = rest.AddUserAgent(rest.CopyConfig(cfg), "leader-election")
	core, err := corev1client.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("leader election client: %w", err)
	}
	coord, err := coordinationv1client.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("leader election client: %w", err)
	}
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, namespace, LeaderLease, core, coord,
		resourcelock.ResourceLockConfig{Identity: identity})
	if err != nil {
		return nil, fmt.Errorf("leader election lock: %w", err)
	}
	return lock, nil
}

// Leader reports whether this replica currently decides.
func (c *Controller) Leader() bool {
	select {
	case <-c.mgr.Elected():
		return true
	default:
		return false
	}
}

// Term is the leadership term: the leader Lease's transitions count, 0
// before any leader.
func (c *Controller) Term() uint64 {
	var l coordinationv1.Lease
	err := c.mgr.GetCache().Get(context.Background(), types.NamespacedName{Namespace: c.opts.Namespace, Name: LeaderLease}, &l)
	if err != nil || l.Spec.LeaseTransitions == nil {
		return 0
	}
	return uint64(*l.Spec.LeaseTransitions)
}

// watched lists the kinds whose changes trigger a rebuild.
func watched() []client.Object {
	return []client.Object{
		&v1alpha1.ProxyVIP{}, &v1alpha1.ProxyIPPool{}, &v1alpha1.ProxyGateway{}, &v1alpha1.ProxyRoute{},
		&v1alpha1.ProxyBackend{}, &v1alpha1.ProxyPolicy{},
		&corev1.Service{}, &discoveryv1.EndpointSlice{}, &corev1.Secret{}, &corev1.Node{}, &corev1.Namespace{},
		&networkingv1.Ingress{},
	}
}

// setup registers the two controllers. Their names are fixed, and a
// process may run several Controllers (tests run replicas side by side), so
// controller-runtime's process-wide name check is off.
func (c *Controller) setup() error {
	hasGatewayAPI := c.kindInstalled(&gatewayv1.Gateway{})
	if !hasGatewayAPI {
		c.log.Warn("the Gateway API CRDs are not installed: Gateways and HTTPRoutes are not watched (restart the controller after installing them)")
	}
	kinds := watched()
	if hasGatewayAPI {
		kinds = append(kinds, &gatewayv1.Gateway{}, &gatewayv1.HTTPRoute{})
	}

	// The publisher runs on every replica.
	pub := &publisher{c: c, gatewayAPI: hasGatewayAPI}
	pubTrigger := newTrigger(c.opts.Debounce)
	b := ctrl.NewControllerManagedBy(c.mgr).Named("novaedge-publish").
		WithOptions(crcontroller.Options{NeedLeaderElection: ptr(false), MaxConcurrentReconciles: 1, SkipNameValidation: ptr(true)})
	for _, k := range kinds {
		b = b.Watches(k, pubTrigger.on(nil))
	}
	// Status writes of the leader (addresses, assignments) are decisions
	// the publisher builds from; Lease renewals are not.
	b = b.Watches(&coordinationv1.Lease{}, pubTrigger.on(func(o client.Object) bool { return o.GetName() == LeaderLease }))
	// So are the Maglev lineages the leader persists.
	if !c.opts.DisableMaglevLineage {
		b = b.Watches(&corev1.ConfigMap{}, pubTrigger.on(nil))
	}
	kickCh := make(chan event.GenericEvent, 1)
	c.kick = func() {
		select {
		case kickCh <- event.GenericEvent{Object: &corev1.Node{}}:
		default:
		}
	}
	b = b.WatchesRawSource(source.Channel(kickCh, pubTrigger.on(nil)))
	if err := b.Complete(pub); err != nil {
		return fmt.Errorf("publisher: %w", err)
	}

	// The decider runs on the leader only.
	dec := &decider{c: c, gatewayAPI: hasGatewayAPI}
	decTrigger := newTrigger(c.opts.Debounce)
	b = ctrl.NewControllerManagedBy(c.mgr).Named("novaedge-decide").
		WithOptions(crcontroller.Options{NeedLeaderElection: ptr(true), MaxConcurrentReconciles: 1, SkipNameValidation: ptr(true)})
	for _, k := range kinds {
		b = b.Watches(k, decTrigger.on(nil))
	}
	b = b.Watches(&coordinationv1.Lease{}, decTrigger.on(nil))
	if err := b.Complete(dec); err != nil {
		return fmt.Errorf("decider: %w", err)
	}
	return nil
}

// kindInstalled reports whether the API server serves obj's kind.
func (c *Controller) kindInstalled(obj client.Object) bool {
	gvk, err := c.mgr.GetClient().GroupVersionKindFor(obj)
	if err != nil {
		return false
	}
	_, err = c.mgr.GetRESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
	return err == nil || !meta.IsNoMatchError(err)
}

func ptr[T any](v T) *T { return &v }
