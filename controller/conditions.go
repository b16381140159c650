package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/novaedge/novaedge/api/v1alpha1"
	"github.com/novaedge/novaedge/diag"
)

// conditioned is a namespaced NovaEdge resource with the usual status.
type conditioned struct {
	obj        client.Object
	ref        diag.Ref
	conditions *[]metav1.Condition
	observed   *int64
	// more, when set, updates other status fields and reports whether
	// they changed.
	more func() bool
}

// writeConditions sets the Accepted condition of gateways, routes,
// backends and policies from the build's diagnostics, so `kubectl describe`
// says what is wrong ("spec.rules[0].backendRefs[0].name: ProxyBackend
// default/api not found"), and emits a Warning Event when it turns bad.
func (d *decider) writeConditions(ctx context.Context, w *world, idx problemIndex, health backendHealth) []error {
	var items []conditioned
	for i := range w.in.Gateways {
		o := &w.in.Gateways[i]
		items = append(items, conditioned{o, diag.Ref{Kind: v1alpha1.KindProxyGateway, Namespace: o.Namespace, Name: o.Name}, &o.Status.Conditions, &o.Status.ObservedGeneration, nil})
	}
	for i := range w.in.Routes {
		o := &w.in.Routes[i]
		items = append(items, conditioned{o, diag.Ref{Kind: v1alpha1.KindProxyRoute, Namespace: o.Namespace, Name: o.Name}, &o.Status.Conditions, &o.Status.ObservedGeneration, nil})
	}
	for i := range w.in.Backends {
		o := &w.in.Backends[i]
		items = append(items, conditioned{o, diag.Ref{Kind: v1alpha1.KindProxyBackend, Namespace: o.Namespace, Name: o.Name}, &o.Status.Conditions, &o.Status.ObservedGeneration,
			func() bool { return health.apply(o) }})
	}
	for i := range w.in.Policies {
		o := &w.in.Policies[i]
		items = append(items, conditioned{o, diag.Ref{Kind: v1alpha1.KindProxyPolicy, Namespace: o.Namespace, Name: o.Name}, &o.Status.Conditions, &o.Status.ObservedGeneration, nil})
	}
	// What to write is decided here, in order; the patches then go out
	// statusWrites at a time: one after another, a leader that found 3 000
	// routes without conditions took 25 s to write them all (each write a
	// round trip to the API server), and every route meanwhile showed none.
	type patch struct {
		it   conditioned
		orig client.Object
		warn string // the Warning Event's message, when the condition turns bad
	}
	var patches []patch
	for _, it := range items {
		gen := it.obj.GetGeneration()
		acc := idx.accepted(it.ref, gen)
		// The patch is the difference from the object as it was: copied
		// before more may change it, or else only once there is something
		// to write (copying each of 3000 routes on every build was 8 % of
		// the controller's and agents' CPU in perf/controlplane's route
		// adds).
		var orig client.Object
		if it.more != nil {
			orig = it.obj.DeepCopyObject().(client.Object)
		}
		next, changed := setConditions(*it.conditions, acc)
		if it.more != nil && it.more() {
			changed = true
		}
		if !changed && *it.observed == gen {
			continue
		}
		if orig == nil {
			orig = it.obj.DeepCopyObject().(client.Object)
		}
		wasBad := conditionIs(*it.conditions, CondAccepted, metav1.ConditionFalse, acc.Message)
		*it.conditions, *it.observed = next, gen
		pt := patch{it: it, orig: orig}
		if acc.Status == metav1.ConditionFalse && !wasBad {
			pt.warn = acc.Message
		}
		patches = append(patches, pt)
	}
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	sem := make(chan struct{}, statusWrites)
	for _, pt := range patches {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			it := pt.it
			err := d.c.mgr.GetClient().Status().Patch(ctx, it.obj, client.MergeFrom(pt.orig))
			switch {
			case err != nil && ctx.Err() != nil:
				// Stopping: reported once below, not once per patch.
			case err != nil:
				mu.Lock()
				errs = append(errs, fmt.Errorf("update status of %s %s/%s: %w", it.ref.Kind, it.ref.Namespace, it.ref.Name, err))
				mu.Unlock()
			case pt.warn != "":
				d.c.recorder.Eventf(it.obj, nil, corev1.EventTypeWarning, ReasonInvalid, "Validate", "%s", pt.warn)
			}
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		// Stopping: every patch left would fail alike.
		errs = append(errs, fmt.Errorf("update status: %w", context.Cause(ctx)))
	}
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return errs
}

// statusWrites bounds the status patches one decide has in flight.
const statusWrites = 8
