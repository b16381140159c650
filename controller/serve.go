package controller

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/novaedge/novaedge/controller/pki"
	"github.com/novaedge/novaedge/controller/stream"
)

// ServeOptions add the agents' gRPC endpoint to Options.
type ServeOptions struct {
	Options
	// GRPCAddr is where agents connect (mTLS), e.g. ":9443".
	GRPCAddr string
	// ServerNames are the DNS names of the server certificate the
	// controller creates when the mTLS Secrets do not exist yet.
	ServerNames []string
	// Listener, when set, is used instead of listening on GRPCAddr.
	Listener net.Listener
	// Started, when set, is called with the controller and its stream
	// server before they run.
	Started func(*Controller, *stream.Server)
	// Registerer takes the stream's metrics; nil: controller-runtime's
	// registry, served on MetricsAddr. Tests running two replicas in one
	// process give each its own.
	Registerer prometheus.Registerer
}

// Serve runs a whole controller replica until ctx ends: the mTLS material
// (created in the namespace's Secrets at first start), the snapshot stream
// server on GRPCAddr, and the controller feeding it.
func Serve(ctx context.Context, cfg *rest.Config, o ServeOptions) error {
	scheme, err := Scheme()
	if err != nil {
		return err
	}
	direct, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	names := o.ServerNames
	if len(names) == 0 {
		names = DefaultServerNames(o.Namespace)
	}
	bundle, err := pki.Ensure(ctx, secrets{direct}, o.Namespace, names)
	if err != nil {
		return fmt.Errorf("mTLS material: %w", err)
	}

	var c *Controller
	srv := stream.NewServer(stream.Options{
		Logger:     o.Logger,
		Registerer: cmp.Or[prometheus.Registerer](o.Registerer, crmetrics.Registry),
		Term: func() uint64 {
			if c == nil {
				return 0
			}
			return c.Term()
		},
		OnSubscribe: func(string) {
			if c != nil {
				c.Kick()
			}
		},
	})
	o.Publisher = srv
	o.Subscribed = func() []string {
		var nodes []string
		for _, a := range srv.Agents() {
			if a.Connected {
				nodes = append(nodes, a.Node)
			}
		}
		return nodes
	}
	c, err = New(cfg, o.Options)
	if err != nil {
		return err
	}

	lis := o.Listener
	if lis == nil {
		if lis, err = net.Listen("tcp", o.GRPCAddr); err != nil {
			return fmt.Errorf("listen on --grpc-addr %s: %w", o.GRPCAddr, err)
		}
	}
	g := grpc.NewServer(stream.GRPCServerOptions(pki.ServerTLSConfig(bundle))...)
	srv.Register(g)
	served := make(chan error, 1)
	go func() { served <- g.Serve(lis) }()
	c.log.Info("serving agents", "address", lis.Addr().String())

	if o.Started != nil {
		o.Started(c, srv)
	}
	runErr := c.Run(ctx)
	stopped := make(chan struct{})
	go func() { g.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		g.Stop()
	}
	if err := <-served; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		runErr = errors.Join(runErr, fmt.Errorf("grpc server: %w", err))
	}
	return runErr
}

// DefaultServerNames are the names agents reach the controller's Service
// by in namespace ns.
func DefaultServerNames(ns string) []string {
	return []string{
		"novaedge-controller",
		"novaedge-controller." + ns,
		"novaedge-controller." + ns + ".svc",
		"novaedge-controller." + ns + ".svc.cluster.local",
	}
}

// secrets gives pki.Ensure the Secrets of a controller-runtime client.
type secrets struct{ c client.Client }

func (s secrets) Get(ctx context.Context, namespace, name string) (*corev1.Secret, error) {
	var out corev1.Secret
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

func (s secrets) Create(ctx context.Context, secret *corev1.Secret) error {
	return s.c.Create(ctx, secret)
}
