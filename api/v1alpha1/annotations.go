package v1alpha1

// Annotations a Service of type LoadBalancer may carry to choose how the XDP
// fast path forwards its flows, as spec.forwarding does for a ProxyVIP (see
// ForwardingConfig for the modes and what they need). A value that is not
// one of those listed is reported and the default is used.
const (
	// AnnotationForwardingMode is NAT (the default) or DSR.
	AnnotationForwardingMode = "novaedge.io/forwarding-mode"
	// AnnotationDSREncapsulation (DSR only) is IPIP (the default), GUE or L2.
	AnnotationDSREncapsulation = "novaedge.io/dsr-encapsulation"
	// AnnotationPreserveClientIP (NAT only) is "true" (DNAT only, the client's
	// address is kept) or "false" (the default: SNAT to the node's address).
	AnnotationPreserveClientIP = "novaedge.io/preserve-client-ip"
	// AnnotationGUEPort (DSR with GUE) is the UDP port 1-65535 of the
	// encapsulated packets; the default is 6080.
	AnnotationGUEPort = "novaedge.io/gue-port"
)

// LoadBalancerClass is the spec.loadBalancerClass of the Services of type
// LoadBalancer that NovaEdge serves. Services without a class are served too
// unless the controller runs with --default-lb-class=false (another load
// balancer implementation owns them then).
const LoadBalancerClass = "novaedge.io/lb"

// Annotations a Service of type LoadBalancer may carry to choose its
// address, as MetalLB's metallb.universe.tf/ annotations of the same names
// do.
const (
	// AnnotationAddressPool names the ProxyIPPool the Service's address comes
	// from. Unset: any pool with autoAssign.
	AnnotationAddressPool = "novaedge.io/address-pool"
	// AnnotationLoadBalancerIPs requests specific addresses, comma-separated,
	// at most one per family ("10.200.0.5" or "10.200.0.5,2001:db8::5"). It
	// takes precedence over the deprecated spec.loadBalancerIP.
	AnnotationLoadBalancerIPs = "novaedge.io/loadBalancerIPs"
	// AnnotationAllowSharedIP is a sharing key: Services carrying the same
	// key (in any namespace) share one address, provided their ports do not
	// collide, they ask for the same pool, addresses, families and
	// forwarding, and they agree on externalTrafficPolicy (with Local, they
	// must also select the same pods, since the nodes with local endpoints
	// announce the address).
	AnnotationAllowSharedIP = "novaedge.io/allow-shared-ip"
)
