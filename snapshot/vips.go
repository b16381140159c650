package snapshot

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/novaedge/novaedge/api/v1alpha1"
	"github.com/novaedge/novaedge/diag"
	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/ipam"
)

type secretEntry struct{ s *corev1.Secret }

type serviceEntry struct {
	svc    *corev1.Service
	slices []*discoveryv1.EndpointSlice
}

func (b *builder) indexCore() {
	for _, s := range sortByName(b.in.Secrets, func(s *corev1.Secret) (string, string) { return s.Namespace, s.Name }) {
		b.secrets[key(orDefault(s.Namespace, "default"), s.Name)] = &secretEntry{s: s}
	}
	for _, s := range sortByName(b.in.Services, func(s *corev1.Service) (string, string) { return s.Namespace, s.Name }) {
		b.services[key(orDefault(s.Namespace, "default"), s.Name)] = &serviceEntry{svc: s}
	}
	for _, es := range sortByName(b.in.EndpointSlices, func(s *discoveryv1.EndpointSlice) (string, string) { return s.Namespace, s.Name }) {
		svc := es.Labels[discoveryv1.LabelServiceName]
		if svc == "" {
			continue
		}
		e := b.services[key(orDefault(es.Namespace, "default"), svc)]
		if e == nil {
			// Slices may arrive before their Service; keep them so the
			// Service, once known, finds them. A Service that never
			// arrives is reported by the backend that references it.
			e = &serviceEntry{}
			b.services[key(orDefault(es.Namespace, "default"), svc)] = e
		}
		e.slices = append(e.slices, es)
	}
}

// secretValue returns one key of a Secret, reporting what is missing.
// ok is false when the value is unavailable; fatal is true when that is an
// error (the input is the whole cluster) rather than a warning.
func (b *builder) secretValue(owner diag.Ref, field, ns, name, k string) (val []byte, ok, fatal bool) {
	e := b.secrets[key(ns, name)]
	if e == nil {
		b.missingf(owner, field, "Secret %s/%s not found", ns, name)
		return nil, false, b.opts.ClusterComplete
	}
	v, found := e.s.Data[k]
	if !found {
		if sv, sfound := e.s.StringData[k]; sfound {
			return []byte(sv), true, false
		}
		b.errorf(owner, field, "Secret %s/%s has no key %q", ns, name, k)
		return nil, false, true
	}
	return v, true, false
}

type poolEntry struct {
	obj      *v1alpha1.ProxyIPPool
	pool     *ipam.Pool
	ref      diag.Ref
	accepted bool
}

// oldestFirst returns pointers to s's objects ordered by creation time,
// then name, then namespace: when two resources claim the same thing, the
// one that existed first keeps it (files carry no timestamps, so there the
// name decides). Creation times have one-second resolution: of two
// resources made in the same second, the one that holds the contested
// thing already (held: accepted per its status) stays the older, whatever
// the names, so that a newcomer never takes over what is in use.
//
// Namespace and name identify an object, so the order is total and the
// sort need not be stable. Each object's key is taken once: comparing
// ObjectMetas and scanning conditions in the comparison took half of a
// build of 3000 routes listed in a controller cache's random order.
func oldestFirst[T any](s []T, meta func(*T) (*metav1.ObjectMeta, bool)) []*T {
	type key struct {
		sec      int64
		nsec     int32
		held     bool
		name, ns string
		obj      *T
	}
	keys := make([]key, len(s))
	for i := range s {
		m, held := meta(&s[i])
		t := m.CreationTimestamp.Time
		keys[i] = key{sec: t.Unix(), nsec: int32(t.Nanosecond()), held: held, name: m.Name, ns: m.Namespace, obj: &s[i]}
	}
	slices.SortFunc(keys, func(a, b key) int {
		switch {
		case a.sec != b.sec:
			return cmp.Compare(a.sec, b.sec)
		case a.nsec != b.nsec:
			return cmp.Compare(a.nsec, b.nsec)
		case a.held != b.held:
			return compareBool(b.held, a.held)
		case a.name != b.name:
			return cmp.Compare(a.name, b.name)
		}
		return cmp.Compare(a.ns, b.ns)
	})
	out := make([]*T, len(keys))
	for i := range keys {
		out[i] = keys[i].obj
	}
	return out
}

// wasAccepted says whether a resource's status says it was accepted.
func wasAccepted(cs []metav1.Condition) bool {
	return meta.IsStatusConditionTrue(cs, v1alpha1.ConditionAccepted)
}

// compareBool orders false before true.
func compareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	}
	return 1
}

func (b *builder) buildPools() {
	pools := oldestFirst(b.in.Pools, func(p *v1alpha1.ProxyIPPool) (*metav1.ObjectMeta, bool) {
		return &p.ObjectMeta, wasAccepted(p.Status.Conditions)
	})
	for _, p := range pools {
		e := &poolEntry{obj: p, ref: ref(kPool, "", p.Name), pool: &ipam.Pool{
			Name:          p.Name,
			AutoAssign:    p.Spec.AutoAssign == nil || *p.Spec.AutoAssign,
			AvoidBuggyIPs: p.Spec.AvoidBuggyIPs,
		}}
		ok := true
		for i, c := range p.Spec.CIDRs {
			r, err := ipam.ParseCIDR(c)
			if err != nil {
				b.errorf(e.ref, fmt.Sprintf("spec.cidrs[%d]", i), "%v", err)
				ok = false
				continue
			}
			e.pool.Ranges = append(e.pool.Ranges, r)
		}
		for i, a := range p.Spec.Addresses {
			r, err := ipam.ParseAddress(a)
			if err != nil {
				b.errorf(e.ref, fmt.Sprintf("spec.addresses[%d]", i), "%v", err)
				ok = false
				continue
			}
			e.pool.Ranges = append(e.pool.Ranges, r)
		}
		if ok && len(e.pool.Ranges) == 0 {
			b.errorf(e.ref, "spec", "pool has no addresses: set cidrs or addresses")
			ok = false
		}
		if ok {
			for i, r := range e.pool.Ranges {
				for _, o := range e.pool.Ranges[:i] {
					if r.Overlaps(o) {
						b.errorf(e.ref, "spec", "entries %s and %s of the pool overlap", o, r)
						ok = false
					}
				}
			}
		}
		// Overlapping pools are rejected, as MetalLB does: an address in two
		// pools would have two owners. The older pool keeps its addresses.
		if ok {
			for _, o := range b.pools {
				if !o.accepted {
					continue
				}
				if ra, rb, overlap := e.pool.Overlap(o.pool); overlap {
					b.errorf(e.ref, "spec", "overlaps ProxyIPPool %s (%s and %s); the older pool keeps its addresses and this one is not used", o.obj.Name, ra, rb)
					ok = false
					break
				}
			}
		}
		e.accepted = ok
		b.pools = append(b.pools, e)
		b.poolsByName[p.Name] = e
	}
}

type vipEntry struct {
	obj      *v1alpha1.ProxyVIP
	ref      diag.Ref
	pool     *poolEntry
	families []int // 4 and/or 6, the address families the VIP needs
	addrs    []netip.Addr
	accepted bool
	pb       *pb.VIP
	// svc is set for the VIP of Services of type LoadBalancer; obj is then
	// a stand-in ProxyVIP and ref names the oldest Service.
	svc *svcGroup
}

var vipModes = map[v1alpha1.VIPMode]pb.VIPMode{
	v1alpha1.VIPModeL2ARP: pb.VIPMode_VIP_MODE_L2ARP,
	v1alpha1.VIPModeBGP:   pb.VIPMode_VIP_MODE_BGP,
	v1alpha1.VIPModeOSPF:  pb.VIPMode_VIP_MODE_OSPF,
	v1alpha1.VIPModeLocal: pb.VIPMode_VIP_MODE_LOCAL,
}

func (b *builder) buildVIPs() {
	vips := oldestFirst(b.in.VIPs, func(v *v1alpha1.ProxyVIP) (*metav1.ObjectMeta, bool) {
		return &v.ObjectMeta, wasAccepted(v.Status.Conditions)
	})

	// Pass 1: parse, check modes and pool references, claim static addresses.
	claimed := map[netip.Addr]*vipEntry{}
	for _, v := range vips {
		e := &vipEntry{obj: v, ref: ref(kVIP, "", v.Name), accepted: true}
		b.vips = append(b.vips, e)
		b.checkVIPSpec(e)
		fam := v.Spec.AddressFamily
		switch {
		case fam == v1alpha1.AddressFamilyDual || (fam == "" && v.Spec.Address != "" && v.Spec.IPv6Address != ""):
			e.families = []int{4, 6}
		case fam == v1alpha1.AddressFamilyIPv6:
			e.families = []int{6}
		default:
			e.families = []int{4}
		}
		for _, f := range []struct {
			field, val string
			family     int
		}{{"spec.address", v.Spec.Address, 4}, {"spec.ipv6Address", v.Spec.IPv6Address, 6}} {
			if f.val == "" {
				continue
			}
			a, err := ipam.ParseHost(f.val)
			if err == nil && (a.Is4() != (f.family == 4)) {
				err = fmt.Errorf("%q is not an IPv%d address", f.val, f.family)
			}
			if err != nil {
				b.errorf(e.ref, f.field, "%v", err)
				e.accepted = false
				continue
			}
			if other := claimed[a]; other != nil {
				b.errorf(e.ref, f.field, "address %s is already claimed by ProxyVIP %s; the older VIP keeps it and this one is not served", a, other.obj.Name)
				e.accepted = false
				continue
			}
			claimed[a] = e
			e.addrs = append(e.addrs, a)
		}
		if pr := v.Spec.PoolRef; pr != nil {
			p := b.poolsByName[pr.Name]
			switch {
			case p == nil:
				b.errorf(e.ref, "spec.poolRef.name", "ProxyIPPool %q not found", pr.Name)
				e.accepted = false
			case !p.accepted:
				b.errorf(e.ref, "spec.poolRef.name", "ProxyIPPool %q is not usable (see its errors)", pr.Name)
				e.accepted = false
			default:
				e.pool = p
				for _, a := range e.addrs {
					if !p.pool.Contains(a) {
						b.errorf(e.ref, "spec.address", "address %s is outside ProxyIPPool %s", a, pr.Name)
						e.accepted = false
					}
				}
			}
		}
	}

	// A static address inside a pool is reserved there, never handed out
	// again. MetalLB users expect this to work (a Service asking for a
	// specific address of a pool), so it is a warning, not an error.
	for _, e := range b.vips {
		for _, a := range e.addrs {
			for _, p := range b.pools {
				if p.accepted && p.pool.Contains(a) && e.pool != p && claimed[a] == e {
					b.warnf(e.ref, "spec.address", "address %s lies inside ProxyIPPool %s; it is reserved there and never auto-assigned (add poolRef to make that explicit)", a, p.obj.Name)
				}
			}
		}
	}

	// Services of type LoadBalancer claim their addresses after the
	// ProxyVIPs' static ones (those are the administrator's) and before
	// pool allocations, which must not hand their addresses out.
	svcVIPs := b.serviceVIPs(claimed)

	// Pass 2: pool allocations, in age order so earlier VIPs keep theirs.
	inUse := func(a netip.Addr) bool { return claimed[a] != nil }
	for _, e := range b.vips {
		if !e.accepted || e.pool == nil {
			continue
		}
		for _, fam := range e.families {
			if slices.ContainsFunc(e.addrs, func(a netip.Addr) bool { return a.Is4() == (fam == 4) }) {
				continue
			}
			var a netip.Addr
			var ok bool
			if b.in.Decisions != nil {
				a, ok = decidedAddr(b.in.Decisions.Addresses[e.obj.Name], fam)
				if !ok {
					b.warnf(e.ref, "spec.poolRef", "no IPv%d address allocated from ProxyIPPool %s yet", fam, e.pool.obj.Name)
				}
			} else {
				a, ok = e.pool.pool.Allocate(fam, inUse)
				if !ok {
					b.errorf(e.ref, "spec.poolRef", "ProxyIPPool %s has no free IPv%d address", e.pool.obj.Name, fam)
				}
			}
			if !ok {
				e.accepted = false
				continue
			}
			claimed[a] = e
			e.addrs = append(e.addrs, a)
		}
	}

	for _, e := range b.vips {
		if len(e.addrs) == 0 && e.accepted {
			b.errorf(e.ref, "spec", "VIP has no address")
			e.accepted = false
		}
		if !e.accepted {
			continue
		}
		slices.SortFunc(e.addrs, func(x, y netip.Addr) int { return x.Compare(y) })
		e.pb = &pb.VIP{Name: e.obj.Name, Mode: vipModes[e.obj.Spec.Mode], Forwarding: resolveForwarding(e.obj.Spec.Forwarding)}
		for _, a := range e.addrs {
			e.pb.Addresses = append(e.pb.Addresses, a.String())
		}
		for _, p := range e.obj.Spec.Ports {
			e.pb.Ports = append(e.pb.Ports, uint32(p))
		}
		slices.Sort(e.pb.Ports)
		e.pb.Ports = slices.Compact(e.pb.Ports)
		b.vipsByName[e.obj.Name] = e
	}
	b.addServiceVIPs(svcVIPs)
}

func decidedAddr(addrs []netip.Addr, fam int) (netip.Addr, bool) {
	for _, a := range addrs {
		if a.Is4() == (fam == 4) {
			return a, true
		}
	}
	return netip.Addr{}, false
}

// checkVIPSpec checks what the CRD schema checks too (the builder must not
// trust its input) plus what only a build can say.
func (b *builder) checkVIPSpec(e *vipEntry) {
	s := &e.obj.Spec
	if _, ok := vipModes[s.Mode]; !ok {
		b.errorf(e.ref, "spec.mode", "unsupported mode %q: use L2ARP, BGP, OSPF or Local", s.Mode)
		e.accepted = false
	}
	if s.Address == "" && s.IPv6Address == "" && s.PoolRef == nil {
		b.errorf(e.ref, "spec", "set address (or ipv6Address) or poolRef")
		e.accepted = false
	}
	switch {
	case s.Mode == v1alpha1.VIPModeBGP && s.BGPConfig == nil:
		b.errorf(e.ref, "spec.bgpConfig", "bgpConfig is required when mode is BGP")
		e.accepted = false
	case s.Mode != v1alpha1.VIPModeBGP && s.BGPConfig != nil:
		b.warnf(e.ref, "spec.bgpConfig", "ignored: mode is %s", s.Mode)
	}
	switch {
	case s.Mode == v1alpha1.VIPModeOSPF && s.OSPFConfig == nil:
		b.errorf(e.ref, "spec.ospfConfig", "ospfConfig is required when mode is OSPF")
		e.accepted = false
	case s.Mode != v1alpha1.VIPModeOSPF && s.OSPFConfig != nil:
		b.warnf(e.ref, "spec.ospfConfig", "ignored: mode is %s", s.Mode)
	}
	if s.OSPFConfig != nil && s.OSPFConfig.AuthKey != "" {
		b.warnf(e.ref, "spec.ospfConfig.authKey", "inline authKey is deprecated: anyone who can read the ProxyVIP can read the key; move it to a Secret and use authKeySecretRef")
	}
	if s.BFD != nil && s.BFD.Enabled && s.Mode == v1alpha1.VIPModeLocal {
		b.warnf(e.ref, "spec.bfd", "ignored: a Local VIP has no peers")
	}
	for i, p := range s.Ports {
		if p < 1 || p > 65535 {
			b.errorf(e.ref, fmt.Sprintf("spec.ports[%d]", i), "port %d out of range 1-65535", p)
			e.accepted = false
		}
	}
	b.checkForwarding(e)
}
