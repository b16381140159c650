package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/novaedge/novaedge/agent/internal/unixsys"
	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

// Signals the agent's main handles.
var (
	// ShutdownSignals (SIGTERM, SIGINT) stop the agent, leaving what it
	// set up in place.
	ShutdownSignals = unixsys.ShutdownSignals
	// ReloadSignal (SIGHUP) makes a standalone agent re-read its files.
	ReloadSignal = unixsys.ReloadSignal
)

// DefaultAdminSocket is where the agent serves its admin API.
const DefaultAdminSocket = "/run/novaedge/agent.sock"

// adminServer implements the AgentAdmin service on top of an Agent.
type adminServer struct {
	pb.UnimplementedAgentAdminServer
	a *Agent
}

var _ pb.AgentAdminServer = (*adminServer)(nil)

// RegisterAdmin adds the AgentAdmin service for a to s.
func (a *Agent) RegisterAdmin(s *grpc.Server) {
	pb.RegisterAgentAdminServer(s, &adminServer{a: a})
}

func unixMillis(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// Status reports what the agent serves.
func (s *adminServer) Status(context.Context, *pb.StatusRequest) (*pb.AgentStatus, error) {
	a := s.a
	st := &pb.AgentStatus{
		NodeName:        a.opts.NodeName,
		Source:          a.opts.Source.Kind(),
		AgentVersion:    a.opts.Version,
		StartedAtUnixMs: unixMillis(a.started),
	}
	if st.Source == "standalone" {
		st.ConfigPaths = a.opts.Source.Describe()
	} else if d := a.opts.Source.Describe(); len(d) > 0 {
		st.ControllerAddress = d[0]
	}
	for _, f := range a.opts.Features {
		st.Features = append(st.Features, &pb.Feature{Name: f.Name, Available: f.Available, Detail: f.Detail})
	}
	if a.opts.BoundAddresses != nil {
		st.BoundAddresses = sortedCopy(a.opts.BoundAddresses())
	}
	if r := a.Rejected(); r != nil {
		st.LastError = r.Err.Error()
		st.LastErrorAtUnixMs = unixMillis(r.At)
	}
	cur := a.State()
	if cur == nil {
		return st, nil
	}
	snap := cur.Snapshot
	c := snap.GetCluster()
	fast, slow := planCounts(snap)
	st.Ready = true
	st.AppliedVersion = snap.GetVersion()
	st.AppliedContentHash = snap.GetContentHash()
	st.AppliedAtUnixMs = unixMillis(cur.AppliedAt)
	st.Vips = uint32(len(c.GetVips()))
	st.Listeners = uint32(len(c.GetListeners()))
	st.Routes = uint32(len(c.GetRoutes()))
	st.Backends = uint32(len(c.GetBackends()))
	st.FastPathEntries = uint32(fast)
	st.SlowPathEntries = uint32(slow)
	st.Warnings = uint32(len(cur.Diagnostics.Warnings()))
	if len(cur.ApplyErrors) > 0 && st.LastError == "" {
		st.LastError = fmt.Sprintf("version %d is not applied completely: %s", snap.GetVersion(), cur.ApplyErrors[0])
		st.LastErrorAtUnixMs = unixMillis(cur.AppliedAt)
	}
	return st, nil
}

// GetSnapshot returns the snapshot in service.
func (s *adminServer) GetSnapshot(context.Context, *pb.GetSnapshotRequest) (*pb.ConfigSnapshot, error) {
	cur := s.a.State()
	if cur == nil {
		return nil, status.Error(codes.Unavailable, "no configuration applied yet")
	}
	return cur.Snapshot, nil
}

// ConfigErrors returns the served and the last rejected diagnostics.
func (s *adminServer) ConfigErrors(context.Context, *pb.ConfigErrorsRequest) (*pb.ConfigErrorsResponse, error) {
	resp := &pb.ConfigErrorsResponse{}
	if cur := s.a.State(); cur != nil {
		resp.Applied = diagsToProto(cur.Diagnostics)
	}
	if r := s.a.Rejected(); r != nil {
		resp.Rejected = diagsToProto(r.Diagnostics)
		resp.RejectedError = r.Err.Error()
	}
	return resp, nil
}

// Reload re-reads a standalone agent's files.
func (s *adminServer) Reload(ctx context.Context, _ *pb.ReloadRequest) (*pb.ReloadResponse, error) {
	if s.a.opts.Source.Kind() != "standalone" {
		return nil, status.Error(codes.FailedPrecondition, "reload applies to a standalone agent; this agent follows its controller")
	}
	out, err := s.a.Reload(ctx, "admin API")
	if err != nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return nil, status.FromContextError(err).Err()
		}
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	resp := &pb.ReloadResponse{Applied: out.Applied, Version: out.Version}
	if out.Err != nil {
		resp.Error = out.Err.Error()
	}
	return resp, nil
}

// VIPStatusReporter is implemented by the applier that announces VIPs
// (vip/manager); the admin API's VIPStatus asks the first applier that
// implements it.
type VIPStatusReporter interface {
	VIPStatus(ctx context.Context) (*pb.VIPStatusResponse, error)
}

// VIPStatus reports the VIP announcements, or enabled false when no
// applier announces VIPs.
func (s *adminServer) VIPStatus(ctx context.Context, _ *pb.VIPStatusRequest) (*pb.VIPStatusResponse, error) {
	for _, ap := range s.a.opts.Appliers {
		if r, ok := ap.(VIPStatusReporter); ok {
			st, err := r.VIPStatus(ctx)
			if err != nil {
				return nil, status.Error(codes.Internal, err.Error())
			}
			return st, nil
		}
	}
	return &pb.VIPStatusResponse{}, nil
}

// ListenAdmin creates the admin API's Unix socket at path, readable and
// writable by root only (the API can reload configuration). A socket left
// behind by an agent that died is replaced; one that still answers means
// another agent runs, which is an error.
func ListenAdmin(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("admin socket directory: %w", err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("admin socket %s: exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			_ = c.Close()
			return nil, fmt.Errorf("admin socket %s: another agent is serving it", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("remove stale admin socket: %w", err)
		}
	}
	ln, err := unixsys.ListenUnixPrivate(path)
	if err != nil {
		return nil, fmt.Errorf("admin socket: %w", err)
	}
	return ln, nil
}
