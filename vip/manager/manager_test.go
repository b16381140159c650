package manager

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

func bgpVIP(name, addr string, peers ...*pb.BGPPeer) *pb.VIPAssignment {
	if len(peers) == 0 {
		peers = []*pb.BGPPeer{{Address: "127.0.0.1", As: 65000, Port: 1}}
	}
	return &pb.VIPAssignment{
		Vip: name, Mode: pb.VIPMode_VIP_MODE_BGP, Role: pb.VIPRole_VIP_ROLE_ANNOUNCE, Addresses: []string{addr},
		Bgp: &pb.BGPAnnouncement{LocalAs: 65100, Peers: peers},
	}
}

func l2VIP(name, addr string, ifaces ...string) *pb.VIPAssignment {
	return &pb.VIPAssignment{Vip: name, Mode: pb.VIPMode_VIP_MODE_L2ARP, Role: pb.VIPRole_VIP_ROLE_ACTIVE, Addresses: []string{addr}, Interfaces: ifaces}
}

func ospfVIP(name, addr string) *pb.VIPAssignment {
	return &pb.VIPAssignment{
		Vip: name, Mode: pb.VIPMode_VIP_MODE_OSPF, Role: pb.VIPRole_VIP_ROLE_ANNOUNCE, Addresses: []string{addr},
		Ospf: &pb.OSPFAnnouncement{Area: "0.0.0.0", Cost: 10},
	}
}

func snapOf(vips ...*pb.VIPAssignment) *pb.ConfigSnapshot {
	return &pb.ConfigSnapshot{Node: &pb.NodeConfig{NodeName: "n1", Vips: vips}}
}

func TestCompileValidation(t *testing.T) {
	with := func(a *pb.VIPAssignment, f func(*pb.VIPAssignment)) *pb.VIPAssignment { f(a); return a }
	tests := []struct {
		name string
		vips []*pb.VIPAssignment
		want string // substring of the error; empty: accepted
	}{
		{"valid bgp and l2", []*pb.VIPAssignment{bgpVIP("a", "10.200.0.10"), l2VIP("b", "10.0.0.50", "eth0")}, ""},
		{"local is not ours", []*pb.VIPAssignment{{Vip: "l", Mode: pb.VIPMode_VIP_MODE_LOCAL, Addresses: []string{"bogus"}}}, ""},
		{"bad address", []*pb.VIPAssignment{l2VIP("b", "10.0.0.500", "eth0")}, `vip b: addresses[0]: "10.0.0.500" is not an IP address`},
		{"loopback address", []*pb.VIPAssignment{l2VIP("b", "127.0.0.5", "eth0")}, "vip b: addresses[0]: 127.0.0.5: not a unicast address that can be announced"},
		{"mapped address", []*pb.VIPAssignment{l2VIP("b", "::ffff:10.0.0.5", "eth0")}, "vip b: addresses[0]: ::ffff:10.0.0.5: IPv4-mapped: write 10.0.0.5"},
		{"interface name too long", []*pb.VIPAssignment{l2VIP("b", "10.0.0.50", "a-very-long-interface")}, `vip b: interfaces[0]: "a-very-long-interface": longer than 15 bytes`},
		{"interface name with slash", []*pb.VIPAssignment{l2VIP("b", "10.0.0.50", "eth0", "eth/1")}, `vip b: interfaces[1]: "eth/1": contains '/'`},
		{"l2 on lo", []*pb.VIPAssignment{l2VIP("b", "10.0.0.50", "lo")}, "vip b: interfaces[0]: lo: an L2ARP VIP is bound on lo"},
		{"l2 with announce role", []*pb.VIPAssignment{with(l2VIP("b", "10.0.0.50"), func(a *pb.VIPAssignment) { a.Role = pb.VIPRole_VIP_ROLE_ANNOUNCE })}, "vip b: role: VIP_ROLE_ANNOUNCE is not a role of an L2ARP VIP"},
		{"bgp without settings", []*pb.VIPAssignment{with(bgpVIP("a", "10.200.0.10"), func(a *pb.VIPAssignment) { a.Bgp = nil })}, "vip a: bgp: missing"},
		{"bgp local as zero", []*pb.VIPAssignment{with(bgpVIP("a", "10.200.0.10"), func(a *pb.VIPAssignment) { a.Bgp.LocalAs = 0 })}, "vip a: bgp.local_as: must not be zero"},
		{"conflicting local as", []*pb.VIPAssignment{bgpVIP("a", "10.200.0.10"), with(bgpVIP("b", "10.200.0.11"), func(a *pb.VIPAssignment) { a.Bgp.LocalAs = 65200 })},
			"vip b: bgp.local_as: 65200 differs from 65100 of vip a"},
		{"conflicting router ids", []*pb.VIPAssignment{
			with(bgpVIP("a", "10.200.0.10"), func(a *pb.VIPAssignment) { a.Bgp.RouterId = "10.0.0.1" }),
			with(bgpVIP("b", "10.200.0.11"), func(a *pb.VIPAssignment) { a.Bgp.RouterId = "10.0.0.2" }),
		}, "vip b: bgp.router_id: 10.0.0.2 differs from 10.0.0.1 of vip a"},
		{"router id IPv6", []*pb.VIPAssignment{with(bgpVIP("a", "10.200.0.10"), func(a *pb.VIPAssignment) { a.Bgp.RouterId = "fd00::1" })}, `vip a: bgp.router_id: "fd00::1" is not an IPv4 address`},
		{"conflicting peer", []*pb.VIPAssignment{bgpVIP("a", "10.200.0.10"), bgpVIP("b", "10.200.0.11", &pb.BGPPeer{Address: "127.0.0.1", As: 65001, Port: 1})},
			"vip b: bgp.peers[0]: peer 127.0.0.1 is configured differently by vip a"},
		{"bad peer address", []*pb.VIPAssignment{bgpVIP("a", "10.200.0.10", &pb.BGPPeer{Address: "router-1", As: 65000})}, `vip a: bgp.peers[0].address: "router-1" is not an IP address`},
		{"peer port out of range", []*pb.VIPAssignment{bgpVIP("a", "10.200.0.10", &pb.BGPPeer{Address: "10.0.0.1", As: 65000, Port: 70000})}, "vip a: bgp.peers[0].port: 70000 is out of range"},
		{"no peers", []*pb.VIPAssignment{with(bgpVIP("a", "10.200.0.10"), func(a *pb.VIPAssignment) { a.Bgp.Peers = nil })}, "vip a: bgp.peers: none"},
		{"bfd interval too short", []*pb.VIPAssignment{with(bgpVIP("a", "10.200.0.10"), func(a *pb.VIPAssignment) {
			a.Bfd = &pb.BFD{Enabled: true, DetectMultiplier: 3, DesiredMinTxMs: 5, RequiredMinRxMs: 300}
		})}, "vip a: bfd: desired_min_tx_ms 5: below the minimum"},
		{"bfd timers differ for one peer", []*pb.VIPAssignment{
			with(bgpVIP("a", "10.200.0.10"), func(a *pb.VIPAssignment) { a.Bfd = &pb.BFD{Enabled: true, DetectMultiplier: 3} }),
			with(bgpVIP("b", "10.200.0.11"), func(a *pb.VIPAssignment) { a.Bfd = &pb.BFD{Enabled: true, DetectMultiplier: 5} }),
		}, "vip b: bfd: peer 127.0.0.1 has other BFD timers in vip a"},
		{"ospf", []*pb.VIPAssignment{ospfVIP("o", "10.200.0.20")}, ""},
		{"ospf without settings", []*pb.VIPAssignment{with(ospfVIP("o", "10.200.0.20"), func(a *pb.VIPAssignment) { a.Ospf = nil })}, "vip o: ospf: missing"},
		{"ospf with active role", []*pb.VIPAssignment{with(ospfVIP("o", "10.200.0.20"), func(a *pb.VIPAssignment) { a.Role = pb.VIPRole_VIP_ROLE_ACTIVE })}, "vip o: role: VIP_ROLE_ACTIVE is not a role of an OSPF VIP"},
		{"no addresses", []*pb.VIPAssignment{{Vip: "c", Mode: pb.VIPMode_VIP_MODE_L2ARP, Role: pb.VIPRole_VIP_ROLE_ACTIVE}}, "vip c: addresses: none"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := compile(snapOf(tc.vips...))
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("rejected: %v", err)
			case tc.want != "" && err == nil:
				t.Fatalf("accepted, want an error with %q", tc.want)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Fatalf("error %q lacks %q", err, tc.want)
			}
		})
	}
}

func TestCompileWarnings(t *testing.T) {
	a := bgpVIP("a", "10.200.0.10")
	a.Bfd = &pb.BFD{Enabled: true, EchoMode: true}
	o := &pb.VIPAssignment{Vip: "o", Mode: pb.VIPMode_VIP_MODE_OSPF, Role: pb.VIPRole_VIP_ROLE_ANNOUNCE, Addresses: []string{"10.200.0.20"}, Ospf: &pb.OSPFAnnouncement{Area: "0"}}
	c, err := compile(snapOf(a, o))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"vip a: bfd.echo_mode: echo mode is not supported; the sessions run in asynchronous mode only",
	}
	if !slices.Equal(c.warnings, want) {
		t.Errorf("warnings %q, want %q", c.warnings, want)
	}
}

// cluster builds a cluster part: VIP "fast" with a FAST entry, VIP "slow"
// with a SLOW entry whose listener routes to backend ns/b, VIP "redirect"
// with a redirect listener. healthy says which endpoints are HEALTHY.
func cluster(fastHealthy, backendHealthy bool) *pb.ClusterConfig {
	state := func(h bool) pb.EndpointState {
		if h {
			return pb.EndpointState_ENDPOINT_STATE_HEALTHY
		}
		return pb.EndpointState_ENDPOINT_STATE_UNHEALTHY
	}
	return &pb.ClusterConfig{
		Listeners: []*pb.Listener{
			{Name: "ns/gw/http", Vip: "slow", Routes: []string{"ns/web"}},
			{Name: "ns/gw/redirect", Vip: "redirect", RedirectScheme: &pb.RedirectScheme{Scheme: "https"}},
		},
		Routes: []*pb.Route{{Name: "ns/web", Rules: []*pb.RouteRule{{Backends: []*pb.WeightedBackend{{Backend: "ns/b", Weight: 1}}}}}},
		Backends: []*pb.Backend{{Name: "ns/b", Endpoints: []*pb.Endpoint{
			{Address: "10.1.0.1", Port: 80, State: state(backendHealthy)},
			{Address: "10.1.0.2", Port: 80, State: pb.EndpointState_ENDPOINT_STATE_DRAINING},
		}}},
		Plan: []*pb.PlanEntry{
			{Vip: "fast", Address: "10.200.0.1", Port: 9000, Path: pb.DataPath_DATA_PATH_FAST, Endpoints: []*pb.Endpoint{
				{Address: "10.1.0.3", Port: 9000, State: state(fastHealthy)},
				{Address: "10.1.0.4", Port: 9000, State: pb.EndpointState_ENDPOINT_STATE_UNHEALTHY},
			}},
			{Vip: "slow", Address: "10.200.0.2", Port: 80, Path: pb.DataPath_DATA_PATH_SLOW, Listener: "ns/gw/http"},
			{Vip: "redirect", Address: "10.200.0.3", Port: 80, Path: pb.DataPath_DATA_PATH_SLOW, Listener: "ns/gw/redirect"},
			// A VIP with one serving and one dead entry serves.
			{Vip: "mixed", Address: "10.200.0.4", Port: 80, Path: pb.DataPath_DATA_PATH_SLOW, Listener: "ns/gw/http"},
			{Vip: "mixed", Address: "10.200.0.4", Port: 81, Path: pb.DataPath_DATA_PATH_FAST, Endpoints: []*pb.Endpoint{{Address: "10.1.0.5", State: pb.EndpointState_ENDPOINT_STATE_HEALTHY}}},
		},
	}
}

func TestServing(t *testing.T) {
	tests := []struct {
		name                       string
		fastHealthy, backendHealth bool
		want                       map[string]bool
	}{
		{"all healthy", true, true, map[string]bool{"fast": true, "slow": true, "redirect": true, "mixed": true}},
		{"fast endpoints unhealthy", false, true, map[string]bool{"fast": false, "slow": true, "redirect": true, "mixed": true}},
		{"backend unhealthy, draining does not count", true, false, map[string]bool{"fast": true, "slow": false, "redirect": true, "mixed": true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Serving(cluster(tc.fastHealthy, tc.backendHealth))
			for vip, want := range tc.want {
				v, ok := got[vip]
				if !ok || v.Serving != want {
					t.Errorf("vip %s: %+v (judged %v), want serving %v", vip, v, ok, want)
				}
				if !want && !strings.HasPrefix(v.Reason, "no healthy backend") {
					t.Errorf("vip %s: reason %q", vip, v.Reason)
				}
			}
			if _, ok := got["unlisted"]; ok {
				t.Error("a VIP without plan entries was judged")
			}
		})
	}
}

// fakeRoutes answers route questions without the host's tables.
type fakeRoutes struct{ src netip.Addr }

func (f fakeRoutes) InterfaceFor(netip.Addr) (string, error) {
	return "", errors.New("no routes in this test")
}
func (f fakeRoutes) SourceFor(netip.Addr) (netip.Addr, error) { return f.src, nil }

// TestBGPWithdrawAndRestartMarker runs the real speaker (no listener; its
// peer 127.0.0.1:1 never answers, so nothing leaves the host): the VIP
// without a healthy backend is withdrawn, the others announced; the
// restart marker makes the next manager start as restarting.
func TestBGPWithdrawAndRestartMarker(t *testing.T) {
	dir := t.TempDir()
	newManager := func() *Manager {
		m, err := New(Options{StateDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		m.routes = fakeRoutes{src: netip.MustParseAddr("192.0.2.7")}
		return m
	}
	snap := snapOf(bgpVIP("fast", "10.200.0.1"), bgpVIP("slow", "10.200.0.2"), bgpVIP("unlisted", "10.200.0.9"))
	snap.Cluster = cluster(true, false)
	m := newManager()
	apply := func(m *Manager, snap *pb.ConfigSnapshot) {
		t.Helper()
		ch, err := m.Compile(snap)
		if err != nil {
			t.Fatal(err)
		}
		if err := ch.Apply(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	apply(m, snap)
	st := m.State(context.Background())
	var routes []string
	for _, r := range st.BGP.Routes {
		routes = append(routes, r.VIP+" "+r.Prefix.String())
	}
	if want := []string{"fast 10.200.0.1/32", "unlisted 10.200.0.9/32"}; !slices.Equal(routes, want) {
		t.Errorf("routes %q, want %q", routes, want)
	}
	if !st.BGP.Running || st.BGP.Restarting || st.BGP.RouterID != netip.MustParseAddr("192.0.2.7") || st.BGP.LocalAS != 65100 {
		t.Errorf("bgp state %+v, want running as AS 65100 with the derived router ID 192.0.2.7, not restarting", st.BGP)
	}
	announced := map[string]string{}
	for _, v := range st.VIPs {
		announced[v.VIP] = v.Reason
		if (v.VIP == "slow") == v.Announced {
			t.Errorf("vip %s: announced %v (%s)", v.VIP, v.Announced, v.Reason)
		}
	}
	if !strings.HasPrefix(announced["slow"], "no healthy backend") {
		t.Errorf("reason for slow: %q", announced["slow"])
	}
	if len(st.BGP.Peers) != 1 || st.BGP.Peers[0].Peer.Address != netip.MustParseAddr("127.0.0.1") {
		t.Errorf("peers %+v", st.BGP.Peers)
	}
	p := StatusProto(st)
	if len(p.GetVips()) != 3 || p.GetVips()[0].GetMode() != "BGP" || p.GetVips()[0].GetRole() != "ANNOUNCE" || p.GetBgp().GetRouterId() != "192.0.2.7" {
		t.Errorf("status proto %v", p)
	}

	// The backend recovers: the VIP comes back.
	snap.Cluster = cluster(true, true)
	apply(m, snap)
	if got := len(m.State(context.Background()).BGP.Routes); got != 3 {
		t.Errorf("%d routes after recovery, want 3", got)
	}

	// Exit as the agent does: the marker stays, the next speaker restarts.
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.bgp.Close() }) // the process lives on in a test
	if _, err := os.Stat(filepath.Join(dir, RestartMarker)); err != nil {
		t.Fatalf("no restart marker after Close: %v", err)
	}
	m2 := newManager()
	apply(m2, snap)
	if st := m2.State(context.Background()); !st.BGP.Restarting {
		t.Errorf("second manager: bgp %+v, want restarting", st.BGP)
	}
	// Withdraw takes the node out and forgets the restart.
	if err := m2.Withdraw(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, RestartMarker)); !os.IsNotExist(err) {
		t.Errorf("restart marker after Withdraw: %v", err)
	}
}

func TestApplyReportsL2InterfaceProblem(t *testing.T) {
	m, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	m.routes = fakeRoutes{}
	ch, err := m.Compile(snapOf(l2VIP("b", "10.0.0.50")))
	if err != nil {
		t.Fatal(err)
	}
	err = ch.Apply(context.Background())
	if err == nil || !strings.Contains(err.Error(), "vip b: interfaces: no routes in this test") {
		t.Fatalf("Apply = %v, want the interface lookup's error naming the VIP", err)
	}
	st := m.State(context.Background())
	if len(st.VIPs) != 1 || st.VIPs[0].Announced || !strings.Contains(st.VIPs[0].Reason, "no routes in this test") {
		t.Errorf("state %+v", st.VIPs)
	}
	if m.l2 != nil {
		t.Error("an announcer was opened with nothing to announce")
	}
}
