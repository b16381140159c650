package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// ProxyIPPoolSpec is a set of addresses that ProxyVIPs (with poolRef) and
// Services of type LoadBalancer are allocated from.
// +kubebuilder:validation:XValidation:rule="(has(self.cidrs) ? size(self.cidrs) : 0) + (has(self.addresses) ? size(self.addresses) : 0) > 0",message="a pool needs at least one entry in cidrs or addresses"
type ProxyIPPoolSpec struct {
	// CIDRs are address blocks, e.g. "10.200.0.0/24" or "2001:db8::/120".
	// Every address of a block is allocatable, network and broadcast
	// addresses of IPv4 blocks included unless avoidBuggyIPs is set.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=64
	// +kubebuilder:validation:items:XValidation:rule="isCIDR(self) && cidr(self) == cidr(self).masked()",message="must be a CIDR with no host bits set, e.g. 10.200.0.0/24"
	CIDRs []string `json:"cidrs,omitempty"`

	// Addresses are single addresses ("10.200.1.10", "10.200.1.10/32",
	// "2001:db8::5/128") or inclusive ranges ("10.200.1.10-10.200.1.20").
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=1024
	// +kubebuilder:validation:items:MaxLength=96
	// +kubebuilder:validation:items:XValidation:rule="isIP(self) || (isCIDR(self) && cidr(self).prefixLength() == (cidr(self).ip().family() == 4 ? 32 : 128)) || (self.contains('-') && size(self.split('-')) == 2 && isIP(self.split('-')[0]) && isIP(self.split('-')[1]) && ip(self.split('-')[0]).family() == ip(self.split('-')[1]).family())",message="must be an address, a host prefix (/32 or /128) or a range start-end of one family"
	Addresses []string `json:"addresses,omitempty"`

	// AutoAssign lets VIPs and Services that name no pool take addresses from
	// this one. Nil means true. A VIP that names the pool in poolRef is served
	// either way.
	// +optional
	AutoAssign *bool `json:"autoAssign,omitempty"`

	// AvoidBuggyIPs skips addresses ending in .0 and .255, which some old
	// client stacks treat as broadcast. False by default.
	// +optional
	AvoidBuggyIPs bool `json:"avoidBuggyIPs,omitempty"`
}

// PoolAllocation records one address given out by a pool.
type PoolAllocation struct {
	// Address allocated, without prefix length.
	Address string `json:"address"`
	// Owner is what holds the address: "ProxyVIP/name" or
	// "Service/namespace/name".
	Owner string `json:"owner"`
}

// ProxyIPPoolStatus shows what the pool has given out.
type ProxyIPPoolStatus struct {
	// Allocations lists every allocated address and its owner.
	// +optional
	// +listType=map
	// +listMapKey=address
	Allocations []PoolAllocation `json:"allocations,omitempty"`
	// Allocated is the number of allocated addresses.
	// +optional
	Allocated int64 `json:"allocated,omitempty"`
	// Available is the number of addresses still free (capped at 2^62 for
	// large IPv6 blocks).
	// +optional
	Available int64 `json:"available,omitempty"`
	// Conditions: Accepted (false on overlap with another pool or invalid
	// ranges), Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// ObservedGeneration is the spec generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// ProxyIPPool is a cluster-scoped pool of addresses for VIPs and Services of
// type LoadBalancer.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=nepool,categories=novaedge
// +kubebuilder:printcolumn:name="Allocated",type=integer,JSONPath=`.status.allocated`
// +kubebuilder:printcolumn:name="Available",type=integer,JSONPath=`.status.available`
// +kubebuilder:printcolumn:name="Auto",type=boolean,JSONPath=`.spec.autoAssign`
// +kubebuilder:printcolumn:name="CIDRs",type=string,JSONPath=`.spec.cidrs`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ProxyIPPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ProxyIPPoolSpec   `json:"spec"`
	Status ProxyIPPoolStatus `json:"status,omitempty"`
}

// ProxyIPPoolList is a list of ProxyIPPools.
// +kubebuilder:object:root=true
type ProxyIPPoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ProxyIPPool `json:"items"`
}
