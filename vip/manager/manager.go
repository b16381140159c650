package manager

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/novaedge/novaedge/agent"
	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/vip/bfd"
	"github.com/novaedge/novaedge/vip/bfdd"
	"github.com/novaedge/novaedge/vip/bgp"
	"github.com/novaedge/novaedge/vip/failover"
	"github.com/novaedge/novaedge/vip/frr"
	"github.com/novaedge/novaedge/vip/l2"
	"github.com/novaedge/novaedge/vip/local"
)

// DefaultHeartbeatPort is the UDP port of the L2 heartbeats: not BFD's
// 3784, 3785 or 4784, which the node's BFD speaker for the routers (FRR's
// bfdd among them) may hold.
const DefaultHeartbeatPort = 3786

// DefaultL2LeaseTTL is the L2 lease length when Options.L2LeaseTTL is zero.
const DefaultL2LeaseTTL = 3 * time.Second

// FRRBFDPeersFile records the bfd peers the manager wrote into FRR's bfdd,
// so that a restarted agent removes only its own.
const FRRBFDPeersFile = "frr-bfd-peers.json"

// BGPAddressFile records the BGP VIP addresses the manager bound on lo, so
// that a restarted agent removes only its own.
const BGPAddressFile = "bgp-addresses.json"

// RestartMarker is the file in Options.StateDir that says a BGP speaker
// ran and left its routes to graceful restart.
const RestartMarker = "bgp-graceful-restart"

// Options configure a Manager.
type Options struct {
	// Logger receives changes and problems. Nil discards them.
	Logger *slog.Logger
	// RouterID is the node's BGP router ID. Zero: the source address of
	// the route towards the first IPv4 peer (the node's address as its
	// routers see it), unless a VIP carries one.
	RouterID netip.Addr
	// L2LeaseTTL is how long one renewal lets the node answer ARP/NDP for
	// its L2 VIPs; it is renewed every third of it. Zero means
	// DefaultL2LeaseTTL.
	L2LeaseTTL time.Duration
	// L2 are the announcer's options (schedule, GARP form). Its Logger and
	// Clock default to the manager's.
	L2 l2.Options
	// BGPListenPort is the TCP port the speaker accepts sessions on. Zero:
	// no listener (sessions are opened by the node).
	BGPListenPort int32
	// BGPConnectRetry is the wait between attempts to open a session.
	// Zero: bgp.DefaultConnectRetry.
	BGPConnectRetry time.Duration
	// StateDir holds RestartMarker. Empty: restarts are not detected and
	// the speaker never starts with graceful restart's Restarting bit.
	StateDir string
	// Registry receives the manager's metrics. Nil: none.
	Registry prometheus.Registerer
	// L2FailoverGrace is how long a standby that took over an L2 VIP keeps
	// it while the assignment still names the active it lost (and how long
	// an active that yielded to it waits before it takes the VIP back):
	// see package failover. Longer than the agents' Lease duration. Zero
	// means DefaultL2FailoverGrace; negative means no grace, a takeover
	// lasts until the heartbeats recover, which suits standalone agents
	// (no controller ever promotes the standby there).
	L2FailoverGrace time.Duration
	// Clock drives the lease and the failover timing. Nil: the system
	// clock.
	Clock l2.Clock
	// FRRSocketDir is the directory of FRR's vty sockets, for OSPF VIPs.
	// Empty: frr.DefaultSocketDir.
	FRRSocketDir string
	// FRRVtysh is the vtysh program. Empty: frr.DefaultVtysh.
	FRRVtysh string
	// FRRInterval is the time between periodic reconciles of FRR's
	// configuration. Zero: frr.DefaultInterval.
	FRRInterval time.Duration
	// OSPFUplinks are the interfaces facing the routers for the OSPF VIPs
	// that name none. Empty: the interface of the default route.
	OSPFUplinks []string
	// BFDSocket is the Unix socket of the node's novaedge-bfdd. Set, the
	// BFD sessions run there: the BGP peers' with the C bit, so that they
	// outlive this agent (a restart is not a node death to the routers),
	// the L2 heartbeats without it. Empty: an embedded speaker, whose
	// sessions end with the agent.
	BFDSocket string
	// BFDClient names this agent in novaedge-bfdd's log.
	BFDClient string
	// BindBGPAddresses binds the addresses of the BGP VIPs this node
	// announces on lo (recorded in BGPAddressFile), so that the kernel
	// delivers the traffic the routers send here to the slow path's
	// listeners; they stay bound across restarts and go with Withdraw.
	// False leaves the addresses to the operator (or to IP_FREEBIND, which
	// receives nothing routed to a non-local address).
	BindBGPAddresses bool
	// HeartbeatPort is the UDP port of the L2 heartbeats between agents
	// (BFD control packets, run by a speaker embedded in the agent), the
	// same on every node. Zero means DefaultHeartbeatPort.
	HeartbeatPort uint16
}

// bfdSpeaker is what the manager needs of a BFD speaker: the embedded
// *bfd.Speaker or a client of novaedge-bfdd.
type bfdSpeaker interface {
	AddSession(bfd.SessionConfig) (bfd.SessionKey, error)
	RemoveSession(bfd.SessionKey) error
	Sessions() []bfd.SessionState
	Subscribe() (<-chan bfd.StateChange, func())
	Close() error
}

// Manager is the "vip" applier. Its methods are safe for concurrent use.
type Manager struct {
	opts   Options
	log    *slog.Logger
	clock  l2.Clock
	ttl    time.Duration
	routes routes

	grace time.Duration

	// mu serialises Apply, Close, Withdraw, State and the failover loop.
	mu        sync.Mutex
	closed    bool
	l2        *l2.Announcer
	renewStop chan struct{}
	renewDone chan struct{}
	// serving says that some L2 VIP is decided to be served here: only
	// then is the answer lease renewed.
	serving atomic.Bool

	// self is this node's name; l2Plans the L2ARP VIPs of the last apply;
	// decisions whether each was served at the last decision (to log
	// changes).
	self      string
	l2Plans   []l2Plan
	decisions map[string]bool
	foWake    chan struct{}
	foStop    chan struct{}
	foDone    chan struct{}

	bgp *bgp.Speaker
	// bgpRef is bgp for the BFD event goroutine, which must not take mu.
	bgpRef        atomic.Pointer[bgp.Speaker]
	bgpRestarting bool
	bgpDesired    bgp.Desired
	bgpErr        string
	bgpAddrs      *local.Manager
	derivedID     netip.Addr

	// bgpBFD runs the BGP peers' sessions on the node's BFD speaker;
	// hbBFD the L2 heartbeats, on a port of their own.
	bgpBFD, hbBFD bfdSet
	// bfdMu guards bfdDown, the peers BFD shut down, written by the event
	// goroutine; bgpPeers and hbPeers, the sessions' purposes (BGP peer,
	// L2 heartbeat); and hb, the heartbeat state of each L2 peer.
	bfdMu    sync.Mutex
	bfdDown  map[netip.Addr]bool
	bgpPeers map[netip.Addr]bool
	hbPeers  map[netip.Addr]bool
	hb       map[netip.Addr]failover.Peer
	// hbAdded is when each heartbeat session was added.
	hbAdded map[netip.Addr]time.Time

	// ospf drives FRR for the OSPF VIPs, whose addresses ospfAddrs binds
	// on lo; ospfStop and ospfDone end its reconcile loop.
	ospf        *frr.Driver
	ospfAddrs   *local.Manager
	ospfStop    context.CancelFunc
	ospfDone    chan struct{}
	ospfDesired frr.Desired
	ospfErr     string
	ospfID      netip.Addr

	vips     []VIPState
	problems []string
}

var _ agent.Applier = (*Manager)(nil)

// New returns a manager with nothing announced. Nothing is opened before
// the first Apply that needs it.
func New(opts Options) (*Manager, error) {
	if opts.L2LeaseTTL < 0 {
		return nil, fmt.Errorf("l2 lease ttl %v: negative", opts.L2LeaseTTL)
	}
	if opts.BGPListenPort < 0 || opts.BGPListenPort > 65535 {
		return nil, fmt.Errorf("bgp listen port %d: out of range", opts.BGPListenPort)
	}
	if opts.RouterID.IsValid() && !opts.RouterID.Unmap().Is4() {
		return nil, fmt.Errorf("router id %s: must be an IPv4 address", opts.RouterID)
	}
	m := &Manager{
		opts:      opts,
		log:       opts.Logger,
		clock:     opts.Clock,
		ttl:       opts.L2LeaseTTL,
		routes:    hostRoutes{},
		bgpBFD:    bfdSet{kind: "bgp", sessions: map[netip.Addr]bfd.SessionConfig{}},
		hbBFD:     bfdSet{kind: "heartbeat", sessions: map[netip.Addr]bfd.SessionConfig{}},
		bfdDown:   map[netip.Addr]bool{},
		bgpPeers:  map[netip.Addr]bool{},
		hbPeers:   map[netip.Addr]bool{},
		hb:        map[netip.Addr]failover.Peer{},
		hbAdded:   map[netip.Addr]time.Time{},
		decisions: map[string]bool{},
		foWake:    make(chan struct{}, 1),
		grace:     opts.L2FailoverGrace,
	}
	if m.grace == 0 {
		m.grace = DefaultL2FailoverGrace
	}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	if m.clock == nil {
		m.clock = systemClock{}
	}
	if m.ttl == 0 {
		m.ttl = DefaultL2LeaseTTL
	}
	m.opts.RouterID = opts.RouterID.Unmap()
	if opts.Registry != nil {
		if err := opts.Registry.Register(&collector{m: m}); err != nil {
			return nil, fmt.Errorf("register vip metrics: %w", err)
		}
	}
	return m, nil
}

// Name returns "vip".
func (m *Manager) Name() string { return "vip" }

// Compile checks the snapshot's node part; the returned change reconciles
// the announcements with it.
func (m *Manager) Compile(snap *pb.ConfigSnapshot) (agent.Change, error) {
	c, err := compile(snap)
	if err != nil {
		return nil, err
	}
	return agent.ChangeFunc(func(ctx context.Context) error { return m.apply(ctx, c) }), nil
}

// apply reconciles every announcement with c. Problems that leave a VIP
// unannounced are returned (the agent reports them and marks itself
// unhealthy); those that do not (a BFD speaker that cannot start, settings
// settled between VIPs) are only in the status.
func (m *Manager) apply(ctx context.Context, c *compiled) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return errors.New("vip manager closed")
	}
	problems := slices.Clone(c.warnings)
	var errs []error
	states := make([]VIPState, 0, len(c.vips))
	for _, v := range c.vips {
		a := v.asg
		states = append(states, VIPState{
			VIP: a.GetVip(), Mode: a.GetMode(), Role: a.GetRole(), Addresses: v.addrs,
			Interfaces: slices.Clone(a.GetInterfaces()), BFD: a.GetBfd().GetEnabled(),
		})
	}
	plans, l2Errs := m.planL2(c, states)
	errs = append(errs, l2Errs...)
	d, bgpErrs, bgpProblems := m.applyBGP(ctx, c, states)
	errs = append(errs, bgpErrs...)
	problems = append(problems, bgpProblems...)
	ospfErrs, ospfProblems := m.applyOSPF(ctx, c, states)
	errs = append(errs, ospfErrs...)
	problems = append(problems, ospfProblems...)
	m.self, m.l2Plans, m.vips = c.node.GetNodeName(), plans, states
	problems = append(problems, m.applyBFD(ctx, c, d)...)
	errs = append(errs, m.reconcileL2()...)
	if len(plans) > 0 {
		// The loop re-decides on heartbeat changes and at the end of
		// hold-downs and graces; a new snapshot may move those.
		m.startFailover()
		m.wakeFailover()
	}
	m.problems = problems
	for _, p := range problems {
		m.log.Warn("vip announcement", "problem", p)
	}
	return errors.Join(errs...)
}

func compareAnnouncement(x, y l2.Announcement) int {
	if x.Interface != y.Interface {
		if x.Interface < y.Interface {
			return -1
		}
		return 1
	}
	return x.Addr.Compare(y.Addr)
}

// startRenewal renews the lease every third of its length until Close.
func (m *Manager) startRenewal() {
	m.renewStop, m.renewDone = make(chan struct{}), make(chan struct{})
	an, stop, done := m.l2, m.renewStop, m.renewDone
	period := m.ttl / 3
	go func() {
		defer close(done)
		t := m.clock.NewTimer(period)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C():
				// Only while serving: a lease is a promise that this node
				// answers for its VIPs.
				if m.serving.Load() {
					an.Renew(m.clock.Now().Add(m.ttl))
				}
				t.Reset(period)
			}
		}
	}()
}

// include is the BGP announcement rule: a VIP is announced unless Serving
// judged that it cannot serve.
func (c *compiled) include(a *pb.VIPAssignment) bool {
	v, judged := c.serving[a.GetVip()]
	return !judged || v.Serving
}

// applyBGP reconciles the speaker, starting it for the first BGP VIP. It
// returns the desired state it applied, errors and status problems.
func (m *Manager) applyBGP(ctx context.Context, c *compiled, states []VIPState) (bgp.Desired, []error, []string) {
	var errs []error
	var problems []string
	has := false
	for _, v := range c.vips {
		if v.asg.GetMode() == pb.VIPMode_VIP_MODE_BGP {
			has = true
		}
	}
	if !has && m.bgp == nil {
		return bgp.Desired{}, nil, nil
	}
	id := m.opts.RouterID
	if !id.IsValid() && has {
		id = m.deriveRouterID(c)
	}
	d, ps := bgp.FromNode(c.node, id, c.include)
	for _, p := range ps {
		problems = append(problems, p.Error())
	}
	if err := m.bindBGP(c); err != nil {
		errs = append(errs, err)
	}
	if d.LocalAS != 0 && !d.RouterID.Is4() {
		errs = append(errs, errors.New("bgp: no router ID: the route towards the first IPv4 peer has no source address and no VIP sets bgp.router_id; set the agent's --router-id"))
		d = bgp.Desired{}
	}
	if d.LocalAS != 0 && m.bgp == nil {
		if err := m.startBGP(); err != nil {
			m.bgpErr = err.Error()
			return d, append(errs, err), problems
		}
	}
	if m.bgp != nil {
		if err := m.bgp.Reconcile(ctx, d); err != nil {
			m.bgpErr = err.Error()
			errs = append(errs, fmt.Errorf("bgp: %w", err))
		} else {
			m.bgpErr = ""
			m.bgpDesired = d
		}
		m.writeMarker(d.LocalAS != 0)
	}
	routed := map[string]bool{}
	for _, r := range m.bgpDesired.Routes {
		routed[r.VIP] = true
	}
	for i, v := range c.vips {
		if v.asg.GetMode() != pb.VIPMode_VIP_MODE_BGP {
			continue
		}
		switch {
		case !c.include(v.asg):
			states[i].Reason = c.serving[v.asg.GetVip()].Reason
		case routed[v.asg.GetVip()]:
			states[i].Announced = true
		case m.bgpErr != "":
			states[i].Reason = "bgp: " + m.bgpErr
		default:
			states[i].Reason = "not announced: see the errors"
		}
	}
	return d, errs, problems
}

// deriveRouterID returns the source address towards the first IPv4 peer
// of a BGP VIP, computed once: a router ID that changed would restart the
// speaker.
func (m *Manager) deriveRouterID(c *compiled) netip.Addr {
	if m.derivedID.IsValid() {
		return m.derivedID
	}
	for _, v := range c.vips {
		for _, p := range v.asg.GetBgp().GetPeers() {
			a, err := netip.ParseAddr(p.GetAddress())
			if err != nil || !a.Unmap().Is4() {
				continue
			}
			src, err := m.routes.SourceFor(a.Unmap())
			if err != nil || !src.Is4() {
				m.log.Warn("cannot derive the BGP router ID from the route towards a peer", "peer", a, "error", err)
				continue
			}
			m.derivedID = src
			m.log.Info("bgp router ID from the route towards the first IPv4 peer", "router_id", src, "peer", a)
			return src
		}
	}
	return netip.Addr{}
}

func (m *Manager) markerPath() string {
	if m.opts.StateDir == "" {
		return ""
	}
	return filepath.Join(m.opts.StateDir, RestartMarker)
}

// bindBGP binds the addresses of every BGP VIP this node announces on lo,
// healthy or not: binding announces nothing, and a VIP that comes back
// healthy then serves at once.
func (m *Manager) bindBGP(c *compiled) error {
	if !m.opts.BindBGPAddresses {
		return nil
	}
	var addrs []local.Address
	for _, v := range c.vips {
		if v.asg.GetMode() != pb.VIPMode_VIP_MODE_BGP || v.asg.GetRole() != pb.VIPRole_VIP_ROLE_ANNOUNCE {
			continue
		}
		for _, a := range v.addrs {
			addrs = append(addrs, local.Address{Prefix: netip.PrefixFrom(a, a.BitLen())})
		}
	}
	if m.bgpAddrs == nil {
		if len(addrs) == 0 {
			return nil
		}
		var file string
		if m.opts.StateDir != "" {
			file = filepath.Join(m.opts.StateDir, BGPAddressFile)
		}
		am, err := local.New(local.Options{StateFile: file, Logger: m.log.With("component", "bgp")})
		if err != nil {
			return fmt.Errorf("bgp addresses: %w", err)
		}
		m.bgpAddrs = am
	}
	if err := m.bgpAddrs.Apply(addrs); err != nil {
		return fmt.Errorf("bgp: bind VIP addresses: %w", err)
	}
	return nil
}

// startBGP starts the speaker, restarting (graceful restart's R bit) when
// the marker says a speaker ran before this process.
func (m *Manager) startBGP() error {
	restarting := false
	if p := m.markerPath(); p != "" {
		if _, err := os.Stat(p); err == nil {
			restarting = true
		} else if !errors.Is(err, fs.ErrNotExist) {
			m.log.Warn("cannot read the bgp restart marker; starting without graceful restart's restarting bit", "file", p, "error", err)
		}
	}
	sp, err := bgp.New(bgp.Options{
		ListenPort:      m.opts.BGPListenPort,
		GracefulRestart: bgp.GracefulRestart{Restarting: restarting},
		ConnectRetry:    m.opts.BGPConnectRetry,
		Logger:          m.log.With("component", "bgp"),
	})
	if err != nil {
		return fmt.Errorf("bgp speaker: %w", err)
	}
	m.bgp, m.bgpRestarting = sp, restarting
	m.bgpRef.Store(sp)
	m.log.Info("bgp speaker started", "restarting", restarting, "listen_port", m.opts.BGPListenPort)
	return nil
}

// writeMarker records whether routes were left to graceful restart.
func (m *Manager) writeMarker(running bool) {
	p := m.markerPath()
	if p == "" {
		return
	}
	if !running {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			m.log.Warn("cannot remove the bgp restart marker", "file", p, "error", err)
		}
		return
	}
	if err := os.MkdirAll(m.opts.StateDir, 0o755); err != nil {
		m.log.Warn("cannot write the bgp restart marker; the next start will not ask for graceful restart", "error", err)
		return
	}
	if err := os.WriteFile(p, []byte(m.clock.Now().UTC().Format(time.RFC3339)+"\n"), 0o644); err != nil {
		m.log.Warn("cannot write the bgp restart marker; the next start will not ask for graceful restart", "error", err)
	}
}

// applyBFD keeps one session per BGP peer of a VIP with BFD enabled and
// one per other node of an L2 VIP with heartbeats (shared by VIPs: a peer
// has one session, BGP's timers first). It returns status problems: BFD
// never fails an apply.
func (m *Manager) applyBFD(ctx context.Context, c *compiled, d bgp.Desired) []string {
	var problems []string
	configured := map[netip.Addr]bool{}
	for _, p := range d.Peers {
		configured[p.Address] = true
	}
	want := map[netip.Addr]bfd.SessionConfig{}
	bgpPeers := map[netip.Addr]bool{}
	for _, v := range c.vips {
		if v.bfd == nil || v.asg.GetMode() != pb.VIPMode_VIP_MODE_BGP {
			continue
		}
		for _, p := range v.asg.GetBgp().GetPeers() {
			a, err := netip.ParseAddr(p.GetAddress())
			if err != nil || !configured[a.Unmap()] {
				continue
			}
			if _, ok := want[a.Unmap()]; !ok {
				cfg := *v.bfd
				cfg.Peer = a.Unmap()
				want[a.Unmap()] = cfg
				bgpPeers[a.Unmap()] = true
			}
		}
	}
	hbWant, _, hbProblems := m.heartbeatSessions()
	problems = append(problems, hbProblems...)
	hbPeers := map[netip.Addr]bool{}
	for peer := range hbWant {
		hbPeers[peer] = true
	}
	m.bfdMu.Lock()
	m.bgpPeers, m.hbPeers = bgpPeers, hbPeers
	for peer := range m.hb {
		if !hbPeers[peer] {
			delete(m.hb, peer)
		}
	}
	for peer := range m.hbAdded {
		if !hbPeers[peer] {
			delete(m.hbAdded, peer)
		}
	}
	m.bfdMu.Unlock()
	if m.opts.BFDSocket != "" || frr.BFDRunning(m.opts.FRRSocketDir) {
		// The speaker outlives this agent: the BGP peers' sessions say so.
		for peer, cfg := range want {
			cfg.ControlPlaneIndependent = true
			want[peer] = cfg
		}
	}
	problems = append(problems, m.reconcileBFD(ctx, &m.bgpBFD, want, m.newBFD)...)
	return append(problems, m.reconcileBFD(ctx, &m.hbBFD, hbWant, m.newHeartbeatBFD)...)
}

// reconcileBFD makes set's sessions want, starting its speaker with start
// when the first session is wanted.
func (m *Manager) reconcileBFD(ctx context.Context, set *bfdSet, want map[netip.Addr]bfd.SessionConfig, start func() (bfdSpeaker, error)) []string {
	var problems []string
	if len(want) > 0 && set.sp == nil {
		sp, err := start()
		if err != nil {
			set.err = err.Error()
			if set.kind == "bgp" {
				return []string{"bfd: " + err.Error() + "; BGP runs without BFD"}
			}
			return []string{"l2 heartbeats: " + err.Error() + "; L2 VIPs run without heartbeats (the assignment alone decides)"}
		}
		set.sp, set.err = sp, ""
		m.startBFDEvents(set)
	}
	if set.sp == nil {
		return nil
	}
	for peer, cur := range set.sessions {
		w, ok := want[peer]
		if ok && sameTimers(w, cur) && (!w.Local.IsValid() || w.Local == cur.Local) {
			continue
		}
		if err := set.sp.RemoveSession(cur.Key()); err != nil {
			problems = append(problems, fmt.Sprintf("bfd peer %s: remove session: %v", peer, err))
		}
		delete(set.sessions, peer)
		if !ok && set.kind == "bgp" {
			m.enableAfterBFD(ctx, peer)
		}
	}
	for _, peer := range slices.SortedFunc(maps.Keys(want), netip.Addr.Compare) {
		if _, ok := set.sessions[peer]; ok {
			continue
		}
		cfg := want[peer]
		if !cfg.Local.IsValid() {
			local, err := m.routes.SourceFor(peer)
			if err != nil {
				problems = append(problems, fmt.Sprintf("bfd peer %s: local address: %v", peer, err))
				continue
			}
			cfg.Local = local
		}
		if _, err := set.sp.AddSession(cfg); err != nil {
			problems = append(problems, fmt.Sprintf("bfd peer %s: %v", peer, err))
			continue
		}
		set.sessions[peer] = cfg
		if set.kind == "heartbeat" {
			added := m.clock.Now()
			if m.answeringWithStandby(peer) {
				// A standby (re)joining an active that answers: the
				// active has nothing to wait for or hold down, it goes
				// on answering (the zero time is "long ago").
				added = time.Time{}
			}
			m.bfdMu.Lock()
			m.hbAdded[peer] = added
			m.bfdMu.Unlock()
		}
	}
	// A speaker that adopts the sessions of the agent before this one
	// (novaedge-bfdd) must hear the whole set before it drops the rest.
	if r, ok := set.sp.(interface{ Ready() }); ok {
		r.Ready()
	}
	return problems
}

// newBFD picks the node's BFD speaker for the BGP peers: FRR's bfdd where
// it runs (it holds UDP 3784), else novaedge-bfdd when configured, else an
// embedded one.
func (m *Manager) newBFD() (bfdSpeaker, error) {
	log := m.log.With("component", "bfd")
	if frr.BFDRunning(m.opts.FRRSocketDir) {
		log.Info("FRR's bfdd runs on this node: the BFD sessions run there", "vtyDir", cmp.Or(m.opts.FRRSocketDir, frr.DefaultSocketDir))
		var file string
		if m.opts.StateDir != "" {
			file = filepath.Join(m.opts.StateDir, FRRBFDPeersFile)
		}
		return frr.NewBFDPeers(frr.BFDOptions{SocketDir: m.opts.FRRSocketDir, Vtysh: m.opts.FRRVtysh, Logger: log, StateFile: file})
	}
	if m.opts.BFDSocket == "" {
		return bfd.NewSpeaker(bfd.Options{Logger: log})
	}
	return bfdd.Dial(bfdd.ClientOptions{Socket: m.opts.BFDSocket, Name: m.opts.BFDClient, Logger: log})
}

// answeringWithStandby reports whether this node answers, as the active,
// for an L2 VIP whose first standby is at peer. Called with mu held.
func (m *Manager) answeringWithStandby(peer netip.Addr) bool {
	for _, p := range m.l2Plans {
		if p.asg.Active == m.self && len(p.asg.Standbys) > 0 && p.peers[p.asg.Standbys[0]] == peer && m.decisions[p.vip] {
			return true
		}
	}
	return false
}

// newHeartbeatBFD starts the speaker of the L2 heartbeats: embedded, since
// they must end with the agent that answers ARP/NDP, and on a port of their
// own (Options.HeartbeatPort), so that they never meet the node's BFD
// speaker for the routers, whichever it is.
func (m *Manager) newHeartbeatBFD() (bfdSpeaker, error) {
	return bfd.NewSpeaker(bfd.Options{Logger: m.log.With("component", "l2-heartbeat"), Port: m.heartbeatPort()})
}

func (m *Manager) heartbeatPort() uint16 { return cmp.Or(m.opts.HeartbeatPort, DefaultHeartbeatPort) }

func sameTimers(a, b bfd.SessionConfig) bool {
	return a.DetectMultiplier == b.DetectMultiplier && a.DesiredMinTx == b.DesiredMinTx && a.RequiredMinRx == b.RequiredMinRx &&
		a.ControlPlaneIndependent == b.ControlPlaneIndependent
}

// startBFDEvents follows set's sessions: a heartbeat's changes become the
// state of its L2 peer (and wake the failover loop); a BGP peer's session
// that fails shuts the peer down, and enables it again when it is Up. It
// never takes mu: closeBFD waits for it with mu held.
func (m *Manager) startBFDEvents(set *bfdSet) {
	ch, stop := set.sp.Subscribe()
	done := make(chan struct{})
	set.stop, set.done = stop, done
	heartbeats := set.kind == "heartbeat"
	go func() {
		defer close(done)
		for ev := range ch {
			if heartbeats {
				m.bfdMu.Lock()
				if m.hbPeers[ev.Peer] {
					prev := m.hb[ev.Peer]
					m.hb[ev.Peer] = heartbeat(prev, ev, m.hbAdded[ev.Peer].Add(heartbeatStartup))
					if m.hb[ev.Peer].State != prev.State {
						m.log.Info("l2 heartbeat", "peer", ev.Peer, "state", m.hb[ev.Peer].State.String(), "bfd", ev.To.String(), "diag", ev.Diag.String())
					}
				}
				m.bfdMu.Unlock()
				m.wakeFailover()
				continue
			}
			m.bfdMu.Lock()
			isBGP := m.bgpPeers[ev.Peer]
			m.bfdMu.Unlock()
			if !isBGP {
				continue
			}
			switch {
			case ev.PathFailed():
				m.log.Warn("bfd session failed: shutting the bgp peer down", "peer", ev.Peer, "diag", ev.Diag.String())
				m.bfdMu.Lock()
				m.bfdDown[ev.Peer] = true
				m.bfdMu.Unlock()
				if speaker := m.bgpRef.Load(); speaker != nil {
					if err := speaker.SetPeerEnabled(context.Background(), ev.Peer, false, "BFD down"); err != nil {
						m.log.Error("shut the bgp peer down after bfd failure", "peer", ev.Peer, "error", err)
					}
				}
			case ev.To == bfd.StateUp:
				m.enableAfterBFD(context.Background(), ev.Peer)
			}
		}
	}()
}

// enableAfterBFD enables a peer BFD shut down.
func (m *Manager) enableAfterBFD(ctx context.Context, peer netip.Addr) {
	m.bfdMu.Lock()
	down := m.bfdDown[peer]
	delete(m.bfdDown, peer)
	m.bfdMu.Unlock()
	speaker := m.bgpRef.Load()
	if !down || speaker == nil {
		return
	}
	m.log.Info("bfd session up: enabling the bgp peer", "peer", peer)
	if err := speaker.SetPeerEnabled(ctx, peer, true, ""); err != nil {
		m.log.Error("enable the bgp peer after bfd came up", "peer", peer, "error", err)
	}
}

// Close stops the lease renewal and the BFD speaker (an embedded one takes
// its sessions AdminDown; novaedge-bfdd keeps the BGP peers' sessions Up
// for the next agent and takes only the L2 heartbeats down) and leaves the rest
// to the end of the process: the BGP sessions close without a Cease
// notification, so the routers keep this node's routes through graceful
// restart, and the restart marker tells the next manager to ask for it.
// The L2 responders stop with the process; the lease, no longer renewed,
// ends at most the lease TTL later in any case.
func (m *Manager) Close() error {
	// After mu is released: the failover loop takes it.
	defer m.stopFailover()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	m.stopRenewal()
	err := m.closeBFD(false)
	if m.bgp != nil {
		m.writeMarker(len(m.bgpDesired.Peers) > 0)
	}
	return errors.Join(err, m.closeOSPF(false))
}

// Withdraw takes the node out of the routing at once: BGP sessions end
// with Cease (routers drop the routes), L2 announcements are released and
// their addresses unbound, BFD sessions go AdminDown, and the restart
// marker is removed.
func (m *Manager) Withdraw() error {
	// After mu is released: the failover loop takes it.
	defer m.stopFailover()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	m.stopRenewal()
	errs := []error{m.closeBFD(true)}
	if m.bgp != nil {
		errs = append(errs, m.bgp.Close())
		m.bgp = nil
		m.bgpRef.Store(nil)
		m.writeMarker(false)
	}
	if m.bgpAddrs != nil {
		if err := m.bgpAddrs.Release(); err != nil {
			errs = append(errs, fmt.Errorf("bgp: unbind addresses: %w", err))
		}
		m.bgpAddrs = nil
	}
	if m.l2 != nil {
		errs = append(errs, m.l2.Close())
		m.l2 = nil
	}
	errs = append(errs, m.closeOSPF(true))
	return errors.Join(errs...)
}

func (m *Manager) stopRenewal() {
	if m.renewStop != nil {
		close(m.renewStop)
		<-m.renewDone
		m.renewStop = nil
	}
}

// closeBFD stops both speakers; withdraw takes every session down first,
// also those a speaker outliving the agent would keep for the next one.
func (m *Manager) closeBFD(withdraw bool) error {
	return errors.Join(m.bgpBFD.close(withdraw), m.hbBFD.close(withdraw))
}

// bfdSet is one BFD speaker and the sessions the manager runs on it, by
// peer address.
type bfdSet struct {
	kind     string // "bgp" or "heartbeat"
	sp       bfdSpeaker
	err      string
	sessions map[netip.Addr]bfd.SessionConfig
	stop     func()
	done     chan struct{}
}

func (s *bfdSet) close(withdraw bool) error {
	if s.sp == nil {
		return nil
	}
	var errs []error
	if withdraw {
		for _, cfg := range s.sessions {
			if err := s.sp.RemoveSession(cfg.Key()); err != nil {
				errs = append(errs, fmt.Errorf("bfd peer %s: %w", cfg.Peer, err))
			}
		}
	}
	errs = append(errs, s.sp.Close())
	s.stop()
	<-s.done
	s.sp = nil
	s.sessions = map[netip.Addr]bfd.SessionConfig{}
	return errors.Join(errs...)
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) NewTimer(d time.Duration) l2.Timer { return systemTimer{time.NewTimer(d)} }

type systemTimer struct{ t *time.Timer }

func (t systemTimer) C() <-chan time.Time        { return t.t.C }
func (t systemTimer) Stop() bool                 { return t.t.Stop() }
func (t systemTimer) Reset(d time.Duration) bool { return t.t.Reset(d) }
