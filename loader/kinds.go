package loader

import (
	"encoding/base64"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metavalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	kjson "sigs.k8s.io/json"

	"github.com/novaedge/novaedge/api/v1alpha1"
	"github.com/novaedge/novaedge/snapshot"
)

// kindSpec says how one apiVersion/kind is checked and where it goes in the
// Input.
type kindSpec struct {
	apiVersion string
	kind       string
	// crd is true for NovaEdge kinds, validated by package schema against
	// the embedded CRDs; their scope comes from the CRD.
	crd bool
	// namespaced is the scope of a non-CRD kind.
	namespaced bool
	// nameFn validates metadata.name of a non-CRD kind, as the apiserver
	// does for it.
	nameFn metavalidation.ValidateNameFunc
	// prepare rewrites the object before it is decoded (Secret stringData)
	// and reports problems the decoder cannot see. May be nil.
	prepare func(obj map[string]any) field.ErrorList
	// codec decodes the kind's objects and makes room for them.
	codec codec
}

// kinds lists every kind the loader accepts, in the order they are listed
// to users.
var kinds = []kindSpec{
	{apiVersion: v1alpha1.GroupVersion.String(), kind: v1alpha1.KindProxyVIP, crd: true, codec: codecOf(func(in *snapshot.Input) *[]v1alpha1.ProxyVIP { return &in.VIPs }, nil)},
	{apiVersion: v1alpha1.GroupVersion.String(), kind: v1alpha1.KindProxyIPPool, crd: true, codec: codecOf(func(in *snapshot.Input) *[]v1alpha1.ProxyIPPool { return &in.Pools }, nil)},
	{apiVersion: v1alpha1.GroupVersion.String(), kind: v1alpha1.KindProxyGateway, crd: true, codec: codecOf(func(in *snapshot.Input) *[]v1alpha1.ProxyGateway { return &in.Gateways }, nil)},
	{apiVersion: v1alpha1.GroupVersion.String(), kind: v1alpha1.KindProxyRoute, crd: true, codec: codecOf(func(in *snapshot.Input) *[]v1alpha1.ProxyRoute { return &in.Routes }, nil)},
	{apiVersion: v1alpha1.GroupVersion.String(), kind: v1alpha1.KindProxyBackend, crd: true, codec: codecOf(func(in *snapshot.Input) *[]v1alpha1.ProxyBackend { return &in.Backends }, nil)},
	{apiVersion: v1alpha1.GroupVersion.String(), kind: v1alpha1.KindProxyPolicy, crd: true, codec: codecOf(func(in *snapshot.Input) *[]v1alpha1.ProxyPolicy { return &in.Policies }, nil)},
	{
		apiVersion: "v1", kind: "Secret", namespaced: true, nameFn: metavalidation.NameIsDNSSubdomain,
		prepare: prepareSecret,
		codec:   codecOf(func(in *snapshot.Input) *[]corev1.Secret { return &in.Secrets }, checkSecret),
	},
	{
		apiVersion: "v1", kind: "Service", namespaced: true, nameFn: metavalidation.NameIsDNS1035Label,
		codec: codecOf(func(in *snapshot.Input) *[]corev1.Service { return &in.Services }, checkService),
	},
	{
		apiVersion: "v1", kind: "Namespace", nameFn: metavalidation.NameIsDNSLabel,
		codec: codecOf(func(in *snapshot.Input) *[]corev1.Namespace { return &in.Namespaces }, nil),
	},
	{
		apiVersion: "discovery.k8s.io/v1", kind: "EndpointSlice", namespaced: true, nameFn: metavalidation.NameIsDNSSubdomain,
		codec: codecOf(func(in *snapshot.Input) *[]discoveryv1.EndpointSlice { return &in.EndpointSlices }, checkEndpointSlice),
	},
	{
		apiVersion: "networking.k8s.io/v1", kind: "Ingress", namespaced: true, nameFn: metavalidation.NameIsDNSSubdomain,
		codec: codecOf(func(in *snapshot.Input) *[]networkingv1.Ingress { return &in.Ingresses }, nil),
	},
	{
		apiVersion: "gateway.networking.k8s.io/v1", kind: "Gateway", namespaced: true, nameFn: metavalidation.NameIsDNSSubdomain,
		codec: codecOf(func(in *snapshot.Input) *[]gatewayv1.Gateway { return &in.APIGateways }, nil),
	},
	{
		apiVersion: "gateway.networking.k8s.io/v1", kind: "HTTPRoute", namespaced: true, nameFn: metavalidation.NameIsDNSSubdomain,
		codec: codecOf(func(in *snapshot.Input) *[]gatewayv1.HTTPRoute { return &in.HTTPRoutes }, nil),
	},
}

// findKind returns the spec of apiVersion/kind, or nil.
func findKind(apiVersion, kind string) *kindSpec {
	for i := range kinds {
		if kinds[i].apiVersion == apiVersion && kinds[i].kind == kind {
			return &kinds[i]
		}
	}
	return nil
}

// group returns the API group of an apiVersion ("" for the core group).
func group(apiVersion string) string {
	g, _, ok := strings.Cut(apiVersion, "/")
	if !ok {
		return ""
	}
	return g
}

// unknownKind explains an unsupported apiVersion/kind, listing the kinds of
// the same group, or else the supported apiVersions.
func unknownKind(apiVersion, kind string) string {
	msg := fmt.Sprintf("unsupported kind %q in apiVersion %q", kind, apiVersion)
	if strings.HasSuffix(kind, "List") {
		return msg + "; lists are not read: write one resource per document, separated by \"---\" lines"
	}
	var versions, same []string
	for _, k := range kinds {
		if !slices.Contains(versions, k.apiVersion) {
			versions = append(versions, k.apiVersion)
		}
		if group(k.apiVersion) == group(apiVersion) {
			same = append(same, k.kind)
		}
	}
	for _, v := range versions {
		if group(v) == group(apiVersion) {
			return msg + "; supported kinds of " + v + ": " + strings.Join(same, ", ")
		}
	}
	return msg + "; supported apiVersions: " + strings.Join(versions, ", ")
}

// decoded is the outcome of decoding one object.
type decoded struct {
	// strict lists unknown and duplicate fields; err is a type error.
	strict []error
	err    error
	// errs are the problems the kind's checks found in the decoded object.
	errs field.ErrorList
	// add appends the object to an Input; nil when it could not be decoded.
	add func(in *snapshot.Input)
}

// codec decodes objects of one kind and stores them in an Input.
type codec struct {
	// decode decodes the object's JSON strictly and checks it.
	decode func(raw []byte) decoded
	// reserve makes room for n more objects in the Input's slice of the
	// kind: appending 3000 routes one by one, growing the slice each time
	// it filled, cost 1.5 ms of a reload.
	reserve func(in *snapshot.Input, n int)
	// unreserve sets the slice back to nil if nothing was added: a load
	// gives what FromDocuments gives, which leaves kinds it saw no
	// object of nil.
	unreserve func(in *snapshot.Input)
}

// codecOf returns the codec of a kind stored in the slice list selects,
// checked by check (which may be nil). decoded.add appends the object
// itself, not a deep copy: loads that reuse it (chunkCache) share what it
// holds, which is safe because snapshot.Build never modifies its input
// (snapshot's TestBuildDoesNotModifyInput). Copying cost 9 ms of each
// reload of 3000 routes.
func codecOf[T any](list func(*snapshot.Input) *[]T, check func(*T) field.ErrorList) codec {
	decode := func(raw []byte) decoded {
		var obj T
		strict, err := kjson.UnmarshalStrict(raw, &obj)
		if err != nil {
			return decoded{strict: strict, err: err}
		}
		d := decoded{strict: strict, add: func(in *snapshot.Input) {
			p := list(in)
			*p = append(*p, obj)
		}}
		if check != nil {
			d.errs = check(&obj)
		}
		return d
	}
	reserve := func(in *snapshot.Input, n int) {
		p := list(in)
		*p = slices.Grow(*p, n)
	}
	unreserve := func(in *snapshot.Input) {
		if p := list(in); len(*p) == 0 {
			*p = nil
		}
	}
	return codec{decode: decode, reserve: reserve, unreserve: unreserve}
}

// prepareSecret checks data and stringData and merges stringData into data
// as the apiserver does: stringData is write-only and its keys win.
func prepareSecret(obj map[string]any) field.ErrorList {
	var errs field.ErrorList
	data, _ := obj["data"].(map[string]any)
	for k, v := range data {
		p := field.NewPath("data").Key(k)
		s, ok := v.(string)
		if !ok {
			continue // the decoder reports the type
		}
		if _, err := base64.StdEncoding.DecodeString(s); err != nil {
			errs = append(errs, field.Invalid(p, "<value omitted>", "must be base64-encoded (use stringData for plain text): "+err.Error()))
			delete(data, k)
		}
	}
	sd, ok := obj["stringData"].(map[string]any)
	if _, isMap := obj["data"].(map[string]any); !ok || (obj["data"] != nil && !isMap) {
		return errs // nothing to merge, or data is malformed: the decoder reports it
	}
	if data == nil {
		data = map[string]any{}
	}
	for k, v := range sd {
		s, ok := v.(string)
		if !ok {
			errs = append(errs, field.Invalid(field.NewPath("stringData").Key(k), v, "must be a string"))
			continue
		}
		data[k] = base64.StdEncoding.EncodeToString([]byte(s))
	}
	obj["data"] = data
	delete(obj, "stringData")
	return errs
}

// maxSecretSize is the apiserver's limit on the total size of a Secret's
// data.
const maxSecretSize = 1 << 20

// checkSecret is the part of the apiserver's Secret validation that matters
// to NovaEdge: key names, size, and the keys of typed Secrets.
func checkSecret(s *corev1.Secret) field.ErrorList {
	var errs field.ErrorList
	size := 0
	for k, v := range s.Data {
		for _, msg := range validation.IsConfigMapKey(k) {
			errs = append(errs, field.Invalid(field.NewPath("data").Key(k), k, msg))
		}
		size += len(v)
	}
	if size > maxSecretSize {
		errs = append(errs, field.TooLong(field.NewPath("data"), "", maxSecretSize))
	}
	switch s.Type {
	case corev1.SecretTypeTLS:
		for _, k := range []string{corev1.TLSCertKey, corev1.TLSPrivateKeyKey} {
			if _, ok := s.Data[k]; !ok {
				errs = append(errs, field.Required(field.NewPath("data").Key(k), "a kubernetes.io/tls Secret needs tls.crt and tls.key"))
			}
		}
	case corev1.SecretTypeBasicAuth:
		_, u := s.Data[corev1.BasicAuthUsernameKey]
		_, p := s.Data[corev1.BasicAuthPasswordKey]
		if !u && !p {
			errs = append(errs, field.Required(field.NewPath("data").Key(corev1.BasicAuthUsernameKey), "a kubernetes.io/basic-auth Secret needs username or password"))
		}
	}
	return errs
}

// checkService checks what the snapshot builder relies on: port numbers,
// protocols and target ports.
func checkService(s *corev1.Service) field.ErrorList {
	var errs field.ErrorList
	for i, p := range s.Spec.Ports {
		fp := field.NewPath("spec", "ports").Index(i)
		for _, msg := range validation.IsValidPortNum(int(p.Port)) {
			errs = append(errs, field.Invalid(fp.Child("port"), p.Port, msg))
		}
		switch p.Protocol {
		case "", corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP:
		default:
			errs = append(errs, field.NotSupported(fp.Child("protocol"), p.Protocol, []string{"TCP", "UDP", "SCTP"}))
		}
		if p.TargetPort.StrVal != "" {
			for _, msg := range validation.IsValidPortName(p.TargetPort.StrVal) {
				errs = append(errs, field.Invalid(fp.Child("targetPort"), p.TargetPort.StrVal, msg))
			}
		} else if p.TargetPort.IntVal != 0 {
			for _, msg := range validation.IsValidPortNum(int(p.TargetPort.IntVal)) {
				errs = append(errs, field.Invalid(fp.Child("targetPort"), p.TargetPort.IntVal, msg))
			}
		}
	}
	return errs
}

// checkEndpointSlice checks the address type, the addresses and the ports.
func checkEndpointSlice(es *discoveryv1.EndpointSlice) field.ErrorList {
	var errs field.ErrorList
	switch es.AddressType {
	case discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6, discoveryv1.AddressTypeFQDN:
	default:
		errs = append(errs, field.NotSupported(field.NewPath("addressType"), es.AddressType, []string{"IPv4", "IPv6", "FQDN"}))
	}
	for i, ep := range es.Endpoints {
		fp := field.NewPath("endpoints").Index(i).Child("addresses")
		if len(ep.Addresses) == 0 {
			errs = append(errs, field.Required(fp, "an endpoint needs an address"))
		}
		for j, a := range ep.Addresses {
			switch es.AddressType {
			case discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6:
				errs = append(errs, validation.IsValidIP(fp.Index(j), a)...)
				want4 := es.AddressType == discoveryv1.AddressTypeIPv4
				if len(validation.IsValidIP(fp.Index(j), a)) == 0 && strings.Contains(a, ":") == want4 {
					errs = append(errs, field.Invalid(fp.Index(j), a, "must be an "+string(es.AddressType)+" address (addressType)"))
				}
			}
		}
	}
	for i, p := range es.Ports {
		if p.Port == nil {
			continue
		}
		for _, msg := range validation.IsValidPortNum(int(*p.Port)) {
			errs = append(errs, field.Invalid(field.NewPath("ports").Index(i).Child("port"), *p.Port, msg))
		}
	}
	return errs
}
