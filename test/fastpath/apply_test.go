package e2e

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/novaedge/novaedge/fastpath"
)

// TestApplyRemovesBackend opens connections to a NAT VIP over three
// backends, then applies a Config without one of them: the connections on
// the two others go on exchanging data with the same backend, and new
// connections never reach the removed one.
func TestApplyRemovesBackend(t *testing.T) {
	const removed = "b3"
	cfg := func(skip ...string) fastpath.Config {
		var vips []fastpath.VIP
		for _, v := range []netip.Addr{vip4, vip6} {
			vips = append(vips, natVIPs(v, backendsOf(v, backendPort, skip...))...)
		}
		return fastpath.Config{VIPs: vips, Node: nodeConfig()}
	}
	s := newSite(t, natBackends, cfg())

	for _, v := range []netip.Addr{vip4, vip6} {
		name := "ipv4"
		if v.Is6() {
			name = "ipv6"
		}
		t.Run(name, func(t *testing.T) {
			if _, err := s.fp.mgr.Apply(cfg()); err != nil {
				t.Fatalf("apply all three backends: %v", err)
			}
			vip := netip.AddrPortFrom(v, natPort)
			const n = 45
			old := make([]*tcpFlow, n)
			served := make([]string, n)
			for i := range old {
				old[i] = mustDialTCP(t, s.client, netip.AddrPort{}, vip)
				var err error
				if served[i], err = old[i].ask(fmt.Sprintf("before %d", i)); err != nil {
					t.Fatalf("connection %d before the apply: %v", i, err)
				}
			}
			perBackend(t, served)

			before := s.fp.counters(t)
			res, err := s.fp.mgr.Apply(cfg(removed))
			if err != nil {
				t.Fatalf("apply without %s: %v", removed, err)
			}
			// b3's IPv4 and IPv6 addresses: the Config drops it from
			// the VIPs of both families.
			if res.BackendsRemoved != 2 {
				t.Errorf("apply removed %d backends, want 2 (%+v)", res.BackendsRemoved, res)
			}

			kept := 0
			for i, f := range old {
				if served[i] == removed {
					continue
				}
				kept++
				for m := range 3 {
					name, err := f.ask(fmt.Sprintf("after %d.%d", i, m))
					if err != nil {
						t.Fatalf("connection %d to %s broke with the apply: %v", i, served[i], err)
					}
					if name != served[i] {
						t.Errorf("connection %d moved from %s to %s with the apply", i, served[i], name)
					}
				}
			}
			if kept == 0 {
				t.Fatal("no connection on a surviving backend")
			}

			fresh := map[string]int{}
			for i := range n {
				f := mustDialTCP(t, s.client, netip.AddrPort{}, vip)
				name, err := f.ask(fmt.Sprintf("new %d", i))
				if err != nil {
					t.Fatalf("new connection %d after the apply: %v", i, err)
				}
				fresh[name]++
				s.checkFlow(t, f.local(), vip, fastpath.ProtoTCP, name)
				_ = f.conn.Close()
			}
			if fresh[removed] > 0 {
				t.Errorf("%d of %d new connections reached the removed backend %s: %v", fresh[removed], n, removed, fresh)
			}
			t.Logf("%d connections kept, new ones served by %v", kept, fresh)
			d := diff(before, s.fp.counters(t))
			d.grew(t, "redirect", "ct_hit", "nat_reply", "ct_created")
			d.clean(t)
			for _, f := range old {
				_ = f.conn.Close()
			}
		})
	}
}
