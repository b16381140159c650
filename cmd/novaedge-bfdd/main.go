// Command novaedge-bfdd is the node's long-lived BFD speaker. It holds UDP
// port 3784 and the BFD sessions of the node's agent, which drives it over a
// Unix socket (novaedge-agent --bfd-socket), so that restarting or upgrading
// the agent does not take the BGP peers' BFD sessions down: the routers keep
// the node's paths through BGP graceful restart instead of dropping them as
// for a dead node. See package vip/bfdd.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/internal/termsig"
	"github.com/novaedge/novaedge/vip/bfd"
	"github.com/novaedge/novaedge/vip/bfdd"
)

// version is set at build time (-ldflags "-X main.version=...").
var version = "dev"

// DefaultSocket is where the daemon listens and the agent's --bfd-socket
// looks by default in the Helm chart.
const DefaultSocket = "/run/novaedge/bfd.sock"

type flags struct {
	socket    string
	orphan    time.Duration
	listen    []string
	logLevel  string
	logFormat string
}

func newCommand(stdout, stderr io.Writer) *cobra.Command {
	var f flags
	cmd := &cobra.Command{
		Use:   "novaedge-bfdd",
		Short: "NovaEdge BFD daemon: the node's BFD sessions, kept across agent restarts",
		Long: `novaedge-bfdd runs the node's BFD sessions (RFC 5880/5881, UDP port 3784) for
novaedge-agent, which attaches over --socket (novaedge-agent --bfd-socket) and
tells it the sessions it wants. Sessions with BGP peers carry the C bit
(control plane independent): they stay Up while the agent restarts, so the
routers keep the node's paths through BGP graceful restart, and go down only
when the node does (or when no agent attaches again within --orphan-timeout).
The L2 heartbeats between agents go down as soon as their agent detaches.

Run one per node, in the host network namespace, beside the agent; never
together with FRR's bfdd, which would hold the same port. SIGTERM takes every
session AdminDown, which peers do not treat as a failure.`,
		Version:       version,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.check(); err != nil {
				return err
			}
			log := f.logger(stderr)
			ctx, stop := signal.NotifyContext(cmd.Context(), termsig.Shutdown...)
			defer stop()
			return run(ctx, f, log)
		},
	}
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	fl := cmd.Flags()
	fl.StringVar(&f.socket, "socket", DefaultSocket, "Unix socket the agent attaches to (created with mode 0600; a stale one is replaced)")
	fl.DurationVar(&f.orphan, "orphan-timeout", bfdd.DefaultOrphanTimeout, "how long the BGP peers' sessions (C bit) stay Up with no agent attached; then they go AdminDown")
	fl.StringSliceVar(&f.listen, "listen", nil, "addresses to receive BFD control packets on (comma-separated or repeated); empty: 0.0.0.0 and ::")
	fl.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fl.StringVar(&f.logFormat, "log-format", "text", "log format: text or json (one object per line)")
	return cmd
}

func (f *flags) check() error {
	switch {
	case f.socket == "":
		return errors.New("--socket: must not be empty")
	case f.orphan <= 0:
		return fmt.Errorf("--orphan-timeout %v: must be positive", f.orphan)
	case f.logFormat != "text" && f.logFormat != "json":
		return fmt.Errorf("--log-format %q: must be text or json", f.logFormat)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		return fmt.Errorf("--log-level %q: must be debug, info, warn or error", f.logLevel)
	}
	for _, a := range f.listen {
		if _, err := netip.ParseAddr(a); err != nil {
			return fmt.Errorf("--listen %q: not an IP address", a)
		}
	}
	return nil
}

func (f *flags) logger(w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(f.logLevel)) // checked by check
	opts := &slog.HandlerOptions{Level: level}
	if f.logFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

func run(ctx context.Context, f flags, log *slog.Logger) error {
	var addrs []netip.Addr
	for _, a := range f.listen {
		addrs = append(addrs, netip.MustParseAddr(a)) // checked by check
	}
	lis, err := listenUnix(f.socket)
	if err != nil {
		return err
	}
	sp, err := bfd.NewSpeaker(bfd.Options{Logger: log.With("component", "bfd"), ListenAddrs: addrs})
	if err != nil {
		_ = lis.Close()
		return fmt.Errorf("bfd speaker: %w", err)
	}
	srv := grpc.NewServer()
	pb.RegisterBFDDaemonServer(srv, bfdd.NewServer(sp, bfdd.ServerOptions{Logger: log, OrphanTimeout: f.orphan}))
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	log.Info("novaedge-bfdd serving", "version", version, "socket", f.socket, "orphanTimeout", f.orphan)
	select {
	case <-ctx.Done():
		log.Info("stopping: taking every session AdminDown")
	case err = <-served:
		err = fmt.Errorf("serve %s: %w", f.socket, err)
	}
	// The speaker first, so its last packets say AdminDown; Stop then
	// ends the attached agent's stream.
	_ = sp.Close()
	srv.Stop()
	return err
}

// listenUnix listens on path, replacing a socket file no process answers
// on (left by a daemon that died) but never one in use.
func listenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("--socket %s: %w", path, err)
	}
	if _, err := os.Stat(path); err == nil {
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			_ = c.Close()
			return nil, fmt.Errorf("--socket %s: another novaedge-bfdd is serving there", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("--socket %s: remove the stale socket: %w", path, err)
		}
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("--socket %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		_ = lis.Close()
		return nil, fmt.Errorf("--socket %s: %w", path, err)
	}
	return lis, nil
}

func main() {
	if err := newCommand(os.Stdout, os.Stderr).Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "novaedge-bfdd: "+strings.TrimSpace(err.Error()))
		os.Exit(1)
	}
}
