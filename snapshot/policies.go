package snapshot

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/novaedge/novaedge/api/v1alpha1"
	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

func (b *builder) buildPolicies() {
	for _, p := range sortByName(b.in.Policies, func(x *v1alpha1.ProxyPolicy) (string, string) { return x.Namespace, x.Name }) {
		ns := orDefault(p.Namespace, "default")
		r := ref(kPolicy, ns, p.Name)
		s := &p.Spec
		out := &pb.Policy{Name: key(ns, p.Name)}
		ok := true
		switch {
		case s.Type == v1alpha1.PolicyRateLimit && s.RateLimit != nil:
			rl := s.RateLimit
			if rl.RequestsPerSecond < 1 {
				b.errorf(r, "spec.rateLimit.requestsPerSecond", "must be at least 1")
				ok = false
			}
			if rl.Key == "Header" && rl.Header == "" {
				b.errorf(r, "spec.rateLimit.header", "required when key is Header")
				ok = false
			}
			out.Policy = &pb.Policy_RateLimit{RateLimit: &pb.RateLimitPolicy{
				RequestsPerSecond: uint32(max(rl.RequestsPerSecond, 0)),
				Burst:             uint32(max(cmp.Or(rl.Burst, rl.RequestsPerSecond), 0)),
				Key:               string(cmp.Or(rl.Key, "SourceIP")),
				Header:            rl.Header,
			}}
		case s.Type == v1alpha1.PolicyJWT && s.JWT != nil:
			j := s.JWT
			jp := &pb.JWTPolicy{Issuer: j.Issuer, Audiences: slices.Sorted(slices.Values(j.Audiences)), JwksUri: j.JWKSURI, HeaderName: cmp.Or(j.HeaderName, "Authorization")}
			if j.JWKSSecretRef != nil {
				sns := orDefault(j.JWKSSecretRef.Namespace, ns)
				if sns != ns {
					b.errorf(r, "spec.jwt.jwksSecretRef.namespace", "cross-namespace Secret references are not allowed")
					ok = false
				} else if v, found, _ := b.secretValue(r, "spec.jwt.jwksSecretRef", sns, j.JWKSSecretRef.Name, "jwks"); found {
					jp.Jwks = string(v)
				} else {
					// Without keys no token validates: fail closed by
					// leaving the policy, and whatever uses it, out.
					ok = false
				}
			}
			if (j.JWKSURI == "") == (j.JWKSSecretRef == nil) {
				b.errorf(r, "spec.jwt", "set exactly one of jwksURI or jwksSecretRef")
				ok = false
			}
			for _, claim := range slices.Sorted(maps.Keys(j.ForwardClaims)) {
				jp.ForwardClaims = append(jp.ForwardClaims, &pb.HeaderValue{Name: claim, Value: j.ForwardClaims[claim]})
			}
			out.Policy = &pb.Policy_Jwt{Jwt: jp}
		case s.Type == v1alpha1.PolicyCORS && s.CORS != nil:
			c := s.CORS
			out.Policy = &pb.Policy_Cors{Cors: &pb.CORSPolicy{
				AllowOrigins: c.AllowOrigins, AllowMethods: c.AllowMethods, AllowHeaders: c.AllowHeaders,
				ExposeHeaders: c.ExposeHeaders, MaxAgeS: ms(c.MaxAge, 5e9) / 1000, AllowCredentials: c.AllowCredentials,
			}}
			if slices.Contains(c.AllowOrigins, "*") && c.AllowCredentials {
				b.errorf(r, "spec.cors.allowCredentials", "browsers reject credentials with allowOrigins \"*\"; list the origins")
				ok = false
			}
		case s.Type == v1alpha1.PolicyIPFilter && s.IPFilter != nil:
			f := &pb.IPFilterPolicy{}
			for _, l := range []struct {
				name string
				in   []string
				out  *[]string
			}{{"allow", s.IPFilter.Allow, &f.Allow}, {"deny", s.IPFilter.Deny, &f.Deny}} {
				for i, c := range l.in {
					p, err := netip.ParsePrefix(c)
					if err != nil {
						b.errorf(r, fmt.Sprintf("spec.ipFilter.%s[%d]", l.name, i), "invalid CIDR %q", c)
						ok = false
						continue
					}
					*l.out = append(*l.out, p.Masked().String())
				}
			}
			out.Policy = &pb.Policy_IpFilter{IpFilter: f}
		default:
			b.errorf(r, "spec.type", "type %q needs the matching field set (rateLimit, jwt, cors or ipFilter)", s.Type)
			ok = false
		}
		if ok {
			b.policies[out.Name] = out
		}
	}
}
