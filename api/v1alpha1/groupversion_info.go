package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Group is the API group of every NovaEdge kind.
const Group = "novaedge.io"

// GroupVersion is the group and version of this package's kinds.
var GroupVersion = schema.GroupVersion{Group: Group, Version: "v1alpha1"}

// Kind names, as written in the kind field of a manifest.
const (
	KindProxyVIP     = "ProxyVIP"
	KindProxyIPPool  = "ProxyIPPool"
	KindProxyGateway = "ProxyGateway"
	KindProxyRoute   = "ProxyRoute"
	KindProxyBackend = "ProxyBackend"
	KindProxyPolicy  = "ProxyPolicy"
)

// AddToScheme registers this package's kinds with a runtime.Scheme.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&ProxyVIP{}, &ProxyVIPList{},
		&ProxyIPPool{}, &ProxyIPPoolList{},
		&ProxyGateway{}, &ProxyGatewayList{},
		&ProxyRoute{}, &ProxyRouteList{},
		&ProxyBackend{}, &ProxyBackendList{},
		&ProxyPolicy{}, &ProxyPolicyList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
