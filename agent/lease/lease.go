package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/clock"
)

// NamePrefix starts the name of every agent Lease; the rest is the node name.
const NamePrefix = "novaedge-agent-"

// DefaultDuration is the lease duration when Options.Duration is zero.
const DefaultDuration = 10 * time.Second

// Name returns the name of the Lease of the agent on node.
func Name(node string) string { return NamePrefix + node }

// NodeOf returns the node whose agent holds the Lease called leaseName, and
// false when the name is not an agent Lease's.
func NodeOf(leaseName string) (string, bool) {
	node, ok := strings.CutPrefix(leaseName, NamePrefix)
	if !ok || node == "" {
		return "", false
	}
	return node, true
}

// Fresh reports whether l was renewed less than its duration before now,
// that is whether its holder was alive recently enough. A Lease without a
// renew time or a positive duration is never fresh.
func Fresh(l *coordinationv1.Lease, now time.Time) bool {
	if l == nil || l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil || *l.Spec.LeaseDurationSeconds <= 0 {
		return false
	}
	expiry := l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second)
	return expiry.After(now)
}

// Options configure a Renewer.
type Options struct {
	// Client reaches the API server (NewClient). Required.
	Client Client
	// Namespace holds the Lease (the agent's own namespace). Required.
	Namespace string
	// Node is the node the agent runs on. Required.
	Node string
	// Identity is the Lease's holderIdentity. Empty means
	// "<node>/<random id made by New>", so each agent process holds the
	// Lease under its own identity and a takeover is visible.
	Identity string
	// Duration is how long a renewal keeps the Lease fresh, a whole number
	// of seconds (leaseDurationSeconds is an integer). Zero means
	// DefaultDuration.
	Duration time.Duration
	// RenewInterval is the time between renewals, shorter than Duration.
	// Zero means Duration/3, so two renewals in a row may fail before the
	// Lease goes stale.
	RenewInterval time.Duration
	// Clock stamps renewals and paces them. Nil means the real clock.
	Clock clock.WithTicker
	// Logger receives failures (once per streak) and takeovers. Nil
	// discards.
	Logger *slog.Logger
	// Report, when set, is asked at every renewal what the agent wants the
	// controller to know, written as the Lease's annotations.
	Report func() Report
}

// Report is what an agent tells the controller with each renewal.
type Report struct {
	// Healthy is false when the agent cannot serve (no configuration in
	// service, or an applier failed): the controller then moves its VIPs
	// as if the node were gone, while the agent keeps its Lease.
	Healthy bool
	// Reason says why it is not healthy.
	Reason string
	// AppliedVersion is the snapshot version in service (0: none).
	AppliedVersion uint64
	// ProbeFailures are the endpoints ("address:port") the agent's active
	// health checks find unhealthy. The controller takes an endpoint out
	// for every node when most agents report it.
	ProbeFailures []string
}

// Annotations of an agent Lease, written by the agent from its Report.
const (
	AnnotationHealthy        = "novaedge.io/healthy"
	AnnotationReason         = "novaedge.io/unhealthy-reason"
	AnnotationAppliedVersion = "novaedge.io/applied-version"
	AnnotationProbeFailures  = "novaedge.io/probe-failures"
)

// ProbeFailures returns the endpoints l's holder reports as failing its
// health checks.
func ProbeFailures(l *coordinationv1.Lease) []string {
	if l == nil {
		return nil
	}
	v := l.Annotations[AnnotationProbeFailures]
	if v == "" {
		return nil
	}
	return strings.Split(v, ",")
}

// Healthy reports whether l's holder says it can serve. A Lease without the
// annotation (an agent that does not report) counts as healthy.
func Healthy(l *coordinationv1.Lease) bool {
	return l != nil && l.Annotations[AnnotationHealthy] != "false"
}

// Renewer creates and renews one agent Lease.
type Renewer struct {
	client    Client
	namespace string
	name      string
	identity  string
	seconds   int32
	interval  time.Duration
	clock     clock.WithTicker
	log       *slog.Logger
	report    func() Report

	// Owned by Run.
	lease    *coordinationv1.Lease // as last written by us; nil: read it first
	failures int

	lastRenewal atomic.Int64 // unix nanoseconds of the clock; 0: never
}

// New checks opts and returns a Renewer; it does not contact the API server.
func New(opts Options) (*Renewer, error) {
	if opts.Client == nil {
		return nil, errors.New("lease: client is nil")
	}
	if opts.Namespace == "" {
		return nil, errors.New("lease: namespace is empty")
	}
	if errs := validation.IsDNS1123Label(opts.Namespace); len(errs) > 0 {
		return nil, fmt.Errorf("lease: namespace %q: %s", opts.Namespace, strings.Join(errs, "; "))
	}
	if opts.Node == "" {
		return nil, errors.New("lease: node name is empty")
	}
	name := Name(opts.Node)
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return nil, fmt.Errorf("lease: node %q gives lease name %q: %s", opts.Node, name, strings.Join(errs, "; "))
	}
	duration := opts.Duration
	if duration == 0 {
		duration = DefaultDuration
	}
	if duration < time.Second || duration%time.Second != 0 {
		return nil, fmt.Errorf("lease: duration %v: must be a whole number of seconds, at least 1s", duration)
	}
	interval := opts.RenewInterval
	if interval == 0 {
		interval = duration / 3
	}
	if interval <= 0 || interval >= duration {
		return nil, fmt.Errorf("lease: renew interval %v: must be positive and shorter than the duration %v", interval, duration)
	}
	identity := opts.Identity
	if identity == "" {
		id := make([]byte, 8)
		if _, err := rand.Read(id); err != nil {
			return nil, fmt.Errorf("lease: make holder identity: %w", err)
		}
		identity = opts.Node + "/" + hex.EncodeToString(id)
	}
	clk := opts.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Renewer{
		client:    opts.Client,
		namespace: opts.Namespace,
		name:      name,
		identity:  identity,
		seconds:   int32(duration / time.Second),
		interval:  interval,
		clock:     clk,
		log:       log.With("lease", opts.Namespace+"/"+name),
		report:    opts.Report,
	}, nil
}

// Identity returns the holderIdentity the Renewer writes.
func (r *Renewer) Identity() string { return r.identity }

// LastRenewal returns the clock's time of the last successful renewal, or
// the zero time before the first.
func (r *Renewer) LastRenewal() time.Time {
	ns := r.lastRenewal.Load()
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// Run renews the Lease at once and then every renew interval until ctx ends.
// Failures are retried at the next interval. On return the Lease is left as
// it is: it goes stale by itself unless a successor renews it. Run is not
// meant to run twice at once on one Renewer.
func (r *Renewer) Run(ctx context.Context) {
	// The ticker exists before the first renewal, so a test that sees the
	// first renewal can step a fake clock without racing its creation.
	ticker := r.clock.NewTicker(r.interval)
	defer ticker.Stop()
	for {
		r.renewOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-ticker.C():
		}
	}
}

func (r *Renewer) renewOnce(ctx context.Context) {
	// A request that outlives the lease duration is useless: the Lease has
	// gone stale by then, and the next tick starts afresh.
	rctx, cancel := context.WithTimeout(ctx, time.Duration(r.seconds)*time.Second)
	defer cancel()
	now := r.clock.Now()
	err := r.renew(rctx, now)
	if err != nil {
		if ctx.Err() != nil {
			return // Shutting down; not a failure worth reporting.
		}
		r.failures++
		if r.failures == 1 {
			r.log.Warn("agent lease renewal failed; retrying every interval", "interval", r.interval, "error", err)
		}
		return
	}
	if r.failures > 0 {
		r.log.Info("agent lease renewed again", "failed_attempts", r.failures)
		r.failures = 0
	}
	r.lastRenewal.Store(now.UnixNano())
}

// renew writes one renewal at now. It updates the Lease as last written when
// it has one, and otherwise (first run, or someone else changed or deleted
// the Lease) reads it first, creating or taking it over as needed.
func (r *Renewer) renew(ctx context.Context, now time.Time) error {
	if r.lease != nil {
		l := r.lease.DeepCopy()
		r.stamp(l, now)
		updated, err := r.client.Update(ctx, l)
		if err == nil {
			r.lease = updated
			return nil
		}
		r.lease = nil
		if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			return fmt.Errorf("update lease: %w", err)
		}
	}

	current, err := r.client.Get(ctx, r.namespace, r.name)
	if apierrors.IsNotFound(err) {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: r.name, Namespace: r.namespace}}
		r.stamp(l, now)
		created, err := r.client.Create(ctx, l)
		if err != nil {
			return fmt.Errorf("create lease: %w", err)
		}
		r.lease = created
		return nil
	}
	if err != nil {
		return fmt.Errorf("get lease: %w", err)
	}
	l := current.DeepCopy()
	previous := ""
	if l.Spec.HolderIdentity != nil {
		previous = *l.Spec.HolderIdentity
	}
	r.stamp(l, now)
	updated, err := r.client.Update(ctx, l)
	if err != nil {
		return fmt.Errorf("update lease: %w", err)
	}
	if previous != r.identity {
		r.log.Info("took over agent lease", "previous_holder", previous, "holder", r.identity)
	}
	r.lease = updated
	return nil
}

// stamp makes l held by this Renewer and renewed at now. A change of holder
// counts as a transition and restarts acquireTime, as for leader election.
func (r *Renewer) stamp(l *coordinationv1.Lease, now time.Time) {
	t := metav1.NewMicroTime(now)
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != r.identity {
		if l.Spec.HolderIdentity != nil {
			transitions := int32(1)
			if l.Spec.LeaseTransitions != nil {
				transitions = *l.Spec.LeaseTransitions + 1
			}
			l.Spec.LeaseTransitions = &transitions
		}
		identity := r.identity
		l.Spec.HolderIdentity = &identity
		l.Spec.AcquireTime = &t
	}
	seconds := r.seconds
	l.Spec.LeaseDurationSeconds = &seconds
	l.Spec.RenewTime = &t
	if r.report != nil {
		rep := r.report()
		if l.Annotations == nil {
			l.Annotations = map[string]string{}
		}
		l.Annotations[AnnotationHealthy] = strconv.FormatBool(rep.Healthy)
		l.Annotations[AnnotationAppliedVersion] = strconv.FormatUint(rep.AppliedVersion, 10)
		if len(rep.ProbeFailures) > 0 {
			l.Annotations[AnnotationProbeFailures] = strings.Join(rep.ProbeFailures, ",")
		} else {
			delete(l.Annotations, AnnotationProbeFailures)
		}
		if rep.Healthy || rep.Reason == "" {
			delete(l.Annotations, AnnotationReason)
		} else {
			l.Annotations[AnnotationReason] = rep.Reason
		}
	}
}
