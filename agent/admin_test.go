package agent

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/kernel"
)

// serveAgent runs an agent with Serve on a real Unix socket and returns a
// client of its admin API.
func serveAgent(t *testing.T, src Source, opts Options) (*Agent, pb.AgentAdminClient, string) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "agent.sock")
	opts.Source = src
	opts.StrictReload = true
	a, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Serve(ctx, ServeOptions{AdminSocket: sock}) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		if _, err := os.Stat(sock); !os.IsNotExist(err) {
			t.Errorf("admin socket left behind after Serve returned: %v", err)
		}
	})
	waitFor(t, "the agent to be ready", a.Ready)
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return a, pb.NewAgentAdminClient(conn), sock
}

func TestAdminAPI(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "standalone.yaml")
	writeConfig(t, path)
	src := fileSource(path)
	src.Debounce = 0
	features := []kernel.Feature{{Name: "xdp", Available: true, Detail: "loads"}, {Name: "bpffs", Detail: "missing"}}
	a, c, sock := serveAgent(t, noWatchSource{src}, Options{
		NodeName: "node-a", Version: "v-test", Features: features,
		BoundAddresses: func() []string { return []string{"127.0.10.1/32 on lo"} },
	})
	ctx := context.Background()

	st, err := c.Status(ctx, &pb.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	want := &pb.AgentStatus{
		NodeName: "node-a", Source: "standalone", ConfigPaths: []string{path},
		AppliedVersion: 1, AppliedContentHash: a.State().Snapshot.GetContentHash(),
		Ready: true, Vips: 1, Listeners: 2, Routes: 2, Backends: 3,
		FastPathEntries: 1, SlowPathEntries: 1, AgentVersion: "v-test",
		Features: []*pb.Feature{
			{Name: "xdp", Available: true, Detail: "loads"},
			{Name: "bpffs", Detail: "missing"},
		},
		BoundAddresses: []string{"127.0.10.1/32 on lo"},
	}
	if st.GetAppliedAtUnixMs() == 0 || st.GetStartedAtUnixMs() == 0 {
		t.Errorf("times not set: applied %d started %d", st.GetAppliedAtUnixMs(), st.GetStartedAtUnixMs())
	}
	st.AppliedAtUnixMs, st.StartedAtUnixMs = 0, 0
	if !proto.Equal(st, want) {
		t.Fatalf("Status =\n%v\nwant\n%v", st, want)
	}

	snap, err := c.GetSnapshot(ctx, &pb.GetSnapshotRequest{})
	if err != nil || !proto.Equal(snap, a.State().Snapshot) {
		t.Fatalf("GetSnapshot differs from the state in service (err %v)", err)
	}

	// A bad edit through the admin API's Reload: rejected, reported.
	writeConfig(t, path, "address: 127.0.10.1/32", "address: 127.0.10.1/33")
	rr, err := c.Reload(ctx, &pb.ReloadRequest{})
	if err != nil || rr.GetApplied() || rr.GetVersion() != 1 || !strings.Contains(rr.GetError(), "still serving version 1") {
		t.Fatalf("Reload = %v, %v", rr, err)
	}
	ce, err := c.ConfigErrors(ctx, &pb.ConfigErrorsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ce.GetApplied()) != 0 || ce.GetRejectedError() == "" || len(ce.GetRejected()) == 0 {
		t.Fatalf("ConfigErrors = %v", ce)
	}
	d := ce.GetRejected()[0]
	if d.GetKind() != "ProxyVIP" || d.GetName() != "demo-vip" || d.GetField() != "spec.address" || d.GetFile() != path || d.GetLine() == 0 {
		t.Fatalf("rejected diagnostic = %v, want ProxyVIP demo-vip spec.address at %s:line", d, path)
	}
	if st, _ := c.Status(ctx, &pb.StatusRequest{}); st.GetLastError() == "" || st.GetAppliedVersion() != 1 {
		t.Fatalf("Status after the rejection = %v", st)
	}

	writeConfig(t, path, "port: 18082\n  healthCheck", "port: 18083\n  healthCheck")
	rr, err = c.Reload(ctx, &pb.ReloadRequest{})
	if err != nil || !rr.GetApplied() || rr.GetVersion() != 2 || rr.GetError() != "" {
		t.Fatalf("Reload after the fix = %v, %v", rr, err)
	}
	if st, _ := c.Status(ctx, &pb.StatusRequest{}); st.GetLastError() != "" || st.GetAppliedVersion() != 2 {
		t.Fatalf("Status after the fix = %v", st)
	}

	// The socket is private: the API can reload configuration.
	fi, err := os.Stat(sock)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode = %v, %v; want 0600", fi.Mode(), err)
	}
}

// noWatchSource notices changes only on Reload, so the test decides when.
type noWatchSource struct{ *FileSource }

func (n noWatchSource) Watch(ctx context.Context, _ func()) error {
	<-ctx.Done()
	return nil
}

func TestListenAdmin(t *testing.T) {
	dir := t.TempDir()

	t.Run("stale socket is replaced", func(t *testing.T) {
		p := filepath.Join(dir, "stale.sock")
		ln, err := net.Listen("unix", p)
		if err != nil {
			t.Fatal(err)
		}
		// Leave the file behind, as a killed agent does.
		ln.(*net.UnixListener).SetUnlinkOnClose(false)
		_ = ln.Close()
		ln2, err := ListenAdmin(p)
		if err != nil {
			t.Fatalf("ListenAdmin over a stale socket: %v", err)
		}
		_ = ln2.Close()
	})
	t.Run("live socket is refused", func(t *testing.T) {
		p := filepath.Join(dir, "live.sock")
		ln, err := ListenAdmin(p)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = ln.Close() }()
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				_ = c.Close()
			}
		}()
		if _, err := ListenAdmin(p); err == nil || !strings.Contains(err.Error(), "another agent") {
			t.Fatalf("ListenAdmin on a live socket: %v", err)
		}
	})
	t.Run("regular file is not removed", func(t *testing.T) {
		p := filepath.Join(dir, "file.sock")
		if err := os.WriteFile(p, []byte("data"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := ListenAdmin(p); err == nil || !strings.Contains(err.Error(), "not a socket") {
			t.Fatalf("ListenAdmin on a regular file: %v", err)
		}
		if b, _ := os.ReadFile(p); string(b) != "data" {
			t.Fatal("the regular file was changed")
		}
	})
	t.Run("directory is created", func(t *testing.T) {
		p := filepath.Join(dir, "run", "novaedge", "agent.sock")
		ln, err := ListenAdmin(p)
		if err != nil {
			t.Fatal(err)
		}
		_ = ln.Close()
	})
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

func TestOpsEndpoints(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "standalone.yaml")
	writeConfig(t, path)
	src := fileSource(path)
	a, err := New(Options{Source: noWatchSource{src}, StrictReload: true, Version: "v-test",
		Features: []kernel.Feature{{Name: "xdp", Available: true}}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a.OpsHandler())
	defer srv.Close()

	if code, body := get(t, srv.URL+"/healthz"); code != 200 || body != "ok\n" {
		t.Fatalf("/healthz = %d %q", code, body)
	}
	if code, body := get(t, srv.URL+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "no configuration applied yet") {
		t.Fatalf("/readyz before the first configuration = %d %q", code, body)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	waitFor(t, "ready", a.Ready)
	if code, body := get(t, srv.URL+"/readyz"); code != 200 || !strings.HasPrefix(body, "ready: version 1") {
		t.Fatalf("/readyz = %d %q", code, body)
	}

	writeConfig(t, path, "address: 127.0.10.1/32", "address: 127.0.10.1/33")
	if out, _ := a.Reload(ctx, "test"); out.Applied {
		t.Fatal("bad configuration applied")
	}
	code, body := get(t, srv.URL+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics = %d", code)
	}
	for _, want := range []string{
		`novaedge_agent_ready 1`,
		`novaedge_config_version 1`,
		`novaedge_config_reloads_total{result="applied"} 1`,
		`novaedge_config_reloads_total{result="rejected"} 1`,
		`novaedge_config_last_reload_successful 0`,
		`novaedge_config_objects{kind="listener"} 2`,
		`novaedge_plan_entries{path="fast"} 1`,
		`novaedge_plan_entries{path="slow"} 1`,
		`novaedge_kernel_feature_available{feature="xdp"} 1`,
		`novaedge_build_info{goversion="`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if code, _ := get(t, srv.URL+"/nothing"); code != http.StatusNotFound {
		t.Errorf("/nothing = %d, want 404", code)
	}
}

// vipReporter is an applier that reports VIP status.
type vipReporter struct{ st *pb.VIPStatusResponse }

func (v *vipReporter) Name() string { return "vip" }

func (v *vipReporter) Compile(*pb.ConfigSnapshot) (Change, error) {
	return ChangeFunc(func(context.Context) error { return nil }), nil
}

func (v *vipReporter) VIPStatus(context.Context) (*pb.VIPStatusResponse, error) { return v.st, nil }

// silentApplier applies nothing and reports nothing.
type silentApplier struct{}

func (silentApplier) Name() string { return "silent" }

func (silentApplier) Compile(*pb.ConfigSnapshot) (Change, error) {
	return ChangeFunc(func(context.Context) error { return nil }), nil
}

func TestAdminVIPStatus(t *testing.T) {
	want := &pb.VIPStatusResponse{Enabled: true, Vips: []*pb.VIPAnnouncementStatus{{Vip: "web", Mode: "BGP", Role: "ANNOUNCE", Announced: true}}}
	tests := []struct {
		name     string
		appliers []Applier
		want     *pb.VIPStatusResponse
	}{
		{"no vip applier", nil, &pb.VIPStatusResponse{}},
		{"the reporting applier answers", []Applier{silentApplier{}, &vipReporter{st: want}}, want},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "standalone.yaml")
			writeConfig(t, path)
			src := fileSource(path)
			src.Debounce = 0
			_, c, _ := serveAgent(t, noWatchSource{src}, Options{Appliers: tc.appliers})
			got, err := c.VIPStatus(context.Background(), &pb.VIPStatusRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(got, tc.want) {
				t.Errorf("VIPStatus = %v, want %v", got, tc.want)
			}
		})
	}
}
