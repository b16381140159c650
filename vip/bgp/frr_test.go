package bgp

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/novaedge/novaedge/test/frr"
)

// The test topology: a router namespace running FRR's zebra and bgpd (the
// top-of-rack router, AS 65000) and two node namespaces, each running one
// speaker in a child process, peering with the router over IPv4 and over
// IPv6 on its own veth pair. Each node announces the same VIP as a /32 and
// a /128; zebra installs what bgpd selects, so that `show ip route json`
// shows the router's FIB view.
const (
	routerAS = 65000
	nodeAS   = 65100
)

var (
	vip4 = netip.MustParsePrefix("10.200.0.10/32")
	vip6 = netip.MustParsePrefix("fd00:200::10/128")
)

type testNode struct {
	name           string
	ns             *frr.NetNS
	addr4, addr6   netip.Addr // the node's side of its link
	router4, rout6 netip.Addr // the router's side
	sp             *childSpeaker
}

type bed struct {
	router *frr.Router
	nodes  [2]*testNode
}

func newBed(t *testing.T, localAS uint32) *bed {
	t.Helper()
	rns := frr.NewNetNS(t, "nebgp-r")
	b := &bed{}
	for i, name := range []string{"a", "b"} {
		n := &testNode{
			name:    name,
			ns:      frr.NewNetNS(t, "nebgp-"+name),
			addr4:   netip.MustParseAddr(fmt.Sprintf("10.81.%d.2", i+1)),
			addr6:   netip.MustParseAddr(fmt.Sprintf("fd81:%d::2", i+1)),
			router4: netip.MustParseAddr(fmt.Sprintf("10.81.%d.1", i+1)),
			rout6:   netip.MustParseAddr(fmt.Sprintf("fd81:%d::1", i+1)),
		}
		frr.Link(t, rns, "r-"+name, []string{n.router4.String() + "/24", n.rout6.String() + "/64"},
			n.ns, name+"-r", []string{n.addr4.String() + "/24", n.addr6.String() + "/64"})
		b.nodes[i] = n
	}
	var conf strings.Builder
	fmt.Fprintf(&conf, "frr defaults traditional\nhostname tor\n!\nrouter bgp %d\n bgp router-id 10.81.0.1\n no bgp ebgp-requires-policy\n no bgp default ipv4-unicast\n", routerAS)
	for _, n := range b.nodes {
		for _, a := range []netip.Addr{n.addr4, n.addr6} {
			fmt.Fprintf(&conf, " neighbor %s remote-as %d\n neighbor %s timers connect 1\n", a, localAS, a)
		}
	}
	multipath := "maximum-paths 2"
	if localAS == routerAS {
		multipath = "maximum-paths ibgp 2"
	}
	for _, fam := range []string{"ipv4", "ipv6"} {
		fmt.Fprintf(&conf, " address-family %s unicast\n  %s\n", fam, multipath)
		for _, n := range b.nodes {
			a := n.addr4
			if fam == "ipv6" {
				a = n.addr6
			}
			fmt.Fprintf(&conf, "  neighbor %s activate\n", a)
		}
		conf.WriteString(" exit-address-family\n")
	}
	conf.WriteString("!\n")
	b.router = frr.Start(t, rns,
		frr.Daemon{Name: "zebra", Config: "hostname tor\n"},
		frr.Daemon{Name: "bgpd", Config: conf.String(), Args: []string{"-p", "179"}},
	)
	return b
}

// desired is what node n announces: both VIP addresses, to the router over
// IPv4 and IPv6, with every attribute the API has.
func (n *testNode) desired(localAS uint32, hold time.Duration) Desired {
	lp, med := uint32(200), uint32(50)
	d := Desired{LocalAS: localAS, RouterID: n.addr4}
	for _, a := range []netip.Addr{n.router4, n.rout6} {
		d.Peers = append(d.Peers, Peer{Address: a, AS: routerAS, HoldTime: hold, GracefulRestart: true})
	}
	for _, p := range []netip.Prefix{vip4, vip6} {
		d.Routes = append(d.Routes, Route{VIP: "web", Prefix: p,
			Communities: []string{"65000:100", "no-export"}, LargeCommunities: []string{"65000:1:2"},
			LocalPreference: &lp, MED: &med})
	}
	return d
}

// FRR's JSON, the fields the test reads.
type (
	frrRoute struct {
		Protocol  string       `json:"protocol"`
		Selected  bool         `json:"selected"`
		Installed bool         `json:"installed"`
		Nexthops  []frrNexthop `json:"nexthops"`
	}
	frrNexthop struct {
		IP     string `json:"ip"`
		Active bool   `json:"active"`
		FIB    bool   `json:"fib"`
	}
	frrBGPPrefix struct {
		Paths []frrPath `json:"paths"`
	}
	frrPath struct {
		Community      *struct{ String string } `json:"community"`
		LargeCommunity *struct{ String string } `json:"largeCommunity"`
		LocPrf         *uint32                  `json:"locPrf"`
		Metric         *uint32                  `json:"metric"`
		Multipath      bool                     `json:"multipath"`
		Stale          bool                     `json:"stale"`
		Peer           struct {
			PeerID string `json:"peerId"`
		} `json:"peer"`
	}
	frrNeighbor struct {
		BGPState               string `json:"bgpState"`
		ConnectionsEstablished int    `json:"connectionsEstablished"`
		HoldTimeMsecs          int    `json:"bgpTimerHoldTimeMsecs"`
		MessageStats           struct {
			UpdatesRecv int `json:"updatesRecv"`
		} `json:"messageStats"`
	}
)

// fib returns the next hops zebra installed for prefix.
func (b *bed) fib(t *testing.T, p netip.Prefix) []string {
	t.Helper()
	cmd := "show ip route " + p.String() + " json"
	if p.Addr().Is6() {
		cmd = "show ipv6 route " + p.String() + " json"
	}
	var out map[string][]frrRoute
	b.router.JSON(t, cmd, &out)
	var hops []string
	for _, r := range out[p.String()] {
		if r.Protocol != "bgp" || !r.Selected || !r.Installed {
			continue
		}
		for _, h := range r.Nexthops {
			if h.Active && h.FIB {
				hops = append(hops, h.IP)
			}
		}
	}
	slices.Sort(hops)
	return hops
}

// waitFIB waits until the router's FIB has exactly the next hops want for
// p.
func (b *bed) waitFIB(t *testing.T, p netip.Prefix, want ...netip.Addr) {
	t.Helper()
	var w []string
	for _, a := range want {
		w = append(w, a.String())
	}
	slices.Sort(w)
	frr.Eventually(t, fmt.Sprintf("router FIB: %s via %v", p, w), func() (bool, string) {
		got := b.fib(t, p)
		return slices.Equal(got, w), fmt.Sprintf("next hops %v", got)
	})
}

func (b *bed) bgpPaths(t *testing.T, p netip.Prefix) map[string]frrPath {
	t.Helper()
	fam := "ipv4"
	if p.Addr().Is6() {
		fam = "ipv6"
	}
	var out frrBGPPrefix
	b.router.JSON(t, "show bgp "+fam+" unicast "+p.String()+" json", &out)
	m := map[string]frrPath{}
	for _, path := range out.Paths {
		m[path.Peer.PeerID] = path
	}
	return m
}

func (b *bed) neighbor(t *testing.T, a netip.Addr) frrNeighbor {
	t.Helper()
	var out map[string]frrNeighbor
	b.router.JSON(t, "show bgp neighbors "+a.String()+" json", &out)
	return out[a.String()]
}

func (b *bed) waitNeighbor(t *testing.T, a netip.Addr, what string, cond func(frrNeighbor) bool) frrNeighbor {
	t.Helper()
	var n frrNeighbor
	frr.Eventually(t, "router: neighbor "+a.String()+" "+what, func() (bool, string) {
		n = b.neighbor(t, a)
		return cond(n), fmt.Sprintf("%+v", n)
	})
	return n
}

func established(n frrNeighbor) bool { return n.BGPState == "Established" }

// TestFRR runs two speakers against FRR, over eBGP (the nodes in their own
// AS, as the seeds show) and over iBGP (the nodes in the router's AS, the
// only case where local preference is sent).
func TestFRR(t *testing.T) {
	for _, tc := range []struct {
		name    string
		localAS uint32
	}{
		{"ebgp", nodeAS},
		{"ibgp", routerAS},
	} {
		t.Run(tc.name, func(t *testing.T) { testFRR(t, tc.localAS) })
	}
}

func testFRR(t *testing.T, localAS uint32) {
	top := t // owns what outlives a subtest
	ibgp := localAS == routerAS
	b := newBed(t, localAS)
	a, bn := b.nodes[0], b.nodes[1]
	for _, n := range b.nodes {
		n.sp = startChild(t, n.ns, n.name, childOpts{})
		n.sp.reconcile(n.desired(localAS, 9*time.Second))
	}

	t.Run("ECMP route from both nodes", func(t *testing.T) {
		b.waitFIB(t, vip4, a.addr4, bn.addr4)
		b.waitFIB(t, vip6, a.addr6, bn.addr6)
	})

	t.Run("attributes visible in FRR", func(t *testing.T) {
		for _, p := range []netip.Prefix{vip4, vip6} {
			paths := b.bgpPaths(t, p)
			for _, n := range b.nodes {
				peer := n.addr4
				if p.Addr().Is6() {
					peer = n.addr6
				}
				path, ok := paths[peer.String()]
				if !ok {
					t.Errorf("%s: no path from %s in FRR: %+v", p, peer, paths)
					continue
				}
				if path.Community == nil || path.Community.String != "65000:100 no-export" {
					t.Errorf("%s from %s: community %+v, want 65000:100 no-export", p, peer, path.Community)
				}
				if path.LargeCommunity == nil || path.LargeCommunity.String != "65000:1:2" {
					t.Errorf("%s from %s: large community %+v, want 65000:1:2", p, peer, path.LargeCommunity)
				}
				if path.Metric == nil || *path.Metric != 50 {
					t.Errorf("%s from %s: MED %v, want 50", p, peer, path.Metric)
				}
				// Local preference crosses no AS boundary: over eBGP none
				// arrives.
				switch {
				case ibgp && (path.LocPrf == nil || *path.LocPrf != 200):
					t.Errorf("%s from %s: local preference %v, want 200", p, peer, path.LocPrf)
				case !ibgp && path.LocPrf != nil:
					t.Errorf("%s from %s: local preference %d received over eBGP", p, peer, *path.LocPrf)
				}
				if !path.Multipath {
					t.Errorf("%s from %s: not a multipath", p, peer)
				}
			}
		}
	})

	t.Run("speaker state", func(t *testing.T) {
		ps := a.sp.peers()
		if len(ps) != 2 {
			t.Fatalf("node a: %d peers, want 2: %+v", len(ps), ps)
		}
		for _, p := range ps {
			if p.State != StateEstablished || p.EstablishedSince.IsZero() || p.Advertised != 1 || p.ShutDown != "" {
				t.Errorf("node a: peer %s: %+v, want Established with a start time, 1 prefix advertised, not shut down", p.Peer.Address, p)
			}
		}
		evs := a.sp.events()
		for _, peer := range []netip.Addr{a.router4, a.rout6} {
			if !slices.ContainsFunc(evs, func(e PeerEvent) bool { return e.Peer == peer && e.To == StateEstablished }) {
				t.Errorf("node a: no event for %s reaching Established: %+v", peer, evs)
			}
		}
	})

	if ibgp {
		return // the rest does not depend on the session type
	}

	t.Run("same desired state changes nothing", func(t *testing.T) {
		before := b.neighbor(t, a.addr4)
		a.sp.reconcile(a.desired(localAS, 9*time.Second))
		// TCP keeps order: withdrawing the IPv6 route, then the IPv4 one,
		// and seeing the latter arrive proves that anything the repeated
		// Reconcile sent would have arrived first.
		d := a.desired(localAS, 9*time.Second)
		d.Routes = nil
		a.sp.reconcile(d)
		b.waitFIB(t, vip4, bn.addr4)
		after := b.neighbor(t, a.addr4)
		if after.ConnectionsEstablished != before.ConnectionsEstablished || after.MessageStats.UpdatesRecv != before.MessageStats.UpdatesRecv+1 {
			t.Errorf("router's view of node a: %d sessions and %d updates before, %d and %d after; want the same session and exactly one update (the withdrawal)",
				before.ConnectionsEstablished, before.MessageStats.UpdatesRecv, after.ConnectionsEstablished, after.MessageStats.UpdatesRecv)
		}
	})

	t.Run("withdrawing on one node leaves the other", func(t *testing.T) {
		// Node a withdrew both addresses above.
		b.waitFIB(t, vip4, bn.addr4)
		b.waitFIB(t, vip6, bn.addr6)
		if rs := a.sp.call(childRequest{Op: "routes"}).Routes; len(rs) != 0 {
			t.Errorf("node a still lists routes: %+v", rs)
		}
		a.sp.reconcile(a.desired(localAS, 9*time.Second))
		b.waitFIB(t, vip4, a.addr4, bn.addr4)
		b.waitFIB(t, vip6, a.addr6, bn.addr6)
	})

	t.Run("changed peer resets its session", func(t *testing.T) {
		before := b.neighbor(t, a.addr4)
		a.sp.reconcile(a.desired(localAS, 12*time.Second))
		after := b.waitNeighbor(t, a.addr4, "re-established with hold time 12s", func(n frrNeighbor) bool {
			return established(n) && n.HoldTimeMsecs == 12000
		})
		if after.ConnectionsEstablished != before.ConnectionsEstablished+1 {
			t.Errorf("router's view of node a: %d sessions before, %d after; want one new session", before.ConnectionsEstablished, after.ConnectionsEstablished)
		}
		b.waitFIB(t, vip4, a.addr4, bn.addr4)
	})

	t.Run("BFD hook shuts the peer down", func(t *testing.T) {
		bn.sp.setPeerEnabled(bn.router4, false, "bfd down")
		b.waitFIB(t, vip4, a.addr4)
		b.waitNeighbor(t, bn.addr4, "down", func(n frrNeighbor) bool { return !established(n) })
		// The IPv6 session is another peer: untouched.
		b.waitFIB(t, vip6, a.addr6, bn.addr6)
		// The shutdown survives a reconcile.
		bn.sp.reconcile(bn.desired(localAS, 9*time.Second))
		var st PeerState
		for _, p := range bn.sp.peers() {
			if p.Peer.Address == bn.router4 {
				st = p
			}
		}
		if st.State == StateEstablished || st.ShutDown != "bfd down" || st.LastError == "" {
			t.Errorf("node b: peer %s after shutdown and reconcile: %+v, want not Established, shut down for \"bfd down\", with the last error", bn.router4, st)
		}
		evs := bn.sp.events()
		if !slices.ContainsFunc(evs, func(e PeerEvent) bool {
			return e.Peer == bn.router4 && e.From == StateEstablished && e.Reason != ""
		}) {
			t.Errorf("node b: no event for %s leaving Established with a reason: %+v", bn.router4, evs)
		}
		if got := b.fib(t, vip4); len(got) != 1 {
			t.Errorf("router FIB after reconcile of the shut-down node: %v, want node a only", got)
		}
		bn.sp.setPeerEnabled(bn.router4, true, "")
		b.waitFIB(t, vip4, a.addr4, bn.addr4)
	})

	t.Run("agent restart keeps the path through graceful restart", func(t *testing.T) {
		bn.sp.crash()
		// The router sees the session go and keeps node b's paths, stale.
		b.waitNeighbor(t, bn.addr4, "down", func(n frrNeighbor) bool { return !established(n) })
		frr.Eventually(t, "node b's path is stale", func() (bool, string) {
			p := b.bgpPaths(t, vip4)[bn.addr4.String()]
			return p.Stale, fmt.Sprintf("%+v", p)
		})
		if got := b.fib(t, vip4); !slices.Equal(got, []string{a.addr4.String(), bn.addr4.String()}) {
			t.Errorf("router FIB while node b restarts: %v, want both nodes", got)
		}
		bn.sp = startChild(top, bn.ns, "b-restarted", childOpts{Restarting: true})
		bn.sp.reconcile(bn.desired(localAS, 9*time.Second))
		b.waitNeighbor(t, bn.addr4, "re-established", established)
		frr.Eventually(t, "node b's path is fresh", func() (bool, string) {
			p, ok := b.bgpPaths(t, vip4)[bn.addr4.String()]
			return ok && !p.Stale, fmt.Sprintf("%+v", p)
		})
		b.waitFIB(t, vip4, a.addr4, bn.addr4)
		b.waitFIB(t, vip6, a.addr6, bn.addr6)
	})

	t.Run("close withdraws at once", func(t *testing.T) {
		a.sp.reconcile(Desired{})
		b.waitFIB(t, vip4, bn.addr4)
		b.waitFIB(t, vip6, bn.addr6)
		if p, ok := b.bgpPaths(t, vip4)[a.addr4.String()]; ok {
			t.Errorf("router keeps node a's path after it stopped: %+v", p)
		}
	})
}
