package bfdd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/vip/bfd"
)

// DefaultOrphanTimeout is how long sessions with the C bit outlive their
// agent when ServerOptions.OrphanTimeout is zero: longer than a restart
// takes (an image pull included) and than the routers' graceful-restart
// time (120 s by default), after which their paths are gone anyway.
const DefaultOrphanTimeout = 3 * time.Minute

// ServerOptions configure a Server.
type ServerOptions struct {
	// Logger receives attaches, detaches and orphan timeouts. Nil discards.
	Logger *slog.Logger
	// OrphanTimeout is how long sessions with the C bit stay Up without
	// an attached agent. Zero means DefaultOrphanTimeout.
	OrphanTimeout time.Duration
}

// Server is the BFDDaemon gRPC service over one speaker, which it owns:
// every session of the speaker is the attached agent's.
type Server struct {
	pb.UnimplementedBFDDaemonServer

	sp     *bfd.Speaker
	log    *slog.Logger
	orphan time.Duration

	// mu serialises applies and the attachment bookkeeping.
	mu      sync.Mutex
	current *attachment
	nextID  uint64
	// orphanTimer takes the C-bit sessions down when no agent came back.
	orphanTimer *time.Timer
}

type attachment struct {
	id       uint64
	client   string
	cancel   context.CancelFunc
	replaced bool
}

// NewServer returns the service for sp.
func NewServer(sp *bfd.Speaker, opts ServerOptions) *Server {
	s := &Server{sp: sp, log: opts.Logger, orphan: opts.OrphanTimeout}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.orphan <= 0 {
		s.orphan = DefaultOrphanTimeout
	}
	return s
}

// Attach implements pb.BFDDaemonServer.
func (s *Server) Attach(stream pb.BFDDaemon_AttachServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	a := s.attach(cancel)
	defer s.detach(a)

	reqs := make(chan *pb.BFDAttachRequest)
	recvErr := make(chan error, 1)
	go func() {
		for {
			r, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case reqs <- r:
			case <-ctx.Done():
				return
			}
		}
	}()

	var events <-chan bfd.StateChange
	stopEvents := func() {}
	defer func() { stopEvents() }()
	for {
		select {
		case <-ctx.Done():
			s.mu.Lock()
			replaced := a.replaced
			s.mu.Unlock()
			if replaced {
				return status.Error(codes.Aborted, "a newer agent attached to novaedge-bfdd")
			}
			return ctx.Err()
		case err := <-recvErr:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		case r := <-reqs:
			if a.client == "" && r.GetClient() != "" {
				s.mu.Lock()
				a.client = r.GetClient()
				s.mu.Unlock()
				s.log.Info("agent attached", "client", a.client)
			}
			if err := stream.Send(&pb.BFDAttachResponse{Kind: &pb.BFDAttachResponse_Applied{Applied: s.apply(r)}}); err != nil {
				return err
			}
			if events != nil {
				continue
			}
			// The first set is applied: report where every session
			// stands, then every change.
			states, ch, stop := s.sp.Watch()
			events, stopEvents = ch, stop
			for _, st := range states {
				ev := bfd.StateChange{SessionKey: st.SessionKey, From: st.State, To: st.State, Diag: st.Diag,
					RemoteState: st.RemoteState, RemoteDiag: st.RemoteDiag, At: st.LastChange}
				if err := stream.Send(&pb.BFDAttachResponse{Kind: &pb.BFDAttachResponse_Change{Change: toChange(ev, true)}}); err != nil {
					return err
				}
			}
		case ev, ok := <-events:
			if !ok {
				return status.Error(codes.Unavailable, "novaedge-bfdd is stopping")
			}
			if err := stream.Send(&pb.BFDAttachResponse{Kind: &pb.BFDAttachResponse_Change{Change: toChange(ev, false)}}); err != nil {
				return err
			}
		}
	}
}

// Sessions implements pb.BFDDaemonServer.
func (s *Server) Sessions(context.Context, *pb.BFDSessionsRequest) (*pb.BFDSessionsResponse, error) {
	resp := &pb.BFDSessionsResponse{}
	for _, st := range s.sp.Sessions() {
		resp.Sessions = append(resp.Sessions, toState(st))
	}
	return resp, nil
}

// attach makes a the current attachment, ending the one before it.
func (s *Server) attach(cancel context.CancelFunc) *attachment {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextID++
	a := &attachment{id: s.nextID, cancel: cancel}
	if old := s.current; old != nil {
		old.replaced = true
		old.cancel()
		s.log.Info("a newer agent attached: ending the older attachment", "older", old.client)
	}
	if s.orphanTimer != nil {
		s.orphanTimer.Stop()
		s.orphanTimer = nil
	}
	s.current = a
	return a
}

// detach ends a: the sessions that depend on the agent go down now, the
// others when no agent attaches within the orphan timeout.
func (s *Server) detach(a *attachment) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.current != a {
		return // replaced: the newer attachment owns the sessions
	}
	s.current = nil
	kept := s.removeLocked(func(cfg bfd.SessionConfig) bool { return !cfg.ControlPlaneIndependent }, "its agent detached")
	s.log.Info("agent detached", "client", a.client, "keptSessions", kept, "orphanTimeout", s.orphan)
	if kept == 0 {
		return
	}
	s.orphanTimer = time.AfterFunc(s.orphan, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.current != nil {
			return
		}
		s.orphanTimer = nil
		s.log.Warn("no agent attached within the orphan timeout: taking the remaining sessions down", "orphanTimeout", s.orphan)
		s.removeLocked(func(bfd.SessionConfig) bool { return true }, "orphan timeout")
	})
}

// removeLocked removes the sessions drop selects and returns how many
// remain.
func (s *Server) removeLocked(drop func(bfd.SessionConfig) bool, why string) int {
	kept := 0
	for _, st := range s.sp.Sessions() {
		if !drop(st.Config) {
			kept++
			continue
		}
		if err := s.sp.RemoveSession(st.SessionKey); err != nil && !errors.Is(err, bfd.ErrClosed) {
			s.log.Error("remove bfd session", "session", st.SessionKey, "reason", why, "error", err)
		}
	}
	return kept
}

// apply makes the speaker's sessions the set r names: sessions already
// running with the same configuration are left alone (the router sees no
// change), others are added, changed or removed.
func (s *Server) apply(r *pb.BFDAttachRequest) *pb.BFDApplied {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := &pb.BFDApplied{Generation: r.GetGeneration()}
	fail := func(spec *pb.BFDSessionSpec, err error) {
		out.Errors = append(out.Errors, &pb.BFDSessionError{Session: spec, Error: err.Error()})
	}
	want := map[bfd.SessionKey]bfd.SessionConfig{}
	specs := map[bfd.SessionKey]*pb.BFDSessionSpec{}
	for _, spec := range r.GetSessions() {
		cfg, err := fromSpec(spec)
		if err != nil {
			fail(spec, err)
			continue
		}
		if _, dup := want[cfg.Key()]; dup {
			fail(spec, fmt.Errorf("session %v: named twice", cfg.Key()))
			continue
		}
		want[cfg.Key()], specs[cfg.Key()] = cfg, spec
	}
	have := map[bfd.SessionKey]bfd.SessionConfig{}
	for _, st := range s.sp.Sessions() {
		have[st.SessionKey] = st.Config
		if _, ok := want[st.SessionKey]; !ok {
			if err := s.sp.RemoveSession(st.SessionKey); err != nil {
				s.log.Error("remove bfd session", "session", st.SessionKey, "error", err)
			}
		}
	}
	for key, cfg := range want {
		cur, ok := have[key]
		var err error
		switch {
		case ok && cur == cfg:
			continue
		case ok:
			err = s.sp.UpdateSession(cfg)
		default:
			_, err = s.sp.AddSession(cfg)
		}
		if err != nil {
			fail(specs[key], err)
		}
	}
	return out
}
