package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/novaedge/novaedge/test/kubeenv"
)

// createNamespaces creates the namespaces names (the API server is fresh,
// so they are new).
func createNamespaces(ctx context.Context, env *kubeenv.Env, names ...string) error {
	for _, n := range names {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}
		if err := env.Client.Create(ctx, ns); err != nil {
			return fmt.Errorf("create namespace %s: %w", n, err)
		}
	}
	return nil
}

// createReadyNodes creates Nodes reporting Ready, as kubelets would (envtest
// runs none): the controller schedules VIPs onto Ready nodes only.
func createReadyNodes(ctx context.Context, env *kubeenv.Env, names ...string) error {
	for _, name := range names {
		n := readyNode(name)
		status := n.Status
		n.Status = corev1.NodeStatus{}
		if err := env.Client.Create(ctx, &n); err != nil {
			return fmt.Errorf("create node %s: %w", name, err)
		}
		now := metav1.Now()
		n.Status = status
		for i := range n.Status.Conditions {
			n.Status.Conditions[i].LastHeartbeatTime, n.Status.Conditions[i].LastTransitionTime = now, now
		}
		if err := env.Client.Status().Update(ctx, &n); err != nil {
			return fmt.Errorf("set node %s Ready: %w", name, err)
		}
	}
	return nil
}

// createAll creates objs with workers concurrent clients, stopping at the
// first error. An object that already exists counts as created, so an
// interrupted creation can be resumed.
func createAll(ctx context.Context, cl client.Client, objs []client.Object, workers int) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(objs) || ctx.Err() != nil {
					return
				}
				o := objs[i]
				if err := cl.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
					errOnce.Do(func() {
						firstErr = fmt.Errorf("create %T %s/%s: %w", o, o.GetNamespace(), o.GetName(), err)
						cancel()
					})
					return
				}
			}
		})
	}
	wg.Wait()
	return firstErr
}
