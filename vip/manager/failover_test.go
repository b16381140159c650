package manager

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/vip/bfd"
	"github.com/novaedge/novaedge/vip/failover"
)

// TestHeartbeat: what each BFD state change tells the failover rules about
// the peer's node.
func TestHeartbeat(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := t0.Add(10 * time.Second)
	startupEnd := t0.Add(3 * time.Second)
	ev := func(from, to bfd.State, diag bfd.Diag, remote bfd.State) bfd.StateChange {
		return bfd.StateChange{From: from, To: to, Diag: diag, RemoteState: remote, At: at}
	}
	lostEarlier := failover.Peer{State: failover.Lost, LostSince: t0}
	tests := []struct {
		name       string
		prev       failover.Peer
		ev         bfd.StateChange
		startupEnd time.Time
		want       failover.Peer
	}{
		{"first contact after the startup wait: no hold-down", failover.Peer{}, ev(bfd.StateInit, bfd.StateUp, bfd.DiagNone, bfd.StateUp), startupEnd, failover.Peer{State: failover.Up}},
		{"first contact within the startup wait: hold-down", failover.Peer{}, ev(bfd.StateInit, bfd.StateUp, bfd.DiagNone, bfd.StateUp), at.Add(time.Second), failover.Peer{State: failover.Up, UpSince: at}},
		{"heal after a loss: hold-down", lostEarlier, ev(bfd.StateDown, bfd.StateUp, bfd.DiagNone, bfd.StateInit), startupEnd, failover.Peer{State: failover.Up, UpSince: at}},
		{"detection time expired: lost", failover.Peer{State: failover.Up}, ev(bfd.StateUp, bfd.StateDown, bfd.DiagControlDetectionExpired, bfd.StateDown), startupEnd, failover.Peer{State: failover.Lost, LostSince: at}},
		{"still lost: the first time stays", lostEarlier, ev(bfd.StateInit, bfd.StateDown, bfd.DiagControlDetectionExpired, bfd.StateDown), startupEnd, lostEarlier},
		{"the peer says it lost us", failover.Peer{State: failover.Up}, ev(bfd.StateUp, bfd.StateDown, bfd.DiagNeighborDown, bfd.StateDown), startupEnd, failover.Peer{State: failover.SaysLost, LostSince: at}},
		{"the peer went administratively down: its agent stops", failover.Peer{State: failover.Up}, ev(bfd.StateUp, bfd.StateDown, bfd.DiagNeighborDown, bfd.StateAdminDown), startupEnd, failover.Peer{State: failover.Lost, LostSince: at}},
		{"Init keeps what the Down said", failover.Peer{State: failover.SaysLost, LostSince: t0}, ev(bfd.StateDown, bfd.StateInit, bfd.DiagNeighborDown, bfd.StateDown), startupEnd, failover.Peer{State: failover.SaysLost, LostSince: t0}},
		{"our session removed: unknown", failover.Peer{State: failover.Up}, ev(bfd.StateUp, bfd.StateAdminDown, bfd.DiagAdminDown, bfd.StateUp), startupEnd, failover.Peer{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := heartbeat(tc.prev, tc.ev, tc.startupEnd); got != tc.want {
				t.Errorf("heartbeat = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestPlanAndDecideL2: the plan of an L2 VIP (peers from the node
// addresses, timers from its BFD settings or the default) and the
// decisions with the active's startup wait.
func TestPlanAndDecideL2(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	asg := func(self string, bfdOn bool) *pb.ConfigSnapshot {
		a := l2VIP("web", "10.0.0.50", "eth0")
		a.ActiveNode, a.StandbyNodes = "a", []string{"b"}
		a.NodeAddresses = map[string]string{"a": "192.0.2.1", "b": "192.0.2.2"}
		if self == "b" {
			a.Role = pb.VIPRole_VIP_ROLE_STANDBY
		}
		if bfdOn {
			a.Bfd = &pb.BFD{Enabled: true, DetectMultiplier: 5, DesiredMinTxMs: 100, RequiredMinRxMs: 200}
		}
		return &pb.ConfigSnapshot{Node: &pb.NodeConfig{NodeName: self, Vips: []*pb.VIPAssignment{a}}}
	}
	peerB, peerA := netip.MustParseAddr("192.0.2.2"), netip.MustParseAddr("192.0.2.1")
	now := t0.Add(time.Hour)
	recently := now.Add(-time.Second) // within the default grace
	tests := []struct {
		name     string
		snap     *pb.ConfigSnapshot
		hb       map[netip.Addr]failover.Peer
		added    time.Duration // session added this long before now; 0: not added
		holdDown time.Duration
		peer     netip.Addr
		serve    bool
		reason   string
	}{
		{"active in its startup wait", asg("a", false), nil, time.Second, 900 * time.Millisecond, peerB, false, "waiting up to 2.9s for the heartbeats of standby b"},
		{"active after its startup wait", asg("a", false), nil, 4 * time.Second, 900 * time.Millisecond, peerB, true, "active"},
		{"active, standby up", asg("a", true), map[netip.Addr]failover.Peer{peerB: {State: failover.Up}}, time.Second, time.Second, peerB, true, "active"},
		{"active, standby says it lost us", asg("a", false), map[netip.Addr]failover.Peer{peerB: {State: failover.SaysLost, LostSince: recently}}, time.Minute, 900 * time.Millisecond, peerB, false, "standby b lost our heartbeats"},
		{"standby, active lost", asg("b", false), map[netip.Addr]failover.Peer{peerA: {State: failover.Lost, LostSince: recently}}, time.Minute, 900 * time.Millisecond, peerA, true, "standby took over"},
		{"standby, active unknown", asg("b", false), nil, time.Minute, 900 * time.Millisecond, peerA, false, "active a is unknown"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := New(Options{})
			if err != nil {
				t.Fatal(err)
			}
			c, err := compile(tc.snap)
			if err != nil {
				t.Fatal(err)
			}
			states := make([]VIPState, len(c.vips))
			plans, errs := m.planL2(c, states)
			if len(errs) > 0 || len(plans) != 1 {
				t.Fatalf("plans %v, errors %v", plans, errs)
			}
			p := plans[0]
			if p.holdDown != tc.holdDown || len(p.peers) != 1 || p.peers[map[bool]string{true: "a", false: "b"}[tc.peer == peerA]] != tc.peer {
				t.Fatalf("plan: hold-down %v, peers %v; want %v and %s", p.holdDown, p.peers, tc.holdDown, tc.peer)
			}
			if tc.hb != nil {
				m.hb = tc.hb
			}
			m.hbAdded[tc.peer] = now.Add(-tc.added)
			d := m.decide(&p, tc.snap.GetNode().GetNodeName(), now)
			if d.Serve != tc.serve || !strings.Contains(d.Reason, tc.reason) {
				t.Errorf("decision %+v, want serve=%v with %q", d, tc.serve, tc.reason)
			}
		})
	}
}
