package snapshot

import (
	"testing"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

func TestPlanKey(t *testing.T) {
	for _, c := range []struct {
		e    *pb.PlanEntry
		want string
	}{
		{&pb.PlanEntry{Address: "192.0.2.10", Port: 443, Protocol: pb.L4Protocol_L4_PROTOCOL_TCP}, "192.0.2.10:443/tcp"},
		{&pb.PlanEntry{Address: "2001:db8::1", Port: 53, Protocol: pb.L4Protocol_L4_PROTOCOL_UDP}, "[2001:db8::1]:53/udp"},
		{&pb.PlanEntry{Address: "::ffff:192.0.2.10", Port: 80, Protocol: pb.L4Protocol_L4_PROTOCOL_TCP}, "192.0.2.10:80/tcp"},
		{&pb.PlanEntry{Address: "192.0.2.10", Port: 0, Protocol: pb.L4Protocol_L4_PROTOCOL_UDP}, "192.0.2.10:0/udp"},
	} {
		if got := PlanKey(c.e); got != c.want {
			t.Errorf("PlanKey(%v) = %q, want %q", c.e, got, c.want)
		}
	}
}
