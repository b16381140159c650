package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// ParentRef attaches a route to a gateway, or to one listener of it.
type ParentRef struct {
	// Name of the ProxyGateway.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Namespace of the gateway. Empty means the route's namespace.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace,omitempty"`
	// SectionName is the name of one listener. Empty means every listener
	// whose protocol suits the route.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	SectionName string `json:"sectionName,omitempty"`
	// Port selects listeners by port. Zero means any.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port,omitempty"`
}

// PathMatchType is how a path is compared.
// +kubebuilder:validation:Enum=Exact;PathPrefix;RegularExpression
type PathMatchType string

const (
	PathMatchExact             PathMatchType = "Exact"
	PathMatchPathPrefix        PathMatchType = "PathPrefix"
	PathMatchRegularExpression PathMatchType = "RegularExpression"
)

// PathMatch matches the request path (Gateway API HTTPPathMatch).
// +kubebuilder:validation:XValidation:rule="(has(self.type) && self.type == 'RegularExpression') || self.value.startsWith('/')",message="value must be an absolute path"
// +kubebuilder:validation:XValidation:rule="(has(self.type) && self.type == 'RegularExpression') || !self.value.contains('//')",message="value must not contain '//'"
type PathMatch struct {
	// Type is Exact, PathPrefix or RegularExpression (RE2). Empty means
	// PathPrefix.
	// +optional
	Type PathMatchType `json:"type,omitempty"`
	// Value to match. Empty means "/".
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Value string `json:"value,omitempty"`
}

// StringMatchType is how a header or query value is compared.
// +kubebuilder:validation:Enum=Exact;RegularExpression
type StringMatchType string

const (
	StringMatchExact             StringMatchType = "Exact"
	StringMatchRegularExpression StringMatchType = "RegularExpression"
)

// HeaderMatch matches one request header (Gateway API HTTPHeaderMatch).
type HeaderMatch struct {
	// Type is Exact or RegularExpression. Empty means Exact.
	// +optional
	Type StringMatchType `json:"type,omitempty"`
	// Name of the header (case-insensitive).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9!#$%&'*+\-.^_\x60|~]+$`
	Name string `json:"name"`
	// Value to match.
	// +kubebuilder:validation:MaxLength=4096
	Value string `json:"value"`
}

// QueryParamMatch matches one query parameter (Gateway API
// HTTPQueryParamMatch).
type QueryParamMatch struct {
	// Type is Exact or RegularExpression. Empty means Exact.
	// +optional
	Type StringMatchType `json:"type,omitempty"`
	// Name of the parameter (case-sensitive).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Name string `json:"name"`
	// Value to match.
	// +kubebuilder:validation:MaxLength=1024
	Value string `json:"value"`
}

// HTTPMethod is an HTTP request method.
// +kubebuilder:validation:Enum=GET;HEAD;POST;PUT;DELETE;CONNECT;OPTIONS;TRACE;PATCH
type HTTPMethod string

// RouteMatch is one set of conditions that must all hold (Gateway API
// HTTPRouteMatch). A rule matches when any of its matches does.
type RouteMatch struct {
	// Path to match. Nil means PathPrefix "/".
	// +optional
	Path *PathMatch `json:"path,omitempty"`
	// Headers that must all match.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	Headers []HeaderMatch `json:"headers,omitempty"`
	// QueryParams that must all match.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	QueryParams []QueryParamMatch `json:"queryParams,omitempty"`
	// Method that must match. Empty means any.
	// +optional
	Method HTTPMethod `json:"method,omitempty"`
}

// HeaderValue is a header name and value.
type HeaderValue struct {
	// Name of the header.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9!#$%&'*+\-.^_\x60|~]+$`
	Name string `json:"name"`
	// Value of the header.
	// +kubebuilder:validation:MaxLength=4096
	Value string `json:"value"`
}

// HeaderModifier changes headers (Gateway API HTTPHeaderFilter).
type HeaderModifier struct {
	// Set overwrites headers.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	Set []HeaderValue `json:"set,omitempty"`
	// Add appends header values.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	Add []HeaderValue `json:"add,omitempty"`
	// Remove deletes headers by name.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	Remove []string `json:"remove,omitempty"`
}

// PathModifierType is how a path is rewritten.
// +kubebuilder:validation:Enum=ReplaceFullPath;ReplacePrefixMatch
type PathModifierType string

const (
	ReplaceFullPath    PathModifierType = "ReplaceFullPath"
	ReplacePrefixMatch PathModifierType = "ReplacePrefixMatch"
)

// PathModifier rewrites a path (Gateway API HTTPPathModifier).
// +kubebuilder:validation:XValidation:rule="self.type == 'ReplaceFullPath' ? has(self.replaceFullPath) && !has(self.replacePrefixMatch) : has(self.replacePrefixMatch) && !has(self.replaceFullPath)",message="set replaceFullPath for type ReplaceFullPath, replacePrefixMatch for ReplacePrefixMatch"
type PathModifier struct {
	// Type is ReplaceFullPath or ReplacePrefixMatch (only with a PathPrefix
	// match).
	Type PathModifierType `json:"type"`
	// ReplaceFullPath is the new path.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	ReplaceFullPath *string `json:"replaceFullPath,omitempty"`
	// ReplacePrefixMatch replaces the matched prefix.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	ReplacePrefixMatch *string `json:"replacePrefixMatch,omitempty"`
}

// URLRewrite rewrites the request before it is forwarded.
type URLRewrite struct {
	// Hostname replaces the Host header. Empty keeps it.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Hostname string `json:"hostname,omitempty"`
	// Path rewrite. Nil keeps the path.
	// +optional
	Path *PathModifier `json:"path,omitempty"`
}

// RequestRedirect answers with a redirect instead of forwarding.
type RequestRedirect struct {
	// Scheme of the Location. Empty keeps the request's.
	// +optional
	// +kubebuilder:validation:Enum=http;https
	Scheme string `json:"scheme,omitempty"`
	// Hostname of the Location. Empty keeps the request's.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Hostname string `json:"hostname,omitempty"`
	// Path of the Location. Nil keeps the request's.
	// +optional
	Path *PathModifier `json:"path,omitempty"`
	// Port of the Location. Zero means the scheme's default.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port,omitempty"`
	// StatusCode is 301, 302, 303, 307 or 308. Zero means 302.
	// +optional
	// +kubebuilder:validation:Enum=301;302;303;307;308
	StatusCode int32 `json:"statusCode,omitempty"`
}

// RequestMirror sends a copy of each request to another backend; its
// response is discarded.
type RequestMirror struct {
	// BackendRef is the ProxyBackend receiving copies.
	BackendRef NamespacedRef `json:"backendRef"`
	// Percent of requests mirrored. Zero means 100.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	Percent int32 `json:"percent,omitempty"`
}

// FilterType names a route filter.
// +kubebuilder:validation:Enum=RequestHeaderModifier;ResponseHeaderModifier;URLRewrite;RequestRedirect;RequestMirror
type FilterType string

const (
	FilterRequestHeaderModifier  FilterType = "RequestHeaderModifier"
	FilterResponseHeaderModifier FilterType = "ResponseHeaderModifier"
	FilterURLRewrite             FilterType = "URLRewrite"
	FilterRequestRedirect        FilterType = "RequestRedirect"
	FilterRequestMirror          FilterType = "RequestMirror"
)

// RouteFilter is one request or response transformation (Gateway API
// HTTPRouteFilter): type names which one field is set.
// +kubebuilder:validation:XValidation:rule="(self.type == 'RequestHeaderModifier') == has(self.requestHeaderModifier)",message="requestHeaderModifier must be set exactly when type is RequestHeaderModifier"
// +kubebuilder:validation:XValidation:rule="(self.type == 'ResponseHeaderModifier') == has(self.responseHeaderModifier)",message="responseHeaderModifier must be set exactly when type is ResponseHeaderModifier"
// +kubebuilder:validation:XValidation:rule="(self.type == 'URLRewrite') == has(self.urlRewrite)",message="urlRewrite must be set exactly when type is URLRewrite"
// +kubebuilder:validation:XValidation:rule="(self.type == 'RequestRedirect') == has(self.requestRedirect)",message="requestRedirect must be set exactly when type is RequestRedirect"
// +kubebuilder:validation:XValidation:rule="(self.type == 'RequestMirror') == has(self.requestMirror)",message="requestMirror must be set exactly when type is RequestMirror"
type RouteFilter struct {
	// Type of the filter.
	Type FilterType `json:"type"`
	// +optional
	RequestHeaderModifier *HeaderModifier `json:"requestHeaderModifier,omitempty"`
	// +optional
	ResponseHeaderModifier *HeaderModifier `json:"responseHeaderModifier,omitempty"`
	// +optional
	URLRewrite *URLRewrite `json:"urlRewrite,omitempty"`
	// +optional
	RequestRedirect *RequestRedirect `json:"requestRedirect,omitempty"`
	// +optional
	RequestMirror *RequestMirror `json:"requestMirror,omitempty"`
}

// BackendRef sends a share of a rule's traffic to a ProxyBackend.
type BackendRef struct {
	// Name of the ProxyBackend.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Namespace of the backend. Empty means the route's namespace.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace,omitempty"`
	// Weight relative to the rule's other backendRefs. Nil means 1; 0 sends
	// nothing (a backend kept warm for a later shift).
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000000
	Weight *int32 `json:"weight,omitempty"`
}

// RetryOn is a condition that allows a retry.
// +kubebuilder:validation:Enum="5xx";"gateway-error";"connection-failure";"reset";"retriable-status-codes";"refused-stream"
type RetryOn string

// RetryPolicy retries failed requests.
type RetryPolicy struct {
	// MaxRetries is the number of retries after the first try. Zero disables
	// retries.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10
	MaxRetries int32 `json:"maxRetries"`
	// RetryOn lists the conditions that allow a retry. Empty means
	// connection-failure and reset.
	// +optional
	// +listType=set
	RetryOn []RetryOn `json:"retryOn,omitempty"`
	// RetriableStatusCodes are retried when retryOn has
	// retriable-status-codes.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:Minimum=100
	// +kubebuilder:validation:items:Maximum=599
	RetriableStatusCodes []int32 `json:"retriableStatusCodes,omitempty"`
	// PerTryTimeout bounds each try. Empty means the rule's request timeout
	// alone bounds the tries.
	// +optional
	PerTryTimeout Duration `json:"perTryTimeout,omitempty"`
	// Backoff is the base of the jittered exponential wait between tries.
	// Empty means 25ms.
	// +optional
	Backoff Duration `json:"backoff,omitempty"`
	// RetryNonIdempotent allows retrying POST, PATCH and other
	// non-idempotent requests. False by default: only GET, HEAD, OPTIONS,
	// TRACE, PUT and DELETE are retried (and any request that never reached
	// a backend).
	// +optional
	RetryNonIdempotent bool `json:"retryNonIdempotent,omitempty"`
	// BudgetPercent caps retries at this share of active requests to the
	// backend, so retries cannot multiply load during an outage. Zero means
	// 20.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	BudgetPercent int32 `json:"budgetPercent,omitempty"`
}

// RouteTimeouts bound a request (Gateway API HTTPRouteTimeouts).
type RouteTimeouts struct {
	// Request bounds the whole request, retries included. Empty means none.
	// +optional
	Request Duration `json:"request,omitempty"`
	// BackendRequest bounds each request to a backend. Empty means
	// retry.perTryTimeout, or no bound.
	// +optional
	BackendRequest Duration `json:"backendRequest,omitempty"`
	// Idle closes streams (WebSocket, gRPC streaming) idle this long. Empty
	// means 1h.
	// +optional
	Idle Duration `json:"idle,omitempty"`
}

// RouteRule is one set of matches and what happens to matching requests.
// On TCP, UDP and TLS-passthrough listeners only backendRefs apply.
type RouteRule struct {
	// Name of the rule, for status and metrics.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name,omitempty"`
	// Matches; the rule applies when any matches. Empty means every request.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	Matches []RouteMatch `json:"matches,omitempty"`
	// Filters applied in order.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	Filters []RouteFilter `json:"filters,omitempty"`
	// BackendRefs receive the traffic, split by weight. Empty (with no
	// redirect filter) answers 500, as Gateway API specifies.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	BackendRefs []BackendRef `json:"backendRefs,omitempty"`
	// Retry policy. Nil means no retries.
	// +optional
	Retry *RetryPolicy `json:"retry,omitempty"`
	// Timeouts of matching requests.
	// +optional
	Timeouts *RouteTimeouts `json:"timeouts,omitempty"`
	// PolicyRefs name ProxyPolicies (same namespace) for this rule, applied
	// after the route's and the gateway's.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	PolicyRefs []LocalObjectRef `json:"policyRefs,omitempty"`
}

// ProxyRouteSpec routes requests or connections to backends.
//
// A route with parentRefs attaches to the gateways (or listeners) it names.
// A route without parentRefs attaches to every HTTP, HTTPS and HTTP3
// listener of every gateway in its own namespace whose hostnames intersect
// the route's hostnames (a listener or route with no hostnames accepts
// any). TCP, UDP and TLS listeners take only routes that name them.
type ProxyRouteSpec struct {
	// ParentRefs attach the route to gateways or listeners.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	ParentRefs []ParentRef `json:"parentRefs,omitempty"`
	// Hostnames the route serves (exact or "*.example.com"); matched
	// against Host/:authority, or SNI on TLS passthrough listeners. Empty
	// means any.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:Pattern=`^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +kubebuilder:validation:items:MaxLength=253
	Hostnames []string `json:"hostnames,omitempty"`
	// Rules of the route, tried by Gateway API precedence (not list order).
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	Rules []RouteRule `json:"rules"`
	// PolicyRefs name ProxyPolicies (same namespace) for every rule.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	PolicyRefs []LocalObjectRef `json:"policyRefs,omitempty"`
}

// RouteParentStatus is the state of a route on one gateway listener.
type RouteParentStatus struct {
	// ParentRef is the gateway (and listener) this entry describes.
	ParentRef ParentRef `json:"parentRef"`
	// Conditions: Accepted, ResolvedRefs.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ProxyRouteStatus is the observed state of a route.
type ProxyRouteStatus struct {
	// Parents lists the gateways the route is attached to.
	// +optional
	Parents []RouteParentStatus `json:"parents,omitempty"`
	// Conditions: Accepted, ResolvedRefs.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// ObservedGeneration is the spec generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// ProxyRoute routes HTTP requests, TLS connections (by SNI), or TCP and UDP
// traffic from gateway listeners to backends.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=nert,categories=novaedge
// +kubebuilder:printcolumn:name="Hostnames",type=string,JSONPath=`.spec.hostnames`
// +kubebuilder:printcolumn:name="Accepted",type=string,JSONPath=`.status.conditions[?(@.type=="Accepted")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ProxyRoute struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ProxyRouteSpec   `json:"spec"`
	Status ProxyRouteStatus `json:"status,omitempty"`
}

// ProxyRouteList is a list of ProxyRoutes.
// +kubebuilder:object:root=true
type ProxyRouteList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ProxyRoute `json:"items"`
}
