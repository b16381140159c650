package main

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/novaedge/novaedge/api/v1alpha1"
)

// scale describes the generated configuration of the build and memory
// measurements: HTTP routes of two matches each, spread over gateways
// (one listener each) and backends (two static endpoints each), every
// gateway on one VIP with a fixed address.
type scale struct {
	Namespace                  string
	Routes, Backends, Gateways int
}

// vipName is the ProxyVIP every generated gateway binds.
const vipName = "bench-scale"

// objects returns every generated object: the VIP, the gateways, the
// backends, then the routes.
func (s scale) objects() (vip *v1alpha1.ProxyVIP, gws []*v1alpha1.ProxyGateway, bes []*v1alpha1.ProxyBackend, routes []*v1alpha1.ProxyRoute) {
	meta := func(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Name: name, Namespace: s.Namespace} }
	vip = &v1alpha1.ProxyVIP{
		ObjectMeta: metav1.ObjectMeta{Name: vipName},
		Spec:       v1alpha1.ProxyVIPSpec{Address: "10.200.0.10/32", Mode: v1alpha1.VIPModeLocal},
	}
	for g := range s.Gateways {
		gws = append(gws, &v1alpha1.ProxyGateway{
			ObjectMeta: meta(gatewayName(g)),
			Spec: v1alpha1.ProxyGatewaySpec{VIPRef: vipName, Listeners: []v1alpha1.Listener{
				{Name: "http", Port: v1alpha1.PortNumber(8000 + g), Protocol: v1alpha1.ProtocolHTTP},
			}},
		})
	}
	for b := range s.Backends {
		bes = append(bes, &v1alpha1.ProxyBackend{
			ObjectMeta: meta(backendName(b)),
			Spec: v1alpha1.ProxyBackendSpec{Endpoints: []v1alpha1.Endpoint{
				{Address: fmt.Sprintf("10.64.%d.%d", b>>8, b&0xff), Port: 8080},
				{Address: fmt.Sprintf("10.65.%d.%d", b>>8, b&0xff), Port: 8080},
			}},
		})
	}
	for r := range s.Routes {
		routes = append(routes, &v1alpha1.ProxyRoute{
			ObjectMeta: meta(fmt.Sprintf("r%05d", r)),
			Spec: v1alpha1.ProxyRouteSpec{
				ParentRefs: []v1alpha1.ParentRef{{Name: gatewayName(r % s.Gateways)}},
				Hostnames:  []string{fmt.Sprintf("r%d.bench.example.test", r)},
				Rules: []v1alpha1.RouteRule{{
					Matches: []v1alpha1.RouteMatch{
						{Path: &v1alpha1.PathMatch{Type: v1alpha1.PathMatchPathPrefix, Value: "/api"}},
						{Path: &v1alpha1.PathMatch{Type: v1alpha1.PathMatchExact, Value: "/"}},
					},
					BackendRefs: []v1alpha1.BackendRef{{Name: backendName(r % s.Backends)}},
				}},
			},
		})
	}
	return vip, gws, bes, routes
}

func gatewayName(g int) string { return fmt.Sprintf("gw%02d", g) }
func backendName(b int) string { return fmt.Sprintf("be%04d", b) }

// clientObjects lists the objects in creation order (what others refer to
// first), for the API server.
func (s scale) clientObjects() []client.Object {
	vip, gws, bes, routes := s.objects()
	out := []client.Object{vip}
	for _, o := range gws {
		out = append(out, o)
	}
	for _, o := range bes {
		out = append(out, o)
	}
	for _, o := range routes {
		out = append(out, o)
	}
	return out
}

// readyNode is a Node whose kubelet reports Ready, as the controller's
// cache would hold it.
func readyNode(name string) corev1.Node {
	return corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		}}},
	}
}
