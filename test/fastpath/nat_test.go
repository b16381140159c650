package e2e

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/novaedge/novaedge/fastpath"
)

// TestNAT sends TCP and UDP flows to NAT VIPs, IPv4 and IPv6, and pings
// them: flows spread over the three backends, each stays on its backend for
// its lifetime, the program tracks it with the backend the Maglev table and
// the Go flow hash predict, and no packet is forwarded by the node's kernel
// (every one is redirected by XDP, both ways).
func TestNAT(t *testing.T) {
	var vips []fastpath.VIP
	vips = append(vips, natVIPs(vip4, backendsOf(vip4, backendPort))...)
	vips = append(vips, natVIPs(vip6, backendsOf(vip6, backendPort))...)
	s := newSite(t, natBackends, fastpath.Config{VIPs: vips, Node: nodeConfig()})

	for _, vip := range []netip.Addr{vip4, vip6} {
		family := "ipv4"
		if vip.Is6() {
			family = "ipv6"
		}
		t.Run(family+"/tcp", func(t *testing.T) {
			before, fwd := s.fp.counters(t), s.node.forwarded(t)
			per := s.spreadTCP(t, netip.AddrPortFrom(vip, natPort), 60)
			t.Logf("60 connections served by %v", per)
			d := diff(before, s.fp.counters(t))
			d.grew(t, "redirect", "ct_hit", "ct_created", "nat_created", "nat_reply")
			d.clean(t)
			if got := s.node.forwarded(t) - fwd; got != 0 {
				t.Errorf("the node's kernel forwarded %d packets: NAT traffic must go through XDP only", got)
			}
		})
		t.Run(family+"/udp", func(t *testing.T) {
			before, fwd := s.fp.counters(t), s.node.forwarded(t)
			per := s.spreadUDP(t, netip.AddrPortFrom(vip, natPort), 60)
			t.Logf("60 UDP flows served by %v", per)
			d := diff(before, s.fp.counters(t))
			d.grew(t, "redirect", "ct_hit", "ct_created", "nat_created", "nat_reply")
			d.clean(t)
			if got := s.node.forwarded(t) - fwd; got != 0 {
				t.Errorf("the node's kernel forwarded %d packets: NAT traffic must go through XDP only", got)
			}
		})
		t.Run(family+"/echo", func(t *testing.T) {
			before := s.fp.counters(t)
			if err := ping(s.client, vip, 1); err != nil {
				t.Fatalf("ping %s: %v", vip, err)
			}
			d := diff(before, s.fp.counters(t))
			// Answered in place with XDP_TX; counted as icmp_echo (the tx
			// counter counts only forwarded frames).
			d.grew(t, "icmp_echo")
			d.clean(t)
		})
	}
}

// TestNATSameSourcePort connects two clients (two addresses) from the same
// source port to a VIP, over TCP and UDP, IPv4 and IPv6: both get through,
// also when the VIP has a single backend and the SNAT must give the two
// flows different ports towards the same backend.
func TestNATSameSourcePort(t *testing.T) {
	var vips []fastpath.VIP
	for _, v := range []netip.Addr{vip4, vip6} {
		vips = append(vips, natVIPs(v, backendsOf(v, backendPort))...)
	}
	for _, v := range []netip.Addr{soloVIP4, soloVIP6} {
		vips = append(vips, natVIPs(v, backendsOf(v, backendPort, "b2", "b3"))...)
	}
	s := newSite(t, natBackends, fastpath.Config{VIPs: vips, Node: nodeConfig()})

	port := uint16(40000)
	for _, tc := range []struct {
		name    string
		clients [2]netip.Addr
		vip     netip.Addr
		solo    bool
	}{
		{"ipv4/one-backend", [2]netip.Addr{client4, client4b}, soloVIP4, true},
		{"ipv4/three-backends", [2]netip.Addr{client4, client4b}, vip4, false},
		{"ipv6/one-backend", [2]netip.Addr{client6, client6b}, soloVIP6, true},
		{"ipv6/three-backends", [2]netip.Addr{client6, client6b}, vip6, false},
	} {
		for _, proto := range []uint8{fastpath.ProtoTCP, fastpath.ProtoUDP} {
			port++
			name := tc.name + "/tcp"
			if proto == fastpath.ProtoUDP {
				name = tc.name + "/udp"
			}
			t.Run(name, func(t *testing.T) {
				before := s.fp.counters(t)
				vip := netip.AddrPortFrom(tc.vip, natPort)
				var served [2]string
				var locals [2]netip.AddrPort
				for i, c := range tc.clients {
					locals[i] = netip.AddrPortFrom(c, port)
					msg := fmt.Sprintf("client %d", i)
					var err error
					if proto == fastpath.ProtoTCP {
						f := mustDialTCP(t, s.client, locals[i], vip)
						// The connection stays open until the subtest
						// ends: both flows must be tracked (and hold a
						// SNAT port) at once.
						served[i], err = f.ask(msg)
					} else {
						var u *net.UDPConn
						u, err = dialUDP(s.client, locals[i], vip)
						if err != nil {
							t.Fatal(err)
						}
						t.Cleanup(func() { _ = u.Close() })
						served[i], err = askUDP(u, msg, 5, 2*time.Second)
					}
					if err != nil {
						t.Fatalf("client %s: %v", locals[i], err)
					}
				}
				if tc.solo && (served[0] != "b1" || served[1] != "b1") {
					t.Errorf("one-backend VIP served by %v, want b1 for both", served)
				}
				var ports [2]uint16
				for i := range locals {
					ct, err := s.fp.lookupFlow(locals[i], vip, proto)
					if err != nil {
						t.Fatalf("flow %s → %s not tracked: %v", locals[i], vip, err)
					}
					if got := s.nameOfID(t, ct.BackendId); got != served[i] {
						t.Errorf("flow %s served by %s, tracked with %s", locals[i], served[i], got)
					}
					ports[i] = ct.NatPort
				}
				if served[0] == served[1] && ports[0] == ports[1] {
					t.Errorf("both flows to %s got SNAT port %d", served[0], ports[0])
				}
				d := diff(before, s.fp.counters(t))
				d.grew(t, "redirect", "nat_created", "nat_reply")
				d.clean(t)
			})
		}
	}
}

// TestNATManyFlows opens ten thousand UDP flows from two client addresses
// to a NAT VIP, all alive at once: each is answered, twice, by the same
// backend, and the program holds a conntrack entry and a NAT mapping for
// every one.
func TestNATManyFlows(t *testing.T) {
	const (
		perClient = 5000
		firstPort = 20000
		workers   = 32
	)
	node := nodeConfig()
	// 3 backends × 50 001 ports: with the default 4 001 ports per backend
	// and 16 tries per new mapping, some of ~3 400 flows per backend
	// would find no free port.
	node.NATPortMin, node.NATPortMax = 10000, 60000
	s := newSite(t, natBackends, fastpath.Config{VIPs: natVIPs(vip4, backendsOf(vip4, backendPort)), Node: node})
	vip := netip.AddrPortFrom(vip4, natPort)

	var socks []*net.UDPConn
	t.Cleanup(func() {
		for _, c := range socks {
			_ = c.Close()
		}
	})
	for _, client := range []netip.Addr{client4, client4b} {
		for p := range perClient {
			c, err := dialUDP(s.client, netip.AddrPortFrom(client, uint16(firstPort+p)), vip)
			if err != nil {
				t.Fatal(err)
			}
			socks = append(socks, c)
		}
	}
	before, fwd := s.fp.counters(t), s.node.forwarded(t)

	served := make([]string, len(socks))
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for round := range 2 {
		next := make(chan int)
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range next {
					name, err := askUDP(socks[i], fmt.Sprintf("flow %d round %d", i, round), 10, 2*time.Second)
					if err == nil && round > 0 && name != served[i] {
						err = fmt.Errorf("moved from %s to %s", served[i], name)
					}
					if err != nil {
						mu.Lock()
						errs = append(errs, fmt.Errorf("flow %d from %s: %w", i, socks[i].LocalAddr(), err))
						mu.Unlock()
						continue
					}
					served[i] = name
				}
			}()
		}
		for i := range socks {
			next <- i
		}
		close(next)
		wg.Wait()
		if len(errs) > 0 {
			t.Fatalf("round %d: %d of %d flows failed, first: %v", round, len(errs), len(socks), errors.Join(errs[:min(len(errs), 5)]...))
		}
	}
	t.Logf("%d flows served by %v", len(socks), perBackend(t, served))

	if n := len(s.fp.conntrack(t, vip4, natPort, fastpath.ProtoUDP)); n < len(socks) {
		t.Errorf("fp_conntrack holds %d flows to %s, want ≥ %d", n, vip, len(socks))
	}
	if n := s.fp.natMappings(t, node4, fastpath.ProtoUDP); n < len(socks) {
		t.Errorf("fp_nat holds %d mappings, want ≥ %d", n, len(socks))
	}
	d := diff(before, s.fp.counters(t))
	for name, want := range map[string]int64{
		"ct_created": int64(len(socks)), "nat_created": int64(len(socks)),
		"nat_reply": 2 * int64(len(socks)), "redirect": 4 * int64(len(socks)),
		"ct_hit": int64(len(socks)),
	} {
		if d[name] < want {
			t.Errorf("counter %s grew by %d, want ≥ %d", name, d[name], want)
		}
	}
	d.clean(t)
	if got := s.node.forwarded(t) - fwd; got != 0 {
		t.Errorf("the node's kernel forwarded %d packets: NAT traffic must go through XDP only", got)
	}
}

// TestNATPortExhaustion gives the node a single SNAT port: a second
// concurrent flow to the same backend finds no free port, is dropped and
// counted as drop_nat_exhausted, while the first flow keeps working.
func TestNATPortExhaustion(t *testing.T) {
	node := nodeConfig()
	node.NATPortMin, node.NATPortMax = 61000, 61000
	s := newSite(t, natBackends, fastpath.Config{VIPs: natVIPs(soloVIP4, backendsOf(soloVIP4, backendPort, "b2", "b3")), Node: node})
	vip := netip.AddrPortFrom(soloVIP4, natPort)
	first, second := netip.AddrPortFrom(client4, 30001), netip.AddrPortFrom(client4, 30002)

	t.Run("udp", func(t *testing.T) {
		c1, err := dialUDP(s.client, first, vip)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c1.Close() })
		if _, err := askUDP(c1, "first", 5, 2*time.Second); err != nil {
			t.Fatalf("first flow: %v", err)
		}
		c2, err := dialUDP(s.client, second, vip)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c2.Close() })

		before := s.fp.counters(t)
		if _, err := c2.Write([]byte("second")); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "drop_nat_exhausted to count the second flow", func() bool {
			return s.fp.counters(t)["drop_nat_exhausted"] > before["drop_nat_exhausted"]
		})
		// The drop is counted, so no answer can come; a short wait shows
		// none was already there.
		if err := c2.SetReadDeadline(time.Now().Add(500 * time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 256)
		if n, err := c2.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("second flow: read %q, %v; want no answer", buf[:n], err)
		}
		if _, err := askUDP(c1, "first again", 5, 2*time.Second); err != nil {
			t.Errorf("first flow after the second was refused: %v", err)
		}
		if _, err := s.fp.lookupFlow(second, vip, fastpath.ProtoUDP); err == nil {
			t.Error("the refused flow is in fp_conntrack")
		}
		if n := s.fp.natMappings(t, node4, fastpath.ProtoUDP); n != 1 {
			t.Errorf("fp_nat holds %d UDP mappings, want 1", n)
		}
		d := diff(before, s.fp.counters(t))
		d.grew(t, "drop_nat_exhausted", "redirect", "ct_hit", "nat_reply")
		d.clean(t, "drop_nat_exhausted")
	})

	t.Run("tcp", func(t *testing.T) {
		f1 := mustDialTCP(t, s.client, first, vip)
		if _, err := f1.ask("first"); err != nil {
			t.Fatalf("first connection: %v", err)
		}
		before := s.fp.counters(t)
		// The SYNs are dropped, so the dial can only time out; the
		// counter, not the timeout, is the proof.
		if f2, err := dialTCP(s.client, second, vip, 2*time.Second); err == nil {
			_ = f2.conn.Close()
			t.Fatal("second connection got through with the only SNAT port taken")
		}
		d := diff(before, s.fp.counters(t))
		d.grew(t, "drop_nat_exhausted")
		if _, err := f1.ask("first again"); err != nil {
			t.Errorf("first connection after the second was refused: %v", err)
		}
		d = diff(before, s.fp.counters(t))
		d.grew(t, "redirect", "ct_hit", "nat_reply")
		d.clean(t, "drop_nat_exhausted")
	})
}
