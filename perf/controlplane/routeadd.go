package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/pprof"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/novaedge/novaedge/api/v1alpha1"
	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

// routeResult is one route-add measurement: ProxyRoutes created (even
// samples) and deleted again (odd ones) among Routes others; the baseline
// is a watch of ProxyRoutes in the same process.
type routeResult struct {
	Routes   int
	Debounce time.Duration
	// Settled is when, after the start, the leader had written the
	// conditions of every route (the samples begin then).
	Settled time.Duration
	timings
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
	defer func() { err = errors.Join(err, p.stop()) }()
	res := &routeResult{Routes: sc.Routes, Debounce: debounce}
	if err := c.waitReady(ctx, fmt.Sprintf("%d routes", sc.Routes), servedRoutes(sc), sc.Routes, p.agents, &p.srv); err != nil {
		return nil, err
	}
	res.Ready = time.Since(p.started)
	// A leader that finds routes without conditions writes them one after
	// another, each write an event both controllers see; samples taken
	// meanwhile would measure that start-up, not the steady state a new
	// route usually meets.
	if err := c.waitConditions(ctx, sc.Namespace, sc.Routes); err != nil {
		return nil, err
	}
	res.Settled = time.Since(p.started)
	firstBuild := p.builds.count()
	if routeProfile != "" {
		stop, err := startCPUProfile(fmt.Sprintf("%s.%s", routeProfile, debounce))
		if err != nil {
			return nil, err
		}
		defer stop()
	}
	_, _, _, routes := scale{Namespace: sc.Namespace, Routes: 1, Backends: 1, Gateways: 1}.objects()
	for k := range samples {
		name := fmt.Sprintf("added-%04d", k/2)
		snapKey := routeKey(sc, name)
		add := k%2 == 0
		for _, a := range p.agents {
			a.rec.arm(func(s *pb.ConfigSnapshot) bool { return hasRoute(s, snapKey) == add })
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
		event := "-" + name
		if add {
			event = "+" + name
		}
		tw, err := w.wait(ctx, event, fmt.Sprintf("event %q of ProxyRoute %s", event[:1], name))
		if err != nil {
			return nil, err
		}
		applied, acked, polled, err := waitAcked(ctx, p.srv.Load(), p.agents)
		if err != nil {
			return nil, fmt.Errorf("sample %d (%s ProxyRoute %s): %w", k, map[bool]string{true: "create", false: "delete"}[add], name, err)
		}
		res.add(t0, tw, applied, acked, polled)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(spacing):
		}
	}
	res.Builds = p.builds.since(firstBuild)
	return res, nil
}

// waitConditions waits until the n ProxyRoutes of ns all carry conditions
// for their generation.
func (c *propCluster) waitConditions(ctx context.Context, ns string, n int) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	for {
		var l v1alpha1.ProxyRouteList
		if err := c.env.Client.List(ctx, &l, client.InNamespace(ns)); err != nil {
			return fmt.Errorf("wait for the conditions of %d routes: %w", n, err)
		}
		done := 0
		for i := range l.Items {
			r := &l.Items[i]
			if r.Status.ObservedGeneration == r.Generation && meta.FindStatusCondition(r.Status.Conditions, v1alpha1.ConditionAccepted) != nil {
				done++
			}
		}
		if done >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for the conditions of %d routes: %d written: %w", n, done, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// routeWatch is the baseline of the route measurement: a watch of the
// namespace's ProxyRoutes, noting when each route's creation ("+name")
// and deletion ("-name") arrive.
type routeWatch struct{ events }

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
	w := &routeWatch{newEvents()}
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
				rt, isRoute := ev.Object.(*v1alpha1.ProxyRoute)
				switch {
				case !isRoute:
				case ev.Type == watch.Added:
					w.note("+" + rt.Name)
				case ev.Type == watch.Deleted:
					w.note("-" + rt.Name)
				}
			}
		}
	}()
	return w, nil
}

// routeProfile, when set, is where measureRouteAdd writes a CPU profile of
// this process (controllers, agents, clients; not the API server) over its
// samples, one file per debounce with the debounce appended.
var routeProfile string

// startCPUProfile profiles this process into path until the returned
// function is called.
func startCPUProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}, nil
}
