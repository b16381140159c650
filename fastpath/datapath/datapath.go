package datapath

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vishvananda/netlink"

	"github.com/novaedge/novaedge/agent"
	"github.com/novaedge/novaedge/fastpath"
	"github.com/novaedge/novaedge/fastpath/attach"
	fastpathbpf "github.com/novaedge/novaedge/gen/bpf/fastpath"
	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

// Options configure Start. Zero values are the defaults.
type Options struct {
	// Interfaces to attach to; empty means the interface of the default
	// route. VLAN and bond devices resolve to where XDP attaches.
	Interfaces []string
	// Mode is the XDP mode: auto (native, falling back to generic), native
	// or generic.
	Mode attach.Mode
	// PinRoot is where programs, maps and links are pinned; "" means
	// fastpath.DefaultPinRoot.
	PinRoot string
	// Load sizes the maps; its PinPath is set by Start.
	Load fastpath.LoadOptions
	// Node holds the node's addresses, SNAT port range and timeouts. An
	// address left invalid is taken from the first attached interface.
	Node fastpath.Node
	// Lineage: see fastpath.ManagerOptions.
	Lineage bool
	// ReservePorts writes the SNAT port range into
	// net.ipv4.ip_local_reserved_ports so the host never picks those ports
	// for its own connections. Tests that share the host's sysctls turn it
	// off.
	ReservePorts bool
	// Logger; nil discards.
	Logger *slog.Logger
}

// Datapath is the fast path running on this node.
type Datapath struct {
	log     *slog.Logger
	objs    *fastpath.Objects
	mgr     *fastpath.Manager
	att     *attach.Attacher
	node    fastpath.Node
	outcome []attach.Outcome
	root    string

	mu    sync.Mutex
	neigh []netlink.Neigh
}

var _ agent.Applier = (*Datapath)(nil)

// Start loads (or adopts) the fast path and attaches it.
func Start(opts Options) (*Datapath, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	root := opts.PinRoot
	if root == "" {
		root = fastpath.DefaultPinRoot
	}
	if err := attach.Supported(); err != nil {
		return nil, err
	}
	targets, err := attach.Resolve(opts.Interfaces)
	if err != nil {
		return nil, fmt.Errorf("fast path interfaces: %w", err)
	}
	if err := os.MkdirAll(fastpath.MapsDir(root), 0o700); err != nil {
		return nil, fmt.Errorf("create pin directory: %w", err)
	}
	lo := opts.Load
	lo.PinPath = fastpath.MapsDir(root)
	objs, err := fastpath.Load(lo)
	if err != nil {
		return nil, err
	}
	d := &Datapath{log: log, objs: objs, root: root}
	ok := false
	defer func() {
		if !ok {
			_ = d.Close()
		}
	}()
	d.mgr, err = fastpath.NewManager(objs, fastpath.ManagerOptions{Logger: log, Lineage: opts.Lineage})
	if err != nil {
		return nil, err
	}
	if err := pinProgram(objs, root); err != nil {
		return nil, err
	}
	d.att, err = attach.New(attach.Options{Root: root, LayoutVersion: fastpath.Layout, Mode: opts.Mode, Logger: log})
	if err != nil {
		return nil, err
	}
	// Redirect targets first: the program may redirect as soon as it runs.
	for _, t := range targets {
		v := fastpathbpf.FastpathBpfDevmapVal{Ifindex: uint32(t.Ifindex)}
		if err := objs.FpTxPorts.Put(uint32(t.Ifindex), &v); err != nil {
			return nil, fmt.Errorf("add %s to fp_tx_ports: %w", t.Ifname, err)
		}
	}
	res, err := d.att.Adopt(objs.NovaedgeFastpath, targets)
	if res != nil {
		d.outcome = res.Interfaces
		for _, o := range res.Interfaces {
			log.Info("fast path attached", "interface", o.Target.String(), "action", o.Action.String(), "mode", o.Mode.String(), "fallback", errString(o.Fallback))
		}
		for _, p := range res.Unrequested {
			log.Warn("fast path still attached to an interface no longer requested; `novaedgectl fastpath uninstall` removes it", "pin", p)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("attach fast path: %w", err)
	}
	var names []string
	for _, t := range targets {
		names = append(names, t.Ifname)
	}
	if err := PrepareInterfaces(names); err != nil {
		return nil, err
	}
	d.node = opts.Node
	if err := d.fillNodeAddresses(targets); err != nil {
		return nil, err
	}
	if opts.ReservePorts {
		lo, hi := d.node.NATPortMin, d.node.NATPortMax
		if lo == 0 && hi == 0 {
			lo, hi = fastpath.DefaultNATPortMin, fastpath.DefaultNATPortMax
		}
		if err := reservePorts(lo, hi); err != nil {
			return nil, err
		}
	}
	if !forwardingEnabled() {
		log.Warn("IP forwarding is off (net.ipv4.ip_forward=0): XDP cannot look next hops up and passes every fast-path packet to the kernel")
	}
	ok = true
	return d, nil
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// pinProgram pins the program for bpftool next to the maps, replacing the
// previous agent's pin (the links hold the running program either way).
func pinProgram(objs *fastpath.Objects, root string) error {
	path := filepath.Join(root, fastpath.Layout, "prog_xdp")
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("unpin old program: %w", err)
	}
	if err := objs.NovaedgeFastpath.Pin(path); err != nil {
		return fmt.Errorf("pin program: %w", err)
	}
	return nil
}

// fillNodeAddresses takes the node's addresses from the first attached
// interface where options left them unset.
func (d *Datapath) fillNodeAddresses(targets []attach.Target) error {
	if d.node.V4.IsValid() && d.node.V6.IsValid() {
		return nil
	}
	for _, t := range targets {
		l, err := netlink.LinkByIndex(t.Ifindex)
		if err != nil {
			return fmt.Errorf("interface %s: %w", t.Ifname, err)
		}
		addrs, err := netlink.AddrList(l, netlink.FAMILY_ALL)
		if err != nil {
			return fmt.Errorf("addresses of %s: %w", t.Ifname, err)
		}
		for _, a := range addrs {
			ip, ok := netip.AddrFromSlice(a.IP)
			if !ok || !ip.IsGlobalUnicast() {
				continue
			}
			ip = ip.Unmap()
			if ip.Is4() && !d.node.V4.IsValid() {
				d.node.V4 = ip
			}
			if ip.Is6() && !d.node.V6.IsValid() {
				d.node.V6 = ip
			}
		}
	}
	d.log.Info("fast path node addresses", "ipv4", d.node.V4, "ipv6", d.node.V6)
	return nil
}

// Name returns "fastpath".
func (d *Datapath) Name() string { return "fastpath" }

// Compile turns the snapshot's plan into the fast path's Config; a plan
// the fast path cannot serve rejects the snapshot before anything changes.
func (d *Datapath) Compile(snap *pb.ConfigSnapshot) (agent.Change, error) {
	cfg, err := fastpath.FromSnapshot(snap, d.node)
	if err != nil {
		return nil, err
	}
	return agent.ChangeFunc(func(context.Context) error {
		if _, err := d.mgr.Apply(cfg); err != nil {
			return err
		}
		d.keepNeighbours(cfg)
		return nil
	}), nil
}

// Interfaces reports where the program runs and in which mode.
func (d *Datapath) Interfaces() []attach.Outcome { return d.outcome }

// Objects returns the loaded program and maps.
func (d *Datapath) Objects() *fastpath.Objects { return d.objs }

// Manager returns the map manager.
func (d *Datapath) Manager() *fastpath.Manager { return d.mgr }

// Close releases the agent's handles. The program stays attached and the
// maps pinned.
func (d *Datapath) Close() error {
	var errs []error
	if d.att != nil {
		errs = append(errs, d.att.Close())
	}
	if d.objs != nil {
		errs = append(errs, d.objs.Close())
	}
	return errors.Join(errs...)
}

// Uninstall detaches the fast path from every interface and removes its
// pins: programs, links and maps, in every layout version under root.
func Uninstall(root string) ([]attach.Pin, error) {
	if root == "" {
		root = fastpath.DefaultPinRoot
	}
	pins, err := attach.DetachAll(root)
	if err != nil {
		return pins, err
	}
	if err := os.RemoveAll(root); err != nil {
		return pins, fmt.Errorf("remove %s: %w", root, err)
	}
	return pins, nil
}

// Collector exports the program's counters as Prometheus metrics.
func (d *Datapath) Collector() prometheus.Collector {
	return &collector{objs: d.objs, desc: prometheus.NewDesc("novaedge_fastpath_packets_total",
		"Packets the XDP fast path handled, by what happened to them (reasons of passes to the kernel and drops included).",
		[]string{"event"}, nil)}
}

type collector struct {
	objs *fastpath.Objects
	desc *prometheus.Desc

	mu sync.Mutex
	// last is the value each counter was last reported with.
	last map[string]uint64
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	counters, err := c.objs.Counters()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.desc, err)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last == nil {
		c.last = make(map[string]uint64, len(counters))
	}
	monotonic(c.last, counters)
	for name, v := range counters {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(v), name)
	}
}

// monotonic raises each counter of a reading to at least the value last
// reported, and records the reading as last. A reading may miss packets
// the program is moving from a flow cache slot to the counters (the next
// one finds them); a counter that went back would read as a reset.
func monotonic(last, reading map[string]uint64) {
	for name, v := range reading {
		v = max(v, last[name])
		reading[name] = v
		last[name] = v
	}
}
