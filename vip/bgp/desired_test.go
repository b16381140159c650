package bgp

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

func u32(v uint32) *uint32 { return &v }

func bgpVIP(name string, addrs []string, b *pb.BGPAnnouncement) *pb.VIPAssignment {
	return &pb.VIPAssignment{Vip: name, Mode: pb.VIPMode_VIP_MODE_BGP, Role: pb.VIPRole_VIP_ROLE_ANNOUNCE, Addresses: addrs, Bgp: b}
}

func TestFromNode(t *testing.T) {
	node := netip.MustParseAddr("192.0.2.7")
	peer4 := &pb.BGPPeer{Address: "192.0.2.1", As: 65000, Port: 179, HoldTimeMs: 9000, KeepaliveTimeMs: 3000, GracefulRestart: true, Password: "s3cret", EbgpMultihop: 2}
	peer6 := &pb.BGPPeer{Address: "2001:db8::1", As: 65000, Port: 1179, HoldTimeMs: 90000, KeepaliveTimeMs: 30000}
	ann := func(mod func(*pb.BGPAnnouncement)) *pb.BGPAnnouncement {
		b := &pb.BGPAnnouncement{LocalAs: 65100, Peers: []*pb.BGPPeer{peer4, peer6}, Communities: []string{"65000:100", "no-export"},
			LargeCommunities: []string{"65000:1:2"}, HasLocalPreference: true, LocalPreference: 200, HasMed: true, Med: 0}
		if mod != nil {
			mod(b)
		}
		return b
	}
	wantPeer4 := Peer{Address: netip.MustParseAddr("192.0.2.1"), AS: 65000, Port: 179, Password: "s3cret", EBGPMultihop: 2,
		HoldTime: 9 * time.Second, KeepaliveTime: 3 * time.Second, GracefulRestart: true}
	wantPeer6 := Peer{Address: netip.MustParseAddr("2001:db8::1"), AS: 65000, Port: 1179, HoldTime: 90 * time.Second, KeepaliveTime: 30 * time.Second}
	route := func(vip, prefix string) Route {
		return Route{VIP: vip, Prefix: netip.MustParsePrefix(prefix), Communities: []string{"65000:100", "no-export"},
			LargeCommunities: []string{"65000:1:2"}, LocalPreference: u32(200), MED: u32(0)}
	}
	tests := []struct {
		name     string
		vips     []*pb.VIPAssignment
		include  func(*pb.VIPAssignment) bool
		want     Desired
		problems []string
	}{
		{
			name: "dual-stack VIP",
			vips: []*pb.VIPAssignment{bgpVIP("web", []string{"10.200.0.10", "fd00::10"}, ann(nil))},
			want: Desired{LocalAS: 65100, RouterID: node, Peers: []Peer{wantPeer4, wantPeer6},
				Routes: []Route{route("web", "10.200.0.10/32"), route("web", "fd00::10/128")}},
		},
		{
			name: "other modes and roles ignored",
			vips: []*pb.VIPAssignment{
				{Vip: "l2", Mode: pb.VIPMode_VIP_MODE_L2ARP, Role: pb.VIPRole_VIP_ROLE_ACTIVE, Addresses: []string{"10.0.0.1"}},
				{Vip: "ospf", Mode: pb.VIPMode_VIP_MODE_OSPF, Role: pb.VIPRole_VIP_ROLE_ANNOUNCE, Addresses: []string{"10.0.0.2"}},
			},
			want: Desired{},
		},
		{
			// Withdrawing the last VIP keeps the sessions: the router
			// keeps the node as a peer (and its BFD session), it only
			// loses the route.
			name:    "excluded VIP is withdrawn, the sessions stay",
			vips:    []*pb.VIPAssignment{bgpVIP("web", []string{"10.200.0.10"}, ann(nil))},
			include: func(a *pb.VIPAssignment) bool { return a.Vip != "web" },
			want:    Desired{LocalAS: 65100, RouterID: node, Peers: []Peer{wantPeer4, wantPeer6}},
		},
		{
			name: "a prefix shared by an excluded and a served VIP stays",
			vips: []*pb.VIPAssignment{
				bgpVIP("a", []string{"10.200.0.1"}, ann(nil)),
				bgpVIP("b", []string{"10.200.0.1"}, ann(nil)),
			},
			include: func(a *pb.VIPAssignment) bool { return a.Vip != "a" },
			want:    Desired{LocalAS: 65100, RouterID: node, Peers: []Peer{wantPeer4, wantPeer6}, Routes: []Route{route("b", "10.200.0.1/32")}},
		},
		{
			name: "VIP router ID used, conflicting one reported",
			vips: []*pb.VIPAssignment{
				bgpVIP("a", []string{"10.200.0.1"}, ann(func(b *pb.BGPAnnouncement) { b.RouterId = "10.0.0.1" })),
				bgpVIP("b", []string{"10.200.0.2"}, ann(func(b *pb.BGPAnnouncement) { b.RouterId = "10.0.0.2" })),
			},
			want: Desired{LocalAS: 65100, RouterID: netip.MustParseAddr("10.0.0.1"), Peers: []Peer{wantPeer4, wantPeer6},
				Routes: []Route{route("a", "10.200.0.1/32"), route("b", "10.200.0.2/32")}},
			problems: []string{"vip b: bgp.router_id 10.0.0.2 differs from 10.0.0.1 set by vip a"},
		},
		{
			name: "other local AS left out",
			vips: []*pb.VIPAssignment{
				bgpVIP("a", []string{"10.200.0.1"}, ann(nil)),
				bgpVIP("b", []string{"10.200.0.2"}, ann(func(b *pb.BGPAnnouncement) { b.LocalAs = 65200 })),
			},
			want:     Desired{LocalAS: 65100, RouterID: node, Peers: []Peer{wantPeer4, wantPeer6}, Routes: []Route{route("a", "10.200.0.1/32")}},
			problems: []string{"vip b: bgp.local_as 65200 differs from 65100"},
		},
		{
			name: "peer timers differing: first VIP wins",
			vips: []*pb.VIPAssignment{
				bgpVIP("a", []string{"10.200.0.1"}, ann(nil)),
				bgpVIP("b", []string{"10.200.0.2"}, ann(func(b *pb.BGPAnnouncement) {
					b.Peers = []*pb.BGPPeer{{Address: "192.0.2.1", As: 65000, Port: 179, HoldTimeMs: 30000, KeepaliveTimeMs: 10000}}
				})),
			},
			want: Desired{LocalAS: 65100, RouterID: node, Peers: []Peer{wantPeer4, wantPeer6},
				Routes: []Route{route("a", "10.200.0.1/32"), route("b", "10.200.0.2/32")}},
			problems: []string{"vip b: bgp.peers 192.0.2.1 is configured differently by vip a"},
		},
		{
			name: "same prefix with other attributes: first wins",
			vips: []*pb.VIPAssignment{
				bgpVIP("a", []string{"10.200.0.1"}, ann(nil)),
				bgpVIP("b", []string{"10.200.0.1"}, ann(func(b *pb.BGPAnnouncement) { b.HasMed = false })),
			},
			want:     Desired{LocalAS: 65100, RouterID: node, Peers: []Peer{wantPeer4, wantPeer6}, Routes: []Route{route("a", "10.200.0.1/32")}},
			problems: []string{"vip b: 10.200.0.1/32 is announced with other attributes by vip a"},
		},
		{
			name:     "no peer of the family",
			vips:     []*pb.VIPAssignment{bgpVIP("web", []string{"fd00::10"}, ann(func(b *pb.BGPAnnouncement) { b.Peers = b.Peers[:1] }))},
			want:     Desired{LocalAS: 65100, RouterID: node, Peers: []Peer{wantPeer4}, Routes: []Route{route("web", "fd00::10/128")}},
			problems: []string{"vip web: fd00::10/128 has no IPv6 peer"},
		},
		{
			name:     "bad community not announced",
			vips:     []*pb.VIPAssignment{bgpVIP("web", []string{"10.200.0.10"}, ann(func(b *pb.BGPAnnouncement) { b.Communities = []string{"70000:1"} }))},
			want:     Desired{LocalAS: 65100, RouterID: node, Peers: []Peer{wantPeer4, wantPeer6}},
			problems: []string{`vip web: community "70000:1": both parts must be 0-65535`},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, problems := FromNode(&pb.NodeConfig{NodeName: "n1", Vips: tc.vips}, node, tc.include)
			if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b }), cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
				t.Errorf("desired (-want +got):\n%s", diff)
			}
			if len(problems) != len(tc.problems) {
				t.Fatalf("problems %v, want %d like %q", problems, len(tc.problems), tc.problems)
			}
			for i, p := range problems {
				if !strings.Contains(p.Error(), tc.problems[i]) {
					t.Errorf("problem %q, want it to contain %q", p, tc.problems[i])
				}
			}
		})
	}
}

func TestParseCommunity(t *testing.T) {
	tests := []struct {
		in   string
		want uint32
		err  bool
	}{
		{in: "65000:100", want: 65000<<16 | 100},
		{in: "0:0", want: 0},
		{in: "no-export", want: 0xFFFFFF01},
		{in: "no-advertise", want: 0xFFFFFF02},
		{in: "local-as", want: 0xFFFFFF03},
		{in: "no-peer", want: 0xFFFFFF04},
		{in: "blackhole", want: 0xFFFF029A},
		{in: "graceful-shutdown", want: 0xFFFF0000},
		{in: "65536:1", err: true},
		{in: "1:65536", err: true},
		{in: "100", err: true},
		{in: "a:b", err: true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parseCommunity(tc.in)
			if (err != nil) != tc.err || got != tc.want {
				t.Errorf("parseCommunity(%q) = %#x, %v; want %#x, error %v", tc.in, got, err, tc.want, tc.err)
			}
		})
	}
	if _, err := parseLargeCommunity("4294967295:0:1"); err != nil {
		t.Errorf("parseLargeCommunity: %v", err)
	}
	for _, bad := range []string{"1:2", "4294967296:0:1", "1:2:3:4"} {
		if _, err := parseLargeCommunity(bad); err == nil {
			t.Errorf("parseLargeCommunity(%q): no error", bad)
		}
	}
}

func TestHoldAndKeepalive(t *testing.T) {
	tests := []struct {
		name            string
		hold, keepalive time.Duration
		wantH, wantK    uint64
	}{
		{"defaults", 0, 0, 90, 30},
		{"third of hold", 9 * time.Second, 0, 9, 3},
		{"rounded up", 9500 * time.Millisecond, 1500 * time.Millisecond, 10, 2},
		{"at least 3s", time.Second, 0, 3, 1},
		{"keepalive capped at hold", 3 * time.Second, 3 * time.Second, 3, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, k := Peer{HoldTime: tc.hold, KeepaliveTime: tc.keepalive}.holdAndKeepalive()
			if h != tc.wantH || k != tc.wantK {
				t.Errorf("hold %d keepalive %d, want %d and %d", h, k, tc.wantH, tc.wantK)
			}
		})
	}
}

// TestReconcileRejects checks that bad desired states are refused before
// anything is applied, and that a closed speaker says so.
func TestReconcileRejects(t *testing.T) {
	id := netip.MustParseAddr("192.0.2.7")
	peer := Peer{Address: netip.MustParseAddr("192.0.2.1"), AS: 65000}
	tests := []struct {
		name string
		d    Desired
		want string
	}{
		{"no router id", Desired{LocalAS: 1}, "router id"},
		{"IPv6 router id", Desired{LocalAS: 1, RouterID: netip.MustParseAddr("::1")}, "router id"},
		{"peer twice", Desired{LocalAS: 1, RouterID: id, Peers: []Peer{peer, peer}}, "peers[1].address 192.0.2.1: listed twice"},
		{"peer AS zero", Desired{LocalAS: 1, RouterID: id, Peers: []Peer{{Address: peer.Address}}}, "peers[0].as"},
		{"keepalive over hold", Desired{LocalAS: 1, RouterID: id, Peers: []Peer{{Address: peer.Address, AS: 2, HoldTime: 3 * time.Second, KeepaliveTime: 4 * time.Second}}}, "peers[0].keepalive_time"},
		{"local address of another family", Desired{LocalAS: 1, RouterID: id, Peers: []Peer{{Address: peer.Address, AS: 2, LocalAddress: netip.MustParseAddr("::1")}}}, "peers[0].local_address"},
		{"not a host route", Desired{LocalAS: 1, RouterID: id, Routes: []Route{{Prefix: netip.MustParsePrefix("10.0.0.0/24")}}}, "routes[0].prefix 10.0.0.0/24"},
		{"bad large community", Desired{LocalAS: 1, RouterID: id, Routes: []Route{{Prefix: netip.MustParsePrefix("10.0.0.1/32"), LargeCommunities: []string{"1:2"}}}}, "routes[0]: large community"},
	}
	sp, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := sp.Reconcile(ctx, tc.d)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Reconcile: %v, want an error containing %q", err, tc.want)
			}
		})
	}
	if ps, err := sp.Peers(ctx); err != nil || len(ps) != 0 {
		t.Errorf("Peers after rejected states: %v, %v; want none", ps, err)
	}
	if err := sp.Close(); err != nil {
		t.Fatal(err)
	}
	if err := sp.Reconcile(ctx, Desired{}); !errors.Is(err, ErrClosed) {
		t.Errorf("Reconcile after Close: %v, want ErrClosed", err)
	}
	if err := sp.SetPeerEnabled(ctx, peer.Address, false, ""); !errors.Is(err, ErrClosed) {
		t.Errorf("SetPeerEnabled after Close: %v, want ErrClosed", err)
	}
}
