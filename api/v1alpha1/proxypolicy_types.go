package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// PolicyType names the kind of policy.
// +kubebuilder:validation:Enum=RateLimit;JWT;CORS;IPFilter
type PolicyType string

const (
	PolicyRateLimit PolicyType = "RateLimit"
	PolicyJWT       PolicyType = "JWT"
	PolicyCORS      PolicyType = "CORS"
	PolicyIPFilter  PolicyType = "IPFilter"
)

// RateLimitKey says what a rate limit counts per.
// +kubebuilder:validation:Enum=SourceIP;Header;Global
type RateLimitKey string

// RateLimit is a token bucket per key, local to each node.
// +kubebuilder:validation:XValidation:rule="!has(self.key) || self.key != 'Header' || has(self.header)",message="header is required when key is Header"
type RateLimit struct {
	// RequestsPerSecond refilled into each bucket.
	// +kubebuilder:validation:Minimum=1
	RequestsPerSecond int32 `json:"requestsPerSecond"`
	// Burst is the bucket size. Zero means requestsPerSecond.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Burst int32 `json:"burst,omitempty"`
	// Key is SourceIP, Header or Global. Empty means SourceIP.
	// +optional
	Key RateLimitKey `json:"key,omitempty"`
	// Header counted when key is Header.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Header string `json:"header,omitempty"`
}

// JWT validates bearer tokens.
// +kubebuilder:validation:XValidation:rule="has(self.jwksURI) != has(self.jwksSecretRef)",message="set exactly one of jwksURI or jwksSecretRef"
type JWT struct {
	// Issuer that tokens must carry in "iss".
	// +kubebuilder:validation:MinLength=1
	Issuer string `json:"issuer"`
	// Audiences of which "aud" must contain one. Empty means any.
	// +optional
	Audiences []string `json:"audiences,omitempty"`
	// JWKSURI is fetched (and refreshed) for the signing keys.
	// +optional
	// +kubebuilder:validation:XValidation:rule="isURL(self) && (self.startsWith('https://') || self.startsWith('http://'))",message="must be an http(s) URL"
	JWKSURI string `json:"jwksURI,omitempty"`
	// JWKSSecretRef names a Secret whose key "jwks" holds the keys.
	// +optional
	JWKSSecretRef *SecretRef `json:"jwksSecretRef,omitempty"`
	// HeaderName carrying the token. Empty means Authorization (Bearer).
	// +optional
	HeaderName string `json:"headerName,omitempty"`
	// ForwardClaims copies claims to request headers (claim → header).
	// +optional
	ForwardClaims map[string]string `json:"forwardClaims,omitempty"`
}

// CORS answers preflight requests and adds CORS response headers.
type CORS struct {
	// AllowOrigins, exact or "*" or "https://*.example.com".
	// +kubebuilder:validation:MinItems=1
	AllowOrigins []string `json:"allowOrigins"`
	// AllowMethods. Empty means GET, HEAD and POST.
	// +optional
	AllowMethods []string `json:"allowMethods,omitempty"`
	// AllowHeaders the client may send.
	// +optional
	AllowHeaders []string `json:"allowHeaders,omitempty"`
	// ExposeHeaders the client may read.
	// +optional
	ExposeHeaders []string `json:"exposeHeaders,omitempty"`
	// MaxAge of preflight results. Empty means 5s (the browsers' default).
	// +optional
	MaxAge Duration `json:"maxAge,omitempty"`
	// AllowCredentials sets Access-Control-Allow-Credentials.
	// +optional
	AllowCredentials bool `json:"allowCredentials,omitempty"`
}

// IPFilter allows or denies clients by address. Deny wins over allow; with
// a non-empty allow list, everything not in it is denied.
// +kubebuilder:validation:XValidation:rule="(has(self.allow) ? size(self.allow) : 0) + (has(self.deny) ? size(self.deny) : 0) > 0",message="set allow or deny"
type IPFilter struct {
	// Allow lists CIDRs allowed.
	// +optional
	// +kubebuilder:validation:MaxItems=1024
	// +kubebuilder:validation:items:MaxLength=64
	// +kubebuilder:validation:items:XValidation:rule="isCIDR(self)",message="must be a CIDR"
	Allow []string `json:"allow,omitempty"`
	// Deny lists CIDRs denied.
	// +optional
	// +kubebuilder:validation:MaxItems=1024
	// +kubebuilder:validation:items:MaxLength=64
	// +kubebuilder:validation:items:XValidation:rule="isCIDR(self)",message="must be a CIDR"
	Deny []string `json:"deny,omitempty"`
}

// ProxyPolicySpec is one policy; type names the field that is set.
// Policies take effect where gateways or routes name them in policyRefs.
// +kubebuilder:validation:XValidation:rule="(self.type == 'RateLimit') == has(self.rateLimit)",message="rateLimit must be set exactly when type is RateLimit"
// +kubebuilder:validation:XValidation:rule="(self.type == 'JWT') == has(self.jwt)",message="jwt must be set exactly when type is JWT"
// +kubebuilder:validation:XValidation:rule="(self.type == 'CORS') == has(self.cors)",message="cors must be set exactly when type is CORS"
// +kubebuilder:validation:XValidation:rule="(self.type == 'IPFilter') == has(self.ipFilter)",message="ipFilter must be set exactly when type is IPFilter"
type ProxyPolicySpec struct {
	// Type is RateLimit, JWT, CORS or IPFilter.
	Type PolicyType `json:"type"`
	// +optional
	RateLimit *RateLimit `json:"rateLimit,omitempty"`
	// +optional
	JWT *JWT `json:"jwt,omitempty"`
	// +optional
	CORS *CORS `json:"cors,omitempty"`
	// +optional
	IPFilter *IPFilter `json:"ipFilter,omitempty"`
}

// ProxyPolicyStatus is the observed state of a policy.
type ProxyPolicyStatus struct {
	// Conditions: Accepted, ResolvedRefs.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// ObservedGeneration is the spec generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// ProxyPolicy is a rate limit, JWT validation, CORS or IP filter applied to
// the gateways and routes that reference it.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=nepol,categories=novaedge
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.spec.type`
// +kubebuilder:printcolumn:name="Accepted",type=string,JSONPath=`.status.conditions[?(@.type=="Accepted")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ProxyPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ProxyPolicySpec   `json:"spec"`
	Status ProxyPolicyStatus `json:"status,omitempty"`
}

// ProxyPolicyList is a list of ProxyPolicies.
// +kubebuilder:object:root=true
type ProxyPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ProxyPolicy `json:"items"`
}
