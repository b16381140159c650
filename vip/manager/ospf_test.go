package manager

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/vip/frr"
)

func TestOSPFAnnounced(t *testing.T) {
	const mismatch = "OSPF authentication mismatch on n-r with 10.0.0.1: the md5 keys differ (key id 1)"
	full := frr.Neighbor{RouterID: netip.MustParseAddr("10.0.0.1"), Interface: "n-r", State: "Full"}
	init := frr.Neighbor{RouterID: netip.MustParseAddr("10.0.0.1"), Interface: "n-r", State: "Init"}
	route := frr.Route{VIP: "web", Prefix: netip.MustParsePrefix("10.200.0.30/32"), Area: "0.0.0.0", Cost: 20}
	missing := errors.New("vip web: 10.200.0.30 is not in this node's router LSA: is the address bound on lo, and ospfd running?")
	tests := []struct {
		name       string
		vip        VIPState
		state      frr.State
		mismatches []string
		want       VIPState
	}{
		{
			name:  "in the LSA with a Full neighbour",
			vip:   VIPState{VIP: "web", Mode: pb.VIPMode_VIP_MODE_OSPF, Announced: true},
			state: frr.State{Neighbors: []frr.Neighbor{full}, Routes: []frr.Route{route}},
			want:  VIPState{VIP: "web", Mode: pb.VIPMode_VIP_MODE_OSPF, Announced: true},
		},
		{
			name:       "no Full neighbour: the mismatch says why",
			vip:        VIPState{VIP: "web", Mode: pb.VIPMode_VIP_MODE_OSPF, Announced: true},
			state:      frr.State{Neighbors: []frr.Neighbor{init}, Routes: []frr.Route{route}},
			mismatches: []string{mismatch},
			want:       VIPState{VIP: "web", Mode: pb.VIPMode_VIP_MODE_OSPF, Reason: "no OSPF neighbour in state Full: " + mismatch},
		},
		{
			name:  "no neighbour, no known cause",
			vip:   VIPState{VIP: "web", Mode: pb.VIPMode_VIP_MODE_OSPF, Announced: true},
			state: frr.State{Routes: []frr.Route{route}},
			want:  VIPState{VIP: "web", Mode: pb.VIPMode_VIP_MODE_OSPF, Reason: "no OSPF neighbour in state Full"},
		},
		{
			name:  "not in the LSA: the driver's problem for the VIP",
			vip:   VIPState{VIP: "web", Mode: pb.VIPMode_VIP_MODE_OSPF, Announced: true},
			state: frr.State{Neighbors: []frr.Neighbor{full}, Problems: []error{errors.New("uplink n-s: no neighbour in state Full"), missing}},
			want:  VIPState{VIP: "web", Mode: pb.VIPMode_VIP_MODE_OSPF, Reason: missing.Error()},
		},
		{
			name:  "withdrawn by the apply stays withdrawn",
			vip:   VIPState{VIP: "web", Mode: pb.VIPMode_VIP_MODE_OSPF, Reason: "no healthy backend"},
			state: frr.State{Neighbors: []frr.Neighbor{full}, Routes: []frr.Route{route}},
			want:  VIPState{VIP: "web", Mode: pb.VIPMode_VIP_MODE_OSPF, Reason: "no healthy backend"},
		},
		{
			name:  "other modes are left alone",
			vip:   VIPState{VIP: "web", Mode: pb.VIPMode_VIP_MODE_BGP, Announced: true},
			state: frr.State{},
			want:  VIPState{VIP: "web", Mode: pb.VIPMode_VIP_MODE_BGP, Announced: true},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			vips := []VIPState{tc.vip}
			ospfAnnounced(vips, tc.state, tc.mismatches)
			if diff := cmp.Diff(tc.want, vips[0], cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestOSPFStatusProto(t *testing.T) {
	at := time.UnixMilli(1_700_000_000_000)
	st := OSPFState{
		Running: true, RouterID: "10.0.0.2", LastReconcile: at, Reapplied: 2,
		Neighbors: []frr.Neighbor{{RouterID: netip.MustParseAddr("10.0.0.1"), Address: netip.MustParseAddr("10.0.0.1"), Interface: "n-r", State: "Full", Role: "DR", DeadTime: 3500 * time.Millisecond}},
		Routes:    []frr.Route{{VIP: "web", Prefix: netip.MustParsePrefix("10.200.0.30/32"), Area: "0.0.0.1", Cost: 20}},
		Problems:  []string{"uplink n-s: no neighbour in state Full"},
		Error:     "vtysh: exit status 1",
	}
	want := &pb.OSPFStatus{
		Running: true, RouterId: "10.0.0.2", LastReconcileUnixMs: at.UnixMilli(), Reapplied: 2,
		Neighbors: []*pb.OSPFNeighborStatus{{RouterId: "10.0.0.1", Address: "10.0.0.1", Interface: "n-r", State: "Full", Role: "DR", DeadTimeMs: 3500}},
		Routes:    []*pb.OSPFRouteStatus{{Vip: "web", Prefix: "10.200.0.30/32", Area: "0.0.0.1", Cost: 20}},
		Problems:  []string{"uplink n-s: no neighbour in state Full"},
		Error:     "vtysh: exit status 1",
	}
	if diff := cmp.Diff(want, StatusProto(State{OSPF: st}).GetOspf(), protocmp.Transform()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if got := StatusProto(State{}).GetOspf(); got.GetRunning() || len(got.GetNeighbors()) != 0 {
		t.Errorf("without OSPF: %v, want not running", got)
	}
}
