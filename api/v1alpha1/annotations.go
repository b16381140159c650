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
