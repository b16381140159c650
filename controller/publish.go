package controller

import (
	"context"
	"slices"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/novaedge/novaedge/snapshot"
)

// publisher builds every node's snapshot from the cache and the persisted
// decisions and hands it to the Publisher. It runs on every replica.
type publisher struct {
	c          *Controller
	gatewayAPI bool
}

func (p *publisher) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	start := time.Now()
	w, err := gather(ctx, p.c.mgr.GetCache(), p.c.opts.Namespace, p.gatewayAPI, !p.c.opts.ServeClasslessServices)
	if err != nil {
		return reconcile.Result{}, err
	}
	labels := map[string]map[string]string{}
	var nodes []string
	for i := range w.in.Nodes {
		n := &w.in.Nodes[i]
		labels[n.Name] = n.Labels
		nodes = append(nodes, n.Name)
	}
	if p.c.opts.Subscribed != nil {
		nodes = append(nodes, p.c.opts.Subscribed()...)
	}
	slices.Sort(nodes)
	nodes = slices.Compact(nodes)
	for _, node := range nodes {
		snap, _ := snapshot.Build(w.in, p.c.buildOptions(node, labels[node]))
		if p.c.opts.Publisher != nil {
			p.c.opts.Publisher.Publish(node, snap)
		}
	}
	p.c.metrics.observeBuild(len(nodes), time.Since(start))
	p.c.log.Debug("snapshots built", "nodes", len(nodes), "took", time.Since(start))
	return reconcile.Result{}, nil
}

// buildOptions are the options of every build of this controller.
func (c *Controller) buildOptions(node string, labels map[string]string) snapshot.Options {
	return snapshot.Options{
		Node:                  snapshot.Node{Name: node, Labels: labels},
		ClusterComplete:       true,
		SkipClasslessServices: !c.opts.ServeClasslessServices,
	}
}
