package loader

import (
	"encoding/base64"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metavalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

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
	// add decodes the object's JSON strictly and appends it to in. It
	// returns the unknown fields, or a decoding error.
	add func(raw []byte, in *snapshot.Input) (strict []error, err error)
	// check validates the decoded object beyond its types; it runs on the
	// last element add appended. May be nil.
	check func(in *snapshot.Input) field.ErrorList
}

// kinds lists every kind the loader accepts, in the order they are listed
// to users.
var kinds = []kindSpec{
	{apiVersion: v1alpha1.GroupVersion.String(), kind: v1alpha1.KindProxyVIP, crd: true, add: appendTo(func(in *snapshot.Input) *[]v1alpha1.ProxyVIP { return &in.VIPs })},
	{apiVersion: v1alpha1.GroupVersion.String(), kind: v1alpha1.KindProxyIPPool, crd: true, add: appendTo(func(in *snapshot.Input) *[]v1alpha1.ProxyIPPool { return &in.Pools })},
	{apiVersion: v1alpha1.GroupVersion.String(), kind: v1alpha1.KindProxyGateway, crd: true, add: appendTo(func(in *snapshot.Input) *[]v1alpha1.ProxyGateway { return &in.Gateways })},
	{apiVersion: v1alpha1.GroupVersion.String(), kind: v1alpha1.KindProxyRoute, crd: true, add: appendTo(func(in *snapshot.Input) *[]v1alpha1.ProxyRoute { return &in.Routes })},
	{apiVersion: v1alpha1.GroupVersion.String(), kind: v1alpha1.KindProxyBackend, crd: true, add: appendTo(func(in *snapshot.Input) *[]v1alpha1.ProxyBackend { return &in.Backends })},
	{apiVersion: v1alpha1.GroupVersion.String(), kind: v1alpha1.KindProxyPolicy, crd: true, add: appendTo(func(in *snapshot.Input) *[]v1alpha1.ProxyPolicy { return &in.Policies })},
	{
		apiVersion: "v1", kind: "Secret", namespaced: true, nameFn: metavalidation.NameIsDNSSubdomain,
		prepare: prepareSecret,
		add:     appendTo(func(in *snapshot.Input) *[]corev1.Secret { return &in.Secrets }),
		check:   func(in *snapshot.Input) field.ErrorList { return checkSecret(&in.Secrets[len(in.Secrets)-1]) },
	},
	{
		apiVersion: "v1", kind: "Service", namespaced: true, nameFn: metavalidation.NameIsDNS1035Label,
		add:   appendTo(func(in *snapshot.Input) *[]corev1.Service { return &in.Services }),
		check: func(in *snapshot.Input) field.ErrorList { return checkService(&in.Services[len(in.Services)-1]) },
	},
	{
		apiVersion: "v1", kind: "Namespace", nameFn: metavalidation.NameIsDNSLabel,
		add: appendTo(func(in *snapshot.Input) *[]corev1.Namespace { return &in.Namespaces }),
	},
	{
		apiVersion: "discovery.k8s.io/v1", kind: "EndpointSlice", namespaced: true, nameFn: metavalidation.NameIsDNSSubdomain,
		add: appendTo(func(in *snapshot.Input) *[]discoveryv1.EndpointSlice { return &in.EndpointSlices }),
		check: func(in *snapshot.Input) field.ErrorList {
			return checkEndpointSlice(&in.EndpointSlices[len(in.EndpointSlices)-1])
		},
	},
	{
		apiVersion: "networking.k8s.io/v1", kind: "Ingress", namespaced: true, nameFn: metavalidation.NameIsDNSSubdomain,
		add: appendTo(func(in *snapshot.Input) *[]networkingv1.Ingress { return &in.Ingresses }),
	},
	{
		apiVersion: "gateway.networking.k8s.io/v1", kind: "Gateway", namespaced: true, nameFn: metavalidation.NameIsDNSSubdomain,
		add: appendTo(func(in *snapshot.Input) *[]gatewayv1.Gateway { return &in.APIGateways }),
	},
	{
		apiVersion: "gateway.networking.k8s.io/v1", kind: "HTTPRoute", namespaced: true, nameFn: metavalidation.NameIsDNSSubdomain,
		add: appendTo(func(in *snapshot.Input) *[]gatewayv1.HTTPRoute { return &in.HTTPRoutes }),
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

// unknownKind explains an unsupported apiVersion/kind.
func unknownKind(apiVersion, kind string) string {
	msg := fmt.Sprintf("unsupported kind %q in apiVersion %q", kind, apiVersion)
	if kind == "List" || strings.HasSuffix(kind, "List") {
		return msg + "; lists are not read: write one resource per document, separated by \"---\" lines"
	}
	var same, groups []string
	for _, k := range kinds {
		if group(k.apiVersion) == group(apiVersion) {
			same = append(same, k.kind+" ("+k.apiVersion+")")
		}
		if g := k.apiVersion; len(groups) == 0 || groups[len(groups)-1] != g {
			groups = append(groups, g)
		}
	}
	if len(same) > 0 {
		return msg + "; supported kinds of this group: " + strings.Join(same, ", ")
	}
	return msg + "; supported apiVersions: " + strings.Join(groups, ", ")
}

// appendTo returns an add function for kinds stored in the slice list
// selects.
func appendTo[T any](list func(*snapshot.Input) *[]T) func([]byte, *snapshot.Input) ([]error, error) {
	return func(raw []byte, in *snapshot.Input) ([]error, error) {
		var obj T
		strict, err := unmarshalStrict(raw, &obj)
		if err != nil || len(strict) > 0 {
			return strict, err
		}
		p := list(in)
		*p = append(*p, obj)
		return nil, nil
	}
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
	if !ok {
		return errs
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
