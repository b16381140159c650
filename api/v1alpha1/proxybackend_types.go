package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// LBPolicy is a load-balancing algorithm.
// +kubebuilder:validation:Enum=RoundRobin;Random;P2C;EWMA;LeastConn;RingHash;Maglev
type LBPolicy string

const (
	// LBRoundRobin is smooth weighted round robin.
	LBRoundRobin LBPolicy = "RoundRobin"
	// LBRandom picks by weight at random.
	LBRandom LBPolicy = "Random"
	// LBP2C picks the less loaded of two random endpoints (least request).
	LBP2C LBPolicy = "P2C"
	// LBEWMA prefers endpoints with the lowest peak-EWMA latency.
	LBEWMA LBPolicy = "EWMA"
	// LBLeastConn picks the endpoint with the fewest active connections.
	LBLeastConn LBPolicy = "LeastConn"
	// LBRingHash is consistent hashing on a ring (see hashPolicy).
	LBRingHash LBPolicy = "RingHash"
	// LBMaglev is Maglev consistent hashing (see hashPolicy); the L4 fast
	// path always uses Maglev.
	LBMaglev LBPolicy = "Maglev"
)

// ServiceRef takes a backend's endpoints from a Kubernetes Service.
type ServiceRef struct {
	// Name of the Service (in the backend's namespace unless namespace is
	// set).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Namespace of the Service. Empty means the backend's namespace.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace,omitempty"`
	// Port is the Service port (its number, resolved to the target port of
	// each endpoint).
	Port PortNumber `json:"port"`
}

// Endpoint is a static backend address, for use without Kubernetes.
type Endpoint struct {
	// Address is an IPv4 or IPv6 address.
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="must be an IP address"
	Address string `json:"address"`
	// Port of the endpoint.
	Port PortNumber `json:"port"`
	// Weight relative to the other endpoints. Nil means 1; 0 drains the
	// endpoint (existing connections stay, no new ones).
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=65535
	Weight *int32 `json:"weight,omitempty"`
}

// HashPolicy says what consistent hashing (RingHash, Maglev) hashes on.
// +kubebuilder:validation:XValidation:rule="(has(self.header) ? 1 : 0) + (has(self.cookie) ? 1 : 0) + (has(self.sourceIP) && self.sourceIP ? 1 : 0) == 1",message="set exactly one of header, cookie or sourceIP"
type HashPolicy struct {
	// Header whose value is hashed.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Header string `json:"header,omitempty"`
	// Cookie whose value is hashed; set by the proxy when absent.
	// +optional
	Cookie *HashCookie `json:"cookie,omitempty"`
	// SourceIP hashes the client address.
	// +optional
	SourceIP bool `json:"sourceIP,omitempty"`
}

// HashCookie is the session-affinity cookie.
type HashCookie struct {
	// Name of the cookie.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	Name string `json:"name"`
	// TTL of a cookie the proxy sets. Empty means a session cookie.
	// +optional
	TTL Duration `json:"ttl,omitempty"`
	// Path of a cookie the proxy sets. Empty means "/".
	// +optional
	Path string `json:"path,omitempty"`
}

// BackendProtocol is the protocol spoken to endpoints.
// +kubebuilder:validation:Enum=HTTP;HTTPS;H2C;HTTP2;GRPC;TCP;UDP
type BackendProtocol string

const (
	BackendHTTP  BackendProtocol = "HTTP"
	BackendHTTPS BackendProtocol = "HTTPS"
	BackendH2C   BackendProtocol = "H2C"
	BackendHTTP2 BackendProtocol = "HTTP2"
	BackendGRPC  BackendProtocol = "GRPC"
	BackendTCP   BackendProtocol = "TCP"
	BackendUDP   BackendProtocol = "UDP"
)

// BackendTLS configures TLS towards endpoints.
type BackendTLS struct {
	// ServerName for SNI and verification. Empty means the request's host.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ServerName string `json:"serverName,omitempty"`
	// CASecretRef names a Secret whose ca.crt verifies endpoints. Nil means
	// the system roots.
	// +optional
	CASecretRef *SecretRef `json:"caSecretRef,omitempty"`
	// ClientCertSecretRef names a kubernetes.io/tls Secret presented to
	// endpoints.
	// +optional
	ClientCertSecretRef *SecretRef `json:"clientCertSecretRef,omitempty"`
	// InsecureSkipVerify disables verification. For testing only.
	// +optional
	InsecureSkipVerify bool `json:"insecureSkipVerify,omitempty"`
}

// HealthCheckType is the kind of active probe.
// +kubebuilder:validation:Enum=HTTP;TCP;GRPC
type HealthCheckType string

// HealthCheck probes endpoints actively.
// +kubebuilder:validation:XValidation:rule="!has(self.type) || self.type == 'HTTP' || !has(self.httpPath)",message="httpPath applies to HTTP health checks only"
type HealthCheck struct {
	// Type is HTTP, TCP or GRPC (grpc.health.v1). Empty means HTTP when
	// httpPath is set, else TCP.
	// +optional
	Type HealthCheckType `json:"type,omitempty"`
	// Interval between probes. Empty means 10s.
	// +optional
	Interval Duration `json:"interval,omitempty"`
	// Timeout of one probe. Empty means 5s.
	// +optional
	Timeout Duration `json:"timeout,omitempty"`
	// HealthyThreshold is the number of successes that mark an endpoint
	// healthy. Zero means 2.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	HealthyThreshold int32 `json:"healthyThreshold,omitempty"`
	// UnhealthyThreshold is the number of failures that mark it unhealthy.
	// Zero means 3.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	UnhealthyThreshold int32 `json:"unhealthyThreshold,omitempty"`
	// HTTPPath probed by HTTP checks. Empty means "/".
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:Pattern=`^/`
	HTTPPath string `json:"httpPath,omitempty"`
	// Host header of HTTP checks. Empty means the endpoint address.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Host string `json:"host,omitempty"`
	// ExpectedStatuses are the HTTP status codes that count as healthy.
	// Empty means 200-399.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:Minimum=100
	// +kubebuilder:validation:items:Maximum=599
	ExpectedStatuses []int32 `json:"expectedStatuses,omitempty"`
	// GRPCService is the service name sent in gRPC health checks. Empty
	// means the server as a whole.
	// +optional
	GRPCService string `json:"grpcService,omitempty"`
	// Port probed. Zero means the endpoint's port.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port,omitempty"`
}

// CircuitBreaker limits load on a backend and ejects failing endpoints.
type CircuitBreaker struct {
	// ConsecutiveFailures (5xx, gateway errors or connect failures) within
	// interval that eject an endpoint. Zero means 5.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	ConsecutiveFailures int32 `json:"consecutiveFailures,omitempty"`
	// Interval over which failures are counted. Empty means 10s.
	// +optional
	Interval Duration `json:"interval,omitempty"`
	// BaseEjectionTime of the first ejection; each repeat ejects longer
	// (base × ejections, capped at 10 × base). Empty means 30s.
	// +optional
	BaseEjectionTime Duration `json:"baseEjectionTime,omitempty"`
	// MaxEjectionPercent caps the share of endpoints ejected at once. Zero
	// means 50.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	MaxEjectionPercent int32 `json:"maxEjectionPercent,omitempty"`
	// MaxConnections to the backend from one node. Zero means 1024.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MaxConnections int32 `json:"maxConnections,omitempty"`
	// MaxPendingRequests waiting for a connection. Zero means 1024.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MaxPendingRequests int32 `json:"maxPendingRequests,omitempty"`
	// MaxRequests in flight to the backend. Zero means 1024.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MaxRequests int32 `json:"maxRequests,omitempty"`
}

// BackendTimeouts bound connections to endpoints.
type BackendTimeouts struct {
	// Connect bounds connection setup. Empty means 5s.
	// +optional
	Connect Duration `json:"connect,omitempty"`
	// Idle closes pooled connections idle this long. Empty means 90s.
	// +optional
	Idle Duration `json:"idle,omitempty"`
}

// ProxyBackendSpec is a set of endpoints and how traffic is spread over
// them.
// +kubebuilder:validation:XValidation:rule="has(self.serviceRef) != has(self.endpoints)",message="set exactly one of serviceRef or endpoints"
// +kubebuilder:validation:XValidation:rule="!has(self.hashPolicy) || (has(self.lbPolicy) && self.lbPolicy in ['RingHash', 'Maglev'])",message="hashPolicy needs lbPolicy RingHash or Maglev",fieldPath=".hashPolicy"
type ProxyBackendSpec struct {
	// ServiceRef takes endpoints from a Kubernetes Service's EndpointSlices.
	// +optional
	ServiceRef *ServiceRef `json:"serviceRef,omitempty"`
	// Endpoints are static addresses, for use without Kubernetes.
	// +optional
	// +kubebuilder:validation:MaxItems=4096
	Endpoints []Endpoint `json:"endpoints,omitempty"`
	// LBPolicy is the load-balancing algorithm of the L7 slow path. Empty
	// means RoundRobin. The L4 fast path always uses Maglev.
	// +optional
	LBPolicy LBPolicy `json:"lbPolicy,omitempty"`
	// HashPolicy for RingHash and Maglev. Nil hashes the source IP.
	// +optional
	HashPolicy *HashPolicy `json:"hashPolicy,omitempty"`
	// Protocol spoken to endpoints. Empty means HTTP for HTTP routes and the
	// listener's transport for TCP and UDP routes.
	// +optional
	Protocol BackendProtocol `json:"protocol,omitempty"`
	// TLS towards endpoints (protocols HTTPS, HTTP2 and GRPC over TLS).
	// +optional
	TLS *BackendTLS `json:"tls,omitempty"`
	// HealthCheck probes endpoints actively. Nil means no active probes
	// (endpoint readiness and passive ejection still apply).
	// +optional
	HealthCheck *HealthCheck `json:"healthCheck,omitempty"`
	// CircuitBreaker limits and ejection. Nil means the defaults listed on
	// each field.
	// +optional
	CircuitBreaker *CircuitBreaker `json:"circuitBreaker,omitempty"`
	// PanicThresholdPercent: when fewer than this share of endpoints is
	// healthy, traffic is spread over all of them rather than overload the
	// few that remain. Nil means 50; 0 disables panic mode.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	PanicThresholdPercent *int32 `json:"panicThresholdPercent,omitempty"`
	// Timeouts of endpoint connections.
	// +optional
	Timeouts *BackendTimeouts `json:"timeouts,omitempty"`
}

// ProxyBackendStatus is the observed state of a backend.
type ProxyBackendStatus struct {
	// Endpoints is the number of resolved endpoints.
	// +optional
	Endpoints int32 `json:"endpoints,omitempty"`
	// HealthyEndpoints is the number of endpoints that receive new traffic.
	// +optional
	HealthyEndpoints int32 `json:"healthyEndpoints,omitempty"`
	// UnhealthyEndpoints ("address:port") fail the active health checks of
	// most agents: the controller takes them out of every node's tables
	// until the agents report them healthy again. Written by the
	// controller.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=4096
	// +kubebuilder:validation:items:MaxLength=64
	UnhealthyEndpoints []string `json:"unhealthyEndpoints,omitempty"`
	// Conditions: Accepted, ResolvedRefs.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// ObservedGeneration is the spec generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// ProxyBackend is a set of endpoints with load balancing, health checks and
// resilience settings.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=nebe,categories=novaedge
// +kubebuilder:printcolumn:name="LB",type=string,JSONPath=`.spec.lbPolicy`
// +kubebuilder:printcolumn:name="Endpoints",type=integer,JSONPath=`.status.endpoints`
// +kubebuilder:printcolumn:name="Healthy",type=integer,JSONPath=`.status.healthyEndpoints`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ProxyBackend struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ProxyBackendSpec   `json:"spec"`
	Status ProxyBackendStatus `json:"status,omitempty"`
}

// ProxyBackendList is a list of ProxyBackends.
// +kubebuilder:object:root=true
type ProxyBackendList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ProxyBackend `json:"items"`
}
