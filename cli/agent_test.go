package cli

import (
	"context"
	"encoding/json"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/novaedge/novaedge/diag"
	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/loader"
	"github.com/novaedge/novaedge/snapshot"
)

// fakeAgent serves the admin API from a snapshot built from the standalone
// example.
type fakeAgent struct {
	pb.UnimplementedAgentAdminServer
	snap     *pb.ConfigSnapshot
	rejected bool
}

func (f *fakeAgent) Status(context.Context, *pb.StatusRequest) (*pb.AgentStatus, error) {
	return &pb.AgentStatus{
		NodeName: "demo", Source: "standalone", ConfigPaths: []string{"standalone.yaml"},
		AppliedVersion: 3, AppliedContentHash: f.snap.GetContentHash(), AppliedAtUnixMs: 1_700_000_000_000, Ready: true,
		Vips: 1, Listeners: 2, Routes: 2, Backends: 3, FastPathEntries: 1, SlowPathEntries: 1,
		AgentVersion: "v0.test", StartedAtUnixMs: 1_700_000_000_000,
		Features:       []*pb.Feature{{Name: "xdp", Available: true, Detail: "native"}, {Name: "sockmap", Available: false, Detail: "kernel too old"}},
		BoundAddresses: []string{"127.0.10.1/32"},
	}, nil
}

func (f *fakeAgent) GetSnapshot(context.Context, *pb.GetSnapshotRequest) (*pb.ConfigSnapshot, error) {
	return f.snap, nil
}

func (f *fakeAgent) ConfigErrors(context.Context, *pb.ConfigErrorsRequest) (*pb.ConfigErrorsResponse, error) {
	r := &pb.ConfigErrorsResponse{Applied: f.snap.GetDiagnostics()}
	if f.rejected {
		r.RejectedError = "1 error"
		r.Rejected = []*pb.Diagnostic{snapshot.DiagnosticToProto(diag.Diagnostic{
			Severity: diag.Error, Resource: diag.Ref{Kind: "ProxyRoute", Namespace: "demo", Name: "web"},
			Field: "spec.hostname", Message: `unknown field "spec.hostname"`, Pos: diag.Position{File: "standalone.yaml", Line: 61},
		})}
	}
	return r, nil
}

func (f *fakeAgent) Reload(context.Context, *pb.ReloadRequest) (*pb.ReloadResponse, error) {
	if f.rejected {
		return &pb.ReloadResponse{Error: "standalone.yaml:61: error: ProxyRoute demo/web: spec.hostname: unknown field"}, nil
	}
	return &pb.ReloadResponse{Applied: true, Version: 4}, nil
}

// startFakeAgent serves f on a Unix socket in a temporary directory and
// returns the socket's path.
func startFakeAgent(t *testing.T, f *fakeAgent) string {
	t.Helper()
	res, diags := loader.Load(standalone)
	if diags.HasErrors() {
		t.Fatal(diags.Err())
	}
	f.snap, _ = snapshot.Build(res.Input, snapshot.Options{Node: snapshot.Node{Name: "demo"}, Version: 3})
	sock := filepath.Join(t.TempDir(), "agent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pb.RegisterAgentAdminServer(srv, f)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return sock
}

func TestAgentCommands(t *testing.T) {
	sock := startFakeAgent(t, &fakeAgent{})
	tests := []struct {
		args []string
		want []string // substrings of stdout
	}{
		{[]string{"status"}, []string{
			"Node:             demo\n", "Source:           standalone (standalone.yaml)\n", "Ready:            yes\n",
			"Serving:          1 VIP, 2 listeners, 2 routes, 3 backends\n", "Plan:             1 fast path, 1 slow path\n",
			"Bound addresses:  127.0.10.1/32\n", "Last rejected:    none\n",
			"  xdp      available  native\n", "  sockmap  MISSING    kernel too old\n",
		}},
		{[]string{"status", "-o", "json"}, []string{`"node_name": "demo"`, `"bound_addresses": [`}},
		{[]string{"plan"}, []string{
			"VIP       ADDRESS              PATH  LISTENER        REASONS\n",
			"demo-vip  127.0.10.1:9000/tcp  FAST  demo/demo/tcp   TCP listener",
		}},
		{[]string{"plan", "--endpoints"}, []string{"127.0.10.1:9000/tcp endpoints:\n  127.0.0.1:19001 w=1 healthy\n  127.0.0.1:19002 w=1 healthy\n"}},
		{[]string{"plan", "-o", "json"}, []string{`"path": "FAST"`, `"127.0.0.1:19001 w=1 healthy"`}},
		{[]string{"snapshot"}, []string{`"content_hash": "`, `"vips": [`}},
		{[]string{"snapshot", "-o", "yaml"}, []string{"cluster:\n", "  plan:\n"}},
		{[]string{"errors"}, []string{"Served configuration: 0 errors, 0 warnings\n", "Last rejected configuration: none\n"}},
		{[]string{"reload"}, []string{"applied version 4\n"}},
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

	// The JSON outputs parse.
	_, out, _ := run("snapshot", "--socket", sock)
	var s pb.ConfigSnapshot
	if err := protojson.Unmarshal([]byte(out), &s); err != nil || len(s.GetCluster().GetPlan()) != 2 {
		t.Errorf("snapshot output does not round-trip (%v): %d plan entries", err, len(s.GetCluster().GetPlan()))
	}
	_, out, _ = run("plan", "-o", "json", "--socket", sock)
	var rows []planRow
	if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 2 {
		t.Errorf("plan -o json: %v, %d rows", err, len(rows))
	}
}

func TestAgentCommandsRejected(t *testing.T) {
	sock := startFakeAgent(t, &fakeAgent{rejected: true})
	code, out, _ := run("errors", "--socket", sock)
	if code != ExitFailure || !strings.Contains(out, "Last rejected configuration (the served one above was kept):\n  1 error\n  standalone.yaml:61: error: ProxyRoute demo/web: spec.hostname:") {
		t.Errorf("errors: exit %d, output:\n%s", code, out)
	}
	code, _, errOut := run("reload", "--socket", sock)
	if code != ExitFailure || !strings.Contains(errOut, "reload rejected, still serving the last good configuration: standalone.yaml:61") {
		t.Errorf("reload: exit %d, stderr %q", code, errOut)
	}
}

func TestAgentUnreachable(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "none.sock")
	code, _, errOut := run("status", "--socket", sock)
	if code != ExitFailure || !strings.Contains(errOut, "is novaedge-agent running?") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
	// A socket file nobody listens on.
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	_ = ln.Close()
	code, _, errOut = run("status", "--socket", sock, "--timeout", "2s")
	if code != ExitFailure || !strings.Contains(errOut, "agent at "+sock) {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}

// snapshot leaves the slots of Maglev lineages out unless asked: they are
// up to 130 KB of base64 per entry.
func TestSnapshotLineageSlots(t *testing.T) {
	f := &fakeAgent{}
	sock := startFakeAgent(t, f)
	for _, e := range f.snap.GetCluster().GetPlan() {
		if e.GetPath() == pb.DataPath_DATA_PATH_FAST {
			e.Lineage = &pb.MaglevLineage{Size: 251, Backends: []string{"127.0.0.1:19001"}, Slots: []byte("SLOTBYTES")}
		}
	}
	for _, tc := range []struct {
		args      []string
		wantSlots bool
	}{
		{[]string{"snapshot"}, false},
		{[]string{"snapshot", "--lineage-slots"}, true},
	} {
		code, out, errOut := run(append(tc.args, "--socket", sock)...)
		if code != ExitOK {
			t.Fatalf("%v: exit %d, stderr %q", tc.args, code, errOut)
		}
		var s pb.ConfigSnapshot
		if err := protojson.Unmarshal([]byte(out), &s); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		var got *pb.MaglevLineage
		for _, e := range s.GetCluster().GetPlan() {
			if e.GetLineage() != nil {
				got = e.GetLineage()
			}
		}
		if got == nil || len(got.GetBackends()) != 1 || (string(got.GetSlots()) == "SLOTBYTES") != tc.wantSlots {
			t.Errorf("%v: lineage %v, want slots %v", tc.args, got, tc.wantSlots)
		}
	}
}
