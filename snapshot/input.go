package snapshot

import (
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/novaedge/novaedge/api/v1alpha1"
	"github.com/novaedge/novaedge/diag"
	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

// Input is every resource a snapshot is built from. The controller fills it
// from informers; the standalone agent and novaedgectl from YAML files. The
// order of each slice does not matter: Build sorts.
type Input struct {
	VIPs     []v1alpha1.ProxyVIP
	Pools    []v1alpha1.ProxyIPPool
	Gateways []v1alpha1.ProxyGateway
	Routes   []v1alpha1.ProxyRoute
	Backends []v1alpha1.ProxyBackend
	Policies []v1alpha1.ProxyPolicy

	// Core objects referenced by NovaEdge resources.
	Secrets        []corev1.Secret
	Services       []corev1.Service
	EndpointSlices []discoveryv1.EndpointSlice
	Nodes          []corev1.Node
	// Namespaces, for listeners whose allowedRoutes select namespaces by
	// label.
	Namespaces []corev1.Namespace

	// Ingress and Gateway API objects. They are translated into ProxyGateway,
	// ProxyRoute and ProxyBackend by Translators before the build.
	Ingresses   []networkingv1.Ingress
	APIGateways []gatewayv1.Gateway
	HTTPRoutes  []gatewayv1.HTTPRoute

	// Decisions are the controller's choices; nil in standalone mode, where
	// Build decides for the local node alone.
	Decisions *Decisions
}

// Decisions are made once, by the leader controller, and shipped to every
// node, so nodes never disagree.
type Decisions struct {
	// Addresses maps a VIP name to the addresses IPAM allocated for it: a
	// ProxyVIP's name, or the VIP of Services of type LoadBalancer
	// (ServiceInfo.VIP). A VIP with poolRef, or a Service, without an entry
	// has no address yet and is left out.
	Addresses map[string][]netip.Addr
	// Assignments maps a VIP name (as in Addresses) to the nodes serving it.
	Assignments map[string]Assignment
	// EndpointHealth maps "address:port" (netip.AddrPort string) of an
	// endpoint to the verdict of active probes. Endpoints without an entry
	// are judged by their EndpointSlice conditions alone.
	EndpointHealth map[string]bool
	// MaglevLineage maps a FAST plan entry (PlanKey) to the Maglev table
	// its next table is built from (fastpath/lineage). Entries whose
	// endpoints differ between nodes (externalTrafficPolicy Local) never
	// get one.
	MaglevLineage map[string]*pb.MaglevLineage
}

// Assignment is who serves one VIP.
type Assignment struct {
	// Active answers for the address (L2ARP, Local).
	Active string
	// Standbys take over in order (L2ARP).
	Standbys []string
	// Announcing nodes advertise routes (BGP, OSPF).
	Announcing []string
}

// Node identifies the node a snapshot is built for.
type Node struct {
	// Name of the node (the Kubernetes node name, or the host name).
	Name string
	// Labels matched against ProxyVIP nodeSelectors in standalone mode.
	Labels map[string]string
}

// Options control a build.
type Options struct {
	// Node the snapshot is for.
	Node Node
	// Version stamped into the snapshot.
	Version uint64
	// ClusterComplete says Input holds every Secret, Service and
	// EndpointSlice that exists (the controller's informer caches). When
	// false (files), a reference to a missing Secret or Service is a warning:
	// it may exist in the cluster the files are meant for.
	ClusterComplete bool
	// Translators turn Ingress and Gateway API objects into NovaEdge kinds.
	// Nil means DefaultTranslators.
	Translators []Translator
	// SkipClasslessServices leaves Services of type LoadBalancer without
	// spec.loadBalancerClass to another implementation: only those of class
	// v1alpha1.LoadBalancerClass are served. False (the default, and the
	// standalone agent's behaviour) serves classless Services too; the
	// controller sets it when run with --default-lb-class=false.
	SkipClasslessServices bool
	// ProbeFailures are the endpoints ("address:port") a standalone agent's
	// own active health checks find failing: they are UNHEALTHY in the
	// snapshot, as the controller's probe verdicts make them in controller
	// mode, so the fast path stops sending to them and a VIP left without
	// a healthy backend is withdrawn.
	ProbeFailures map[string]bool
	// Memo, when set, carries the routes this build makes into the next
	// build with the same Memo, which takes those that did not change
	// instead of building them again (see Memo for what that requires of
	// the Input's objects).
	Memo *Memo
}

// Translator turns foreign objects of Input (Ingress, Gateway API) into
// NovaEdge kinds appended to Input, reporting problems in diags. It must be
// deterministic and must not modify the objects it reads.
type Translator interface {
	Name() string
	Translate(in *Input, diags *diag.List)
}
