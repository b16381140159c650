package cli

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

// vipAgent serves a fixed VIPStatusResponse.
type vipAgent struct {
	pb.UnimplementedAgentAdminServer
	st *pb.VIPStatusResponse
}

func (v *vipAgent) VIPStatus(context.Context, *pb.VIPStatusRequest) (*pb.VIPStatusResponse, error) {
	return v.st, nil
}

func serveVIPAgent(t *testing.T, st *pb.VIPStatusResponse) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "agent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pb.RegisterAgentAdminServer(srv, &vipAgent{st: st})
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return sock
}

func sampleVIPStatus() *pb.VIPStatusResponse {
	now := time.Now()
	return &pb.VIPStatusResponse{
		Enabled: true,
		Vips: []*pb.VIPAnnouncementStatus{
			{Vip: "l2-web", Mode: "L2ARP", Role: "ACTIVE", Addresses: []string{"10.0.0.50"}, Interfaces: []string{"eth0"}, Announced: true},
			{Vip: "bgp-web", Mode: "BGP", Role: "ANNOUNCE", Addresses: []string{"10.200.0.10"}, Reason: "no healthy backend: no plan entry of the VIP reaches a HEALTHY endpoint", Bfd: true},
		},
		L2:                 &pb.L2Counters{Garps: 5, ArpReplies: 2},
		L2LeaseUntilUnixMs: now.Add(time.Hour).UnixMilli(),
		Bgp: &pb.BGPStatus{
			Running: true, LocalAs: 65100, RouterId: "10.81.1.2",
			Peers: []*pb.BGPPeerStatus{
				{Address: "10.81.1.1", As: 65000, Port: 179, State: "Established", EstablishedSinceUnixMs: now.Add(-time.Minute).UnixMilli(), Advertised: 1},
				{Address: "fd81:1::1", As: 65000, Port: 179, State: "Idle", ShutDown: "BFD down", LastError: "hold timer expired", LastErrorAtUnixMs: now.Add(-time.Second).UnixMilli()},
			},
			Routes: []*pb.BGPRouteStatus{{Vip: "web", Prefix: "10.200.0.11/32", Communities: []string{"65000:100"}, HasMed: true, Med: 50}},
		},
		Bfd: &pb.BFDStatus{Running: true, Speaker: "novaedge-bfdd /run/novaedge/bfd.sock", Problem: "session 10.81.9.1<-10.81.9.2: bind: cannot assign requested address", Sessions: []*pb.BFDSessionStatus{
			{Peer: "10.81.1.1", Local: "10.81.1.2", State: "Up", RemoteState: "Up", Diag: "NoDiagnostic", TxIntervalMs: 300, DetectionTimeMs: 900, Ups: 1, ControlPlaneIndependent: true},
		}},
		Errors: []string{"vip bgp-web: bfd.echo_mode: echo mode is not supported"},
	}
}

func TestVIPCommands(t *testing.T) {
	sock := serveVIPAgent(t, sampleVIPStatus())
	tests := []struct {
		args []string
		want []string // substrings of stdout
	}{
		{[]string{"vip", "status"}, []string{
			"VIP      MODE   ROLE      ADDRESSES    INTERFACES  ANNOUNCED  BFD  REASON\n",
			"l2-web   L2ARP  ACTIVE    10.0.0.50    eth0        yes        no   -\n",
			"bgp-web  BGP    ANNOUNCE  10.200.0.10  -           no         yes  no healthy backend",
			"L2: lease fresh for ", "5 gratuitous ARPs, 0 unsolicited NAs, 2 ARP replies",
			"BGP: AS 65100, router ID 10.81.1.2; 1 of 2 peers established, 1 route announced\n",
			"BFD: 1 of 1 session up (novaedge-bfdd /run/novaedge/bfd.sock)\nBFD problem: session 10.81.9.1<-10.81.9.2: bind: cannot assign requested address\n",
			"Problems:\n  vip bgp-web: bfd.echo_mode: echo mode is not supported\n",
		}},
		{[]string{"vip", "status", "-o", "json"}, []string{`"vip": "l2-web"`, `"garps": "5"`, `"local_as": 65100`}},
		{[]string{"bgp", "peers"}, []string{
			// Durations are left out: they depend on when the test runs.
			"PEER             AS     STATE        UP",
			"10.81.1.1:179    65000  Established  1m",
			"[fd81:1::1]:179  65000  Idle         -",
			"0     0         BFD down   hold timer expired (",
		}},
		{[]string{"bgp", "peers", "-o", "json"}, []string{`"address": "10.81.1.1"`, `"shut_down": "BFD down"`}},
		{[]string{"bgp", "routes"}, []string{"PREFIX          VIP  COMMUNITIES  LOCAL-PREF  MED\n", "10.200.0.11/32  web  65000:100    -           50\n"}},
		{[]string{"bgp", "routes", "-o", "json"}, []string{`"prefix": "10.200.0.11/32"`}},
		{[]string{"bfd"}, []string{"Speaker: novaedge-bfdd /run/novaedge/bfd.sock\nProblem: session 10.81.9.1<-10.81.9.2: bind",
			"PEER       LOCAL      STATE  REMOTE  DIAG          TX     DETECT", "10.81.1.1  10.81.1.2  Up     Up      NoDiagnostic  300ms  900ms", "-      1    0      yes\n"}},
		{[]string{"bfd", "-o", "json"}, []string{`"detection_time_ms": 900`}},
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

	// The JSON of each command is its message and parses back.
	_, out, _ := run("bgp", "peers", "-o", "json", "--socket", sock)
	var b pb.BGPStatus
	if err := protojson.Unmarshal([]byte(out), &b); err != nil || len(b.GetPeers()) != 2 {
		t.Errorf("bgp peers -o json does not parse as BGPStatus (%v): %s", err, out)
	}
	_, out, _ = run("bfd", "-o", "json", "--socket", sock)
	var f pb.BFDStatus
	if err := protojson.Unmarshal([]byte(out), &f); err != nil || len(f.GetSessions()) != 1 {
		t.Errorf("bfd -o json does not parse as BFDStatus (%v): %s", err, out)
	}
}

func TestVIPCommandsNotRunning(t *testing.T) {
	tests := []struct {
		name string
		st   *pb.VIPStatusResponse
		args []string
		want string
	}{
		{"agent without vip manager", &pb.VIPStatusResponse{}, []string{"vip", "status"}, "VIP announcement is not running in this agent\n"},
		{"no bgp vip", &pb.VIPStatusResponse{Enabled: true}, []string{"bgp", "peers"}, "BGP is not running: no BGP VIP on this node\n"},
		{"bfd port taken", &pb.VIPStatusResponse{Enabled: true, Bfd: &pb.BFDStatus{Error: "listen on 0.0.0.0 port 3784: taken by another BFD speaker (FRR's bfdd?)"}},
			[]string{"bfd"}, "BFD is not running: listen on 0.0.0.0 port 3784: taken by another BFD speaker (FRR's bfdd?)\n"},
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
	code, _, errOut := run("vip", "status", "-o", "yaml", "--socket", "/nonexistent.sock")
	if code != ExitUsage || !strings.Contains(errOut, `--output "yaml": must be table or json`) {
		t.Errorf("vip status -o yaml: exit %d, stderr %q", code, errOut)
	}
}
