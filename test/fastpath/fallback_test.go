package e2e

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/novaedge/novaedge/fastpath"
)

// TestUnresolvedNeighbour removes the node's neighbour entries for a
// backend, so bpf_fib_lookup answers NO_NEIGH for the first packets of a
// flow. The program then hands the already translated (NAT) or
// encapsulated (DSR) packet to the kernel, which — bpf/fastpath.bpf.c
// says — forwards it and resolves the neighbour on the way; later packets
// go through XDP again. The connection must work, in both modes and both
// families.
func TestUnresolvedNeighbour(t *testing.T) {
	for _, mode := range []struct {
		name  string
		sites siteMode
		fwd   fastpath.Forward
		vips  [2]netip.Addr
		port  uint16
	}{
		{"nat", natBackends, fastpath.ForwardNAT, [2]netip.Addr{soloVIP4, soloVIP6}, natPort},
		{"dsr-ipip", dsrBackends, fastpath.ForwardDSRIPIP, [2]netip.Addr{vip4, vip6}, backendPort},
	} {
		t.Run(mode.name, func(t *testing.T) {
			var vips []fastpath.VIP
			for _, v := range mode.vips {
				vips = append(vips, fastpath.VIP{Name: mode.name, Addr: v, Port: mode.port, Proto: fastpath.ProtoTCP,
					Forward: mode.fwd, Backends: backendsOf(v, backendPort, "b2", "b3")})
			}
			s := newSite(t, mode.sites, fastpath.Config{VIPs: vips, Node: nodeConfig()})
			dev := s.lab.id + "n1"
			for i, family := range []string{"ipv4", "ipv6"} {
				via := backendLink4(1, 2)
				if i == 1 {
					via = backendLink6(1, 2)
				}
				t.Run(family, func(t *testing.T) {
					s.node.ip("neigh", "del", via.String(), "dev", dev)
					before := s.fp.counters(t)
					vip := netip.AddrPortFrom(mode.vips[i], mode.port)
					// A working fallback connects at the first SYN; half the
					// patience still allows two retransmissions.
					f, err := dialTCP(s.client, netip.AddrPort{}, vip, patience/2)
					if err != nil {
						// The kernel logs "martian source" for what it dropped.
						d := diff(before, s.fp.counters(t))
						t.Fatalf("%v; counters: %v; the node's neighbour entry for %s: %q", err, d.nonZero(), via,
							s.node.exec("ip", "neigh", "show", via.String(), "dev", dev))
					}
					t.Cleanup(func() { _ = f.conn.Close() })
					for m := range 3 {
						name, err := f.ask(fmt.Sprintf("message %d", m))
						if err != nil {
							t.Fatal(err)
						}
						if name != "b1" {
							t.Fatalf("answered by %s, want b1", name)
						}
					}
					d := diff(before, s.fp.counters(t))
					// The first packet went to the kernel, the others through XDP.
					d.grew(t, "pass_no_neigh", "redirect")
					d.clean(t, "pass_no_neigh")
				})
			}
		})
	}
}
