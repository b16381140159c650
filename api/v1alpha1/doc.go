// Package v1alpha1 holds the NovaEdge API, group novaedge.io, version
// v1alpha1: the custom resources users write, both to a Kubernetes cluster and
// to the standalone agent's YAML files.
//
// Cluster-scoped kinds: ProxyVIP (a virtual IP and how it is announced) and
// ProxyIPPool (addresses VIPs and Services are allocated from). Namespaced
// kinds: ProxyGateway (listeners on a VIP), ProxyRoute (HTTP, TLS, TCP and UDP
// routing with Gateway API shapes), ProxyBackend (endpoints, load balancing,
// health and resilience) and ProxyPolicy (rate limits, JWT, CORS, IP filters).
//
// The kubebuilder markers here generate the CRD manifests in deploy/crds
// (make generate): OpenAPI validation for single fields, CEL rules for
// cross-field constraints. Cross-resource checks (references, overlapping
// addresses) belong to the snapshot builder, which sees the whole set.
//
// +kubebuilder:object:generate=true
// +groupName=novaedge.io
package v1alpha1
