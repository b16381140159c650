package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"time"

	"github.com/spf13/cobra"
)

func newDemoBackendCommand() *cobra.Command {
	var (
		listen string
		name   string
		tcp    bool
	)
	cmd := &cobra.Command{
		Use:    "demo-backend",
		Short:  "Run a tiny HTTP or TCP echo server for the demo",
		Hidden: true,
		Long: `demo-backend runs a tiny server used by hack/demo.sh as a backend:

  HTTP (default): every request gets "hello from NAME\n" with status 200,
                  so health checks on any path succeed.
  --tcp:          a TCP echo server: every connection gets back what it sends.

It runs until interrupted (SIGINT) or terminated (SIGTERM).`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if name == "" {
				name = listen
			}
			// SIGTERM keeps its default action (exit at once), which is all a
			// demo server needs; SIGINT (Ctrl-C) shuts down gracefully.
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt)
			defer stop()
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return err
			}
			if tcp {
				return serveEcho(ctx, ln)
			}
			return serveHello(ctx, ln, name)
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:18081", "address:port to listen on")
	cmd.Flags().StringVar(&name, "name", "", "name in the HTTP answer (default: the --listen address)")
	cmd.Flags().BoolVar(&tcp, "tcp", false, "serve TCP echo instead of HTTP")
	return cmd
}

// serveHello answers every HTTP request with "hello from name" until ctx
// ends.
func serveHello(ctx context.Context, ln net.Listener, name string) error {
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			_, _ = fmt.Fprintf(w, "hello from %s\n", name) // a client that went away
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// serveEcho copies every connection's input back to it until ctx ends.
func serveEcho(ctx context.Context, ln net.Listener) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]struct{}{}
	go func() {
		<-ctx.Done()
		_ = ln.Close()
		mu.Lock()
		for c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				wg.Wait()
				return nil
			}
			return err
		}
		mu.Lock()
		conns[c] = struct{}{}
		mu.Unlock()
		wg.Go(func() {
			defer func() {
				mu.Lock()
				delete(conns, c)
				mu.Unlock()
				_ = c.Close()
			}()
			_, _ = io.Copy(c, c)
		})
	}
}
