package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// VIPMode is how a VIP is made reachable.
// +kubebuilder:validation:Enum=L2ARP;BGP;OSPF;Local
type VIPMode string

const (
	// VIPModeL2ARP: one active node answers ARP/NDP for the address;
	// standbys take over on failure.
	VIPModeL2ARP VIPMode = "L2ARP"
	// VIPModeBGP: every healthy node announces a host route over BGP; the
	// router spreads traffic with ECMP.
	VIPModeBGP VIPMode = "BGP"
	// VIPModeOSPF: every healthy node announces a host route into OSPF.
	VIPModeOSPF VIPMode = "OSPF"
	// VIPModeLocal: the address is bound on the host only and announced
	// nowhere (single-node and standalone use, or when the network already
	// routes the address to the node).
	VIPModeLocal VIPMode = "Local"
)

// AddressFamily selects IPv4, IPv6 or both.
// +kubebuilder:validation:Enum=ipv4;ipv6;dual
type AddressFamily string

const (
	AddressFamilyIPv4 AddressFamily = "ipv4"
	AddressFamilyIPv6 AddressFamily = "ipv6"
	AddressFamilyDual AddressFamily = "dual"
)

// ProxyVIPSpec describes a virtual IP and its announcement.
//
// +kubebuilder:validation:XValidation:rule="has(self.address) || has(self.ipv6Address) || has(self.poolRef)",message="set address (or ipv6Address) or poolRef"
// +kubebuilder:validation:XValidation:rule="self.mode != 'BGP' || has(self.bgpConfig)",message="bgpConfig is required when mode is BGP",fieldPath=".bgpConfig"
// +kubebuilder:validation:XValidation:rule="self.mode != 'OSPF' || has(self.ospfConfig)",message="ospfConfig is required when mode is OSPF",fieldPath=".ospfConfig"
// +kubebuilder:validation:XValidation:rule="!has(self.address) || !has(self.addressFamily) || self.addressFamily != 'ipv6'",message="address must not be set when addressFamily is ipv6; use ipv6Address",fieldPath=".address"
// +kubebuilder:validation:XValidation:rule="!has(self.ipv6Address) || !has(self.addressFamily) || self.addressFamily != 'ipv4'",message="ipv6Address needs addressFamily ipv6 or dual",fieldPath=".ipv6Address"
// +kubebuilder:validation:XValidation:rule="!has(self.addressFamily) || self.addressFamily != 'dual' || has(self.poolRef) || (has(self.address) && has(self.ipv6Address))",message="addressFamily dual needs both address and ipv6Address, or a poolRef"
type ProxyVIPSpec struct {
	// Address is the IPv4 address, with or without /32 ("10.200.0.10/32").
	// Empty: allocated from poolRef.
	// +optional
	// +kubebuilder:validation:MaxLength=18
	// +kubebuilder:validation:XValidation:rule="(isIP(self) && ip(self).family() == 4) || (isCIDR(self) && cidr(self).ip().family() == 4 && cidr(self).prefixLength() == 32)",message="must be an IPv4 address or an IPv4 /32, e.g. 10.200.0.10/32"
	Address string `json:"address,omitempty"`

	// IPv6Address is the IPv6 address, with or without /128. Empty: allocated
	// from poolRef when addressFamily is ipv6 or dual.
	// +optional
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="(isIP(self) && ip(self).family() == 6) || (isCIDR(self) && cidr(self).ip().family() == 6 && cidr(self).prefixLength() == 128)",message="must be an IPv6 address or an IPv6 /128, e.g. 2001:db8::50/128"
	IPv6Address string `json:"ipv6Address,omitempty"`

	// Mode is how the VIP is announced: L2ARP, BGP, OSPF or Local.
	Mode VIPMode `json:"mode"`

	// AddressFamily is ipv4, ipv6 or dual. Empty means ipv4, or dual when
	// both address and ipv6Address are set.
	// +optional
	AddressFamily AddressFamily `json:"addressFamily,omitempty"`

	// Ports the VIP accepts traffic on. Gateway listeners on other ports of
	// this VIP are rejected. Empty means any port a gateway listens on.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	Ports []PortNumber `json:"ports,omitempty"`

	// PoolRef names the ProxyIPPool to allocate from. With address set too,
	// that address is requested from the pool and must lie inside it.
	// +optional
	PoolRef *LocalObjectRef `json:"poolRef,omitempty"`

	// NodeSelector limits the nodes that may serve the VIP. Nil selects every
	// node running an agent.
	// +optional
	NodeSelector *metav1.LabelSelector `json:"nodeSelector,omitempty"`

	// Interfaces the VIP is announced on (L2ARP) or bound to (Local). Empty:
	// for L2ARP the interface holding the route towards the VIP's subnet, else
	// the default route's; for Local the loopback interface.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=15
	Interfaces []string `json:"interfaces,omitempty"`

	// HealthPolicy sets how many healthy nodes the VIP needs.
	// +optional
	HealthPolicy *VIPHealthPolicy `json:"healthPolicy,omitempty"`

	// BGPConfig configures BGP announcement; required when mode is BGP,
	// ignored (with a warning) otherwise.
	// +optional
	BGPConfig *BGPConfig `json:"bgpConfig,omitempty"`

	// OSPFConfig configures OSPF announcement; required when mode is OSPF,
	// ignored (with a warning) otherwise.
	// +optional
	OSPFConfig *OSPFConfig `json:"ospfConfig,omitempty"`

	// BFD enables Bidirectional Forwarding Detection towards the BGP peers or
	// OSPF neighbours (and between L2ARP active and standby nodes). Nil
	// disables it.
	// +optional
	BFD *BFDConfig `json:"bfd,omitempty"`

	// Forwarding says how the XDP fast path hands the VIP's L4 flows to their
	// backends: NAT (the default) or DSR. Choose DSR when routers spread the
	// VIP over several nodes with ECMP (BGP, OSPF): only DSR survives a flow
	// moving to another node when the router rehashes; NAT with SNAT cannot.
	// DSR asks more of the backends (see mode). Nil means NAT with SNAT.
	// Listeners served by the Go slow path (HTTP, TLS termination, SNI
	// routing, policies) always proxy and ignore this.
	// +optional
	Forwarding *ForwardingConfig `json:"forwarding,omitempty"`
}

// ForwardingMode is how the XDP fast path delivers a flow to its backend.
// +kubebuilder:validation:Enum=NAT;DSR
type ForwardingMode string

const (
	// ForwardingModeNAT rewrites the destination to the backend (and, unless
	// preserveClientIP is set, the source to the node), so every reply
	// passes back through the node, which rewrites it back. It works with
	// any backend and any network.
	ForwardingModeNAT ForwardingMode = "NAT"
	// ForwardingModeDSR (direct server return) delivers the packet still
	// addressed to the VIP; the backend answers the client directly, so only
	// the requests cross the node.
	ForwardingModeDSR ForwardingMode = "DSR"
)

// Encapsulation is how DSR carries a packet to its backend.
// +kubebuilder:validation:Enum=IPIP;GUE;L2
type Encapsulation string

const (
	// EncapsulationIPIP wraps the packet in an outer IP header to the backend:
	// IPv4-in-IPv4, or IPv6-in-IPv6 for IPv6 backends.
	EncapsulationIPIP Encapsulation = "IPIP"
	// EncapsulationGUE wraps the packet in UDP (Generic UDP Encapsulation),
	// for networks that pass only UDP between the nodes and the backends.
	EncapsulationGUE Encapsulation = "GUE"
	// EncapsulationL2 rewrites only the destination MAC address: the backends
	// must be on the node's L2 segment.
	EncapsulationL2 Encapsulation = "L2"
)

// DefaultGUEPort is the UDP port of GUE-encapsulated DSR packets when
// guePort is not set.
const DefaultGUEPort = 6080

// ForwardingConfig is how the XDP fast path forwards a VIP's L4 flows.
//
// NAT (the default) works with any backend on any network: with SNAT the
// backend sees the node as the client. DSR keeps the client's address and
// sends replies straight from the backend to the client, but asks more of
// every backend:
//   - The VIP address on its loopback interface, so it accepts packets for
//     the VIP and answers from it (without answering ARP/NDP for it).
//   - For IPIP and GUE, the NovaEdge decapsulation program on the NIC the
//     packets arrive on (`novaedgectl decap attach <nic>`): many kernels lack
//     the ipip, ip6_tunnel and fou drivers, and the program needs none.
//   - A listener on the VIP's port: DSR cannot translate ports, so an
//     endpoint whose port differs from the listener's never sees its traffic
//     on that port (the build warns).
//
// With ECMP (several nodes announcing the VIP over BGP or OSPF) a router may
// move a flow to another node when the set of next hops changes. Only DSR
// survives that: every node picks the same backend and the packet still
// carries the client's and the VIP's addresses. NAT with SNAT cannot: the new
// node has another address and picks another source port, so the backend
// sees an unknown connection and resets it.
//
// +kubebuilder:validation:XValidation:rule="!has(self.preserveClientIP) || !self.preserveClientIP || !has(self.mode) || self.mode == 'NAT'",message="preserveClientIP applies only to mode NAT (DSR always keeps the client address): remove preserveClientIP or set mode NAT",fieldPath=".preserveClientIP"
// +kubebuilder:validation:XValidation:rule="!has(self.encapsulation) || (has(self.mode) && self.mode == 'DSR')",message="encapsulation applies only to mode DSR: set mode DSR or remove encapsulation",fieldPath=".encapsulation"
// +kubebuilder:validation:XValidation:rule="!has(self.guePort) || (has(self.mode) && self.mode == 'DSR')",message="guePort applies only to mode DSR with encapsulation GUE: set mode DSR and encapsulation GUE, or remove guePort",fieldPath=".guePort"
// +kubebuilder:validation:XValidation:rule="!has(self.guePort) || !has(self.mode) || self.mode != 'DSR' || (has(self.encapsulation) && self.encapsulation == 'GUE')",message="guePort applies only to encapsulation GUE (DSR defaults to IPIP): set encapsulation GUE or remove guePort",fieldPath=".guePort"
type ForwardingConfig struct {
	// Mode is NAT or DSR. Empty means NAT.
	//
	// NAT: replies pass back through the node. It works with any backend on
	// any network, but with SNAT a flow that ECMP moves to another node
	// breaks (the new node has another address and source port).
	//
	// DSR: replies go straight from the backend to the client, and flows
	// survive moving between nodes. Every backend needs the VIP address on
	// its loopback interface; a listener on the VIP's port, because DSR
	// cannot translate ports; and, for IPIP and GUE, the NovaEdge
	// decapsulation program on its NIC (`novaedgectl decap attach <nic>`),
	// because many kernels lack the tunnel drivers.
	// +optional
	Mode ForwardingMode `json:"mode,omitempty"`

	// PreserveClientIP (NAT only) keeps the client's address as the source:
	// only the destination is translated (DNAT). This works only where the
	// backends' replies route back through the node that translated the
	// request, for example when it is their default gateway; with several
	// nodes announcing the VIP that is rarely so. False (the default)
	// translates the source to the node's address too (SNAT), so replies
	// always come back through the node, on any network.
	// +optional
	PreserveClientIP bool `json:"preserveClientIP,omitempty"`

	// Encapsulation (DSR only) is how packets reach the backends: IPIP
	// (IPv4-in-IPv4, or IPv6-in-IPv6 for IPv6 backends), GUE (the packet in
	// UDP to guePort, for networks that pass only UDP) or L2 (only the
	// destination MAC is rewritten; the backends must be on the node's L2
	// segment and need no decapsulation). Empty means IPIP.
	// +optional
	Encapsulation Encapsulation `json:"encapsulation,omitempty"`

	// GUEPort (DSR with encapsulation GUE) is the UDP destination port of
	// the encapsulated packets, where the backends' decapsulation program
	// expects them. Unset means 6080.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self >= 1 && self <= 65535",message="guePort must be 1-65535; leave it out for the default 6080"
	GUEPort int32 `json:"guePort,omitempty"`
}

// VIPHealthPolicy says when a VIP counts as healthy.
type VIPHealthPolicy struct {
	// MinHealthyNodes is the number of healthy serving nodes below which the
	// VIP's Ready condition turns False (it is still served by the nodes that
	// remain). Zero means 1.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	MinHealthyNodes int32 `json:"minHealthyNodes,omitempty"`
}

// BGPConfig is the BGP speaker configuration of a VIP.
type BGPConfig struct {
	// LocalAS is the node's autonomous system number.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4294967295
	LocalAS int64 `json:"localAS"`

	// RouterID is the BGP router ID. Every announcing node needs its own, so
	// this is used only when a single node announces the VIP (a warning
	// otherwise); empty means the node's IPv4 address (or the agent's
	// --router-id).
	// +optional
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:XValidation:rule="isIP(self) && ip(self).family() == 4",message="must be a dotted IPv4 address"
	RouterID string `json:"routerID,omitempty"`

	// Peers are the BGP neighbours (usually the top-of-rack routers).
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +listType=map
	// +listMapKey=address
	Peers []BGPPeer `json:"peers"`

	// Communities attached to the announced routes, "ASN:value" or a
	// well-known name (no-export, no-advertise, local-as).
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:Pattern=`^([0-9]{1,5}:[0-9]{1,5}|no-export|no-advertise|local-as|no-peer|blackhole|graceful-shutdown)$`
	Communities []string `json:"communities,omitempty"`

	// LargeCommunities attached to the announced routes, "ASN:x:y".
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:Pattern=`^[0-9]{1,10}:[0-9]{1,10}:[0-9]{1,10}$`
	LargeCommunities []string `json:"largeCommunities,omitempty"`

	// LocalPreference sent with the routes (iBGP peers only). Nil sends none.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=4294967295
	LocalPreference *int64 `json:"localPreference,omitempty"`

	// MED (multi-exit discriminator) sent with the routes. Nil sends none.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=4294967295
	MED *int64 `json:"med,omitempty"`
}

// BGPPeer is one BGP neighbour.
type BGPPeer struct {
	// Address of the peer.
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="must be an IP address"
	Address string `json:"address"`
	// AS is the peer's autonomous system number.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4294967295
	AS int64 `json:"as"`
	// Port of the peer's BGP listener. Zero means 179.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port,omitempty"`
	// PasswordSecretRef names the Secret key holding the TCP MD5 password.
	// Nil means no password.
	// +optional
	PasswordSecretRef *SecretKeyRef `json:"passwordSecretRef,omitempty"`
	// EBGPMultihop is the TTL for eBGP sessions to peers that are not
	// directly connected. Zero means directly connected (TTL 1).
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=255
	EBGPMultihop int32 `json:"ebgpMultihop,omitempty"`
	// HoldTime of the session. Empty means 90s.
	// +optional
	HoldTime Duration `json:"holdTime,omitempty"`
	// KeepaliveTime of the session. Empty means a third of holdTime.
	// +optional
	KeepaliveTime Duration `json:"keepaliveTime,omitempty"`
	// GracefulRestart keeps the peer's routes through an agent restart. Nil
	// means true.
	// +optional
	GracefulRestart *bool `json:"gracefulRestart,omitempty"`
}

// OSPFAuthType is the OSPF authentication scheme.
// +kubebuilder:validation:Enum=none;md5
type OSPFAuthType string

const (
	OSPFAuthNone OSPFAuthType = "none"
	OSPFAuthMD5  OSPFAuthType = "md5"
)

// OSPFConfig is the OSPF configuration of a VIP (driven through FRR).
//
// +kubebuilder:validation:XValidation:rule="!has(self.authType) || self.authType != 'md5' || has(self.authKey) || has(self.authKeySecretRef)",message="authType md5 needs authKeySecretRef (or the deprecated inline authKey)"
// +kubebuilder:validation:XValidation:rule="!(has(self.authKey) && has(self.authKeySecretRef))",message="set authKeySecretRef or authKey, not both"
// +kubebuilder:validation:XValidation:rule="!has(self.helloInterval) || !has(self.deadInterval) || self.deadInterval > self.helloInterval",message="deadInterval must be greater than helloInterval",fieldPath=".deadInterval"
type OSPFConfig struct {
	// RouterID is the OSPF router ID. As for BGP, every announcing node needs
	// its own: used only when a single node announces the VIP; empty means
	// the node's IPv4 address.
	// +optional
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:XValidation:rule="isIP(self) && ip(self).family() == 4",message="must be a dotted IPv4 address"
	RouterID string `json:"routerID,omitempty"`
	// AreaID is the OSPF area, a number (0) or dotted form ("0.0.0.0").
	// Zero and empty mean the backbone.
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? (self >= 0 && self <= 4294967295) : self.matches('^[0-9]{1,3}(\\\\.[0-9]{1,3}){3}$')",message="must be a number 0-4294967295 or dotted like 0.0.0.0"
	AreaID *intstr.IntOrString `json:"areaID,omitempty"`
	// Cost of the announced route. Zero means 10.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=65535
	Cost int32 `json:"cost,omitempty"`
	// HelloInterval in seconds. Zero means 10.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=65535
	HelloInterval int32 `json:"helloInterval,omitempty"`
	// DeadInterval in seconds. Zero means four hello intervals.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=65535
	DeadInterval int32 `json:"deadInterval,omitempty"`
	// AuthType is none or md5. Empty means none.
	// +optional
	AuthType OSPFAuthType `json:"authType,omitempty"`
	// AuthKey is an inline md5 key. Deprecated: it is readable by anyone who
	// can read the VIP; use authKeySecretRef. Still honoured, reported by a
	// DeprecatedField condition and a warning.
	// +optional
	// +kubebuilder:validation:MaxLength=16
	AuthKey string `json:"authKey,omitempty"`
	// AuthKeySecretRef names the Secret key holding the md5 key.
	// +optional
	AuthKeySecretRef *SecretKeyRef `json:"authKeySecretRef,omitempty"`
	// AuthKeyID is the md5 key ID. Zero means 1.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=255
	AuthKeyID int32 `json:"authKeyID,omitempty"`
	// GracefulRestart asks neighbours to keep routes through a restart of the
	// routing daemon or agent. False by default, as in FRR.
	// +optional
	GracefulRestart bool `json:"gracefulRestart,omitempty"`
}

// BFDConfig configures BFD sessions (RFC 5880/5881).
type BFDConfig struct {
	// Enabled turns BFD on.
	Enabled bool `json:"enabled"`
	// DetectMultiplier is the number of missed packets that declares the
	// session down. Zero means 3.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=255
	DetectMultiplier int32 `json:"detectMultiplier,omitempty"`
	// DesiredMinTxInterval is how often this node sends. Empty means 300ms.
	// +optional
	DesiredMinTxInterval Duration `json:"desiredMinTxInterval,omitempty"`
	// RequiredMinRxInterval is the fastest rate this node accepts. Empty
	// means 300ms.
	// +optional
	RequiredMinRxInterval Duration `json:"requiredMinRxInterval,omitempty"`
	// EchoMode enables BFD echo where the peer supports it.
	// +optional
	EchoMode bool `json:"echoMode,omitempty"`
}

// BFDSessionStatus is the state of one BFD session seen from one node.
type BFDSessionStatus struct {
	// Node running the session.
	Node string `json:"node"`
	// Peer address.
	Peer string `json:"peer"`
	// State is AdminDown, Down, Init or Up.
	State string `json:"state"`
	// LastChange is when the state last changed.
	// +optional
	LastChange *metav1.Time `json:"lastChange,omitempty"`
}

// ProxyVIPStatus is the observed state of a VIP.
type ProxyVIPStatus struct {
	// Address is the IPv4 address in use (given or allocated).
	// +optional
	Address string `json:"address,omitempty"`
	// IPv6Address is the IPv6 address in use (given or allocated).
	// +optional
	IPv6Address string `json:"ipv6Address,omitempty"`
	// ActiveNode answers for the address (L2ARP and Local modes).
	// +optional
	ActiveNode string `json:"activeNode,omitempty"`
	// StandbyNodes take over in this order when the active node fails
	// (L2ARP).
	// +optional
	StandbyNodes []string `json:"standbyNodes,omitempty"`
	// AnnouncingNodes announce the VIP (BGP and OSPF modes; the active node in
	// L2ARP mode).
	// +optional
	AnnouncingNodes []string `json:"announcingNodes,omitempty"`
	// BFDSessions lists the BFD sessions of the announcing nodes.
	// +optional
	BFDSessions []BFDSessionStatus `json:"bfdSessions,omitempty"`
	// Conditions: Accepted, Ready (enough healthy nodes per healthPolicy),
	// DeprecatedField.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// ObservedGeneration is the spec generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// ProxyVIP is a cluster-scoped virtual IP address and how it is announced.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=nevip,categories=novaedge
// +kubebuilder:printcolumn:name="Address",type=string,JSONPath=`.status.address`
// +kubebuilder:printcolumn:name="IPv6",type=string,JSONPath=`.status.ipv6Address`,priority=1
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.mode`
// +kubebuilder:printcolumn:name="Active",type=string,JSONPath=`.status.activeNode`
// +kubebuilder:printcolumn:name="Announcing",type=string,JSONPath=`.status.announcingNodes`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ProxyVIP struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ProxyVIPSpec   `json:"spec"`
	Status ProxyVIPStatus `json:"status,omitempty"`
}

// ProxyVIPList is a list of ProxyVIPs.
// +kubebuilder:object:root=true
type ProxyVIPList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ProxyVIP `json:"items"`
}
