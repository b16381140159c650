package e2e

import (
	"net/netip"
	"testing"

	"github.com/novaedge/novaedge/fastpath"
	"github.com/novaedge/novaedge/fastpath/decap"
)

// TestDSR sends TCP and UDP flows to DSR VIPs: IPv4 in IPv4, IPv6 in IPv6,
// and GUE over IPv4 and IPv6. The node encapsulates towards the backends in
// XDP (redirected, tracked), the backends' decapsulation program strips
// the outer headers, and the backends answer the client directly from the
// VIP on their lo, through the node's kernel as ordinary routed packets
// that the fast path leaves alone. Flows spread over the three backends and
// stay on theirs.
func TestDSR(t *testing.T) {
	vip := func(name string, addr netip.Addr, port uint16, proto uint8, fwd fastpath.Forward) fastpath.VIP {
		return fastpath.VIP{Name: name, Addr: addr, Port: port, Proto: proto, Forward: fwd, Backends: backendsOf(addr, port)}
	}
	var vips []fastpath.VIP
	for _, a := range []netip.Addr{vip4, vip6} {
		for _, p := range []uint8{fastpath.ProtoTCP, fastpath.ProtoUDP} {
			vips = append(vips, vip("ipip", a, backendPort, p, fastpath.ForwardDSRIPIP), vip("gue", a, guePort, p, fastpath.ForwardDSRGUE))
		}
	}
	s := newSite(t, dsrBackends, fastpath.Config{VIPs: vips, Node: nodeConfig()})

	for _, tc := range []struct {
		name   string
		vip    netip.AddrPort
		decaps func(decap.Counters) uint64
	}{
		{"ipip4", netip.AddrPortFrom(vip4, backendPort), func(c decap.Counters) uint64 { return c.IP4InIP4 }},
		{"ip6ip6", netip.AddrPortFrom(vip6, backendPort), func(c decap.Counters) uint64 { return c.IP6InIP6 }},
		{"gue4", netip.AddrPortFrom(vip4, guePort), func(c decap.Counters) uint64 { return c.GUEIP4 }},
		{"gue6", netip.AddrPortFrom(vip6, guePort), func(c decap.Counters) uint64 { return c.GUEIP6 }},
	} {
		for _, proto := range []string{"tcp", "udp"} {
			t.Run(tc.name+"/"+proto, func(t *testing.T) {
				before, fwd := s.fp.counters(t), s.node.forwarded(t)
				decapBefore := s.decapCounters(t)
				var per map[string]int
				if proto == "tcp" {
					per = s.spreadTCP(t, tc.vip, 60)
				} else {
					per = s.spreadUDP(t, tc.vip, 60)
				}
				t.Logf("60 flows served by %v", per)
				d := diff(before, s.fp.counters(t))
				d.grew(t, "redirect", "ct_hit", "ct_created")
				// The replies bypass the node's XDP translation.
				d.still(t, "nat_reply", "nat_created")
				d.clean(t)
				if s.node.forwarded(t) == fwd {
					t.Error("the node's kernel forwarded no packet: the backends' replies must be routed by it")
				}
				for i, c := range s.decapCounters(t) {
					b := s.backends[i]
					if got := tc.decaps(c) - tc.decaps(decapBefore[i]); got == 0 && per[b.name] > 0 {
						t.Errorf("%s served %d flows but decapsulated no %s packet: %+v", b.name, per[b.name], tc.name, c)
					}
					if c.Malformed != decapBefore[i].Malformed {
						t.Errorf("%s dropped %d malformed packets", b.name, c.Malformed-decapBefore[i].Malformed)
					}
				}
			})
		}
	}
}

// decapCounters reads the decapsulation counters of every backend.
func (s *site) decapCounters(t *testing.T) []decap.Counters {
	t.Helper()
	out := make([]decap.Counters, len(s.backends))
	for i, b := range s.backends {
		c, err := b.decap.Stats()
		if err != nil {
			t.Fatalf("%s decap counters: %v", b.name, err)
		}
		out[i] = c
	}
	return out
}
