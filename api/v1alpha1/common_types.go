package v1alpha1

import "time"

// Duration is a Go duration string such as "300ms", "10s" or "1m30s".
// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
// +kubebuilder:validation:MaxLength=32
type Duration string

// Std returns the duration, or 0 when d is empty or malformed (the schema
// rejects malformed values before they reach Go code).
func (d Duration) Std() time.Duration {
	v, err := time.ParseDuration(string(d))
	if err != nil {
		return 0
	}
	return v
}

// PortNumber is a TCP or UDP port.
// +kubebuilder:validation:Minimum=1
// +kubebuilder:validation:Maximum=65535
type PortNumber int32

// SecretKeyRef names one key of a Secret.
type SecretKeyRef struct {
	// Name of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Namespace of the Secret. Empty means the namespace of the referring
	// resource; for cluster-scoped resources it means the namespace the
	// controller runs in (novaedge-system by default).
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace,omitempty"`
	// Key in the Secret's data. Empty means the kind-specific default
	// ("password" for BGP, "key" for OSPF).
	// +optional
	Key string `json:"key,omitempty"`
}

// SecretRef names a Secret (for TLS: type kubernetes.io/tls with tls.crt
// and tls.key).
type SecretRef struct {
	// Name of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Namespace of the Secret. Empty means the referring resource's namespace.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace,omitempty"`
}

// LocalObjectRef names a resource of a known kind by name.
type LocalObjectRef struct {
	// Name of the referenced resource.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// NamespacedRef names a namespaced resource of a known kind.
type NamespacedRef struct {
	// Name of the referenced resource.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Namespace of the referenced resource. Empty means the referring
	// resource's namespace.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace,omitempty"`
}

// Condition types shared by NovaEdge kinds.
const (
	// ConditionAccepted: the resource is valid and its references resolve.
	ConditionAccepted = "Accepted"
	// ConditionReady: the resource is serving on every node it should.
	ConditionReady = "Ready"
	// ConditionResolvedRefs: every reference (backends, secrets, pools) resolves.
	ConditionResolvedRefs = "ResolvedRefs"
	// ConditionDeprecatedField: a deprecated or insecure form is in use (for
	// example an inline OSPF authKey); the resource still works.
	ConditionDeprecatedField = "DeprecatedField"
)
