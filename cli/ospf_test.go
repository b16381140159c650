package cli

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

func sampleOSPFStatus() *pb.VIPStatusResponse {
	return &pb.VIPStatusResponse{
		Enabled: true,
		Vips: []*pb.VIPAnnouncementStatus{
			{Vip: "ospf-web", Mode: "OSPF", Role: "ANNOUNCE", Addresses: []string{"10.200.0.30"}, Reason: "no OSPF neighbour in state Full: OSPF authentication mismatch on n-r with 10.82.1.1: the md5 keys differ (key id 1)"},
		},
		Ospf: &pb.OSPFStatus{
			Running: true, RouterId: "10.82.1.2", LastReconcileUnixMs: time.Now().Add(-2 * time.Second).UnixMilli(), Reapplied: 3,
			Neighbors: []*pb.OSPFNeighborStatus{
				{RouterId: "10.82.1.1", Address: "10.82.1.1", Interface: "n-r", State: "Full", Role: "DR", DeadTimeMs: 3500},
				{RouterId: "10.82.3.1", Address: "10.82.3.1", Interface: "n-s", State: "Init", DeadTimeMs: 1000},
			},
			Routes:   []*pb.OSPFRouteStatus{{Vip: "ospf-web", Prefix: "10.200.0.30/32", Area: "0.0.0.0", Cost: 33}},
			Problems: []string{"OSPF authentication mismatch on n-s with 10.82.3.1: the md5 keys differ (key id 1)"},
			Error:    "vtysh: line 3: % Unknown command",
		},
	}
}

func TestOSPFCommand(t *testing.T) {
	sock := serveVIPAgent(t, sampleOSPFStatus())
	tests := []struct {
		args []string
		want []string // substrings of stdout
	}{
		{[]string{"ospf"}, []string{
			"Router ID 10.82.1.2; last reconcile 2s ago; 3 lines re-applied\n",
			"NEIGHBOUR  ADDRESS    INTERFACE  STATE  ROLE  DEAD IN\n",
			"10.82.1.1  10.82.1.1  n-r        Full   DR    3.5s\n",
			"10.82.3.1  10.82.3.1  n-s        Init   -     1s\n",
			"PREFIX          VIP       AREA     COST\n",
			"10.200.0.30/32  ospf-web  0.0.0.0  33\n",
			"\nError: vtysh: line 3: % Unknown command\n",
			"\nProblems:\n  OSPF authentication mismatch on n-s with 10.82.3.1: the md5 keys differ (key id 1)\n",
		}},
		{[]string{"ospf", "-o", "json"}, []string{`"router_id": "10.82.1.2"`, `"state": "Full"`, `"cost": 33`}},
		{[]string{"vip", "status"}, []string{
			"ospf-web  OSPF  ANNOUNCE  10.200.0.30  -           no         no   no OSPF neighbour in state Full: OSPF authentication mismatch",
			"OSPF: router ID 10.82.1.2; 1 of 2 neighbours Full, 1 route advertised\n",
			"OSPF problem: OSPF authentication mismatch on n-s with 10.82.3.1: the md5 keys differ (key id 1)\n",
			"OSPF error: vtysh: line 3: % Unknown command\n",
		}},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, errOut := run(append(tc.args, "--socket", sock)...)
			if code != ExitOK {
				t.Fatalf("exit %d, stderr %q", code, errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("stdout lacks %q:\n%s", w, out)
				}
			}
		})
	}

	_, out, _ := run("ospf", "-o", "json", "--socket", sock)
	var o pb.OSPFStatus
	if err := protojson.Unmarshal([]byte(out), &o); err != nil || len(o.GetNeighbors()) != 2 || o.GetRoutes()[0].GetCost() != 33 {
		t.Errorf("ospf -o json does not parse as OSPFStatus (%v): %s", err, out)
	}
}

func TestOSPFCommandNotRunning(t *testing.T) {
	tests := []struct {
		name string
		st   *pb.VIPStatusResponse
		args []string
		want string
	}{
		{"no ospf vip", &pb.VIPStatusResponse{Enabled: true}, []string{"ospf"}, "OSPF is not running: no OSPF VIP on this node\n"},
		{"driver failed", &pb.VIPStatusResponse{Enabled: true, Ospf: &pb.OSPFStatus{Error: "ospf: frr driver: grace period 0s: must be 1s-1800s"}},
			[]string{"ospf"}, "OSPF is not running: ospf: frr driver: grace period 0s: must be 1s-1800s\n"},
		{"no ospf vip json", &pb.VIPStatusResponse{Enabled: true}, []string{"ospf", "-o", "json"}, "{}\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sock := serveVIPAgent(t, tc.st)
			code, out, errOut := run(append(tc.args, "--socket", sock)...)
			if code != ExitOK || out != tc.want {
				t.Errorf("exit %d, stdout %q (want %q), stderr %q", code, out, tc.want, errOut)
			}
		})
	}
}
