// Command novaedge-controller is the NovaEdge control plane: it watches the
// NovaEdge CRDs, Services, EndpointSlices, Secrets, Nodes and the agents'
// Leases, allocates VIP addresses from ProxyIPPools, decides which nodes
// serve each VIP, and streams per-node ConfigSnapshots to the agents over
// gRPC with mTLS. Run two replicas: one leads (decides and writes status),
// both serve agents.
package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/novaedge/novaedge/internal/termsig"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/novaedge/novaedge/controller"
)

// version is set at build time (-ldflags "-X main.version=...").
var version = "dev"

// flags are the controller's settings.
type flags struct {
	kubeconfig     string
	grpcAddr       string
	metricsAddr    string
	healthAddr     string
	leaderElect    bool
	namespace      string
	podName        string
	defaultLBClass bool
	maglevLineage  bool
	apiQPS         float32
	apiBurst       int
	logLevel       string
	logFormat      string
}

func newCommand(stdout, stderr io.Writer) *cobra.Command {
	var f flags
	cmd := &cobra.Command{
		Use:   "novaedge-controller",
		Short: "NovaEdge control plane",
		Long: `novaedge-controller is the NovaEdge control plane. It watches the NovaEdge
CRDs, Services of type LoadBalancer, EndpointSlices, Secrets, Nodes and the
agents' liveness Leases; allocates addresses from ProxyIPPools (ProxyVIPs with
poolRef, and Services of type LoadBalancer); chooses the nodes serving each VIP;
and streams a versioned ConfigSnapshot to every agent over gRPC with mTLS.

Run two replicas with --leader-elect: the leader decides (allocations,
assignments, status, Events); every replica builds snapshots from the
decisions the leader wrote and serves agents.

At first start it creates the mTLS Secrets novaedge-ca, novaedge-controller-tls
and novaedge-agent-tls in --namespace unless they exist (bring your own, e.g.
from cert-manager, with the same names and keys ca.crt, tls.crt, tls.key).`,
		Version:       version,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.check(); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), termsig.Shutdown...)
			defer stop()
			return f.run(ctx, stderr)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.kubeconfig, "kubeconfig", "", "path to a kubeconfig file; empty means $KUBECONFIG, else the in-cluster service account")
	fl.StringVar(&f.grpcAddr, "grpc-addr", ":9443", "address of the gRPC server the agents connect to for ConfigSnapshots (mTLS)")
	fl.StringVar(&f.metricsAddr, "metrics-addr", ":8080", "address of /metrics; \"0\" disables it")
	fl.StringVar(&f.healthAddr, "health-addr", ":8081", "address of /healthz and /readyz; \"0\" disables it")
	fl.BoolVar(&f.leaderElect, "leader-elect", true, "elect one deciding controller among replicas with the Lease novaedge-controller; only the leader allocates addresses, assigns VIPs and writes status")
	fl.StringVar(&f.namespace, "namespace", "", "namespace of the controller's Leases and mTLS Secrets, and of Secrets referenced without a namespace by cluster-scoped resources; empty: $POD_NAMESPACE, else novaedge-system")
	fl.StringVar(&f.podName, "pod-name", "", "this replica's name in logs; empty: $POD_NAME, else the host name")
	fl.BoolVar(&f.defaultLBClass, "default-lb-class", true, "also serve Services of type LoadBalancer without spec.loadBalancerClass (as MetalLB does); those with class novaedge.io/lb are served either way")
	fl.BoolVar(&f.maglevLineage, "maglev-lineage", true, "share Maglev tables between nodes: the leader persists the table of every cluster-wide fast-path entry with 64 or more live backends in a ConfigMap labelled novaedge.io/maglev-lineage in --namespace, and every node builds its next table from it, so a backend that leaves moves only its own flows; false: plain Maglev tables, no such ConfigMaps read or written")
	fl.Float32Var(&f.apiQPS, "kube-api-qps", 50, "requests per second to the API server (client-go's default of 5 makes status writes of large clusters take minutes)")
	fl.IntVar(&f.apiBurst, "kube-api-burst", 100, "burst of requests to the API server")
	fl.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fl.StringVar(&f.logFormat, "log-format", "text", "log format: text or json")
	cmd.SetOut(stdout)
	return cmd
}

// check validates flag values.
func (f *flags) check() error {
	if !slices.Contains([]string{"debug", "info", "warn", "error"}, strings.ToLower(f.logLevel)) {
		return fmt.Errorf("--log-level %q: must be debug, info, warn or error", f.logLevel)
	}
	if f.logFormat != "text" && f.logFormat != "json" {
		return fmt.Errorf("--log-format %q: must be text or json", f.logFormat)
	}
	if f.apiQPS <= 0 || f.apiBurst <= 0 {
		return errors.New("--kube-api-qps and --kube-api-burst: must be positive")
	}
	if f.grpcAddr == "" {
		return errors.New("--grpc-addr: must not be empty: agents connect there")
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

func (f *flags) restConfig() (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if f.kubeconfig != "" {
		rules.ExplicitPath = f.kubeconfig
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubernetes configuration (--kubeconfig, $KUBECONFIG or in-cluster): %w", err)
	}
	cfg.UserAgent = "novaedge-controller/" + version
	cfg.QPS, cfg.Burst = f.apiQPS, f.apiBurst
	return cfg, nil
}

func (f *flags) run(ctx context.Context, stderr io.Writer) error {
	log := f.logger(stderr)
	ns := firstOf(f.namespace, os.Getenv("POD_NAMESPACE"), "novaedge-system")
	id := firstOf(f.podName, os.Getenv("POD_NAME"))
	if id == "" {
		id, _ = os.Hostname()
	}
	cfg, err := f.restConfig()
	if err != nil {
		return err
	}
	log.Info("starting", "version", version, "namespace", ns, "replica", id, "leaderElect", f.leaderElect, "maglevLineage", f.maglevLineage)
	return controller.Serve(ctx, cfg, controller.ServeOptions{
		Options: controller.Options{
			Namespace: ns, Identity: id, LeaderElect: f.leaderElect,
			ServeClasslessServices: f.defaultLBClass,
			DisableMaglevLineage:   !f.maglevLineage,
			MetricsAddr:            f.metricsAddr, HealthAddr: f.healthAddr,
			Logger: log,
		},
		GRPCAddr: f.grpcAddr,
	})
}

func firstOf(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

// run executes the command with args and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	cmd := newCommand(stdout, stderr)
	cmd.SetArgs(args)
	cmd.SetErr(stderr)
	if err := cmd.Execute(); err != nil {
		_, _ = fmt.Fprintf(stderr, "novaedge-controller: %v\n", err)
		return 2
	}
	return 0
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}
