package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/novaedge/novaedge/api/v1alpha1"
	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

// routeResult is one route-add measurement: ProxyRoutes created (even
// samples) and deleted again (odd ones) among Routes others.
type routeResult struct {
	Routes   int
	Debounce time.Duration
	// Watch, Applied and Acked are measured from just before the create
	// or delete call: until a watch of ProxyRoutes in the same process
	// delivered its event (the baseline), until the last agent applied a
	// snapshot with (without) the route, and until the controller had
	// every agent's ACK of it.
	Watch, Applied, Acked []time.Duration
	Polled                int
	Builds                []time.Duration
	Ready                 time.Duration
}

// routeKey is the snapshot's name of route r of sc.
func routeKey(sc scale, name string) string { return sc.Namespace + "/" + name }

// hasRoute reports whether snap holds the route named key.
func hasRoute(snap *pb.ConfigSnapshot, key string) bool {
	return slices.ContainsFunc(snap.GetCluster().GetRoutes(), func(r *pb.Route) bool { return r.GetName() == key })
}

// servedRoutes counts the routes of sc's namespace in snap.
func servedRoutes(sc scale) func(*pb.ConfigSnapshot) int {
	return func(snap *pb.ConfigSnapshot) int {
		n := 0
		for _, r := range snap.GetCluster().GetRoutes() {
			if len(r.GetName()) > len(sc.Namespace) && r.GetName()[:len(sc.Namespace)+1] == sc.Namespace+"/" {
				n++
			}
		}
		return n
	}
}

// createScale creates sc's objects (the VIP, gateways, backends and
// routes of gen.go) in the API server.
func (c *propCluster) createScale(ctx context.Context, sc scale) error {
	if err := createNamespaces(ctx, c.env, sc.Namespace); err != nil {
		return err
	}
	return createAll(ctx, c.env.Client, sc.clientObjects(), 8)
}

// measureRouteAdd runs a controller and three agents over the API server
// holding sc and takes samples: even ones create one more ProxyRoute (a
// new hostname on the first gateway), odd ones delete it again.
func (c *propCluster) measureRouteAdd(ctx context.Context, sc scale, debounce time.Duration, samples int, spacing time.Duration) (_ *routeResult, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := watchRoutes(ctx, c, sc.Namespace)
	if err != nil {
		return nil, err
	}
	p, err := c.startPlane(ctx, debounce)
	if err != nil {
		return nil, err
	}
	defer func() { err = joinStop(err, p.stop()) }()
	res := &routeResult{Routes: sc.Routes, Debounce: debounce}
	if err := c.waitReady(ctx, fmt.Sprintf("%d routes", sc.Routes), servedRoutes(sc), sc.Routes, p.agents, &p.srv); err != nil {
		return nil, err
	}
	res.Ready = time.Since(p.started)
	firstBuild := p.builds.count()
	_, _, _, routes := scale{Namespace: sc.Namespace, Routes: 1, Backends: 1, Gateways: 1}.objects()
	for k := range samples {
		name := fmt.Sprintf("added-%04d", k/2)
		key := routeKey(sc, name)
		add := k%2 == 0
		for _, a := range p.agents {
			a.rec.arm(func(s *pb.ConfigSnapshot) bool { return hasRoute(s, key) == add })
		}
		rt := routes[0].DeepCopy()
		rt.Name = name
		rt.Spec.Hostnames = []string{name + ".bench.example.test"}
		t0 := time.Now()
		if add {
			err = c.env.Client.Create(ctx, rt)
		} else {
			err = c.env.Client.Delete(ctx, rt)
		}
		if err != nil {
			return nil, fmt.Errorf("sample %d: %w", k, err)
		}
		tw, err := w.wait(ctx, name, add)
		if err != nil {
			return nil, err
		}
		applied, acked, polled, err := waitAcked(ctx, p.srv.Load(), p.agents)
		if err != nil {
			return nil, fmt.Errorf("sample %d (%s ProxyRoute %s): %w", k, map[bool]string{true: "create", false: "delete"}[add], name, err)
		}
		res.Watch = append(res.Watch, tw.Sub(t0))
		res.Applied = append(res.Applied, applied.Sub(t0))
		res.Acked = append(res.Acked, acked.Sub(t0))
		if polled {
			res.Polled++
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(spacing):
		}
	}
	res.Builds = p.builds.since(firstBuild)
	return res, nil
}

// routeWatch is the baseline of the route measurement: a watch of the
// namespace's ProxyRoutes, noting when each route's creation and deletion
// arrive.
type routeWatch struct {
	mu      sync.Mutex
	seen    map[string]time.Time // "+name" created, "-name" deleted
	changed chan struct{}        // closed and replaced on every event
}

func watchRoutes(ctx context.Context, c *propCluster, ns string) (*routeWatch, error) {
	cl, err := client.NewWithWatch(c.env.Config, client.Options{Scheme: c.env.Scheme})
	if err != nil {
		return nil, fmt.Errorf("baseline watch client: %w", err)
	}
	var list v1alpha1.ProxyRouteList
	if err := cl.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return nil, fmt.Errorf("list ProxyRoutes: %w", err)
	}
	wi, err := cl.Watch(ctx, &v1alpha1.ProxyRouteList{}, client.InNamespace(ns), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
	if err != nil {
		return nil, fmt.Errorf("watch ProxyRoutes: %w", err)
	}
	w := &routeWatch{seen: map[string]time.Time{}, changed: make(chan struct{})}
	go func() {
		defer wi.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-wi.ResultChan():
				if !ok {
					return
				}
				now := time.Now()
				rt, isRoute := ev.Object.(*v1alpha1.ProxyRoute)
				if !isRoute || (ev.Type != watch.Added && ev.Type != watch.Deleted) {
					continue
				}
				sign := "+"
				if ev.Type == watch.Deleted {
					sign = "-"
				}
				w.mu.Lock()
				w.seen[sign+rt.Name] = now
				close(w.changed)
				w.changed = make(chan struct{})
				w.mu.Unlock()
			}
		}
	}()
	return w, nil
}

// wait returns when the creation (added) or deletion of route name
// arrived.
func (w *routeWatch) wait(ctx context.Context, name string, added bool) (time.Time, error) {
	key := "-" + name
	if added {
		key = "+" + name
	}
	timeout := time.After(time.Minute)
	for {
		w.mu.Lock()
		at, ok := w.seen[key]
		ch := w.changed
		w.mu.Unlock()
		if ok {
			return at, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-timeout:
			return time.Time{}, fmt.Errorf("the baseline watch saw no event %q of ProxyRoute %s within a minute", key[:1], name)
		}
	}
}
