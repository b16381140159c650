// Command novaedge-agent is NovaEdge's per-node agent. It follows the
// controller's snapshot stream (--controller), or in standalone mode
// (--standalone) reads configuration files; see package agent for the
// pipeline.
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
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/novaedge/novaedge/agent"
	"github.com/novaedge/novaedge/agent/lease"
	"github.com/novaedge/novaedge/cli"
	"github.com/novaedge/novaedge/controller/pki"
	"github.com/novaedge/novaedge/deploy/examples"
	"github.com/novaedge/novaedge/fastpath"
	"github.com/novaedge/novaedge/fastpath/attach"
	"github.com/novaedge/novaedge/fastpath/datapath"
	"github.com/novaedge/novaedge/internal/gctune"
	"github.com/novaedge/novaedge/kernel"
	"github.com/novaedge/novaedge/slowpath"
	"github.com/novaedge/novaedge/slowpath/sockets"
	"github.com/novaedge/novaedge/snapshot"
	"github.com/novaedge/novaedge/vip/frr"
	"github.com/novaedge/novaedge/vip/local"
	"github.com/novaedge/novaedge/vip/manager"
)

// version is set at build time (-ldflags "-X main.version=...").
var version = "dev"

// flags are the agent's settings.
type flags struct {
	standalone    bool
	controller    string
	controllerTLS string
	nodeLease     bool
	rawPath       bool
	leaseDuration time.Duration
	leaseNS       string
	kubeconfig    string
	serverName    string
	configs       []string
	nodeName      string
	nodeLabels    map[string]string
	adminSocket   string
	metricsAddr   string
	stateDir      string
	logLevel      string
	logFormat     string
	dryRun        bool
	watch         bool
	bindLocalVIPs bool
	handoffSocket string
	pprof         bool
	gcHeadroom    uint64
	fastpath      string
	interfaces    []string
	xdpMode       string
	bpfRoot       string
	natPorts      string
	lineage       bool
	routerID      string
	l2LeaseTTL    time.Duration
	l2Grace       time.Duration
	bgpListenPort int32
	frrVtyDir     string
	frrVtysh      string
	ospfUplinks   []string
	bfdSocket     string
	hbPort        uint16
}

// errFailed ends a run whose problem has been reported.
var errFailed = errors.New("failed")

// usageErr marks a wrong flag value (exit status 2).
type usageErr struct{ error }

func newCommand(stdout, stderr io.Writer) *cobra.Command {
	f := flags{}
	cmd := &cobra.Command{
		Use:   "novaedge-agent",
		Short: "NovaEdge node agent: VIPs, the XDP fast path and the L7 slow path on this node",
		Long: `novaedge-agent runs on every node. It receives configuration snapshots, checks
and compiles them, and switches the node's data planes to them as a whole:
Local VIP addresses, the XDP fast path (L4 balancing in the kernel) and the Go
proxy (HTTP, HTTPS, HTTP/3, and TCP, UDP and TLS listeners), and VIP
announcement: L2ARP (ARP/NDP), BGP with BFD (embedded, or in the node's
long-lived novaedge-bfdd with --bfd-socket) and OSPF through FRR.

Controller mode (--controller host:port) follows the NovaEdge controller: the
agent subscribes for its node over gRPC with mutual TLS (ca.crt, tls.crt and
tls.key in --controller-tls-dir, the mounted novaedge-agent-tls Secret),
applies each snapshot the controller sends and answers it: ACK when it serves
it, NACK with the errors when it rejects it (a snapshot with errors, or one a
data plane cannot compile), in which case the last good one keeps serving. The
agent reconnects by itself with backoff; when the controller is unreachable at
start, it serves the last good snapshot kept in --state-dir for the same
controller and node.

Standalone mode (--standalone) needs no Kubernetes: the agent reads YAML files
of the NovaEdge kinds (--config, a file or a directory of *.yaml/*.yml; without
--config the embedded example deploy/examples/standalone.yaml), builds the
snapshot itself, and re-reads the files when they change, on SIGHUP, and on
"novaedgectl reload". A configuration with errors is rejected as a whole and
the last good one keeps serving; "novaedgectl errors" says why. At start, a
configuration with errors is replaced by the last good one kept in
--state-dir for the same files and node; without one, the resources without
errors are served.

The XDP fast path (--fastpath) balances the plan's FAST TCP and UDP entries
in the kernel on the --interface interfaces; its programs, maps and links are
pinned under --bpf-root and adopted by the next agent, so flows keep their
backends across restarts and upgrades.

On SIGTERM or SIGINT the agent stops its servers and exits, leaving VIP
addresses and the XDP program in place so a restart does not drop traffic
(BGP sessions close without a notification, so routers keep the node's
routes through graceful restart until the next agent refreshes them);
"novaedgectl fastpath uninstall" removes the fast path.`,
		Example: `  novaedge-agent --controller novaedge-controller.novaedge-system.svc:9443 --node-name "$NODE_NAME"
  novaedge-agent --standalone
  novaedge-agent --standalone --config /etc/novaedge/ --node-name edge-1
  novaedge-agent --standalone --config config.yaml --dry-run`,
		Version:       version,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return f.run(cmd.Context(), stdout, stderr)
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&f.standalone, "standalone", false, "read configuration from --config files instead of a controller; exclusive with --controller")
	fl.StringVar(&f.controller, "controller", "", "host:port of the controller's gRPC stream (e.g. novaedge-controller.novaedge-system.svc:9443) to follow; exclusive with --standalone")
	fl.StringVar(&f.controllerTLS, "controller-tls-dir", "/etc/novaedge/tls", "directory with ca.crt (the CA of the controller's certificate), tls.crt and tls.key (the agent's client certificate) for --controller")
	fl.StringVar(&f.serverName, "controller-server-name", "", "name the controller's certificate must carry; empty: the host part of --controller")
	fl.BoolVar(&f.nodeLease, "node-lease", true, "with --controller: renew the Lease novaedge-agent-<node> that tells the controller this agent is alive (without it the node never serves VIPs)")
	fl.DurationVar(&f.leaseDuration, "node-lease-duration", lease.DefaultDuration, "with --controller: how long one renewal of the agent's Lease keeps this node alive to the controller (renewed every third of it; whole seconds): a dead agent's VIPs move this much after its last renewal")
	fl.StringVar(&f.leaseNS, "lease-namespace", "", "namespace of the agent's Lease; empty: $POD_NAMESPACE, else novaedge-system")
	fl.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig for the Lease; empty: $KUBECONFIG, else the pod's service account")
	fl.StringArrayVar(&f.configs, "config", nil, "configuration file or directory (its *.yaml and *.yml files); repeatable; empty: the embedded example deploy/examples/standalone.yaml")
	fl.StringVar(&f.nodeName, "node-name", "", "this node's name: VIP assignment and status use it; empty: $NODE_NAME, else the host name")
	fl.StringToStringVar(&f.nodeLabels, "node-labels", nil, "this node's labels as key=value,...; standalone ProxyVIP nodeSelectors match them")
	fl.StringVar(&f.adminSocket, "admin-socket", agent.DefaultAdminSocket, "Unix socket of the admin API (novaedgectl --socket); root only; empty: no admin API")
	fl.StringVar(&f.metricsAddr, "metrics-addr", ":9090", "TCP address of /healthz, /readyz and /metrics; empty: none")
	fl.StringVar(&f.stateDir, "state-dir", "/var/lib/novaedge", "directory for state kept across restarts: the last good snapshot, the Local VIP addresses the agent bound and the HTTP/3 keys")
	fl.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fl.StringVar(&f.logFormat, "log-format", "text", "log format: text or json (one object per line)")
	fl.BoolVar(&f.dryRun, "dry-run", false, "load and check the configuration, print its problems and the fast/slow path plan, and exit (1 if it has errors); changes nothing")
	fl.BoolVar(&f.watch, "watch", true, "re-read the configuration files when they change (SIGHUP and novaedgectl reload work either way)")
	fl.StringVar(&f.handoffSocket, "handoff-socket", "/run/novaedge/handoff.sock", "Unix socket for restarts without a refused connection: a starting agent takes the listening sockets of the running one here, and the running one then drains and exits; empty: no handoff")
	fl.Uint64Var(&f.gcHeadroom, "gc-headroom-mib", 16, "let the heap grow at least this many MiB between garbage collections (GOGC up to 400 while the live heap is small; 100 once it is this large). 0, or GOGC in the environment, leaves the Go default")
	fl.BoolVar(&f.rawPath, "http-raw-path", true, "serve common HTTP/1.x and HTTP/2 requests (routes without filters, plain HTTP/1.1 backends) from their header fields as read, without header maps; false serves every request the general way")
	fl.BoolVar(&f.pprof, "pprof", false, "serve Go profiles under /debug/pprof/ on --metrics-addr (for performance investigations; do not expose)")
	fl.StringVar(&f.fastpath, "fastpath", "auto", "the XDP fast path: on (fail when it cannot run), auto (run it when the kernel can, else warn and serve everything from the slow path) or off")
	fl.StringArrayVar(&f.interfaces, "interface", nil, "interface to attach the XDP fast path to; repeatable; VLAN and bond devices resolve to their parent and slaves; empty: the interface of the default route")
	fl.StringVar(&f.xdpMode, "xdp-mode", "auto", "XDP attach mode: auto (native, falling back to generic), native or generic")
	fl.StringVar(&f.bpfRoot, "bpf-root", fastpath.DefaultPinRoot, "where the fast path's programs, maps and links are pinned (on a bpffs); they stay there across agent restarts")
	fl.StringVar(&f.natPorts, "nat-port-range", fmt.Sprintf("%d-%d", fastpath.DefaultNATPortMin, fastpath.DefaultNATPortMax), "source ports for the fast path's SNAT, reserved from the host's ephemeral ports (net.ipv4.ip_local_reserved_ports)")
	fl.BoolVar(&f.lineage, "maglev-lineage", false, "build each Maglev table from the installed one (removing 1 of N backends remaps only its 1/N of flows); tables then depend on this node's history, so leave it off when several nodes share a VIP through ECMP; a lineage in the controller's snapshot takes precedence")
	fl.BoolVar(&f.bindLocalVIPs, "bind-local-vips", true, "bind the addresses of Local-mode VIPs, and of the BGP-mode VIPs this node announces, on the host's lo (needs root), so the kernel delivers their traffic to the listeners; false: listeners rely on IP_FREEBIND only, and routed BGP VIP traffic reaches only the XDP fast path")
	fl.StringVar(&f.routerID, "router-id", "", "this node's BGP and OSPF router ID (an IPv4 address unique among the routers' peers); empty: for BGP the source address of the route towards the first IPv4 BGP peer, for OSPF that one too when BGP runs, else the first IPv4 address of the first OSPF uplink")
	fl.DurationVar(&f.l2Grace, "l2-failover-grace", 0, "how long a standby that took an L2 VIP over (heartbeats from the active lost) keeps it while its assignment still names the old active; 0: 15s with --controller (the controller then confirms or overrides the takeover), for good in standalone mode (nothing else can)")
	fl.DurationVar(&f.l2LeaseTTL, "l2-lease-ttl", manager.DefaultL2LeaseTTL, "how long the node answers ARP/NDP for its L2ARP VIPs after the agent last renewed its lease (renewed every third of it): a hung agent stops answering after this")
	fl.Int32Var(&f.bgpListenPort, "bgp-listen-port", 0, "TCP port on which the BGP speaker accepts sessions; 0: none, the node opens every session itself and port 179 stays free")
	fl.StringVar(&f.frrVtyDir, "frr-vty-dir", frr.DefaultSocketDir, "directory of FRR's vty sockets (vtysh --vty_socket): OSPF VIPs are announced by driving FRR's ospfd (and bfdd for BFD) there")
	fl.StringVar(&f.frrVtysh, "frr-vtysh", "vtysh", "FRR's vtysh program (a name is looked up in $PATH), through which OSPF VIPs are configured")
	fl.Uint16Var(&f.hbPort, "l2-heartbeat-port", manager.DefaultHeartbeatPort, "UDP port of the L2 heartbeats between agents (BFD control packets, kept off BFD's own ports so they never meet the node's BFD speaker for the routers); the same on every node")
	fl.StringVar(&f.bfdSocket, "bfd-socket", "", "Unix socket of the node's novaedge-bfdd: BFD sessions run there and the BGP peers' outlive agent restarts (the routers keep the node's paths through graceful restart); empty: an embedded BFD speaker, whose sessions end with the agent")
	fl.StringSliceVar(&f.ospfUplinks, "ospf-uplinks", nil, "interfaces facing the OSPF routers, for OSPF VIPs that name none (comma-separated or repeated); empty: the interface of the default route")
	return cmd
}

func (f *flags) check() error {
	if !slices.Contains([]string{"debug", "info", "warn", "error"}, strings.ToLower(f.logLevel)) {
		return usageErr{fmt.Errorf("--log-level %q: must be debug, info, warn or error", f.logLevel)}
	}
	if f.logFormat != "text" && f.logFormat != "json" {
		return usageErr{fmt.Errorf("--log-format %q: must be text or json", f.logFormat)}
	}
	switch {
	case f.standalone && f.controller != "":
		return usageErr{errors.New("--standalone and --controller are exclusive: read configuration files or follow a controller")}
	case !f.standalone && f.controller == "":
		return usageErr{errors.New("one of --standalone (configuration files) or --controller host:port (follow a controller) is required")}
	case f.controller != "":
		if _, _, err := net.SplitHostPort(f.controller); err != nil {
			return usageErr{fmt.Errorf("--controller %q: want host:port: %w", f.controller, err)}
		}
		if len(f.configs) > 0 {
			return usageErr{errors.New("--config is for --standalone; with --controller the configuration comes from the controller")}
		}
		if f.dryRun {
			return usageErr{errors.New("--dry-run checks --standalone configuration files; it does not apply to --controller")}
		}
	}
	if !slices.Contains([]string{"on", "auto", "off"}, f.fastpath) {
		return usageErr{fmt.Errorf("--fastpath %q: must be on, auto or off", f.fastpath)}
	}
	if _, err := attach.ParseMode(f.xdpMode); err != nil {
		return usageErr{fmt.Errorf("--xdp-mode: %w", err)}
	}
	if _, _, err := parsePortRange(f.natPorts); err != nil {
		return usageErr{fmt.Errorf("--nat-port-range: %w", err)}
	}
	if f.routerID != "" {
		if a, err := netip.ParseAddr(f.routerID); err != nil || !a.Unmap().Is4() {
			return usageErr{fmt.Errorf("--router-id %q: must be an IPv4 address", f.routerID)}
		}
	}
	if f.l2Grace < 0 {
		return usageErr{fmt.Errorf("--l2-failover-grace %v: must not be negative", f.l2Grace)}
	}
	if f.l2LeaseTTL <= 0 {
		return usageErr{fmt.Errorf("--l2-lease-ttl %v: must be positive", f.l2LeaseTTL)}
	}
	if f.bgpListenPort < 0 || f.bgpListenPort > 65535 {
		return usageErr{fmt.Errorf("--bgp-listen-port %d: must be 0-65535", f.bgpListenPort)}
	}
	if f.leaseDuration < 3*time.Second || f.leaseDuration%time.Second != 0 {
		return usageErr{fmt.Errorf("--node-lease-duration %v: must be whole seconds, at least 3s", f.leaseDuration)}
	}
	if f.hbPort == 0 {
		return usageErr{errors.New("--l2-heartbeat-port 0: must be 1-65535")}
	}
	if f.frrVtyDir == "" {
		return usageErr{errors.New("--frr-vty-dir: must not be empty")}
	}
	if f.frrVtysh == "" {
		return usageErr{errors.New("--frr-vtysh: must not be empty")}
	}
	for _, u := range f.ospfUplinks {
		if u == "" || len(u) > 15 || strings.ContainsAny(u, "/: \t\n") {
			return usageErr{fmt.Errorf("--ospf-uplinks %q: not an interface name", u)}
		}
	}
	return nil
}

// vipManager builds the VIP announcement applier (L2ARP, BGP, BFD, OSPF). It
// opens nothing until a snapshot assigns this node a VIP in those modes.
func (f *flags) vipManager(log *slog.Logger, reg prometheus.Registerer) (*manager.Manager, error) {
	var id netip.Addr
	if f.routerID != "" {
		id, _ = netip.ParseAddr(f.routerID) // checked by check
	}
	return manager.New(manager.Options{
		Logger:           log.With("component", "vip"),
		RouterID:         id,
		L2LeaseTTL:       f.l2LeaseTTL,
		L2FailoverGrace:  f.l2FailoverGrace(),
		BGPListenPort:    f.bgpListenPort,
		StateDir:         f.stateDir,
		FRRSocketDir:     f.frrVtyDir,
		FRRVtysh:         f.frrVtysh,
		OSPFUplinks:      f.ospfUplinks,
		BFDSocket:        f.bfdSocket,
		BindBGPAddresses: f.bindLocalVIPs,
		HeartbeatPort:    f.hbPort,
		BFDClient:        fmt.Sprintf("novaedge-agent pid %d", os.Getpid()),
		Registry:         reg,
	})
}

// l2FailoverGrace is --l2-failover-grace with its mode-dependent default:
// without a controller no later assignment can confirm a takeover, so a
// standby that took over keeps the VIP until the active's heartbeats return.
func (f *flags) l2FailoverGrace() time.Duration {
	switch {
	case f.l2Grace != 0:
		return f.l2Grace
	case f.controller == "":
		return -1
	}
	return 0 // the manager's default
}

// parsePortRange parses "lo-hi" (inclusive, 1 ≤ lo ≤ hi ≤ 65535).
func parsePortRange(s string) (uint16, uint16, error) {
	a, b, ok := strings.Cut(s, "-")
	if !ok {
		return 0, 0, fmt.Errorf("%q: want LOW-HIGH, e.g. 61000-65000", s)
	}
	lo, err1 := strconv.ParseUint(a, 10, 16)
	hi, err2 := strconv.ParseUint(b, 10, 16)
	if err1 != nil || err2 != nil || lo == 0 || lo > hi {
		return 0, 0, fmt.Errorf("%q: want LOW-HIGH with 1 <= LOW <= HIGH <= 65535", s)
	}
	return uint16(lo), uint16(hi), nil
}

// startFastpath runs the XDP fast path as --fastpath says. With auto, a
// host that cannot run it is reported and the agent goes on without it.
func (f *flags) startFastpath(log *slog.Logger) (*datapath.Datapath, error) {
	if f.fastpath == "off" {
		return nil, nil
	}
	mode, _ := attach.ParseMode(f.xdpMode) // checked by check
	lo, hi, _ := parsePortRange(f.natPorts)
	dp, err := datapath.Start(datapath.Options{
		Interfaces:   f.interfaces,
		Mode:         mode,
		PinRoot:      f.bpfRoot,
		Node:         fastpath.Node{NATPortMin: lo, NATPortMax: hi},
		Lineage:      f.lineage,
		ReservePorts: true,
		Logger:       log.With("component", "fastpath"),
	})
	if err != nil {
		if f.fastpath == "on" {
			return nil, fmt.Errorf("fast path: %w", err)
		}
		log.Warn("the XDP fast path cannot run here; the slow path serves every listener (--fastpath=on makes this fatal)", "error", err)
		return nil, nil
	}
	return dp, nil
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

func (f *flags) node() (snapshot.Node, error) {
	name := f.nodeName
	if name == "" {
		name = os.Getenv("NODE_NAME")
	}
	if name == "" {
		h, err := os.Hostname()
		if err != nil {
			return snapshot.Node{}, fmt.Errorf("node name: %w (set --node-name)", err)
		}
		name = h
	}
	return snapshot.Node{Name: name, Labels: f.nodeLabels}, nil
}

func (f *flags) run(ctx context.Context, stdout, stderr io.Writer) error {
	if err := f.check(); err != nil {
		return err
	}
	if !f.pprof {
		// Memory setting: heap profiles are only served with --pprof.
		// Without it, sampling allocations is pure cost: loading 5000
		// routes allocates close to a gigabyte in all, and each sample (one
		// per 512 kB) unwinds the stack and records it in the profiler's
		// hash table and buckets, which stay resident for the process's
		// life: 1.5 MB of the agent's resident memory with 5000 routes.
		// Set before the agent starts its goroutines.
		runtime.MemProfileRate = 0
	}
	go gctune.Run(ctx, gctune.Options{Headroom: f.gcHeadroom << 20})
	node, err := f.node()
	if err != nil {
		return err
	}
	files := &agent.FileSource{Paths: f.configs, DefaultName: examples.StandaloneName, Default: examples.Standalone, Node: node}
	if f.dryRun {
		return dryRun(stdout, files)
	}
	log := f.logger(stderr)
	var src agent.Source = files
	var leaseRenewer *lease.Renewer
	var theAgent atomic.Pointer[agent.Agent]
	var theProxy atomic.Pointer[slowpath.Proxy]
	// Standalone, the agent's own health checks decide endpoint health
	// (with a controller, the controller decides from every node's).
	files.ProbeFailures = func() []string {
		if p := theProxy.Load(); p != nil {
			return p.ProbeFailures()
		}
		return nil
	}
	if !f.watch {
		files.HoldFiles = true
		src = noWatch{files}
	}
	if f.controller != "" {
		cs, err := f.controllerSource(node.Name, log)
		if err != nil {
			return err
		}
		defer cs.Close()
		src = cs
		if f.nodeLease {
			renewer, err := f.leaseRenewer(node.Name, log, func() lease.Report {
				a := theAgent.Load()
				if a == nil {
					return lease.Report{Reason: "starting"}
				}
				rep := a.LeaseReport()
				if p := theProxy.Load(); p != nil {
					rep.ProbeFailures = p.ProbeFailures()
				}
				return rep
			})
			if err != nil {
				return err
			}
			leaseRenewer = renewer
		}
	}
	features := kernel.Run(kernel.Probes())
	for _, ft := range kernel.Missing(features) {
		log.Warn("kernel feature missing", "feature", ft.Name, "detail", ft.Detail)
	}

	opts := agent.Options{
		Source: src,
		// Files: a bad edit never takes a resource away. Controller:
		// snapshots are decided on; only a compile error is refused.
		StrictReload: f.controller == "",
		StateDir:     f.stateDir,
		NodeName:     node.Name,
		Version:      version,
		Features:     features,
		Logger:       log,
		Pprof:        f.pprof,
	}
	if f.bindLocalVIPs {
		m, err := local.New(local.Options{StateFile: filepath.Join(f.stateDir, "local-vips.json"), Logger: log})
		if err != nil {
			return err
		}
		vips := &agent.LocalVIPs{Binder: m}
		opts.Appliers = append(opts.Appliers, vips)
		opts.BoundAddresses = vips.BoundAddresses
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	opts.Registry = reg
	dp, err := f.startFastpath(log)
	if err != nil {
		return err
	}
	if dp != nil {
		// Closing leaves the program attached: traffic flows on while
		// the agent restarts.
		defer func() { _ = dp.Close() }()
		reg.MustRegister(dp.Collector())
		opts.Appliers = append(opts.Appliers, dp)
	}
	// The slow path also listens on the fast plan's TCP and UDP entries:
	// XDP takes their packets arriving on the attached interfaces, and
	// the listeners serve what XDP never sees (clients on this host, and
	// every client when the fast path cannot run).
	proxy := slowpath.New(slowpath.Options{Logger: log.With("component", "slowpath"), Registry: reg, ServeFastPlan: true, QUICKeys: f.quicKeys(log), NoRawPath: !f.rawPath})
	theProxy.Store(proxy)
	defer proxy.Close()
	opts.Appliers = append(opts.Appliers, proxy)
	vips, err := f.vipManager(log, reg)
	if err != nil {
		return err
	}
	// Close leaves BGP sessions to die with the process (graceful restart
	// keeps the routes) and L2 addresses bound for the next start.
	defer func() { _ = vips.Close() }()
	opts.Appliers = append(opts.Appliers, vips)
	serveOpts := agent.ServeOptions{AdminSocket: f.adminSocket, MetricsAddr: f.metricsAddr}
	var confirmHandoff func() error
	if f.handoffSocket != "" {
		keys, confirm, err := proxy.Sockets().Inherit(f.handoffSocket)
		switch {
		case errors.Is(err, sockets.ErrNoPredecessor):
		case confirm == nil:
			log.Warn("could not take over the running agent's sockets; binding new ones", "error", err)
		default:
			if err != nil {
				log.Warn("some inherited sockets could not be used", "error", err)
			}
			log.Info("took over the running agent's listening sockets", "sockets", len(keys), "generation", proxy.Sockets().Generation())
			confirmHandoff = confirm
			serveOpts.BindRetry = time.Minute
		}
	}
	a, err := agent.New(opts)
	if err != nil {
		return err
	}
	theAgent.Store(a)
	if leaseRenewer != nil {
		go leaseRenewer.Run(ctx)
	}

	ctx, stop := signal.NotifyContext(ctx, agent.ShutdownSignals...)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, agent.ReloadSignal)
	defer signal.Stop(hup)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				// The outcome is logged by the agent.
				_, _ = a.Reload(ctx, "SIGHUP")
			}
		}
	}()

	if confirmHandoff != nil {
		// The predecessor stops accepting once we serve its sockets.
		go func() {
			for !a.Ready() {
				select {
				case <-ctx.Done():
					return
				case <-time.After(20 * time.Millisecond):
				}
			}
			if err := confirmHandoff(); err != nil {
				log.Warn("the previous agent did not take the handoff confirmation", "error", err)
			}
		}()
	}
	if f.handoffSocket != "" {
		// Offer our sockets to a successor once the predecessor (if any)
		// has released the admin socket, i.e. is gone.
		serveOpts.OnListening = func() {
			go func() {
				err := proxy.Sockets().ServeHandoff(ctx, f.handoffSocket, func() {
					log.Info("handed the listening sockets to a new agent; draining and exiting")
					stop()
				})
				if err != nil {
					log.Warn("restarts will refuse connections briefly: no handoff socket", "error", err)
				}
			}()
		}
	}

	log.Info("starting", "version", version, "node", node.Name, "source", strings.Join(src.Describe(), ","))
	if err := a.Serve(ctx, serveOpts); err != nil {
		return err
	}
	// The deferred closes drain what is in flight (HTTP/3 connections a
	// successor took over: until they end, within the drain timeout).
	log.Info("stopped accepting; draining in-flight requests, then exiting (VIP addresses stay bound for the next start)")
	return nil
}

// leaseRenewer renews the agent's liveness Lease, from which the controller
// learns that this node can serve VIPs (not from the stream, which may end
// at any replica).
func (f *flags) leaseRenewer(node string, log *slog.Logger, report func() lease.Report) (*lease.Renewer, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if f.kubeconfig != "" {
		rules.ExplicitPath = f.kubeconfig
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("the agent's Lease needs the Kubernetes API (--kubeconfig, $KUBECONFIG or the pod's service account; --node-lease=false to run without): %w", err)
	}
	cfg.UserAgent = "novaedge-agent/" + version
	cs, err := lease.NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	ns := f.leaseNS
	if ns == "" {
		ns = os.Getenv("POD_NAMESPACE")
	}
	if ns == "" {
		ns = "novaedge-system"
	}
	return lease.New(lease.Options{Client: cs, Namespace: ns, Node: node, Duration: f.leaseDuration, Logger: log.With("component", "lease"), Report: report})
}

// controllerSource returns the source that follows --controller, with the
// TLS material of --controller-tls-dir.
func (f *flags) controllerSource(node string, log *slog.Logger) (*agent.ControllerSource, error) {
	name := f.serverName
	if name == "" {
		name, _, _ = net.SplitHostPort(f.controller) // checked by check
	}
	tlsConfig, err := pki.ClientTLSConfig(f.controllerTLS, name)
	if err != nil {
		return nil, fmt.Errorf("--controller-tls-dir: %w", err)
	}
	return &agent.ControllerSource{
		Address:      f.controller,
		ServerName:   name,
		TLS:          tlsConfig,
		Node:         node,
		AgentVersion: version,
		Logger:       log.With("component", "controller-stream"),
	}, nil
}

// noWatch is a source whose changes are noticed only on request.
type noWatch struct{ *agent.FileSource }

func (n noWatch) Watch(ctx context.Context, changed func()) error {
	return n.WatchProbes(ctx, changed)
}

// dryRun prints what the configuration would do, as novaedgectl validate
// --plan does, and fails when it has errors.
func dryRun(w io.Writer, src *agent.FileSource) error {
	cand := src.Load()
	var b strings.Builder
	for _, d := range cand.Diagnostics {
		b.WriteString(d.String() + "\n")
	}
	if len(cand.Diagnostics) > 0 {
		b.WriteString("\n")
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	if err := cli.WritePlan(w, cand.Snapshot.GetCluster().GetPlan()); err != nil {
		return err
	}
	nerr, nwarn := len(cand.Diagnostics.Errors()), len(cand.Diagnostics.Warnings())
	if _, err := fmt.Fprintf(w, "\n%s, %s\n", plural(nerr, "error"), plural(nwarn, "warning")); err != nil {
		return err
	}
	if nerr > 0 {
		return errFailed
	}
	return nil
}

// plural returns "1 error" or "2 errors", as novaedgectl validate prints.
func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// run executes the command with args and returns the exit status: 0, 1 on
// failure, 2 on a usage error.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmd := newCommand(stdout, stderr)
	cmd.SetArgs(args)
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	err := cmd.ExecuteContext(ctx)
	var ue usageErr
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errFailed):
		return 1
	case errors.As(err, &ue), strings.HasPrefix(err.Error(), "unknown flag"), strings.Contains(err.Error(), "flag needs an argument"),
		strings.HasPrefix(err.Error(), "invalid argument"), strings.HasPrefix(err.Error(), "unknown shorthand"),
		strings.HasPrefix(err.Error(), "unknown command"):
		_, _ = fmt.Fprintf(stderr, "novaedge-agent: %v\nRun 'novaedge-agent --help' for usage.\n", err)
		return 2
	default:
		_, _ = fmt.Fprintf(stderr, "novaedge-agent: %v\n", err)
		return 1
	}
}

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// quicKeys returns the HTTP/3 keys kept in --state-dir, so that the agent
// that follows this one (upgrade, restart, crash) resets the QUIC
// connections it cannot serve at once. Without them HTTP/3 still works:
// clients of lost connections wait out their idle timeout.
func (f *flags) quicKeys(log *slog.Logger) *slowpath.QUICKeys {
	if f.stateDir == "" {
		return nil
	}
	path := filepath.Join(f.stateDir, "quic-keys")
	err := os.MkdirAll(f.stateDir, 0o700)
	if err == nil {
		var keys *slowpath.QUICKeys
		var created bool
		if keys, created, err = slowpath.LoadQUICKeys(path); err == nil {
			if created {
				log.Info("new HTTP/3 keys", "file", path)
			}
			return keys
		}
	}
	log.Warn("HTTP/3 keys not kept: after a restart, clients of lost QUIC connections wait out their idle timeout", "file", path, "error", err)
	return nil
}
