package e2e

import (
	"net/netip"
	"testing"

	"github.com/novaedge/novaedge/fastpath"
)

// TestSlowPath checks that what the fast path does not own reaches the
// node's kernel: connections to a non-VIP address of the node, and to VIP
// entries marked ForwardPass (the slow path's listeners), are accepted by a
// listener in the node namespace, while a NAT entry of the same VIP
// address is still forwarded in XDP.
func TestSlowPath(t *testing.T) {
	var vips []fastpath.VIP
	for _, v := range []netip.Addr{passVIP4, passVIP6} {
		vips = append(vips, fastpath.VIP{Name: "slow", Addr: v, Port: passPort, Proto: fastpath.ProtoTCP, Forward: fastpath.ForwardPass})
		vips = append(vips, natVIPs(v, backendsOf(v, backendPort))...)
	}
	s := newSite(t, natBackends, fastpath.Config{VIPs: vips, Node: nodeConfig()})
	// The slow path holds its VIPs on the node and listens on them.
	s.node.addAddr("lo", pfx(passVIP4, 32), pfx(passVIP6, 128))
	serve(t, s.node, "node", []uint16{passPort, nodePort}, nil)

	for _, tc := range []struct {
		name    string
		dst     netip.AddrPort
		counter string
	}{
		{"non-vip/ipv4", netip.AddrPortFrom(gw4, nodePort), "pass_not_vip"},
		{"non-vip/ipv6", netip.AddrPortFrom(gw6, nodePort), "pass_not_vip"},
		{"node-address/ipv4", netip.AddrPortFrom(node4, nodePort), "pass_not_vip"},
		{"pass-vip/ipv4", netip.AddrPortFrom(passVIP4, passPort), "pass_slow_path"},
		{"pass-vip/ipv6", netip.AddrPortFrom(passVIP6, passPort), "pass_slow_path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := s.fp.counters(t)
			f := mustDialTCP(t, s.client, netip.AddrPort{}, tc.dst)
			for _, msg := range []string{"one", "two", "three"} {
				name, err := f.ask(msg)
				if err != nil {
					t.Fatalf("%s: %v", tc.dst, err)
				}
				if name != "node" {
					t.Fatalf("%s answered by %s, want the node's own listener", tc.dst, name)
				}
			}
			if _, err := s.fp.lookupFlow(f.local(), tc.dst, fastpath.ProtoTCP); err == nil {
				t.Errorf("the fast path tracks %s → %s, which it passed to the kernel", f.local(), tc.dst)
			}
			_ = f.conn.Close()

			// The fast entry of the same address stays fast.
			vip := netip.AddrPortFrom(tc.dst.Addr(), natPort)
			if tc.counter == "pass_slow_path" {
				g := mustDialTCP(t, s.client, netip.AddrPort{}, vip)
				name, err := g.ask("fast")
				if err != nil {
					t.Fatalf("NAT entry %s: %v", vip, err)
				}
				s.checkFlow(t, g.local(), vip, fastpath.ProtoTCP, name)
				_ = g.conn.Close()
			}

			d := diff(before, s.fp.counters(t))
			d.grew(t, "rx", tc.counter)
			if tc.counter == "pass_slow_path" {
				d.grew(t, "redirect", "ct_created", "nat_reply")
			} else {
				d.still(t, "redirect", "ct_created", "pass_slow_path")
			}
			d.clean(t)
		})
	}
}
