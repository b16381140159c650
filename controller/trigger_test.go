package controller

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/novaedge/novaedge/api/v1alpha1"
)

func TestStatusOnly(t *testing.T) {
	route := func(gen int64, accepted metav1.ConditionStatus) *v1alpha1.ProxyRoute {
		r := &v1alpha1.ProxyRoute{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "r", Generation: gen}}
		if accepted != "" {
			meta.SetStatusCondition(&r.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionAccepted, Status: accepted, Reason: "R"})
		}
		return r
	}
	withStatus := func(r *v1alpha1.ProxyRoute, f func(*v1alpha1.ProxyRoute)) *v1alpha1.ProxyRoute {
		r = r.DeepCopy()
		f(r)
		return r
	}
	accepted := route(3, metav1.ConditionTrue)
	now := metav1.Now()
	for _, tc := range []struct {
		name     string
		old, new client.Object
		want     bool
	}{
		{"route: condition message only", accepted, withStatus(accepted, func(r *v1alpha1.ProxyRoute) {
			r.Status.Conditions[0].Message = "other"
			r.Status.ObservedGeneration = 3
		}), true},
		{"route: first conditions (accepted)", route(3, ""), accepted, false},
		{"route: accepted to not", accepted, route(3, metav1.ConditionFalse), false},
		{"route: spec changed", route(3, metav1.ConditionTrue), route(4, metav1.ConditionTrue), false},
		{"route: label", accepted, withStatus(accepted, func(r *v1alpha1.ProxyRoute) { r.Labels = map[string]string{"a": "b"} }), false},
		{"route: annotation", accepted, withStatus(accepted, func(r *v1alpha1.ProxyRoute) { r.Annotations = map[string]string{"a": "b"} }), false},
		{"route: being deleted", accepted, withStatus(accepted, func(r *v1alpha1.ProxyRoute) { r.DeletionTimestamp = &now }), false},
		{"route: no generation (not from an API server)", route(0, metav1.ConditionTrue), route(0, metav1.ConditionTrue), false},
		{"gateway: status only",
			&v1alpha1.ProxyGateway{ObjectMeta: metav1.ObjectMeta{Generation: 1}},
			&v1alpha1.ProxyGateway{ObjectMeta: metav1.ObjectMeta{Generation: 1}, Status: v1alpha1.ProxyGatewayStatus{ObservedGeneration: 1}}, true},
		{"HTTPRoute: status only",
			&gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Generation: 2}},
			&gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Generation: 2}, Status: gatewayv1.HTTPRouteStatus{RouteStatus: gatewayv1.RouteStatus{Parents: []gatewayv1.RouteParentStatus{{ControllerName: "x"}}}}}, true},
		{"Ingress: status only",
			&networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Generation: 1}},
			&networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Generation: 1}, Status: networkingv1.IngressStatus{LoadBalancer: networkingv1.IngressLoadBalancerStatus{Ingress: []networkingv1.IngressLoadBalancerIngress{{IP: "192.0.2.1"}}}}}, true},
		{"backend: endpoint counts only",
			&v1alpha1.ProxyBackend{ObjectMeta: metav1.ObjectMeta{Generation: 1}, Status: v1alpha1.ProxyBackendStatus{Endpoints: 2, HealthyEndpoints: 2}},
			&v1alpha1.ProxyBackend{ObjectMeta: metav1.ObjectMeta{Generation: 1}, Status: v1alpha1.ProxyBackendStatus{Endpoints: 3, HealthyEndpoints: 3}}, true},
		// The leader's health verdicts are input (persistedHealth).
		{"backend: an endpoint found unhealthy",
			&v1alpha1.ProxyBackend{ObjectMeta: metav1.ObjectMeta{Generation: 1}, Status: v1alpha1.ProxyBackendStatus{Endpoints: 2, HealthyEndpoints: 2}},
			&v1alpha1.ProxyBackend{ObjectMeta: metav1.ObjectMeta{Generation: 1}, Status: v1alpha1.ProxyBackendStatus{Endpoints: 2, HealthyEndpoints: 1, UnhealthyEndpoints: []string{"10.0.0.1:80"}}}, false},
		// Their status is input: the leader's decisions, the load
		// balancer's addresses.
		{"VIP: status", &v1alpha1.ProxyVIP{ObjectMeta: metav1.ObjectMeta{Generation: 1}},
			&v1alpha1.ProxyVIP{ObjectMeta: metav1.ObjectMeta{Generation: 1}, Status: v1alpha1.ProxyVIPStatus{Address: "192.0.2.1"}}, false},
		{"Service: status", &corev1.Service{ObjectMeta: metav1.ObjectMeta{Generation: 1}},
			&corev1.Service{ObjectMeta: metav1.ObjectMeta{Generation: 1}, Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "192.0.2.1"}}}}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := statusOnly(tc.old, tc.new); got != tc.want {
				t.Fatalf("statusOnly = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestTrigger(t *testing.T) {
	const d = time.Hour // a delayed add never comes due within the test
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	clock := time.Unix(1000, 0)
	tr := newTrigger(d)
	tr.now = func() time.Time { return clock }
	h := tr.on(nil)
	ctx := context.Background()
	take := func(want int) {
		t.Helper()
		if got := q.Len(); got != want {
			t.Fatalf("queued %d, want %d", got, want)
		}
		if want > 0 {
			k, _ := q.Get()
			q.Done(k)
			q.Forget(k)
		}
	}
	route := &v1alpha1.ProxyRoute{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "r", Generation: 1}}

	// The first event runs at once.
	h.Create(ctx, event.CreateEvent{Object: route}, q)
	take(1)
	// Events soon after wait for d and share one run.
	clock = clock.Add(d / 10)
	h.Delete(ctx, event.DeleteEvent{Object: route}, q)
	h.Generic(ctx, event.GenericEvent{Object: route}, q)
	take(0)
	// After a quiet d, at once again.
	clock = clock.Add(d)
	h.Create(ctx, event.CreateEvent{Object: route}, q)
	take(1)
	// An update that changes nothing the build reads runs nothing, even
	// after a quiet spell; one that does runs at once.
	clock = clock.Add(2 * d)
	status := route.DeepCopy()
	status.Status.ObservedGeneration = 1
	h.Update(ctx, event.UpdateEvent{ObjectOld: route, ObjectNew: status}, q)
	take(0)
	spec := route.DeepCopy()
	spec.Generation = 2
	h.Update(ctx, event.UpdateEvent{ObjectOld: route, ObjectNew: spec}, q)
	take(1)
	// A filter applies to every kind of event.
	clock = clock.Add(2 * d)
	none := tr.on(func(client.Object) bool { return false })
	none.Create(ctx, event.CreateEvent{Object: route}, q)
	none.Update(ctx, event.UpdateEvent{ObjectOld: route, ObjectNew: spec}, q)
	take(0)
}
