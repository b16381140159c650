package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// ListenerProtocol is the protocol a listener accepts.
// +kubebuilder:validation:Enum=HTTP;HTTPS;TLS;TCP;UDP;HTTP3
type ListenerProtocol string

const (
	// ProtocolHTTP is plain HTTP/1.1 and h2c.
	ProtocolHTTP ListenerProtocol = "HTTP"
	// ProtocolHTTPS terminates TLS and serves HTTP/1.1 and h2.
	ProtocolHTTPS ListenerProtocol = "HTTPS"
	// ProtocolTLS routes TLS by SNI; tls.mode selects Terminate (then TCP
	// inside) or Passthrough.
	ProtocolTLS ListenerProtocol = "TLS"
	// ProtocolTCP forwards TCP connections.
	ProtocolTCP ListenerProtocol = "TCP"
	// ProtocolUDP forwards UDP datagrams.
	ProtocolUDP ListenerProtocol = "UDP"
	// ProtocolHTTP3 serves HTTP/3 over QUIC (UDP) with TLS.
	ProtocolHTTP3 ListenerProtocol = "HTTP3"
)

// TLSMode says whether the proxy ends TLS or passes it through.
// +kubebuilder:validation:Enum=Terminate;Passthrough
type TLSMode string

const (
	TLSModeTerminate   TLSMode = "Terminate"
	TLSModePassthrough TLSMode = "Passthrough"
)

// TLSVersion names a TLS protocol version.
// +kubebuilder:validation:Enum=TLS1.0;TLS1.1;TLS1.2;TLS1.3
type TLSVersion string

// ClientAuthMode says whether client certificates are asked for.
// +kubebuilder:validation:Enum=None;Request;Require
type ClientAuthMode string

const (
	ClientAuthNone    ClientAuthMode = "None"
	ClientAuthRequest ClientAuthMode = "Request"
	ClientAuthRequire ClientAuthMode = "Require"
)

// ListenerTLS configures TLS on a listener.
// +kubebuilder:validation:XValidation:rule="!has(self.mode) || self.mode != 'Passthrough' || (!has(self.secretRef) && !has(self.certificateRefs))",message="a Passthrough listener holds no certificates"
// +kubebuilder:validation:XValidation:rule="(has(self.mode) && self.mode == 'Passthrough') || has(self.secretRef) || has(self.certificateRefs)",message="TLS termination needs secretRef or certificateRefs"
// +kubebuilder:validation:XValidation:rule="!has(self.minVersion) || !has(self.maxVersion) || self.minVersion <= self.maxVersion",message="minVersion must not exceed maxVersion"
type ListenerTLS struct {
	// Mode is Terminate or Passthrough. Empty means Terminate.
	// +optional
	Mode TLSMode `json:"mode,omitempty"`
	// SecretRef names the kubernetes.io/tls Secret with the default
	// certificate.
	// +optional
	SecretRef *SecretRef `json:"secretRef,omitempty"`
	// CertificateRefs are further certificates, chosen by SNI against their
	// DNS names (exact names win over wildcards).
	// +optional
	// +kubebuilder:validation:MaxItems=64
	CertificateRefs []SecretRef `json:"certificateRefs,omitempty"`
	// MinVersion is the oldest TLS version accepted. Empty means TLS1.2.
	// +optional
	MinVersion TLSVersion `json:"minVersion,omitempty"`
	// MaxVersion is the newest TLS version accepted. Empty means TLS1.3.
	// +optional
	MaxVersion TLSVersion `json:"maxVersion,omitempty"`
	// CipherSuites limits TLS 1.2 cipher suites (IANA names). Empty means
	// Go's secure defaults. TLS 1.3 suites are not configurable.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	CipherSuites []string `json:"cipherSuites,omitempty"`
	// SSLRedirect makes the gateway's plain-HTTP listeners redirect to this
	// listener with 308 (301 if redirectScheme says so). False by default.
	// +optional
	SSLRedirect bool `json:"sslRedirect,omitempty"`
	// ClientAuth asks clients for certificates verified against a CA.
	// +optional
	ClientAuth *ClientAuth `json:"clientAuth,omitempty"`
}

// ClientAuth configures client-certificate verification (mutual TLS).
// +kubebuilder:validation:XValidation:rule="!has(self.mode) || self.mode == 'None' || has(self.caSecretRef)",message="caSecretRef is required unless mode is None"
type ClientAuth struct {
	// Mode is None, Request or Require. Empty means Require.
	// +optional
	Mode ClientAuthMode `json:"mode,omitempty"`
	// CASecretRef names a Secret whose ca.crt holds the trusted CAs.
	// +optional
	CASecretRef *SecretRef `json:"caSecretRef,omitempty"`
}

// RedirectScheme redirects every request on a listener to another scheme.
type RedirectScheme struct {
	// Enabled turns the redirect on.
	Enabled bool `json:"enabled"`
	// Scheme to redirect to. Empty means https.
	// +optional
	// +kubebuilder:validation:Enum=http;https
	Scheme string `json:"scheme,omitempty"`
	// StatusCode of the redirect. Zero means 301.
	// +optional
	// +kubebuilder:validation:Enum=301;302;303;307;308
	StatusCode int32 `json:"statusCode,omitempty"`
	// Port in the Location header. Zero means the scheme's default port (or
	// the port of the gateway's HTTPS listener).
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port,omitempty"`
}

// RouteNamespacesFrom says which namespaces' routes may attach.
// +kubebuilder:validation:Enum=Same;All;Selector
type RouteNamespacesFrom string

const (
	NamespacesFromSame     RouteNamespacesFrom = "Same"
	NamespacesFromAll      RouteNamespacesFrom = "All"
	NamespacesFromSelector RouteNamespacesFrom = "Selector"
)

// AllowedRoutes limits which routes may attach to a listener, as in Gateway
// API.
// +kubebuilder:validation:XValidation:rule="!has(self.from) || self.from != 'Selector' || has(self.selector)",message="selector is required when from is Selector"
type AllowedRoutes struct {
	// From is Same (the gateway's namespace), All, or Selector. Empty means
	// Same.
	// +optional
	From RouteNamespacesFrom `json:"from,omitempty"`
	// Selector selects namespaces by label when from is Selector.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
}

// Listener is one port and protocol of a gateway.
// +kubebuilder:validation:XValidation:rule="!(self.protocol in ['HTTPS', 'HTTP3']) || has(self.tls)",message="tls is required for HTTPS and HTTP3 listeners",fieldPath=".tls"
// +kubebuilder:validation:XValidation:rule="self.protocol != 'TLS' || has(self.tls)",message="tls (mode Terminate or Passthrough) is required for TLS listeners",fieldPath=".tls"
// +kubebuilder:validation:XValidation:rule="!(self.protocol in ['HTTP', 'TCP', 'UDP']) || !has(self.tls)",message="tls is not allowed on HTTP, TCP and UDP listeners",fieldPath=".tls"
// +kubebuilder:validation:XValidation:rule="!(self.protocol in ['HTTPS', 'HTTP3']) || !has(self.tls.mode) || self.tls.mode == 'Terminate'",message="HTTPS and HTTP3 listeners terminate TLS; use protocol TLS for passthrough",fieldPath=".tls.mode"
// +kubebuilder:validation:XValidation:rule="!has(self.redirectScheme) || self.protocol == 'HTTP' || self.protocol == 'HTTPS'",message="redirectScheme applies to HTTP and HTTPS listeners only",fieldPath=".redirectScheme"
// +kubebuilder:validation:XValidation:rule="!has(self.hostnames) || !(self.protocol in ['TCP', 'UDP'])",message="hostnames cannot be matched on TCP and UDP listeners",fieldPath=".hostnames"
type Listener struct {
	// Name is unique within the gateway; routes name it in
	// parentRefs[].sectionName.
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// Port to listen on.
	Port PortNumber `json:"port"`
	// Protocol is HTTP, HTTPS, TLS, TCP, UDP or HTTP3.
	Protocol ListenerProtocol `json:"protocol"`
	// Hostnames this listener accepts (exact or "*.example.com"). Empty means
	// any. Matched against Host/:authority, or SNI for TLS listeners.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:Pattern=`^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +kubebuilder:validation:items:MaxLength=253
	Hostnames []string `json:"hostnames,omitempty"`
	// TLS settings; required for HTTPS, HTTP3 and TLS listeners.
	// +optional
	TLS *ListenerTLS `json:"tls,omitempty"`
	// RedirectScheme answers every request with a redirect (commonly
	// http → https).
	// +optional
	RedirectScheme *RedirectScheme `json:"redirectScheme,omitempty"`
	// AllowedRoutes limits which namespaces' routes attach. Nil means routes
	// of the gateway's own namespace.
	// +optional
	AllowedRoutes *AllowedRoutes `json:"allowedRoutes,omitempty"`
}

// CompressionAlgorithm is a response content encoding.
// +kubebuilder:validation:Enum=gzip;br;zstd
type CompressionAlgorithm string

// Compression compresses responses for clients that accept it.
type Compression struct {
	// Enabled turns compression on.
	Enabled bool `json:"enabled"`
	// Algorithms in order of preference. Empty means gzip.
	// +optional
	// +listType=set
	Algorithms []CompressionAlgorithm `json:"algorithms,omitempty"`
	// MinSize in bytes below which responses are sent as they are. Zero
	// means 1024.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MinSize int64 `json:"minSize,omitempty"`
	// ContentTypes that are compressed (prefix match, e.g. "text/").
	// Empty means text/*, application/json, application/javascript,
	// application/xml and image/svg+xml.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	ContentTypes []string `json:"contentTypes,omitempty"`
}

// ProxyGatewaySpec is a set of listeners on a VIP.
// +kubebuilder:validation:XValidation:rule="self.listeners.all(l, self.listeners.exists_one(m, m.name == l.name))",message="listener names must be unique",fieldPath=".listeners"
// +kubebuilder:validation:XValidation:rule="self.listeners.all(l, self.listeners.exists_one(m, m.port == l.port && (m.protocol in ['UDP', 'HTTP3']) == (l.protocol in ['UDP', 'HTTP3'])))",message="two listeners use the same port and transport (TCP or UDP)",fieldPath=".listeners"
type ProxyGatewaySpec struct {
	// VIPRef names the ProxyVIP (cluster-scoped) whose addresses the
	// listeners bind. Empty means every address of the node (0.0.0.0 and ::).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	VIPRef string `json:"vipRef,omitempty"`
	// Listeners of the gateway.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	Listeners []Listener `json:"listeners"`
	// Compression of HTTP responses on every HTTP-serving listener.
	// +optional
	Compression *Compression `json:"compression,omitempty"`
	// PolicyRefs name ProxyPolicies (same namespace) applied to every request
	// through this gateway, before route policies.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	PolicyRefs []LocalObjectRef `json:"policyRefs,omitempty"`
}

// ListenerStatus is the observed state of one listener.
type ListenerStatus struct {
	// Name of the listener.
	Name string `json:"name"`
	// AttachedRoutes counts routes attached to the listener.
	AttachedRoutes int32 `json:"attachedRoutes"`
	// DataPath is FastPath (XDP) or SlowPath (Go proxy), from the plan.
	// +optional
	DataPath string `json:"dataPath,omitempty"`
	// Conditions of the listener.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ProxyGatewayStatus is the observed state of a gateway.
type ProxyGatewayStatus struct {
	// Addresses the gateway is reachable on.
	// +optional
	Addresses []string `json:"addresses,omitempty"`
	// Listeners status, one per listener.
	// +optional
	// +listType=map
	// +listMapKey=name
	Listeners []ListenerStatus `json:"listeners,omitempty"`
	// Conditions: Accepted, ResolvedRefs, Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// ObservedGeneration is the spec generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// ProxyGateway binds listeners to a VIP.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=negw,categories=novaedge
// +kubebuilder:printcolumn:name="VIP",type=string,JSONPath=`.spec.vipRef`
// +kubebuilder:printcolumn:name="Addresses",type=string,JSONPath=`.status.addresses`
// +kubebuilder:printcolumn:name="Accepted",type=string,JSONPath=`.status.conditions[?(@.type=="Accepted")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ProxyGateway struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ProxyGatewaySpec   `json:"spec"`
	Status ProxyGatewayStatus `json:"status,omitempty"`
}

// ProxyGatewayList is a list of ProxyGateways.
// +kubebuilder:object:root=true
type ProxyGatewayList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ProxyGateway `json:"items"`
}
