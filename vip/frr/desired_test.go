package frr

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

func ospfVIP(name string, addrs []string, o *pb.OSPFAnnouncement) *pb.VIPAssignment {
	return &pb.VIPAssignment{Vip: name, Mode: pb.VIPMode_VIP_MODE_OSPF, Role: pb.VIPRole_VIP_ROLE_ANNOUNCE, Addresses: addrs, Ospf: o}
}

func TestFromNode(t *testing.T) {
	node := netip.MustParseAddr("10.0.0.7")
	base := &pb.OSPFAnnouncement{Area: "0.0.0.0", Cost: 20, HelloIntervalS: 1, DeadIntervalS: 4, AuthType: "md5", AuthKey: "k", AuthKeyId: 2, GracefulRestart: true}
	for _, tc := range []struct {
		name     string
		vips     []*pb.VIPAssignment
		want     Desired
		problems []string
		include  func(*pb.VIPAssignment) bool
	}{
		{
			// Withdrawing the only VIP keeps the uplink: the adjacency
			// stays Full, only the stub link goes.
			name:    "excluded VIP: uplink kept, address not advertised",
			vips:    []*pb.VIPAssignment{ospfVIP("web", []string{"10.200.0.30"}, base)},
			include: func(*pb.VIPAssignment) bool { return false },
			want: Desired{RouterID: node, GracefulRestart: true,
				Uplinks: []Uplink{{Interface: "eth0", Area: "0.0.0.0", HelloInterval: 1, DeadInterval: 4, Auth: Auth{Key: "k", KeyID: 2}}}},
		},
		{
			name: "one VIP on the default uplink, with BFD",
			vips: []*pb.VIPAssignment{func() *pb.VIPAssignment {
				a := ospfVIP("web", []string{"10.200.0.30"}, base)
				a.Bfd = &pb.BFD{Enabled: true, DetectMultiplier: 3, DesiredMinTxMs: 300, RequiredMinRxMs: 300}
				return a
			}()},
			want: Desired{RouterID: node, GracefulRestart: true,
				Uplinks: []Uplink{{Interface: "eth0", Area: "0.0.0.0", HelloInterval: 1, DeadInterval: 4, Auth: Auth{Key: "k", KeyID: 2},
					BFD: &BFD{DetectMultiplier: 3, MinTx: 300e6, MinRx: 300e6}}},
				VIPs: []VIP{{Name: "web", Address: netip.MustParseAddr("10.200.0.30"), Area: "0.0.0.0", Cost: 20}}},
		},
		{
			name: "IPv6 reported, not announced; VIP router ID used",
			vips: []*pb.VIPAssignment{ospfVIP("web", []string{"10.200.0.30", "fd00::30"}, &pb.OSPFAnnouncement{Area: "0.0.0.1", RouterId: "10.9.9.9"})},
			want: Desired{RouterID: netip.MustParseAddr("10.9.9.9"),
				Uplinks: []Uplink{{Interface: "eth0", Area: "0.0.0.1"}},
				VIPs:    []VIP{{Name: "web", Address: netip.MustParseAddr("10.200.0.30"), Area: "0.0.0.1"}}},
			problems: []string{"vip web: address fd00::30: IPv6 needs ospf6d"},
		},
		{
			name: "uplink settings differ between VIPs: the first by name wins",
			vips: []*pb.VIPAssignment{
				ospfVIP("a", []string{"10.200.0.1"}, base),
				ospfVIP("b", []string{"10.200.0.2"}, &pb.OSPFAnnouncement{Area: "0.0.0.0", Cost: 5, HelloIntervalS: 10, DeadIntervalS: 40}),
			},
			want: Desired{RouterID: node, GracefulRestart: true,
				Uplinks: []Uplink{{Interface: "eth0", Area: "0.0.0.0", HelloInterval: 1, DeadInterval: 4, Auth: Auth{Key: "k", KeyID: 2}}},
				VIPs: []VIP{{Name: "a", Address: netip.MustParseAddr("10.200.0.1"), Area: "0.0.0.0", Cost: 20},
					{Name: "b", Address: netip.MustParseAddr("10.200.0.2"), Area: "0.0.0.0", Cost: 5}}},
			problems: []string{"vip b: uplink eth0 is configured differently"},
		},
		{
			name: "other modes ignored",
			vips: []*pb.VIPAssignment{{Vip: "l2", Mode: pb.VIPMode_VIP_MODE_L2ARP, Role: pb.VIPRole_VIP_ROLE_ACTIVE, Addresses: []string{"10.1.1.1"}}},
			want: Desired{},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, problems := FromNode(&pb.NodeConfig{Vips: tc.vips}, node, []string{"eth0"}, tc.include)
			if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
				t.Errorf("desired (-want +got):\n%s", diff)
			}
			if len(problems) != len(tc.problems) {
				t.Fatalf("problems %v, want %v", problems, tc.problems)
			}
			for i, p := range problems {
				if !strings.Contains(p.Error(), tc.problems[i]) {
					t.Errorf("problem %q, want it to contain %q", p, tc.problems[i])
				}
			}
			if err := got.check(); err != nil {
				t.Errorf("FromNode's result fails its own check: %v", err)
			}
		})
	}
}
