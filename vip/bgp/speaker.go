package bgp

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"time"

	api "github.com/osrg/gobgp/v3/api"
	"github.com/osrg/gobgp/v3/pkg/server"
)

// ErrClosed is returned by the methods of a closed Speaker.
var ErrClosed = errors.New("bgp speaker closed")

// DefaultConnectRetry is the wait between attempts to open a session when
// Options.ConnectRetry is zero. GoBGP's and FRR's default, 120s, would leave
// a VIP unannounced for minutes after a router reboots.
const DefaultConnectRetry = 5 * time.Second

// DefaultRestartTime is the graceful restart time when
// GracefulRestart.RestartTime is zero, FRR's default.
const DefaultRestartTime = 120 * time.Second

// Options configure a Speaker.
type Options struct {
	// ListenPort is the TCP port to accept sessions on. Zero (or negative)
	// means no listener: the speaker opens every session itself, and port
	// 179 stays free for other software on the node.
	ListenPort int32
	// ListenAddresses to listen on with ListenPort. Empty means all.
	ListenAddresses []netip.Addr
	// GracefulRestart is the graceful restart behaviour of the peers with
	// Peer.GracefulRestart set.
	GracefulRestart GracefulRestart
	// ConnectRetry is the wait between attempts to open a session (GoBGP
	// randomises it up to twice this). Zero means DefaultConnectRetry.
	ConnectRetry time.Duration
	// Logger receives the speaker's and GoBGP's messages. Nil discards them.
	Logger *slog.Logger
}

// GracefulRestart configures RFC 4724 graceful restart.
type GracefulRestart struct {
	// RestartTime is how long peers keep this node's routes after its
	// session drops without a notification, rounded down to seconds
	// (at most 4095). Zero means DefaultRestartTime.
	RestartTime time.Duration
	// HelperOnly keeps the routes of restarting peers without asking them
	// to keep ours: peers withdraw this node's routes when its session
	// drops.
	HelperOnly bool
	// Restarting announces that this speaker has just restarted (the R
	// bit): peers keep the routes of the previous run as stale until this
	// one has sent its own and End-of-RIB. It applies to the sessions of
	// the first Reconcile only; set it when the agent restarted on purpose.
	Restarting bool
}

// Speaker is the node's BGP speaker. Its methods are safe for concurrent
// use; changes are applied one at a time.
type Speaker struct {
	opts Options
	log  *slog.Logger
	srv  *server.BgpServer
	// stopWatch ends the peer-event watch.
	stopWatch context.CancelFunc

	// mu serialises the changes: Reconcile, SetPeerEnabled, Close.
	mu         sync.Mutex
	closed     bool
	running    bool
	startedAS  uint32
	startedID  netip.Addr
	restarting bool
	peers      map[netip.Addr]Peer
	routes     map[netip.Prefix]Route
	// disabled holds the peers shut down by SetPeerEnabled, with the reason,
	// whether or not they are currently desired.
	disabled map[netip.Addr]string

	events *events
}

// New starts a speaker with no peers and no routes; Reconcile gives it
// both. Its sockets open in the network namespace of the process.
func New(opts Options) (*Speaker, error) {
	if opts.GracefulRestart.RestartTime < 0 || opts.GracefulRestart.RestartTime > 4095*time.Second {
		return nil, fmt.Errorf("graceful restart time %v: must be 0-4095s", opts.GracefulRestart.RestartTime)
	}
	if opts.ListenPort > 65535 {
		return nil, fmt.Errorf("listen port %d: out of range", opts.ListenPort)
	}
	if opts.ConnectRetry < 0 {
		return nil, fmt.Errorf("connect retry %v: negative", opts.ConnectRetry)
	}
	l := opts.Logger
	if l == nil {
		l = slog.New(slog.DiscardHandler)
	}
	s := &Speaker{
		opts:       opts,
		log:        l,
		restarting: opts.GracefulRestart.Restarting,
		peers:      map[netip.Addr]Peer{},
		routes:     map[netip.Prefix]Route{},
		disabled:   map[netip.Addr]string{},
		events:     newEvents(),
	}
	s.srv = server.NewBgpServer(server.LoggerOption(&gobgpLogger{log: l.With("component", "gobgp"), ev: s.events}))
	go s.srv.Serve()
	ctx, cancel := context.WithCancel(context.Background())
	s.stopWatch = cancel
	if err := s.srv.WatchEvent(ctx, &api.WatchEventRequest{Peer: &api.WatchEventRequest_Peer{}}, s.events.onWatch); err != nil {
		cancel()
		s.srv.Stop()
		return nil, fmt.Errorf("watch peer events: %w", err)
	}
	return s, nil
}

// Close withdraws everything: every session ends with a Cease
// notification, so the peers drop this node's routes at once (no graceful
// restart). Subscriptions end. An agent restarting on purpose exits without
// Close instead (see the package documentation).
func (s *Speaker) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	var err error
	if s.running {
		err = s.stopBGP(context.Background())
	}
	s.stopWatch()
	s.srv.Stop()
	s.events.close()
	return err
}

// Reconcile makes the speaker's state d, changing only what differs (see
// the package documentation). On error, what was applied before the
// failing step stays applied and the next Reconcile continues from there.
func (s *Speaker) Reconcile(ctx context.Context, d Desired) error {
	if err := d.check(); err != nil {
		return fmt.Errorf("desired bgp state: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if s.running && (d.LocalAS != s.startedAS || d.RouterID != s.startedID) {
		if d.LocalAS != 0 {
			s.log.Info("restarting bgp speaker for a new local AS or router id",
				"oldAS", s.startedAS, "newAS", d.LocalAS, "oldRouterID", s.startedID, "newRouterID", d.RouterID)
		}
		if err := s.stopBGP(ctx); err != nil {
			return err
		}
	}
	if d.LocalAS == 0 {
		return nil
	}
	if !s.running {
		if err := s.startBGP(ctx, d.LocalAS, d.RouterID); err != nil {
			return err
		}
	}

	// Withdraw first, so that a route moving to another VIP is never
	// missing at the end.
	want := map[netip.Prefix]Route{}
	for _, r := range d.Routes {
		want[r.Prefix] = r
	}
	for _, prefix := range slices.SortedFunc(maps.Keys(s.routes), comparePrefix) {
		if _, ok := want[prefix]; ok {
			continue
		}
		if err := s.withdraw(ctx, s.routes[prefix]); err != nil {
			return err
		}
	}
	for _, r := range d.Routes {
		if old, ok := s.routes[r.Prefix]; ok && old.sameAttributes(r) {
			if old.VIP != r.VIP {
				s.routes[r.Prefix] = r
			}
			continue
		}
		if err := s.announce(ctx, r); err != nil {
			return err
		}
	}

	wantPeers := map[netip.Addr]Peer{}
	for _, p := range d.Peers {
		p.Address, p.LocalAddress = p.Address.Unmap(), p.LocalAddress.Unmap()
		wantPeers[p.Address] = p
	}
	for _, addr := range slices.SortedFunc(maps.Keys(s.peers), netip.Addr.Compare) {
		if p, ok := wantPeers[addr]; ok && p == s.peers[addr] {
			continue
		}
		// Changed settings take a new session: GoBGP's UpdatePeer applies
		// only some of them to a running one.
		if err := s.srv.DeletePeer(ctx, &api.DeletePeerRequest{Address: addr.String()}); err != nil {
			return fmt.Errorf("delete bgp peer %s: %w", addr, err)
		}
		delete(s.peers, addr)
		s.log.Info("bgp peer deleted", "peer", addr)
	}
	for _, p := range d.Peers {
		p = wantPeers[p.Address.Unmap()]
		if _, ok := s.peers[p.Address]; ok {
			continue
		}
		if err := s.srv.AddPeer(ctx, &api.AddPeerRequest{Peer: s.apiPeer(p)}); err != nil {
			return fmt.Errorf("add bgp peer %s: %w", p.Address, err)
		}
		s.peers[p.Address] = p
		s.events.configured(p.Address)
		s.log.Info("bgp peer added", "peer", p.Address, "as", p.AS, "adminDown", s.disabled[p.Address] != "")
	}
	s.restarting = false
	return nil
}

// SetPeerEnabled shuts the session with a peer down (enabled false) or
// lets it come up again, for BFD: a peer whose BFD session is down must not
// carry traffic. A shut-down peer is administratively down: its session
// ends with a Cease notification (the peer drops this node's routes
// without waiting for graceful restart) and no new one is opened. The
// state holds across Reconcile, also for a peer not configured yet, until
// it is enabled again. reason is sent to the peer in the notification
// (RFC 8203) and shown in PeerState.
func (s *Speaker) SetPeerEnabled(ctx context.Context, addr netip.Addr, enabled bool, reason string) error {
	addr = addr.Unmap()
	if !addr.IsValid() {
		return fmt.Errorf("peer address: missing")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	_, configured := s.peers[addr]
	if !enabled {
		reason = cmp.Or(reason, "shut down")
		if _, was := s.disabled[addr]; was {
			s.disabled[addr] = reason
			return nil
		}
		s.disabled[addr] = reason
		if configured {
			if err := s.srv.DisablePeer(ctx, &api.DisablePeerRequest{Address: addr.String(), Communication: reason}); err != nil {
				return fmt.Errorf("shut down bgp peer %s: %w", addr, err)
			}
		}
		s.log.Info("bgp peer shut down", "peer", addr, "reason", reason)
		return nil
	}
	if _, was := s.disabled[addr]; !was {
		return nil
	}
	delete(s.disabled, addr)
	if configured {
		if err := s.srv.EnablePeer(ctx, &api.EnablePeerRequest{Address: addr.String()}); err != nil {
			return fmt.Errorf("enable bgp peer %s: %w", addr, err)
		}
	}
	s.log.Info("bgp peer enabled", "peer", addr)
	return nil
}

func (s *Speaker) startBGP(ctx context.Context, as uint32, id netip.Addr) error {
	g := &api.Global{Asn: as, RouterId: id.String(), ListenPort: -1}
	if s.opts.ListenPort > 0 {
		g.ListenPort = s.opts.ListenPort
		for _, a := range s.opts.ListenAddresses {
			g.ListenAddresses = append(g.ListenAddresses, a.String())
		}
	}
	if err := s.srv.StartBgp(ctx, &api.StartBgpRequest{Global: g}); err != nil {
		return fmt.Errorf("start bgp as %d router id %s: %w", as, id, err)
	}
	s.running, s.startedAS, s.startedID = true, as, id
	s.log.Info("bgp speaker started", "as", as, "routerID", id, "listenPort", g.ListenPort)
	return nil
}

// stopBGP ends every session with a Cease notification and forgets the
// applied state.
func (s *Speaker) stopBGP(ctx context.Context) error {
	if err := s.srv.StopBgp(ctx, &api.StopBgpRequest{}); err != nil {
		return fmt.Errorf("stop bgp: %w", err)
	}
	s.running = false
	for addr := range s.peers {
		s.events.unconfigured(addr)
	}
	clear(s.peers)
	clear(s.routes)
	s.log.Info("bgp speaker stopped")
	return nil
}

func (s *Speaker) announce(ctx context.Context, r Route) error {
	p, err := r.path()
	if err != nil {
		return err
	}
	// A path for a prefix already announced replaces it.
	if _, err := s.srv.AddPath(ctx, &api.AddPathRequest{TableType: api.TableType_GLOBAL, Path: p}); err != nil {
		return fmt.Errorf("announce %s: %w", r.Prefix, err)
	}
	s.routes[r.Prefix] = r
	s.log.Info("bgp route announced", "vip", r.VIP, "prefix", r.Prefix)
	return nil
}

func (s *Speaker) withdraw(ctx context.Context, r Route) error {
	p, err := r.path()
	if err != nil {
		return err
	}
	// By path, not by the UUID AddPath returned: a replaced path keeps no
	// UUID of its own.
	if err := s.srv.DeletePath(ctx, &api.DeletePathRequest{TableType: api.TableType_GLOBAL, Family: p.Family, Path: p}); err != nil {
		return fmt.Errorf("withdraw %s: %w", r.Prefix, err)
	}
	delete(s.routes, r.Prefix)
	s.log.Info("bgp route withdrawn", "vip", r.VIP, "prefix", r.Prefix)
	return nil
}

func (s *Speaker) apiPeer(p Peer) *api.Peer {
	hold, keepalive := p.holdAndKeepalive()
	fam := apiFamily(p.Address.Is4())
	out := &api.Peer{
		Conf: &api.PeerConf{
			NeighborAddress: p.Address.String(),
			PeerAsn:         p.AS,
			AuthPassword:    p.Password,
			AdminDown:       s.disabled[p.Address] != "",
		},
		Timers: &api.Timers{Config: &api.TimersConfig{
			ConnectRetry:      uint64(max(cmp.Or(s.opts.ConnectRetry, DefaultConnectRetry)/time.Second, 1)),
			HoldTime:          hold,
			KeepaliveInterval: keepalive,
		}},
		Transport: &api.Transport{RemotePort: uint32(cmp.Or(p.Port, DefaultPort))},
		AfiSafis: []*api.AfiSafi{{
			Config: &api.AfiSafiConfig{Family: fam, Enabled: true},
		}},
	}
	if p.LocalAddress.IsValid() {
		out.Transport.LocalAddress = p.LocalAddress.String()
	}
	if p.EBGPMultihop > 0 {
		out.EbgpMultihop = &api.EbgpMultihop{Enabled: true, MultihopTtl: uint32(p.EBGPMultihop)}
	}
	if p.GracefulRestart {
		gr := s.opts.GracefulRestart
		out.GracefulRestart = &api.GracefulRestart{
			Enabled:         true,
			RestartTime:     uint32(cmp.Or(gr.RestartTime, DefaultRestartTime) / time.Second),
			HelperOnly:      gr.HelperOnly,
			LocalRestarting: s.restarting && !gr.HelperOnly,
		}
		out.AfiSafis[0].MpGracefulRestart = &api.MpGracefulRestart{Config: &api.MpGracefulRestartConfig{Enabled: true}}
	}
	return out
}

func comparePrefix(a, b netip.Prefix) int {
	return cmp.Or(a.Addr().Compare(b.Addr()), cmp.Compare(a.Bits(), b.Bits()))
}
