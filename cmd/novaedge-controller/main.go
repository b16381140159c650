// Command novaedge-controller is the NovaEdge control plane: it will watch
// the NovaEdge CRDs, Ingress, Gateway API, Services, EndpointSlices and
// Secrets, allocate VIP addresses, decide which nodes serve each VIP, and
// stream ConfigSnapshots to the agents.
//
// It is not implemented in this build: the command accepts the flags it will
// take and exits with status 1 saying so. Until it exists, run
// novaedge-agent --standalone with configuration files.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
)

// version is set at build time (-ldflags "-X main.version=...").
var version = "dev"

// notImplemented is printed when the controller is started.
const notImplemented = `novaedge-controller: the controller is not implemented in this build yet.
It will watch CRDs, Ingress, Gateway API objects, Services, EndpointSlices and
Secrets and stream ConfigSnapshots to the agents. Until then, run one agent per
node in standalone mode with configuration files:
  novaedge-agent --standalone --config <file-or-directory>
and check the files with:
  novaedgectl validate <file-or-directory>`

// flags are the controller's settings.
type flags struct {
	kubeconfig  string
	grpcAddr    string
	metricsAddr string
	leaderElect bool
	namespace   string
	logLevel    string
	logFormat   string
}

func newCommand(stderr io.Writer) *cobra.Command {
	var f flags
	cmd := &cobra.Command{
		Use:   "novaedge-controller",
		Short: "NovaEdge control plane (not implemented in this build)",
		Long: `novaedge-controller is the NovaEdge control plane. It will watch the NovaEdge
CRDs, Ingress, Gateway API objects, Services of type LoadBalancer,
EndpointSlices and Secrets, allocate VIP addresses from ProxyIPPools, decide
which nodes serve each VIP, and stream versioned ConfigSnapshots to the agents
over gRPC.

NOT IMPLEMENTED IN THIS BUILD: starting it prints a message and exits with
status 1. The flags below are the ones it will take. Until it exists, run
novaedge-agent --standalone on each node with configuration files.`,
		Version:       version,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(*cobra.Command, []string) error {
			if err := f.check(); err != nil {
				return err
			}
			_, _ = fmt.Fprintln(stderr, notImplemented)
			return errNotImplemented
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.kubeconfig, "kubeconfig", "", "path to a kubeconfig file; empty means the in-cluster service account (or $KUBECONFIG)")
	fl.StringVar(&f.grpcAddr, "grpc-addr", ":9443", "address of the gRPC server the agents connect to for ConfigSnapshots (mTLS)")
	fl.StringVar(&f.metricsAddr, "metrics-addr", ":8080", "address of the HTTP server for /metrics, /healthz and /readyz")
	fl.BoolVar(&f.leaderElect, "leader-elect", true, "elect one active controller among replicas with a Lease; only the leader allocates addresses and writes status")
	fl.StringVar(&f.namespace, "namespace", "novaedge-system", "namespace the controller runs in: its Lease, and Secrets referenced without a namespace by cluster-scoped resources")
	fl.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fl.StringVar(&f.logFormat, "log-format", "text", "log format: text or json")
	return cmd
}

// errNotImplemented ends every run; its message has been printed.
var errNotImplemented = errors.New("not implemented")

// check validates flag values, so a wrong value is reported even now.
func (f *flags) check() error {
	if !slices.Contains([]string{"debug", "info", "warn", "error"}, strings.ToLower(f.logLevel)) {
		return fmt.Errorf("--log-level %q: must be debug, info, warn or error", f.logLevel)
	}
	if f.logFormat != "text" && f.logFormat != "json" {
		return fmt.Errorf("--log-format %q: must be text or json", f.logFormat)
	}
	return nil
}

// run executes the command with args and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	cmd := newCommand(stderr)
	cmd.SetArgs(args)
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	err := cmd.Execute()
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errNotImplemented):
		return 1
	default:
		_, _ = fmt.Fprintf(stderr, "novaedge-controller: %v\n", err)
		return 2
	}
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}
