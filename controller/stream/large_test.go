package stream_test

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/novaedge/novaedge/api/v1alpha1"
	"github.com/novaedge/novaedge/controller/stream"
	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/snapshot"
)

// routesInput is n HTTP routes of two matches each on one gateway, as
// perf/routescale serves them.
func routesInput(n int) *snapshot.Input {
	meta := func(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Name: name, Namespace: "scale"} }
	in := &snapshot.Input{
		VIPs: []v1alpha1.ProxyVIP{{
			ObjectMeta: metav1.ObjectMeta{Name: "scale"},
			Spec:       v1alpha1.ProxyVIPSpec{Address: "10.200.0.10/32", Mode: v1alpha1.VIPModeLocal},
		}},
		Gateways: []v1alpha1.ProxyGateway{{
			ObjectMeta: meta("gw"),
			Spec: v1alpha1.ProxyGatewaySpec{VIPRef: "scale", Listeners: []v1alpha1.Listener{
				{Name: "http", Port: 80, Protocol: v1alpha1.ProtocolHTTP},
			}},
		}},
		Backends: []v1alpha1.ProxyBackend{{
			ObjectMeta: meta("be"),
			Spec: v1alpha1.ProxyBackendSpec{Endpoints: []v1alpha1.Endpoint{
				{Address: "10.0.0.1", Port: 8080}, {Address: "10.0.0.2", Port: 8080},
			}},
		}},
	}
	for i := range n {
		in.Routes = append(in.Routes, v1alpha1.ProxyRoute{
			ObjectMeta: meta(fmt.Sprintf("r%05d", i)),
			Spec: v1alpha1.ProxyRouteSpec{
				Hostnames: []string{fmt.Sprintf("r%d.scale.example.test", i)},
				Rules: []v1alpha1.RouteRule{{
					Matches: []v1alpha1.RouteMatch{
						{Path: &v1alpha1.PathMatch{Type: v1alpha1.PathMatchPathPrefix, Value: "/api"}},
						{Path: &v1alpha1.PathMatch{Type: v1alpha1.PathMatchExact, Value: "/"}},
					},
					BackendRefs: []v1alpha1.BackendRef{{Name: "be"}},
				}},
			},
		})
	}
	return in
}

// TestLargeSnapshotRoundTrip: a snapshot of 10 000 routes built by
// snapshot.Build fits MaxMessageSize with room to spare and arrives intact.
func TestLargeSnapshotRoundTrip(t *testing.T) {
	const routes = 10000
	snap, diags := snapshot.Build(routesInput(routes), snapshot.Options{Node: snapshot.Node{Name: "node-a"}})
	if len(diags) != 0 {
		t.Fatalf("the generated resources have problems: %v", diags)
	}
	if got := len(snap.GetCluster().GetRoutes()); got != routes {
		t.Fatalf("built %d routes, want %d", got, routes)
	}
	size := proto.Size(&pb.ControllerMessage{Message: &pb.ControllerMessage_Snapshot{Snapshot: snap}})
	t.Logf("a %d-route snapshot encodes to %d bytes (%.2f MiB); the limit is %d MiB", routes, size, float64(size)/(1<<20), stream.MaxMessageSize>>20)
	// Headroom: ten times the routes must still fit.
	if size*10 > stream.MaxMessageSize {
		t.Fatalf("a %d-route snapshot takes %d bytes: less than 10x headroom under MaxMessageSize %d", routes, size, stream.MaxMessageSize)
	}

	e := newEnv(t, stream.Options{})
	e.srv.Publish("node-a", snap)
	a := subscribe(t, dial(t, e.run.Addr, e.tls), &pb.Subscribe{NodeName: "node-a"}).start()
	got := a.waitSnapshots(1)[0]
	if got.GetContentHash() != snap.GetContentHash() || snapshot.ContentHash(got) != snap.GetContentHash() {
		t.Fatalf("received content hash %s (recomputed %s), want %s", got.GetContentHash(), snapshot.ContentHash(got), snap.GetContentHash())
	}
	if !proto.Equal(got.GetCluster(), snap.GetCluster()) || !proto.Equal(got.GetNode(), snap.GetNode()) {
		t.Fatal("the received snapshot differs from the published one")
	}
}
