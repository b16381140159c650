package manager

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"time"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/vip/bfd"
	"github.com/novaedge/novaedge/vip/failover"
	"github.com/novaedge/novaedge/vip/l2"
)

// DefaultL2FailoverGrace is Options.L2FailoverGrace when zero: longer than
// the agents' Lease duration (the controller's default is 10 s), so that
// the controller has promoted a standby that took over from a dead active
// before the grace ends.
const DefaultL2FailoverGrace = 15 * time.Second

// defaultHeartbeat are the timers of the heartbeats of an L2 VIP without
// BFD settings: 3 × 300 ms, the seeds' BFD default and what two shared
// cores keep without flapping.
var defaultHeartbeat = bfd.SessionConfig{
	DetectMultiplier: bfd.DefaultDetectMultiplier,
	DesiredMinTx:     bfd.DefaultInterval,
	RequiredMinRx:    bfd.DefaultInterval,
}

// heartbeatStartup is how long, after its session to a peer was added, a
// node waits for it to come Up before it treats the peer's silence as the
// package failover does (Unknown: alive). Sessions come Up within about two
// packets each way at the one-second rate of sessions that are not Up; the
// detection time is added on top. The active does not answer meanwhile: a
// restarted active must not answer next to the standby that took over
// while it was away, before the heartbeats tell that standby to stop.
const heartbeatStartup = 3 * time.Second

// l2Plan is one L2ARP VIP of the last apply, ready to be decided.
type l2Plan struct {
	// state is the VIP's index in Manager.vips.
	state int
	vip   string
	addrs []netip.Addr
	// ifaces are the interfaces to announce on; err says why they could
	// not be found (the VIP is then not announced).
	ifaces []string
	err    string
	asg    failover.Assignment
	// peers are the other nodes of the VIP with a heartbeat address; empty
	// without heartbeats (no standby, no node addresses, or no address of
	// this node), where the assignment alone decides.
	peers map[string]netip.Addr
	// timers of the heartbeat sessions this VIP asks for.
	timers   bfd.SessionConfig
	local    netip.Addr
	holdDown time.Duration
}

// planL2 turns the L2ARP VIPs of c into plans, resolving interfaces.
func (m *Manager) planL2(c *compiled, states []VIPState) ([]l2Plan, []error) {
	var plans []l2Plan
	var errs []error
	self := c.node.GetNodeName()
	for i, v := range c.vips {
		a := v.asg
		if a.GetMode() != pb.VIPMode_VIP_MODE_L2ARP {
			continue
		}
		p := l2Plan{state: i, vip: a.GetVip(), addrs: v.addrs, timers: defaultHeartbeat, asg: failover.Assignment{
			VIP: a.GetVip(), Active: a.GetActiveNode(), Standbys: slices.Clone(a.GetStandbyNodes()),
		}}
		if v.bfd != nil {
			p.timers = *v.bfd
		}
		p.holdDown = detectionTime(p.timers)
		// Snapshots that name no active node still carry the role.
		if p.asg.Active == "" && a.GetRole() == pb.VIPRole_VIP_ROLE_ACTIVE {
			p.asg.Active = self
		}
		if local, ok := v.nodes[self]; ok && len(p.asg.Standbys) > 0 {
			p.local = local
			for _, n := range append([]string{p.asg.Active}, p.asg.Standbys...) {
				if addr, ok := v.nodes[n]; ok && n != self && addr != local {
					if p.peers == nil {
						p.peers = map[string]netip.Addr{}
					}
					p.peers[n] = addr
				}
			}
		}
		ifaces := a.GetInterfaces()
		if len(ifaces) == 0 {
			for _, addr := range v.addrs {
				ifc, err := m.routes.InterfaceFor(addr)
				if err != nil {
					err = fmt.Errorf("vip %s: interfaces: %w", a.GetVip(), err)
					errs = append(errs, err)
					p.err = err.Error()
					continue
				}
				if !slices.Contains(ifaces, ifc) {
					ifaces = append(ifaces, ifc)
				}
			}
			states[i].Interfaces = ifaces
		}
		p.ifaces = ifaces
		plans = append(plans, p)
	}
	return plans, errs
}

// detectionTime is how long a session with cfg's timers takes to declare
// the peer lost (when both ends use the same timers).
func detectionTime(cfg bfd.SessionConfig) time.Duration {
	n := cmpOr(time.Duration(cfg.DetectMultiplier), bfd.DefaultDetectMultiplier)
	return n * max(cmpOr(cfg.DesiredMinTx, bfd.DefaultInterval), cmpOr(cfg.RequiredMinRx, bfd.DefaultInterval))
}

func cmpOr(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// timing returns the failover timing of p.
func (m *Manager) timing(p *l2Plan) failover.Timing {
	return failover.Timing{HoldDown: p.holdDown, Grace: max(m.grace, 0)}
}

// decide applies the failover rules to p with the heartbeat state of its
// peers, after the startup wait of the active (heartbeatStartup).
func (m *Manager) decide(p *l2Plan, self string, now time.Time) failover.Decision {
	m.bfdMu.Lock()
	peers := make(map[string]failover.Peer, len(p.peers))
	for n, addr := range p.peers {
		peers[n] = m.hb[addr]
	}
	var startupEnd time.Time
	if p.asg.Active == self && len(p.asg.Standbys) > 0 {
		if addr, ok := p.peers[p.asg.Standbys[0]]; ok && m.hb[addr].State == failover.Unknown {
			if added, ok := m.hbAdded[addr]; ok {
				startupEnd = added.Add(heartbeatStartup + p.holdDown)
			}
		}
	}
	m.bfdMu.Unlock()
	if now.Before(startupEnd) {
		return failover.Decision{Reason: fmt.Sprintf("active, waiting up to %s for the heartbeats of standby %s before answering (it may have taken over)", startupEnd.Sub(now).Round(time.Millisecond), p.asg.Standbys[0])}
	}
	return failover.Decide(self, p.asg, peers, now, m.timing(p))
}

// reconcileL2 decides every L2 VIP and announces those this node serves,
// releasing the others. It runs on each apply and on each heartbeat change
// or timing deadline, with mu held.
func (m *Manager) reconcileL2() []error {
	var errs []error
	now := m.clock.Now()
	want := map[l2.Announcement]int{} // → index in m.vips
	for i := range m.l2Plans {
		p := &m.l2Plans[i]
		st := &m.vips[p.state]
		st.Announced = false
		if p.err != "" {
			st.Reason = p.err
			continue
		}
		d := m.decide(p, m.self, now)
		st.Reason = d.Reason
		if prev, ok := m.decisions[p.vip]; !ok || prev != d.Serve {
			m.log.Info("l2 failover decision", "vip", p.vip, "serve", d.Serve, "reason", d.Reason)
			m.decisions[p.vip] = d.Serve
		}
		if !d.Serve {
			continue
		}
		for _, ifc := range p.ifaces {
			for _, addr := range p.addrs {
				want[l2.Announcement{Interface: ifc, Addr: addr}] = p.state
			}
		}
	}
	for vip := range m.decisions {
		if !slices.ContainsFunc(m.l2Plans, func(p l2Plan) bool { return p.vip == vip }) {
			delete(m.decisions, vip)
		}
	}
	m.serving.Store(len(want) > 0)
	if len(want) > 0 && m.l2 == nil {
		o := m.opts.L2
		if o.Logger == nil {
			o.Logger = m.log.With("component", "l2")
		}
		if o.Clock == nil {
			o.Clock = m.clock
		}
		an, err := l2.New(o)
		if err != nil {
			return append(errs, fmt.Errorf("l2 announcer: %w", err))
		}
		m.l2 = an
		m.startRenewal()
	}
	if m.l2 == nil {
		return errs
	}
	if len(want) > 0 {
		// Announce needs a fresh lease, and a manager that decided to
		// serve is alive.
		m.l2.Renew(now.Add(m.ttl))
	}
	for _, a := range m.l2.Active() {
		if _, ok := want[a]; ok {
			continue
		}
		if err := m.l2.Release(a.Interface, a.Addr); err != nil {
			errs = append(errs, fmt.Errorf("release %s: %w", a, err))
		}
	}
	announced := map[int]bool{}
	failed := map[int]bool{}
	for _, a := range slices.SortedFunc(maps.Keys(want), compareAnnouncement) {
		i := want[a]
		if err := m.l2.Announce(a.Interface, a.Addr); err != nil {
			err = fmt.Errorf("vip %s: %w", m.vips[i].VIP, err)
			errs = append(errs, err)
			m.vips[i].Reason = err.Error()
			failed[i] = true
			continue
		}
		announced[i] = true
	}
	for i := range announced {
		m.vips[i].Announced = !failed[i]
	}
	return errs
}

// heartbeatSessions returns the BFD sessions the L2 VIPs ask for, by peer
// address, and status problems for VIPs whose timers lose to another's.
func (m *Manager) heartbeatSessions() (map[netip.Addr]bfd.SessionConfig, map[netip.Addr]string, []string) {
	want := map[netip.Addr]bfd.SessionConfig{}
	owner := map[netip.Addr]string{}
	var problems []string
	for _, p := range m.l2Plans {
		for _, n := range slices.Sorted(maps.Keys(p.peers)) {
			addr := p.peers[n]
			cfg := p.timers
			cfg.Peer, cfg.Local = addr, p.local
			if cur, ok := want[addr]; ok {
				if !sameTimers(cur, cfg) || cur.Local != cfg.Local {
					problems = append(problems, fmt.Sprintf("vip %s: bfd: node %s (%s) already has a heartbeat session with the timers and address of vip %s; one session per peer", p.vip, n, addr, owner[addr]))
				}
				continue
			}
			want[addr], owner[addr] = cfg, p.vip
		}
	}
	return want, owner, problems
}

// heartbeat is what a BFD state change tells about the peer's node.
// prev is what was known before; startupEnd is when the startup wait of
// the session ends (heartbeatStartup).
func heartbeat(prev failover.Peer, ev bfd.StateChange, startupEnd time.Time) failover.Peer {
	switch {
	case ev.To == bfd.StateUp:
		if prev.State == failover.Unknown && !ev.At.Before(startupEnd) {
			// First contact after the startup wait: this node has been
			// answering alone and the peer has just started (it does not
			// answer before it hears us), so there is nothing to hold
			// down for; the active would otherwise stop answering each
			// time a standby starts. The zero time is "up for ever" to
			// the rules.
			return failover.Peer{State: failover.Up}
		}
		return failover.Peer{State: failover.Up, UpSince: ev.At}
	case ev.To == bfd.StateAdminDown:
		// Our session was removed: nothing known any more.
		return failover.Peer{}
	case ev.To != bfd.StateDown:
		// Init keeps the diagnostic of the Down before it.
		return prev
	case ev.RemoteState == bfd.StateAdminDown:
		// The peer's speaker closed on purpose (its agent stops): it no
		// longer answers for anything, as good as lost.
		return lostSince(prev, failover.Lost, ev.At)
	case ev.Diag == bfd.DiagControlDetectionExpired:
		return lostSince(prev, failover.Lost, ev.At)
	case ev.Diag == bfd.DiagNeighborDown:
		return lostSince(prev, failover.SaysLost, ev.At)
	}
	return prev
}

// lostSince keeps the first time of a lasting loss: the grace counts from
// it.
func lostSince(prev failover.Peer, s failover.PeerState, at time.Time) failover.Peer {
	if prev.State == s && !prev.LostSince.IsZero() {
		return prev
	}
	return failover.Peer{State: s, LostSince: at}
}

// nextDeadline is the earliest future time at which a decision can change
// without a heartbeat event (a hold-down or grace ends); zero for none.
func (m *Manager) nextDeadline(now time.Time) time.Time {
	var next time.Time
	consider := func(t time.Time) {
		if t.After(now) && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	m.bfdMu.Lock()
	defer m.bfdMu.Unlock()
	for _, p := range m.l2Plans {
		tm := m.timing(&p)
		for _, addr := range p.peers {
			h := m.hb[addr]
			if added, ok := m.hbAdded[addr]; ok && h.State == failover.Unknown {
				consider(added.Add(heartbeatStartup + p.holdDown))
			}
			switch {
			case h.State == failover.Up && !h.UpSince.IsZero():
				consider(h.UpSince.Add(tm.HoldDown))
			case (h.State == failover.Lost || h.State == failover.SaysLost) && tm.Grace > 0 && !h.LostSince.IsZero():
				consider(h.LostSince.Add(tm.Grace))
			}
		}
	}
	return next
}

// wakeFailover asks the failover loop to decide again.
func (m *Manager) wakeFailover() {
	select {
	case m.foWake <- struct{}{}:
	default:
	}
}

// startFailover runs the loop that re-decides the L2 VIPs on heartbeat
// changes and deadlines, until stopFailover.
func (m *Manager) startFailover() {
	if m.foStop != nil {
		return
	}
	m.foStop, m.foDone = make(chan struct{}), make(chan struct{})
	stop, done := m.foStop, m.foDone
	go func() {
		defer close(done)
		t := m.clock.NewTimer(time.Hour)
		t.Stop()
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-m.foWake:
			case <-t.C():
			}
			m.mu.Lock()
			var next time.Time
			now := m.clock.Now()
			if !m.closed {
				for _, err := range m.reconcileL2() {
					m.log.Error("l2 failover", "error", err)
				}
				next = m.nextDeadline(now)
			}
			m.mu.Unlock()
			t.Stop()
			if !next.IsZero() {
				t.Reset(next.Sub(now))
			}
		}
	}()
}

// stopFailover ends the loop; it must be called without mu held (the loop
// takes it).
func (m *Manager) stopFailover() {
	m.mu.Lock()
	stop, done := m.foStop, m.foDone
	m.foStop = nil
	m.mu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
}
