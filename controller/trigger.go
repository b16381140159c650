package controller

import (
	"context"
	"maps"
	"strconv"
	"strings"
	"sync"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/novaedge/novaedge/api/v1alpha1"
)

// the single work item: every run looks at the whole cluster.
var allKey = reconcile.Request{NamespacedName: types.NamespacedName{Name: "all"}}

// trigger enqueues one controller's single key. The first event after a
// quiet spell of d starts a run at once; events within d of it wait d and
// share one run, as do events that arrive while a run is under way (the
// work queue holds the key once). So a single change waits for no timer,
// and a burst (a Deployment rolling, kubectl apply -f dir) costs a run for
// its first event and about one per d for the rest.
type trigger struct {
	d   time.Duration
	now func() time.Time // time.Now; tests set it

	mu   sync.Mutex
	last time.Time // of the last run started at once
}

func newTrigger(d time.Duration) *trigger { return &trigger{d: d, now: time.Now} }

func (t *trigger) add(q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	now := t.now()
	t.mu.Lock()
	quiet := t.last.IsZero() || now.Sub(t.last) >= t.d
	if quiet {
		t.last = now
	}
	t.mu.Unlock()
	if quiet {
		q.Add(allKey)
		return
	}
	q.AddAfter(allKey, t.d)
}

// on is an event handler that enqueues through t every event of an object
// filter passes (nil: every object), except updates that change nothing a
// build reads (statusOnly).
func (t *trigger) on(filter func(client.Object) bool) handler.EventHandler {
	pass := func(o client.Object) bool { return filter == nil || filter(o) }
	type queue = workqueue.TypedRateLimitingInterface[reconcile.Request]
	return handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q queue) {
			if pass(e.Object) {
				t.add(q)
			}
		},
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q queue) {
			if pass(e.ObjectNew) && !statusOnly(e.ObjectOld, e.ObjectNew) {
				t.add(q)
			}
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, q queue) {
			if pass(e.Object) {
				t.add(q)
			}
		},
		GenericFunc: func(_ context.Context, _ event.GenericEvent, q queue) { t.add(q) },
	}
}

// statusOnly reports whether an update changed nothing the build reads.
// The kinds listed keep what they ask for under metadata.generation (a
// status write does not move it), and the build reads them only through
// that, their metadata and the part of their status statusRead returns.
// Their status is otherwise written by the decider itself (conditions,
// attached-route counts, endpoint counts): a run for each such write made
// every new route among 3000 cost 4 to 9 runs of the publisher and as
// many of the decider, one after another (perf/controlplane, section 1b). Other kinds' status is input
// (a VIP's addresses and nodes, a Service's load-balancer addresses, a
// Node's conditions), so their updates always count.
func statusOnly(oldObj, newObj client.Object) bool {
	switch newObj.(type) {
	case *v1alpha1.ProxyRoute, *v1alpha1.ProxyGateway, *v1alpha1.ProxyBackend, *v1alpha1.ProxyPolicy,
		*gatewayv1.HTTPRoute, *gatewayv1.Gateway, *networkingv1.Ingress:
	default:
		return false
	}
	if oldObj == nil || newObj.GetGeneration() == 0 || oldObj.GetGeneration() != newObj.GetGeneration() {
		return false
	}
	if !maps.Equal(oldObj.GetLabels(), newObj.GetLabels()) || !maps.Equal(oldObj.GetAnnotations(), newObj.GetAnnotations()) {
		return false
	}
	if !sameTime(oldObj.GetDeletionTimestamp(), newObj.GetDeletionTimestamp()) {
		return false
	}
	return statusRead(oldObj) == statusRead(newObj)
}

// statusRead is what the build reads of an object's status: whether a
// route or gateway was accepted (snapshot's wasAccepted), the endpoints
// the leader found unhealthy for a backend (persistedHealth).
func statusRead(o client.Object) string {
	switch o := o.(type) {
	case *v1alpha1.ProxyRoute:
		return strconv.FormatBool(meta.IsStatusConditionTrue(o.Status.Conditions, v1alpha1.ConditionAccepted))
	case *v1alpha1.ProxyGateway:
		return strconv.FormatBool(meta.IsStatusConditionTrue(o.Status.Conditions, v1alpha1.ConditionAccepted))
	case *v1alpha1.ProxyBackend:
		return strings.Join(o.Status.UnhealthyEndpoints, "\n")
	}
	return ""
}

func sameTime(a, b *metav1.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(b)
}
