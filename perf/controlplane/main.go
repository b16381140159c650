package main

import (
	"context"
	"flag"
	"fmt"
	"github.com/novaedge/novaedge/internal/termsig"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/novaedge/novaedge/test/kubeenv"
)

func main() {
	out := flag.String("out", "perf/results", "directory for the report")
	bin := flag.String("controller", "bin/novaedge-controller", "novaedge-controller binary, for the memory measurement")
	parts := flag.String("parts", "build,propagation,routes,memory", "measurements to run, comma-separated")
	samples := flag.Int("samples", 40, "propagation samples per configuration (even: add, then remove)")
	spacing := flag.Duration("spacing", 300*time.Millisecond, "pause between propagation samples")
	sizes := flag.String("services", "1,100,1000", "Service counts of the propagation measurement")
	routes := flag.Int("routes", 10000, "ProxyRoutes of the build and memory measurements")
	addRoutes := flag.Int("add-routes", 3000, "ProxyRoutes in place when the route measurement adds one")
	backends := flag.Int("backends", 1000, "ProxyBackends of the build and memory measurements")
	gateways := flag.Int("gateways", 10, "ProxyGateways the routes attach to")
	builds := flag.Int("builds", 10, "single builds (and marshals) each median is taken over")
	nodes := flag.Int("nodes", 100, "nodes per round of the per-node builds")
	rounds := flag.Int("rounds", 1, "rounds of per-node builds")
	workers := flag.Int("workers", 8, "concurrent creates in the memory measurement")
	later := flag.Duration("later", 30*time.Second, "how long after the first loaded build memory is read again")
	flag.StringVar(&routeProfile, "route-profile", "", "write a CPU profile of this process (controllers and agents, not the API server) over the route measurement's samples to this file, the debounce appended to its name")
	verbose := flag.Bool("v", false, "log the in-process controller's and agents' debug messages")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("controlplane: ")
	if *samples < 2 || *samples%2 != 0 {
		log.Fatalf("-samples %d: must be even and at least 2 (pairs of add and remove)", *samples)
	}
	want := map[string]bool{}
	for _, p := range strings.Split(*parts, ",") {
		switch p = strings.TrimSpace(p); p {
		case "build", "propagation", "routes", "memory":
			want[p] = true
		default:
			log.Fatalf("-parts: unknown measurement %q (build, propagation, routes, memory)", p)
		}
	}
	var svcSizes []int
	for _, s := range strings.Split(*sizes, ",") {
		var n int
		if _, err := fmt.Sscan(strings.TrimSpace(s), &n); err != nil || n < 1 {
			log.Fatalf("-services %q: want positive counts separated by commas", *sizes)
		}
		svcSizes = append(svcSizes, n)
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	// controller-runtime logs a few things through its process-wide
	// logger (and complains with a stack trace when it is unset).
	crlog.SetLogger(logr.FromSlogHandler(logger.Handler()))

	ctx, cancel := signal.NotifyContext(context.Background(), termsig.Shutdown...)
	defer cancel()
	stamp := time.Now().UTC().Format("2006-01-02T150405Z")
	sc := scale{Namespace: "bench-scale", Routes: *routes, Backends: *backends, Gateways: *gateways}
	rep := &report{stamp: stamp, started: time.Now(), spacing: *spacing}

	// The pure build first, while no API server competes for the CPUs.
	if want["build"] {
		log.Printf("build: snapshot.Build of %d routes, %d backends", sc.Routes, sc.Backends)
		r, err := measureBuild(sc, *builds, *nodes, *rounds)
		if err != nil {
			log.Fatalf("build: %v", err)
		}
		rep.build = r
		log.Printf("build: %s per node (proto.Marshal %s), %d bytes; %d nodes %s", ms(r.Build), ms(r.Marshal), r.Size, r.Nodes, ms(r.PerNodes))
	}
	if want["propagation"] {
		if err := runPropagation(ctx, logger, rep, svcSizes, *samples, *spacing); err != nil {
			log.Fatalf("propagation: %v", err)
		}
	}
	if want["routes"] {
		if err := runRouteAdd(ctx, logger, rep, scale{Namespace: "bench-routes", Routes: *addRoutes, Backends: 10, Gateways: 1}, *samples, *spacing); err != nil {
			log.Fatalf("routes: %v", err)
		}
	}
	if want["memory"] {
		if err := runMemory(ctx, rep, *bin, sc, *workers, *later); err != nil {
			log.Fatalf("memory: %v", err)
		}
	}
	rep.took = time.Since(rep.started)

	if err := os.MkdirAll(*out, 0o755); err != nil {
		log.Fatal(err)
	}
	path := filepath.Join(*out, "controlplane-"+stamp+".md")
	if err := os.WriteFile(path, []byte(rep.markdown()), 0o644); err != nil {
		log.Fatal(err)
	}
	log.Printf("report: %s (the run took %s)", path, rep.took.Round(time.Second))
}

// runPropagation starts an API server of its own, grows the Services size
// by size and measures each size at the default debounce and at 10 ms.
func runPropagation(ctx context.Context, logger *slog.Logger, rep *report, sizes []int, samples int, spacing time.Duration) error {
	t := time.Now()
	return withAPIServer(func(env *kubeenv.Env) error {
		log.Printf("propagation: API server up in %s", time.Since(t).Round(time.Millisecond))
		return propagation(ctx, env, logger, rep, sizes, samples, spacing)
	})
}

// withAPIServer runs fn with an API server of its own.
func withAPIServer(fn func(*kubeenv.Env) error) (err error) {
	env, stop, err := kubeenv.Start()
	if err != nil {
		return err
	}
	defer func() {
		if e := stop(); e != nil && err == nil {
			err = fmt.Errorf("stop the API server: %w", e)
		}
	}()
	return fn(env)
}

func propagation(ctx context.Context, env *kubeenv.Env, logger *slog.Logger, rep *report, sizes []int, samples int, spacing time.Duration) error {
	// The baseline informer's watch must end before the API server stops:
	// it waits for open requests.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c, err := newPropCluster(ctx, env, logger)
	if err != nil {
		return err
	}
	for _, n := range slices.Sorted(slices.Values(sizes)) {
		t := time.Now()
		if err := c.grow(ctx, n); err != nil {
			return err
		}
		log.Printf("propagation: %d Services with their EndpointSlices (created in %s)", n, time.Since(t).Round(time.Millisecond))
		for _, d := range []time.Duration{100 * time.Millisecond, 10 * time.Millisecond} {
			r, err := c.measure(ctx, propConfig{Services: n, Debounce: d}, samples, spacing)
			if err != nil {
				return fmt.Errorf("%d Services, debounce %s: %w", n, d, err)
			}
			rep.prop = append(rep.prop, r)
			w, a := summarize(r.Watch), summarize(r.Acked)
			log.Printf("propagation: %d Services, debounce %s: ACK p50 %s p99 %s; watch p50 %s p99 %s; build run p50 %s (ready %s after start)",
				n, d, ms(a.P50), ms(a.P99), ms(w.P50), ms(w.P99), ms(median(r.Builds)), r.Ready.Round(time.Millisecond))
		}
	}
	return nil
}

// runRouteAdd starts an API server of its own, creates sc and measures
// adding a route at the default debounce and at 10 ms.
func runRouteAdd(ctx context.Context, logger *slog.Logger, rep *report, sc scale, samples int, spacing time.Duration) error {
	return withAPIServer(func(env *kubeenv.Env) error { return routeAdd(ctx, env, logger, rep, sc, samples, spacing) })
}

func routeAdd(ctx context.Context, env *kubeenv.Env, logger *slog.Logger, rep *report, sc scale, samples int, spacing time.Duration) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c, err := newPropCluster(ctx, env, logger)
	if err != nil {
		return err
	}
	t := time.Now()
	if err := c.createScale(ctx, sc); err != nil {
		return err
	}
	log.Printf("routes: %d ProxyRoutes created in %s", sc.Routes, time.Since(t).Round(time.Millisecond))
	for _, d := range []time.Duration{100 * time.Millisecond, 10 * time.Millisecond} {
		r, err := c.measureRouteAdd(ctx, sc, d, samples, spacing)
		if err != nil {
			return fmt.Errorf("%d routes, debounce %s: %w", sc.Routes, d, err)
		}
		rep.routes = append(rep.routes, r)
		w, a := summarize(r.Watch), summarize(r.Acked)
		log.Printf("routes: %d routes, debounce %s: ACK p50 %s p99 %s; watch p50 %s p99 %s; build run p50 %s, %d runs (ready %s, settled %s after start)",
			sc.Routes, d, ms(a.P50), ms(a.P99), ms(w.P50), ms(w.P99), ms(median(r.Builds)), len(r.Builds), r.Ready.Round(time.Millisecond), r.Settled.Round(time.Millisecond))
	}
	return nil
}

// runMemory starts an API server of its own and measures the controller
// binary's memory.
func runMemory(ctx context.Context, rep *report, bin string, sc scale, workers int, later time.Duration) error {
	return withAPIServer(func(env *kubeenv.Env) (err error) {
		rep.mem, err = measureMemory(ctx, env, bin, sc, workers, later, func(f string, a ...any) { log.Printf("memory: "+f, a...) })
		return err
	})
}

// report collects the results and renders them.
type report struct {
	stamp   string
	started time.Time
	spacing time.Duration
	took    time.Duration
	build   *buildResult
	prop    []*propResult
	routes  []*routeResult
	mem     *memResult
}

func (r *report) markdown() string {
	var b strings.Builder
	p := func(f string, a ...any) { fmt.Fprintf(&b, f, a...) }
	p("# Control plane, %s\n\n", r.stamp)
	p("Machine: %d CPUs (shared with other engineers' compiles and tests), %s/%s, %s. ", runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version())
	p("The Kubernetes API is a real kube-apiserver and etcd (envtest, test/kubeenv) on the same machine, competing for the same cores as the controller and agents; ")
	p("absolute figures drift between runs, the ratios against the baselines measured beside them are what to compare. The whole run took %s.\n\n", r.took.Round(time.Second))

	if len(r.prop) > 0 {
		p("## 1. Propagation: EndpointSlice update → every agent's ACK\n\n")
		p("One controller (controller.Serve in process, no leader election, as test/controlplane runs it) with 3 agents (agent.Agent + ControllerSource over gRPC with mTLS + an applier that records; Leases renewed), ")
		p("Services of type LoadBalancer with one EndpointSlice each, addresses from a ProxyIPPool, 3 Ready Nodes. Each sample updates one EndpointSlice: even samples add a fresh address, odd ones remove it again (%d samples per row, %s apart, Services chosen across the set).\n\n", r.prop[0].N(), r.spacing)
		p("- **t0** is taken just before the Update call to the API server.\n")
		p("- **ACK**: until the controller's stream server had received the ACK of every agent for the first snapshot holding the change: the version is the first one each agent's recording applier compiled with the change, and the time is the stream server's own AppliedAt of that ACK (Server.Agents(); when a later ACK had already replaced it, the time of the 1 ms poll that saw it — counted as *polled*).\n")
		p("- **applied**: until the last agent's applier switched to that snapshot (before the ACK is sent).\n")
		p("- **watch** (baseline): until a plain client-go informer on EndpointSlices in the same process received the update event with the update's resourceVersion: the API server's own propagation, the floor for any controller.\n")
		p("- *build run* is the controller's own \"snapshots built\" time of its publisher runs during the samples: list everything from the cache, build the 3 nodes' snapshots, publish (p50 over the runs; a run can also be triggered by other changes).\n")
		p("- p99 is nearest-rank: with fewer than 100 samples it is the largest sample.\n")
		p("- *ready* is from the controller's start until every agent ran a snapshot with every Service (cache sync, for the first row of a size also allocating the new Services' addresses and writing their status).\n\n")
		p("| Services | debounce | watch p50 | watch p99 | applied p50 | ACK p50 | ACK p99 | ACK/watch p50 | ACK/watch p99 | ACK − watch p50 | build run p50 | polled | ready |\n")
		p("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, x := range r.prop {
			w, a, ap := summarize(x.Watch), summarize(x.Acked), summarize(x.Applied)
			p("| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s (n=%d) | %d/%d | %s |\n", x.Services, x.Debounce, ms(w.P50), ms(w.P99), ms(ap.P50), ms(a.P50), ms(a.P99),
				ratio(a.P50, w.P50), ratio(a.P99, w.P99), ms(a.P50-w.P50), ms(median(x.Builds)), len(x.Builds), x.Polled, a.N, x.Ready.Round(100*time.Millisecond))
		}
		p("\nThe controller's default debounce is 100 ms (controller.Options.Debounce): a change waits that long for others to coalesce with before the snapshots are built, so at the default most of the time above the watch is the debounce itself; the 10 ms rows show the rest (list from the cache, build one snapshot per node, send, apply, ACK).\n\n")
	}

	if len(r.routes) > 0 {
		p("## 1b. A new ProxyRoute → every agent's ACK, with %d routes in place\n\n", r.routes[0].Routes)
		p("The same controller and three agents as section 1, over an API server holding one VIP, one gateway, 10 backends and %d HTTP ProxyRoutes (section 2's shape). Each sample creates one more ProxyRoute (even samples) or deletes it again (odd ones), %d samples per row, %s apart; t0 is taken just before the call. ", r.routes[0].Routes, r.routes[0].N(), r.spacing)
		p("**watch** (baseline) is until a watch of ProxyRoutes in the same process delivered the creation or deletion; **applied** and **ACK** as in section 1. The agents' appliers only record: the slow path's own compile, switch and first request with 3000 routes take 8-19 ms more (perf/routescale, in process).\n\n")
		p("Samples start once the leader has written the conditions of every route (**settled**, after the start): a leader that finds routes without them writes one after another, and each write is an event for both controllers.\n\n")
		p("| routes | debounce | watch p50 | watch p99 | applied p50 | ACK p50 | ACK p99 | ACK − watch p50 | build run p50 | polled | ready | settled |\n")
		p("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, x := range r.routes {
			w, a, ap := summarize(x.Watch), summarize(x.Acked), summarize(x.Applied)
			p("| %d | %s | %s | %s | %s | %s | %s | %s | %s (n=%d) | %d/%d | %s | %s |\n", x.Routes, x.Debounce, ms(w.P50), ms(w.P99), ms(ap.P50), ms(a.P50), ms(a.P99),
				ms(a.P50-w.P50), ms(median(x.Builds)), len(x.Builds), x.Polled, a.N, x.Ready.Round(100*time.Millisecond), x.Settled.Round(100*time.Millisecond))
		}
		p("\n")
	}

	if x := r.build; x != nil {
		p("## 2. Snapshot build, %d routes and %d backends\n\n", x.Scale.Routes, x.Scale.Backends)
		p("snapshot.Build on generated objects (no API server): %d HTTP ProxyRoutes of two matches each, %d ProxyBackends of two static endpoints, %d ProxyGateways with one HTTP listener on one Local VIP, built as the controller's publisher builds (ClusterComplete, the leader's decisions) for one node. ", x.Scale.Routes, x.Scale.Backends, x.Scale.Gateways)
		p("Medians of %d runs after a warm-up. Baseline: proto.Marshal of the same snapshot (what sending it costs at least).\n\n", x.Builds)
		rounds := "one round"
		if x.NodeRounds > 1 {
			rounds = fmt.Sprintf("median of %d rounds", x.NodeRounds)
		}
		p("| Build (1 node) | proto.Marshal | Build / Marshal | encoded size | heap allocated per Build | %d nodes, a Build each (%s) | per node | %d nodes, one BuildShared | per node |\n", x.Nodes, rounds, x.Nodes)
		p("|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		p("| %s | %s | %s | %s (%d bytes) | %s | %s | %s | %s | %s |\n\n", ms(x.Build), ms(x.Marshal), ratio(x.Build, x.Marshal), mib(int64(x.Size)), x.Size,
			mib(int64(x.AllocPerBuild)), ms(x.PerNodes), ms(x.PerNodes/time.Duration(x.Nodes)), ms(x.PerNodesShared), ms(x.PerNodesShared/time.Duration(x.Nodes)))
		p("Every one of the %d nodes announces the VIP here, so each has a node part of its own. The controller's publisher builds the cluster part once and each node's part on top of it (snapshot.BuildShared: nodes hosting endpoints of a Service with externalTrafficPolicy Local, whose cluster part differs, still get a Build each); a Build per node is what it did before 2026-11-29 (the controller's run also lists everything from its cache first, which neither includes).\n\n", x.Nodes)
	}

	if m := r.mem; m != nil {
		p("## 3. Controller memory, %d ProxyRoutes and %d ProxyBackends\n\n", m.Scale.Routes, m.Scale.Backends)
		p("The novaedge-controller binary as a separate process (--leader-elect=false, --log-level debug; 3 Ready Nodes, no agents connected, so it builds and keeps 3 snapshots per change). ")
		p("The same generated objects as section 2 (%d objects with the VIP and gateways) were created in the API server with %d concurrent clients while the process ran: **%s** (%.0f objects/s). ", m.Objects, m.Workers, m.Create.Round(time.Millisecond), float64(m.Objects)/m.Create.Seconds())
		p("Baseline: the same process before, with an empty cluster (after its first build and 5 s without another).\n\n")
		p("| state | VmRSS | VmHWM (peak) |\n|---|---:|---:|\n")
		p("| empty cluster (baseline) | %s | %s |\n", mib(m.Empty.RSS), mib(m.Empty.HWM))
		p("| loaded: first build started after the last create (it took %s) | %s | %s |\n", m.LoadedBuild.Round(time.Millisecond), mib(m.Loaded.RSS), mib(m.Loaded.HWM))
		p("| loaded, %s later | %s | %s |\n", m.LaterWait, mib(m.Later.RSS), mib(m.Later.HWM))
		p("| a fresh process with the objects in place, at its first build (%s after start) | %s | %s |\n\n", m.FreshReady.Round(time.Millisecond), mib(m.Fresh.RSS), mib(m.Fresh.HWM))
		per := float64(m.Loaded.RSS-m.Empty.RSS) / float64(m.Scale.Routes)
		perFresh := float64(m.Fresh.RSS-m.Empty.RSS) / float64(m.Scale.Routes)
		p("Difference over the empty cluster: %s (%.1f KiB per route, backends and gateways included) in the process that watched the creation; %s (%.1f KiB per route) in the fresh process. ",
			mib(m.Loaded.RSS-m.Empty.RSS), per/1024, mib(m.Fresh.RSS-m.Empty.RSS), perFresh/1024)
		p("The process that watched the creation rebuilt the snapshots %d times while the objects arrived.\n\n", m.Builds)
		rate := float64(m.Conditions) / (m.Create + m.Elapsed).Seconds()
		p("Status: %d of %d routes had an Accepted condition %s after the last create (%.1f condition writes/s since the first create). ", m.Conditions, m.Scale.Routes, m.Elapsed.Round(time.Second), rate)
		est := "an unknown time"
		if rate > 0 {
			est = (time.Duration(float64(m.Objects-1)/rate) * time.Second).Round(time.Second).String()
		}
		p("The leader patches each object's status on its own, one after the other, through the manager's client (the controller allows itself --kube-api-qps 50 by default): at this rate writing the conditions of all %d objects takes about %s, and each write is a watch event that triggers another debounced rebuild. The in-process controllers of section 1 use envtest's client config (1000 requests/s), as the e2e tests do.\n",
			m.Objects-1, est)
	}
	return b.String()
}
