package snapshot

import (
	"cmp"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/novaedge/novaedge/api/v1alpha1"
	"github.com/novaedge/novaedge/diag"
	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

func (b *builder) buildRoutes() {
	// Older routes win conflicts over a TCP/UDP listener or an SNI name.
	routes := oldestFirst(b.in.Routes, func(r *v1alpha1.ProxyRoute) (*metav1.ObjectMeta, bool) {
		return &r.ObjectMeta, wasAccepted(r.Status.Conditions)
	})
	for _, rt := range routes {
		b.buildRoute(rt)
	}
}

// attachment is a listener a route attaches to, and which parentRef asked.
type attachment struct {
	l     *listenerEntry
	field string // the parentRef's field, or "" for implicit attachment
}

func (b *builder) buildRoute(rt *v1alpha1.ProxyRoute) {
	ns := orDefault(rt.Namespace, "default")
	r := ref(kRoute, ns, rt.Name)
	if len(rt.Spec.Rules) == 0 {
		b.errorf(r, "spec.rules", "a route needs at least one rule")
		return
	}
	routePolicies, ok := b.resolvePolicies(r, "spec.policyRefs", ns, rt.Spec.PolicyRefs)
	if !ok {
		return // fail closed
	}
	atts := b.attachments(rt, r, ns)
	if len(atts) == 0 {
		return
	}
	if out := b.recall(rt, ns, routePolicies, atts); out != nil {
		b.routes = append(b.routes, out)
		for _, a := range atts {
			attach(out, a.l)
		}
		return
	}
	clean := len(b.diags)

	// HTTP form of the rules, built once; L4 forms per kind below.
	var httpRoute *pb.Route
	l4 := map[pb.RouteKind]*pb.Route{}
	added := map[*pb.Route]bool{} // the L4 forms in b.routes
	for _, a := range atts {
		kind := a.l.routeKind()
		if kind == pb.RouteKind_ROUTE_KIND_HTTP {
			if httpRoute == nil {
				rules, ok := b.httpRules(r, ns, rt, routePolicies)
				if !ok {
					return
				}
				httpRoute = &pb.Route{Name: key(ns, rt.Name), Kind: kind, Source: "ProxyRoute/" + key(ns, rt.Name), Hostnames: slices.Sorted(slices.Values(rt.Spec.Hostnames)), Rules: rules}
				b.routes = append(b.routes, httpRoute)
			}
			attach(httpRoute, a.l)
			continue
		}
		out := l4[kind]
		if out == nil {
			rule, ok := b.l4Rule(r, ns, rt, a, routePolicies)
			if !ok {
				continue
			}
			suffix := map[pb.RouteKind]string{pb.RouteKind_ROUTE_KIND_TLS: "#tls", pb.RouteKind_ROUTE_KIND_TCP: "#tcp", pb.RouteKind_ROUTE_KIND_UDP: "#udp"}[kind]
			out = &pb.Route{Name: key(ns, rt.Name) + suffix, Kind: kind, Source: "ProxyRoute/" + key(ns, rt.Name), Rules: []*pb.RouteRule{rule}}
			if kind == pb.RouteKind_ROUTE_KIND_TLS {
				out.Hostnames = slices.Sorted(slices.Values(rt.Spec.Hostnames))
			}
			l4[kind] = out
		}
		if !b.claimL4(r, a, out) {
			continue
		}
		if !added[out] {
			added[out] = true
			b.routes = append(b.routes, out)
		}
		attach(out, a.l)
	}
	if httpRoute != nil && len(l4) == 0 && len(b.diags) == clean {
		b.remember(rt, ns, routePolicies, httpRoute)
	}
}

func attach(rt *pb.Route, l *listenerEntry) {
	if !slices.Contains(rt.Listeners, l.pb.Name) {
		rt.Listeners = append(rt.Listeners, l.pb.Name)
		slices.Sort(rt.Listeners)
	}
	// A listener can hold thousands of routes: a set, and one sort at
	// assembly (assemble), keep attaching them linear.
	if l.routes == nil {
		l.routes = map[string]bool{}
	}
	if !l.routes[rt.Name] {
		l.routes[rt.Name] = true
		l.pb.Routes = append(l.pb.Routes, rt.Name)
	}
}

// elem is the path of element i of the list at field, "field[i]". It is
// built for every element of every route, diagnostic or not, so without
// fmt.
func elem(field string, i int) string {
	return field + "[" + strconv.Itoa(i) + "]"
}

// claimL4 lets one route serve a TCP or UDP listener, and one route serve
// each SNI name of a TLS-passthrough listener.
func (b *builder) claimL4(r diag.Ref, a attachment, out *pb.Route) bool {
	l := a.l
	field := cmp.Or(a.field, "spec")
	if out.Kind == pb.RouteKind_ROUTE_KIND_TLS {
		names := out.Hostnames
		if len(names) == 0 {
			names = []string{"*"}
		}
		for _, h := range names {
			if owner, taken := l.sni[h]; taken && owner != out.Name {
				b.errorf(r, field, "TLS listener %s already routes SNI %q to route %s; the older route keeps it", l.pb.Name, h, owner)
				return false
			}
		}
		for _, h := range names {
			l.sni[h] = out.Name
		}
		if !slices.Contains(l.tlsRoutes, out) {
			l.tlsRoutes = append(l.tlsRoutes, out)
		}
		return true
	}
	if l.l4 != nil && l.l4 != out {
		b.errorf(r, field, "%s listener %s is already served by route %s; the older route keeps it", l.spec.Protocol, l.pb.Name, l.l4.Name)
		return false
	}
	l.l4 = out
	return true
}

// attachments resolves where a route attaches. Without parentRefs it takes
// every HTTP, HTTPS and HTTP3 listener of the gateways in its namespace
// whose hostnames intersect its own; L4 listeners must be named.
func (b *builder) attachments(rt *v1alpha1.ProxyRoute, r diag.Ref, ns string) []attachment {
	var out []attachment
	if len(rt.Spec.ParentRefs) == 0 {
		for _, g := range b.gateways {
			if g.ns != ns {
				continue
			}
			for _, l := range g.listeners {
				if l.routeKind() == pb.RouteKind_ROUTE_KIND_HTTP && hostnamesIntersect(rt.Spec.Hostnames, l.spec.Hostnames) && b.allowed(l, ns) {
					out = append(out, attachment{l: l})
				}
			}
		}
		if len(out) == 0 {
			var unserved []string
			for _, g := range b.in.Gateways {
				if orDefault(g.Namespace, "default") == ns && !slices.ContainsFunc(b.gateways, func(x *gatewayEntry) bool { return x.obj.Name == g.Name && x.ns == ns }) {
					unserved = append(unserved, key(ns, g.Name))
				}
			}
			slices.Sort(unserved)
			if len(unserved) > 0 {
				b.warnf(r, "spec.parentRefs", "attaches to no listener: the gateways of namespace %s that could take it are not served (%s: see their errors)", ns, strings.Join(unserved, ", "))
			} else {
				b.warnf(r, "spec.parentRefs", "attaches to no listener: no gateway in namespace %s has an HTTP, HTTPS or HTTP3 listener accepting its hostnames", ns)
			}
		}
		return out
	}
	for i, p := range rt.Spec.ParentRefs {
		field := elem("spec.parentRefs", i)
		gns := orDefault(p.Namespace, ns)
		var g *gatewayEntry
		for _, x := range b.gateways {
			if x.ns == gns && x.obj.Name == p.Name {
				g = x
			}
		}
		if g == nil {
			if slices.ContainsFunc(b.in.Gateways, func(x v1alpha1.ProxyGateway) bool {
				return x.Name == p.Name && orDefault(x.Namespace, "default") == gns
			}) {
				b.errorf(r, field+".name", "ProxyGateway %s/%s is not served (see its errors)", gns, p.Name)
			} else {
				b.errorf(r, field+".name", "ProxyGateway %s/%s not found", gns, p.Name)
			}
			continue
		}
		n := 0
		for _, l := range g.listeners {
			if p.SectionName != "" && l.spec.Name != p.SectionName {
				continue
			}
			if p.Port != 0 && int32(l.spec.Port) != p.Port {
				continue
			}
			if !b.allowed(l, ns) {
				if p.SectionName != "" {
					b.errorf(r, field, "listener %s does not allow routes from namespace %s (allowedRoutes)", l.pb.Name, ns)
				}
				continue
			}
			if !hostnamesIntersect(rt.Spec.Hostnames, l.spec.Hostnames) {
				if p.SectionName != "" {
					b.errorf(r, "spec.hostnames", "no hostname in common with listener %s %v", l.pb.Name, l.spec.Hostnames)
				}
				continue
			}
			out = append(out, attachment{l: l, field: field})
			n++
		}
		if n == 0 && p.SectionName != "" && !slices.ContainsFunc(g.obj.Spec.Listeners, func(l v1alpha1.Listener) bool { return l.Name == p.SectionName }) {
			b.errorf(r, field+".sectionName", "ProxyGateway %s/%s has no listener %q", gns, p.Name, p.SectionName)
		} else if n == 0 && p.SectionName == "" {
			b.warnf(r, field, "attaches to no listener of ProxyGateway %s/%s", gns, p.Name)
		}
	}
	return out
}

// allowed applies a listener's allowedRoutes to a route namespace.
func (b *builder) allowed(l *listenerEntry, routeNS string) bool {
	ar := l.spec.AllowedRoutes
	if ar == nil || ar.From == "" || ar.From == v1alpha1.NamespacesFromSame {
		return routeNS == l.gw.ns
	}
	if ar.From == v1alpha1.NamespacesFromAll {
		return true
	}
	sel, err := metav1.LabelSelectorAsSelector(ar.Selector)
	if err != nil || ar.Selector == nil {
		return false
	}
	for _, n := range b.in.Namespaces {
		if n.Name == routeNS {
			return sel.Matches(labels.Set(n.Labels))
		}
	}
	return false
}

// l4Rule checks that a route on a TCP, UDP or TLS listener has one rule
// with only backendRefs, as Gateway API's TCPRoute, UDPRoute and TLSRoute.
func (b *builder) l4Rule(r diag.Ref, ns string, rt *v1alpha1.ProxyRoute, a attachment, routePolicies []string) (*pb.RouteRule, bool) {
	l := a.l
	bad := func(field, what string) {
		b.errorf(r, field, "%s listener %s takes rules with only backendRefs; %s cannot apply", l.spec.Protocol, l.pb.Name, what)
	}
	ok := true
	if len(rt.Spec.Rules) != 1 {
		b.errorf(r, "spec.rules", "%s listener %s takes exactly one rule, got %d", l.spec.Protocol, l.pb.Name, len(rt.Spec.Rules))
		return nil, false
	}
	rule := &rt.Spec.Rules[0]
	if len(rule.Matches) > 0 {
		bad("spec.rules[0].matches", "matches")
		ok = false
	}
	if len(rule.Filters) > 0 {
		bad("spec.rules[0].filters", "filters")
		ok = false
	}
	if rule.Retry != nil {
		bad("spec.rules[0].retry", "retry")
		ok = false
	}
	if rule.Timeouts != nil {
		bad("spec.rules[0].timeouts", "timeouts")
		ok = false
	}
	if len(routePolicies) > 0 || len(rule.PolicyRefs) > 0 {
		bad("spec.policyRefs", "HTTP policies")
		ok = false
	}
	if len(rt.Spec.Hostnames) > 0 && l.routeKind() != pb.RouteKind_ROUTE_KIND_TLS {
		bad("spec.hostnames", "hostnames")
		ok = false
	}
	if len(rule.BackendRefs) == 0 {
		b.errorf(r, "spec.rules[0].backendRefs", "%s listener %s needs backendRefs", l.spec.Protocol, l.pb.Name)
		ok = false
	}
	if !ok {
		return nil, false
	}
	backends := b.backendRefs(r, ns, "spec.rules[0].backendRefs", rule.BackendRefs)
	return &pb.RouteRule{Name: rule.Name, Backends: backends}, true
}

// backendRefs resolves a rule's backendRefs. A reference that does not
// resolve keeps its weight with the name as written, so its share of
// requests fails with 500 as Gateway API specifies, instead of shifting
// silently to the others.
func (b *builder) backendRefs(r diag.Ref, ns, field string, refs []v1alpha1.BackendRef) []*pb.WeightedBackend {
	var out []*pb.WeightedBackend
	for i, br := range refs {
		f := elem(field, i)
		bns := orDefault(br.Namespace, ns)
		name := key(bns, br.Name)
		w := uint32(1)
		if br.Weight != nil {
			w = uint32(max(*br.Weight, 0))
		}
		switch {
		case bns != ns:
			b.errorf(r, f+".namespace", "cross-namespace backend references are not allowed (route in %s, backend in %s)", ns, bns)
		case b.backends[name] == nil:
			if slices.ContainsFunc(b.in.Backends, func(x v1alpha1.ProxyBackend) bool {
				return x.Name == br.Name && orDefault(x.Namespace, "default") == bns
			}) {
				b.errorf(r, f+".name", "ProxyBackend %s is not usable (see its errors); its share of traffic fails with 500", name)
			} else {
				b.errorf(r, f+".name", "ProxyBackend %s not found; its share of traffic fails with 500", name)
			}
		}
		out = append(out, &pb.WeightedBackend{Backend: name, Weight: w})
	}
	return out
}

var methods = []string{"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"}

func (b *builder) httpRules(r diag.Ref, ns string, rt *v1alpha1.ProxyRoute, routePolicies []string) ([]*pb.RouteRule, bool) {
	ok := true
	var out []*pb.RouteRule
	for i := range rt.Spec.Rules {
		rule := &rt.Spec.Rules[i]
		rf := elem("spec.rules", i)
		o := &pb.RouteRule{Name: rule.Name}
		rulePolicies, pok := b.resolvePolicies(r, rf+".policyRefs", ns, rule.PolicyRefs)
		if !pok {
			return nil, false // fail closed
		}
		o.Policies = slices.Clone(routePolicies)
		for _, p := range rulePolicies {
			if !slices.Contains(o.Policies, p) {
				o.Policies = append(o.Policies, p)
			}
		}
		// ReplacePrefixMatch needs every match of the rule to be a
		// PathPrefix (Gateway API): otherwise there is no prefix to replace.
		hasPrefixMatch := true
		for j := range rule.Matches {
			m, good := b.match(r, elem(rf+".matches", j), &rule.Matches[j])
			ok = ok && good
			if m != nil {
				o.Matches = append(o.Matches, m)
				if m.Path.Type != pb.MatchType_MATCH_TYPE_PREFIX {
					hasPrefixMatch = false
				}
			}
		}
		if len(o.Matches) == 0 {
			o.Matches = []*pb.RouteMatch{{Path: &pb.StringMatch{Type: pb.MatchType_MATCH_TYPE_PREFIX, Value: "/"}}}
		}
		var redirect, rewrite bool
		for j := range rule.Filters {
			f, good := b.filter(r, ns, elem(rf+".filters", j), &rule.Filters[j], hasPrefixMatch)
			ok = ok && good
			if f == nil {
				continue
			}
			redirect = redirect || f.GetRequestRedirect() != nil
			rewrite = rewrite || f.GetUrlRewrite() != nil
			o.Filters = append(o.Filters, f)
		}
		if redirect && rewrite {
			b.errorf(r, rf+".filters", "RequestRedirect and URLRewrite cannot both be set")
			ok = false
		}
		if redirect && len(rule.BackendRefs) > 0 {
			b.warnf(r, rf+".backendRefs", "ignored: the rule answers with a redirect")
		}
		o.Backends = b.backendRefs(r, ns, rf+".backendRefs", rule.BackendRefs)
		if rp := rule.Retry; rp != nil {
			o.Retry = &pb.RetryPolicy{
				MaxRetries:         uint32(max(rp.MaxRetries, 0)),
				PerTryTimeoutMs:    ms(rp.PerTryTimeout, 0),
				BackoffMs:          ms(rp.Backoff, 25*time.Millisecond),
				RetryNonIdempotent: rp.RetryNonIdempotent,
				BudgetPercent:      orU32(rp.BudgetPercent, 20),
			}
			for _, c := range rp.RetryOn {
				o.Retry.RetryOn = append(o.Retry.RetryOn, string(c))
			}
			if len(o.Retry.RetryOn) == 0 {
				o.Retry.RetryOn = []string{"connection-failure", "reset"}
			}
			slices.Sort(o.Retry.RetryOn)
			for _, c := range rp.RetriableStatusCodes {
				o.Retry.RetriableStatusCodes = append(o.Retry.RetriableStatusCodes, uint32(c))
			}
			slices.Sort(o.Retry.RetriableStatusCodes)
			if len(rp.RetriableStatusCodes) > 0 && !slices.Contains(rp.RetryOn, "retriable-status-codes") {
				b.warnf(r, rf+".retry.retriableStatusCodes", "ignored: retryOn does not list retriable-status-codes")
			}
		}
		o.Timeouts = &pb.RouteTimeouts{IdleMs: ms("", time.Hour)}
		if t := rule.Timeouts; t != nil {
			o.Timeouts = &pb.RouteTimeouts{RequestMs: ms(t.Request, 0), BackendRequestMs: ms(t.BackendRequest, 0), IdleMs: ms(t.Idle, time.Hour)}
			if o.Timeouts.RequestMs > 0 && o.Timeouts.BackendRequestMs > o.Timeouts.RequestMs {
				b.errorf(r, rf+".timeouts.backendRequest", "must not exceed timeouts.request")
				ok = false
			}
		}
		out = append(out, o)
	}
	return out, ok
}

func (b *builder) match(r diag.Ref, field string, m *v1alpha1.RouteMatch) (*pb.RouteMatch, bool) {
	ok := true
	out := &pb.RouteMatch{Path: &pb.StringMatch{Type: pb.MatchType_MATCH_TYPE_PREFIX, Value: "/"}, Method: string(m.Method)}
	if p := m.Path; p != nil {
		out.Path.Value = cmp.Or(p.Value, "/")
		switch p.Type {
		case "", v1alpha1.PathMatchPathPrefix:
			out.Path.Type = pb.MatchType_MATCH_TYPE_PREFIX
		case v1alpha1.PathMatchExact:
			out.Path.Type = pb.MatchType_MATCH_TYPE_EXACT
		case v1alpha1.PathMatchRegularExpression:
			out.Path.Type = pb.MatchType_MATCH_TYPE_REGEX
		default:
			b.errorf(r, field+".path.type", "unsupported value %q: use Exact, PathPrefix or RegularExpression", p.Type)
			ok = false
		}
		switch {
		case out.Path.Type == pb.MatchType_MATCH_TYPE_REGEX:
			ok = b.checkRegex(r, field+".path.value", out.Path.Value) && ok
		case !strings.HasPrefix(out.Path.Value, "/"):
			b.errorf(r, field+".path.value", "must be an absolute path starting with /")
			ok = false
		}
	}
	if m.Method != "" && !slices.Contains(methods, string(m.Method)) {
		b.errorf(r, field+".method", "unsupported method %q", m.Method)
		ok = false
	}
	for i, h := range m.Headers {
		sm, good := b.stringMatch(r, elem(field+".headers", i), h.Type, h.Name, h.Value)
		ok = ok && good
		sm.Name = strings.ToLower(sm.Name)
		out.Headers = append(out.Headers, sm)
	}
	for i, q := range m.QueryParams {
		sm, good := b.stringMatch(r, elem(field+".queryParams", i), q.Type, q.Name, q.Value)
		ok = ok && good
		out.QueryParams = append(out.QueryParams, sm)
	}
	return out, ok
}

func (b *builder) stringMatch(r diag.Ref, field string, t v1alpha1.StringMatchType, name, value string) (*pb.StringMatch, bool) {
	sm := &pb.StringMatch{Type: pb.MatchType_MATCH_TYPE_EXACT, Name: name, Value: value}
	switch t {
	case "", v1alpha1.StringMatchExact:
	case v1alpha1.StringMatchRegularExpression:
		sm.Type = pb.MatchType_MATCH_TYPE_REGEX
		return sm, b.checkRegex(r, field+".value", value)
	default:
		b.errorf(r, field+".type", "unsupported value %q: use Exact or RegularExpression", t)
		return sm, false
	}
	return sm, true
}

func (b *builder) checkRegex(r diag.Ref, field, expr string) bool {
	if _, err := regexp.Compile(expr); err != nil {
		b.errorf(r, field, "invalid regular expression (RE2 syntax): %v", err)
		return false
	}
	return true
}

func headerModifier(h *v1alpha1.HeaderModifier) *pb.HeaderModifier {
	out := &pb.HeaderModifier{Remove: slices.Clone(h.Remove)}
	for _, v := range h.Set {
		out.Set = append(out.Set, &pb.HeaderValue{Name: v.Name, Value: v.Value})
	}
	for _, v := range h.Add {
		out.Add = append(out.Add, &pb.HeaderValue{Name: v.Name, Value: v.Value})
	}
	return out
}

func pathModifier(p *v1alpha1.PathModifier) *pb.PathModifier {
	if p == nil {
		return nil
	}
	out := &pb.PathModifier{Type: string(p.Type)}
	if p.Type == v1alpha1.ReplaceFullPath {
		out.Value = ptrOr(p.ReplaceFullPath, "/")
	} else {
		out.Value = ptrOr(p.ReplacePrefixMatch, "/")
	}
	return out
}

func (b *builder) filter(r diag.Ref, ns, field string, f *v1alpha1.RouteFilter, hasPrefixMatch bool) (*pb.RouteFilter, bool) {
	missing := func(name string) (*pb.RouteFilter, bool) {
		b.errorf(r, field+"."+name, "required when type is %s", f.Type)
		return nil, false
	}
	prefixOnly := func(p *v1alpha1.PathModifier, at string) bool {
		if p != nil && p.Type == v1alpha1.ReplacePrefixMatch && !hasPrefixMatch {
			b.errorf(r, field+"."+at+".path", "ReplacePrefixMatch needs every match of the rule to be a PathPrefix")
			return false
		}
		return true
	}
	switch f.Type {
	case v1alpha1.FilterRequestHeaderModifier:
		if f.RequestHeaderModifier == nil {
			return missing("requestHeaderModifier")
		}
		return &pb.RouteFilter{Filter: &pb.RouteFilter_RequestHeaderModifier{RequestHeaderModifier: headerModifier(f.RequestHeaderModifier)}}, true
	case v1alpha1.FilterResponseHeaderModifier:
		if f.ResponseHeaderModifier == nil {
			return missing("responseHeaderModifier")
		}
		return &pb.RouteFilter{Filter: &pb.RouteFilter_ResponseHeaderModifier{ResponseHeaderModifier: headerModifier(f.ResponseHeaderModifier)}}, true
	case v1alpha1.FilterURLRewrite:
		if f.URLRewrite == nil {
			return missing("urlRewrite")
		}
		ok := prefixOnly(f.URLRewrite.Path, "urlRewrite")
		return &pb.RouteFilter{Filter: &pb.RouteFilter_UrlRewrite{UrlRewrite: &pb.URLRewrite{Hostname: f.URLRewrite.Hostname, Path: pathModifier(f.URLRewrite.Path)}}}, ok
	case v1alpha1.FilterRequestRedirect:
		rr := f.RequestRedirect
		if rr == nil {
			return missing("requestRedirect")
		}
		ok := prefixOnly(rr.Path, "requestRedirect")
		return &pb.RouteFilter{Filter: &pb.RouteFilter_RequestRedirect{RequestRedirect: &pb.RequestRedirect{
			Scheme: rr.Scheme, Hostname: rr.Hostname, Path: pathModifier(rr.Path), Port: uint32(max(rr.Port, 0)), StatusCode: uint32(cmp.Or(rr.StatusCode, 302)),
		}}}, ok
	case v1alpha1.FilterRequestMirror:
		rm := f.RequestMirror
		if rm == nil {
			return missing("requestMirror")
		}
		refs := b.backendRefs(r, ns, field+".requestMirror.backendRef", []v1alpha1.BackendRef{{Name: rm.BackendRef.Name, Namespace: rm.BackendRef.Namespace}})
		ok := b.backends[refs[0].Backend] != nil
		return &pb.RouteFilter{Filter: &pb.RouteFilter_RequestMirror{RequestMirror: &pb.RequestMirror{Backend: refs[0].Backend, Percent: uint32(cmp.Or(rm.Percent, 100))}}}, ok
	default:
		b.errorf(r, field+".type", "unsupported filter type %q", f.Type)
		return nil, false
	}
}
