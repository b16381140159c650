package controller

import (
	"context"
	"fmt"

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
	var errs []error
	for _, it := range items {
		if ctx.Err() != nil {
			// Stopping: every patch left would fail alike.
			return append(errs, fmt.Errorf("update status: %w", context.Cause(ctx)))
		}
		gen := it.obj.GetGeneration()
		acc := idx.accepted(it.ref, gen)
		orig := it.obj.DeepCopyObject().(client.Object)
		next, changed := setConditions(*it.conditions, acc)
		if it.more != nil && it.more() {
			changed = true
		}
		if !changed && *it.observed == gen {
			continue
		}
		wasBad := conditionIs(*it.conditions, CondAccepted, metav1.ConditionFalse, acc.Message)
		*it.conditions, *it.observed = next, gen
		if err := d.c.mgr.GetClient().Status().Patch(ctx, it.obj, client.MergeFrom(orig)); err != nil {
			errs = append(errs, fmt.Errorf("update status of %s %s/%s: %w", it.ref.Kind, it.ref.Namespace, it.ref.Name, err))
			continue
		}
		if acc.Status == metav1.ConditionFalse && !wasBad {
			d.c.recorder.Eventf(it.obj, nil, corev1.EventTypeWarning, ReasonInvalid, "Validate", "%s", acc.Message)
		}
	}
	return errs
}
