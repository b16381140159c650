package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"google.golang.org/grpc"
)

// ServeOptions are the agent's local endpoints.
type ServeOptions struct {
	// AdminSocket is the path of the admin API's Unix socket. Empty: no
	// admin API.
	AdminSocket string
	// MetricsAddr is the TCP address of /healthz, /readyz and /metrics.
	// Empty: no ops server.
	MetricsAddr string
	// ShutdownTimeout bounds how long in-flight admin and ops requests may
	// take after ctx ends. Zero means 5s.
	ShutdownTimeout time.Duration
	// BindRetry, when not zero, starts the agent before its admin socket
	// and metrics port are free and keeps trying to bind them this long: a
	// successor that took over the listening sockets of a running agent
	// serves at once while the predecessor drains and exits.
	BindRetry time.Duration
	// OnListening is called once the admin socket and metrics port are
	// bound. Nil: nothing.
	OnListening func()
}

// Serve opens the admin socket and the ops server, runs the agent, and
// serves until ctx ends; then it stops the servers and returns. Sockets are
// opened before the first configuration is loaded, so a port in use fails
// the start instead of leaving a half-started agent. What the appliers set
// up (VIP addresses, later BPF programs) is left in place: a restart must
// not drop traffic.
func (a *Agent) Serve(ctx context.Context, so ServeOptions) error {
	timeout := so.ShutdownTimeout
	if timeout == 0 {
		timeout = 5 * time.Second
	}
	var adminLn, opsLn net.Listener
	bind := func() error {
		if so.MetricsAddr != "" {
			ln, err := net.Listen("tcp", so.MetricsAddr)
			if err != nil {
				return fmt.Errorf("metrics address: %w", err)
			}
			opsLn = ln
		}
		if so.AdminSocket != "" {
			ln, err := ListenAdmin(so.AdminSocket)
			if err != nil {
				if opsLn != nil {
					_ = opsLn.Close()
					opsLn = nil
				}
				return err
			}
			adminLn = ln
		}
		return nil
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	runDone := make(chan error, 1)
	if so.BindRetry == 0 {
		if err := bind(); err != nil {
			return err
		}
		go func() { runDone <- a.Run(ctx) }()
	} else {
		// Taking over from a predecessor: serve traffic first, then wait
		// for it to release the admin socket and the metrics port.
		go func() { runDone <- a.Run(ctx) }()
		deadline := time.Now().Add(so.BindRetry)
		for {
			err := bind()
			if err == nil {
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				cancel()
				<-runDone //nolint:errcheck // the bind error is the one to report; Run returns nil once ctx ends
				return err
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	if so.OnListening != nil {
		so.OnListening()
	}

	errc := make(chan error, 3)
	running := 0

	var gs *grpc.Server
	if adminLn != nil {
		gs = grpc.NewServer()
		a.RegisterAdmin(gs)
		running++
		go func() {
			if err := gs.Serve(adminLn); err != nil {
				errc <- fmt.Errorf("admin API: %w", err)
				return
			}
			errc <- nil
		}()
		a.log.Info("admin API listening", "socket", so.AdminSocket)
	}
	var hs *http.Server
	if opsLn != nil {
		hs = &http.Server{Handler: a.OpsHandler(), ReadHeaderTimeout: 10 * time.Second}
		running++
		go func() {
			if err := hs.Serve(opsLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("ops server: %w", err)
				return
			}
			errc <- nil
		}()
		a.log.Info("ops server listening", "address", opsLn.Addr().String(), "paths", "/healthz /readyz /metrics")
	}
	var first error
	select {
	case <-ctx.Done():
	case err := <-errc:
		running--
		first = err
		cancel()
	}
	if gs != nil {
		stopped := make(chan struct{})
		go func() { gs.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(timeout):
			gs.Stop()
		}
	}
	if hs != nil {
		sctx, scancel := context.WithTimeout(context.Background(), timeout)
		_ = hs.Shutdown(sctx)
		scancel()
	}
	for ; running > 0; running-- {
		if err := <-errc; first == nil {
			first = err
		}
	}
	if err := <-runDone; first == nil {
		first = err
	}
	return first
}
