package fastpath

import (
	"net/netip"
	"strings"
	"testing"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

// TestFromSnapshot: FAST entries become forwarding VIP entries with their
// endpoints (unhealthy ones left out, draining ones kept without weight),
// forwarding mode and client affinity; SLOW entries pass to the kernel;
// bad entries are errors naming the entry.
func TestFromSnapshot(t *testing.T) {
	fast := func(port uint32, mut ...func(*pb.PlanEntry)) *pb.PlanEntry {
		e := &pb.PlanEntry{
			Vip: "web", Listener: "tcp", Address: "192.0.2.10", Port: port, Protocol: pb.L4Protocol_L4_PROTOCOL_TCP,
			Path: pb.DataPath_DATA_PATH_FAST,
			Endpoints: []*pb.Endpoint{
				{Address: "10.0.0.1", Port: 8080, Weight: 2},
				{Address: "10.0.0.2", Port: 8080, State: pb.EndpointState_ENDPOINT_STATE_UNHEALTHY},
				{Address: "10.0.0.3", Port: 8080, State: pb.EndpointState_ENDPOINT_STATE_DRAINING},
			},
		}
		for _, m := range mut {
			m(e)
		}
		return e
	}
	snap := &pb.ConfigSnapshot{Cluster: &pb.ClusterConfig{Plan: []*pb.PlanEntry{
		fast(80),
		fast(81, func(e *pb.PlanEntry) { e.Affinity = pb.Affinity_AFFINITY_CLIENT_IP }),
		fast(82, func(e *pb.PlanEntry) {
			e.Forwarding = &pb.Forwarding{Mode: pb.ForwardingMode_FORWARDING_MODE_DSR, Encapsulation: pb.Encapsulation_ENCAPSULATION_GUE, GuePort: 7000}
		}),
		{Vip: "web", Listener: "https", Address: "192.0.2.10", Port: 443, Protocol: pb.L4Protocol_L4_PROTOCOL_TCP, Path: pb.DataPath_DATA_PATH_SLOW},
	}}}
	c, err := FromSnapshot(snap, Node{V4: netip.MustParseAddr("192.0.2.1")})
	if err != nil {
		t.Fatal(err)
	}
	byPort := map[uint16]VIP{}
	for _, v := range c.VIPs {
		byPort[v.Port] = v
	}
	want := []Backend{{Addr: netip.MustParseAddr("10.0.0.1"), Port: 8080, Weight: 2}, {Addr: netip.MustParseAddr("10.0.0.3"), Port: 8080, Draining: true}}
	for _, port := range []uint16{80, 81, 82} {
		v := byPort[port]
		if len(v.Backends) != 2 || v.Backends[0] != want[0] || v.Backends[1] != want[1] {
			t.Errorf("port %d: backends %+v, want %+v", port, v.Backends, want)
		}
	}
	if v := byPort[80]; v.Forward != ForwardNAT || v.ClientAffinity {
		t.Errorf("port 80: %+v, want NAT without affinity", v)
	}
	if v := byPort[81]; !v.ClientAffinity {
		t.Errorf("port 81: %+v, want client affinity", v)
	}
	if v := byPort[82]; v.Forward != ForwardDSRGUE || v.GUEPort != 7000 {
		t.Errorf("port 82: %+v, want DSR GUE to 7000", v)
	}
	if v := byPort[443]; v.Forward != ForwardPass || len(v.Backends) != 0 {
		t.Errorf("port 443: %+v, want a pass to the kernel", v)
	}

	bad := &pb.ConfigSnapshot{Cluster: &pb.ClusterConfig{Plan: []*pb.PlanEntry{fast(80, func(e *pb.PlanEntry) { e.Address = "not-an-ip" })}}}
	if _, err := FromSnapshot(bad, Node{}); err == nil || !strings.Contains(err.Error(), `plan[0] (vip web, listener tcp): address "not-an-ip"`) {
		t.Errorf("bad address: %v", err)
	}
}
