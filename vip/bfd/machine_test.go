package bfd

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func fixedJitter(v float64) func() float64 { return func() float64 { return v } }

var cfg300x3 = machineConfig{DetectMult: 3, DesiredMinTx: 300 * time.Millisecond, RequiredMinRx: 300 * time.Millisecond}

// peerPacket is what a peer in state s with discriminator 77 sends to a
// machine with discriminator 11.
func peerPacket(s State) ControlPacket {
	return ControlPacket{State: s, DetectMult: 3, MyDiscriminator: 77, YourDiscriminator: 11,
		DesiredMinTxInterval: 300 * time.Millisecond, RequiredMinRxInterval: 300 * time.Millisecond}
}

// machineIn returns a machine with discriminator 11 driven into state s by
// packets from peer 77 at t0 (AdminDown by adminDown).
func machineIn(t *testing.T, s State) *machine {
	t.Helper()
	m := newMachine(cfg300x3, 11, fixedJitter(0), t0)
	switch s {
	case StateInit:
		m.receive(&ControlPacket{State: StateDown, DetectMult: 3, MyDiscriminator: 77}, t0)
	case StateUp:
		m.receive(&ControlPacket{State: StateDown, DetectMult: 3, MyDiscriminator: 77}, t0)
		p := peerPacket(StateUp)
		m.receive(&p, t0)
	case StateAdminDown:
		m.adminDown()
	}
	if m.state != s {
		t.Fatalf("setup: machine in %v, want %v", m.state, s)
	}
	return m
}

// TestMachineTransitions is the reception state table of RFC 5880 §6.8.6.
func TestMachineTransitions(t *testing.T) {
	tests := []struct {
		local, remote State
		want          State
		wantDiag      Diag
	}{
		{StateDown, StateAdminDown, StateDown, DiagNone},
		{StateDown, StateDown, StateInit, DiagNone},
		{StateDown, StateInit, StateUp, DiagNone},
		{StateDown, StateUp, StateDown, DiagNone},
		{StateInit, StateAdminDown, StateDown, DiagNeighborDown},
		{StateInit, StateDown, StateInit, DiagNone},
		{StateInit, StateInit, StateUp, DiagNone},
		{StateInit, StateUp, StateUp, DiagNone},
		{StateUp, StateAdminDown, StateDown, DiagNeighborDown},
		{StateUp, StateDown, StateDown, DiagNeighborDown},
		{StateUp, StateInit, StateUp, DiagNone},
		{StateUp, StateUp, StateUp, DiagNone},
		{StateAdminDown, StateDown, StateAdminDown, DiagAdminDown},
		{StateAdminDown, StateUp, StateAdminDown, DiagAdminDown},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%v receives %v", tc.local, tc.remote), func(t *testing.T) {
			m := machineIn(t, tc.local)
			p := peerPacket(tc.remote)
			tr := m.receive(&p, t0.Add(time.Millisecond))
			if tr.from != tc.local || tr.to != tc.want || m.state != tc.want {
				t.Errorf("transition %v -> %v (state %v), want %v -> %v", tr.from, tr.to, m.state, tc.local, tc.want)
			}
			if m.localDiag != tc.wantDiag || tr.diag != tc.wantDiag {
				t.Errorf("diag %v (reported %v), want %v", m.localDiag, tr.diag, tc.wantDiag)
			}
		})
	}
}

// sim connects two machines with a zero-delay wire and runs them in
// simulated time: every event happens at an exact, known instant.
type sim struct {
	t     *testing.T
	now   time.Time
	nodes [2]*simNode
}

type simNode struct {
	m *machine
	// drop silences the node: its packets never arrive.
	drop bool
	// events are its transitions, with their times.
	events []simEvent
	sentAt []time.Time
}

type simEvent struct {
	at time.Time
	transition
}

func newSim(t *testing.T, a, b machineConfig, jitter func() float64) *sim {
	return &sim{t: t, now: t0, nodes: [2]*simNode{
		{m: newMachine(a, 1, jitter, t0)},
		{m: newMachine(b, 2, jitter, t0)},
	}}
}

func (s *sim) record(i int, tr transition) {
	if tr.changed() {
		s.nodes[i].events = append(s.nodes[i].events, simEvent{s.now, tr})
	}
}

// flush lets node i send, delivers, and lets each receiver answer, until
// nobody has anything to send at this instant.
func (s *sim) flush(i int) {
	for range 100 {
		p, ok := s.nodes[i].m.transmit(s.now)
		if !ok {
			return
		}
		s.nodes[i].sentAt = append(s.nodes[i].sentAt, s.now)
		if s.nodes[i].drop {
			return
		}
		j := 1 - i
		s.record(j, s.nodes[j].m.receive(&p, s.now))
		i = j
	}
	s.t.Fatal("the machines keep answering each other at one instant")
}

// runUntil processes every timer due up to end, in order.
func (s *sim) runUntil(end time.Time) {
	for range 100000 {
		next, found := time.Time{}, false
		for _, n := range s.nodes {
			if d, ok := n.m.deadline(); ok && (!found || d.Before(next)) {
				next, found = d, true
			}
		}
		if !found || next.After(end) {
			s.now = end
			return
		}
		s.now = next
		for i, n := range s.nodes {
			s.record(i, n.m.expire(s.now))
			s.flush(i)
		}
	}
	s.t.Fatal("simulation did not reach its end time")
}

func (s *sim) states() [2]State { return [2]State{s.nodes[0].m.state, s.nodes[1].m.state} }

func (s *sim) up(t *testing.T) {
	t.Helper()
	s.runUntil(s.now.Add(5 * time.Second))
	if s.states() != [2]State{StateUp, StateUp} {
		t.Fatalf("states after 5 s: %v, want both Up", s.states())
	}
}

func TestMachineThreeWayHandshake(t *testing.T) {
	s := newSim(t, cfg300x3, cfg300x3, fixedJitter(0.5))
	s.up(t)
	// Node 0's Down reaches node 1 first: node 1 goes Init and answers, so
	// node 0 sees Init while Down and goes straight Up; node 1 follows.
	want := [2][]transition{
		{{StateDown, StateUp, DiagNone}},
		{{StateDown, StateInit, DiagNone}, {StateInit, StateUp, DiagNone}},
	}
	for i, n := range s.nodes {
		var got []transition
		for _, e := range n.events {
			got = append(got, e.transition)
		}
		if fmt.Sprint(got) != fmt.Sprint(want[i]) {
			t.Errorf("node %d transitions %v, want %v", i, got, want[i])
		}
		m := n.m
		if m.remoteDiscr != uint32(2-i) {
			t.Errorf("node %d remote discriminator %d, want %d", i, m.remoteDiscr, 2-i)
		}
		if m.poll {
			t.Errorf("node %d still polling after the handshake", i)
		}
		if m.advTx != 300*time.Millisecond || m.txInterval() != 300*time.Millisecond {
			t.Errorf("node %d advertises %v and sends every %v, want 300ms once Up", i, m.advTx, m.txInterval())
		}
		if m.detectionTime() != 900*time.Millisecond {
			t.Errorf("node %d detection time %v, want 900ms", i, m.detectionTime())
		}
	}
}

// TestMachineDetectionTimeout silences node 1: node 0 must go Down with
// diag 1 exactly one detection time after node 1's last packet, and node 1
// then hears node 0's Down and goes Down with diag 3.
func TestMachineDetectionTimeout(t *testing.T) {
	s := newSim(t, cfg300x3, cfg300x3, fixedJitter(0.3))
	s.up(t)
	s.nodes[1].drop = true
	silencedAt := s.now
	lastFrom1 := s.nodes[1].sentAt[len(s.nodes[1].sentAt)-1]
	s.runUntil(s.now.Add(5 * time.Second))

	ev0, ev1 := s.nodes[0].events, s.nodes[1].events
	if len(ev0) != 2 || ev0[1].transition != (transition{StateUp, StateDown, DiagControlDetectionExpired}) {
		t.Fatalf("node 0 events %v, want Up -> Down with diag 1 last", ev0)
	}
	if got, want := ev0[1].at, lastFrom1.Add(900*time.Millisecond); !got.Equal(want) {
		t.Errorf("node 0 went Down at %v after silencing, want %v (last packet + 3 x 300ms)", got.Sub(silencedAt), want.Sub(silencedAt))
	}
	if n := len(ev1); n < 3 || ev1[2].transition != (transition{StateUp, StateDown, DiagNeighborDown}) {
		t.Fatalf("node 1 events %v, want Up -> Down with diag 3 after the handshake", ev1)
	}
	if ev1[2].at.Before(ev0[1].at) {
		t.Errorf("node 1 went Down at %v, before node 0 told it (%v)", ev1[2].at, ev0[1].at)
	}
	if m := s.nodes[0].m; m.remoteDiscr != 0 {
		t.Errorf("node 0 kept remote discriminator %d after the detection time, want 0", m.remoteDiscr)
	}
	if m := s.nodes[0].m; m.advTx != time.Second {
		t.Errorf("node 0 advertises %v while Down, want 1s", m.advTx)
	}
}

// TestMachineExpireBoundary checks the detection timer to the nanosecond.
func TestMachineExpireBoundary(t *testing.T) {
	m := machineIn(t, StateUp)
	detect := m.detectionTime()
	if detect != 900*time.Millisecond {
		t.Fatalf("detection time %v, want 900ms", detect)
	}
	if tr := m.expire(t0.Add(detect - time.Nanosecond)); tr.changed() {
		t.Fatalf("went %v -> %v one nanosecond before the detection time", tr.from, tr.to)
	}
	if d, ok := m.deadline(); !ok || d.After(t0.Add(detect)) {
		t.Errorf("deadline %v (%v), want no later than the detection time %v", d, ok, t0.Add(detect))
	}
	tr := m.expire(t0.Add(detect))
	if tr != (transition{StateUp, StateDown, DiagControlDetectionExpired}) {
		t.Fatalf("at the detection time: %+v, want Up -> Down diag 1", tr)
	}
}

func TestMachineRemoteAdminDown(t *testing.T) {
	s := newSim(t, cfg300x3, cfg300x3, fixedJitter(0))
	s.up(t)
	tr := s.nodes[1].m.adminDown()
	s.record(1, tr)
	s.flush(1)
	if got := s.nodes[0].m; got.state != StateDown || got.localDiag != DiagNeighborDown || got.remoteDiag != DiagAdminDown {
		t.Fatalf("node 0 in %v diag %v (remote diag %v), want Down, neighbor signaled down, remote admin down",
			got.state, got.localDiag, got.remoteDiag)
	}
	// The removed end keeps saying AdminDown; the other stays Down.
	s.runUntil(s.now.Add(3 * time.Second))
	if s.states() != [2]State{StateDown, StateAdminDown} {
		t.Errorf("states %v, want Down and AdminDown", s.states())
	}
}

// TestMachinePollFinal changes timers while Up and follows RFC 5880 §6.5 and
// §6.8.3 packet by packet.
func TestMachinePollFinal(t *testing.T) {
	s := newSim(t, cfg300x3, cfg300x3, fixedJitter(0))
	s.up(t)
	a, b := s.nodes[0].m, s.nodes[1].m

	// Slowing down: node 0 asks to send every 600ms and polls; it keeps
	// 300ms until node 1's Final, so node 1 never misses the new rate.
	slow := cfg300x3
	slow.DesiredMinTx = 600 * time.Millisecond
	a.reconfigure(slow, s.now)
	p, ok := a.transmit(s.now)
	if !ok || !p.Poll || p.Final || p.DesiredMinTxInterval != 600*time.Millisecond {
		t.Fatalf("first packet after the change: %+v (sent %v), want P with 600ms at once", p, ok)
	}
	if a.txInterval() != 300*time.Millisecond {
		t.Errorf("interval before the Final %v, want the old 300ms", a.txInterval())
	}
	b.receive(&p, s.now)
	if b.detectionTime() != 1800*time.Millisecond {
		t.Errorf("node 1 detection time %v after the poll, want 3 x 600ms", b.detectionTime())
	}
	f, ok := b.transmit(s.now)
	if !ok || !f.Final || f.Poll {
		t.Fatalf("node 1's answer %+v (sent %v), want F at once", f, ok)
	}
	a.receive(&f, s.now)
	if a.poll || a.txInterval() != 600*time.Millisecond {
		t.Errorf("after the Final: polling %v, interval %v, want done and 600ms", a.poll, a.txInterval())
	}

	// Speeding up reception: node 0 lowers Required Min RX to 100ms; its
	// detection time keeps the old 300ms base until node 1 answers.
	fast := slow
	fast.RequiredMinRx = 100 * time.Millisecond
	a.reconfigure(fast, s.now)
	if a.detectionTime() != 900*time.Millisecond {
		t.Errorf("detection time before the Final %v, want 3 x 300ms", a.detectionTime())
	}
	p, _ = a.transmit(s.now)
	if !p.Poll || p.RequiredMinRxInterval != 100*time.Millisecond {
		t.Fatalf("packet after lowering rx %+v, want P with 100ms", p)
	}
	b.receive(&p, s.now)
	if b.txInterval() != 300*time.Millisecond {
		t.Errorf("node 1 interval %v, want its own 300ms (node 0 now accepts 100ms)", b.txInterval())
	}
	f, _ = b.transmit(s.now)
	a.receive(&f, s.now)
	if a.poll || a.detectionTime() != 900*time.Millisecond || a.detectRx() != 100*time.Millisecond {
		t.Errorf("after the Final: polling %v, rx base %v", a.poll, a.detectRx())
	}

	// A second change during a poll is polled again after the Final.
	a.reconfigure(cfg300x3, s.now)
	p1, _ := a.transmit(s.now)
	again := cfg300x3
	again.DesiredMinTx = 400 * time.Millisecond
	a.reconfigure(again, s.now)
	b.receive(&p1, s.now)
	f, _ = b.transmit(s.now)
	a.receive(&f, s.now)
	if !a.poll || a.pollTx != 400*time.Millisecond {
		t.Fatalf("after the first Final: polling %v for %v, want a new poll for 400ms", a.poll, a.pollTx)
	}
	s.runUntil(s.now.Add(2 * time.Second))
	if a.poll || a.txInterval() != 400*time.Millisecond || b.detectionTime() != 1200*time.Millisecond {
		t.Errorf("after the second poll: polling %v, interval %v, node 1 detection %v", a.poll, a.txInterval(), b.detectionTime())
	}
	if s.states() != [2]State{StateUp, StateUp} {
		t.Errorf("states %v after the timer changes, want both Up", s.states())
	}
}

// TestMachineSlowTxBeforeUp: while not Up a session advertises and uses at
// least one second (RFC 5880 §6.8.3), whatever it is configured to.
func TestMachineSlowTxBeforeUp(t *testing.T) {
	m := newMachine(cfg300x3, 11, fixedJitter(0), t0)
	var sent []time.Time
	check := func(now time.Time) {
		t.Helper()
		if p, ok := m.transmit(now); ok {
			sent = append(sent, now)
			if p.DesiredMinTxInterval != time.Second {
				t.Errorf("%v packet advertises %v, want 1s", p.State, p.DesiredMinTxInterval)
			}
		}
	}
	for now := t0; now.Before(t0.Add(5 * time.Second)); now = now.Add(10 * time.Millisecond) {
		if now.Equal(t0.Add(2 * time.Second)) {
			// The peer shows up in Down: we go Init, still slow.
			p := ControlPacket{State: StateDown, DetectMult: 3, MyDiscriminator: 77, RequiredMinRxInterval: 10 * time.Millisecond, DesiredMinTxInterval: time.Second}
			m.receive(&p, now)
		}
		m.expire(now)
		check(now)
	}
	if m.state != StateInit {
		t.Fatalf("state %v, want Init (peer never answered Init)", m.state)
	}
	for i := 1; i < len(sent); i++ {
		// The state change at 2s sends at once; periodic packets keep 1s.
		if gap := sent[i].Sub(sent[i-1]); gap < time.Second && !sent[i].Equal(t0.Add(2*time.Second)) {
			t.Errorf("packets %d and %d %v apart, want at least 1s before Up", i-1, i, gap)
		}
	}
	p := peerPacket(StateInit)
	m.receive(&p, t0.Add(5*time.Second))
	if p, _ := m.transmit(t0.Add(5 * time.Second)); m.state != StateUp || p.DesiredMinTxInterval != 300*time.Millisecond {
		t.Errorf("after Up: state %v, advertised %v, want Up and 300ms", m.state, p.DesiredMinTxInterval)
	}
}

func TestMachineJitter(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	tests := []struct {
		name     string
		mult     uint8
		lo, hi   float64
		extremes []float64
	}{
		{"detect mult 3: 75-100%", 3, 0.75, 1.0, []float64{0, 0.9999999}},
		{"detect mult 1: 75-90%", 1, 0.75, 0.90, []float64{0, 0.9999999}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var r float64
			cfg := cfg300x3
			cfg.DetectMult = tc.mult
			m := newMachine(cfg, 11, func() float64 { return r }, t0)
			iv := time.Second
			lo, hi := time.Duration(float64(iv)*tc.lo), time.Duration(float64(iv)*tc.hi)
			seenLo, seenHi := hi, lo
			draws := append([]float64(nil), tc.extremes...)
			for range 10000 {
				draws = append(draws, rng.Float64())
			}
			now := t0
			for _, r = range draws {
				if _, ok := m.transmit(now); !ok {
					t.Fatal("no packet at its due time")
				}
				gap := m.nextTx.Sub(now)
				if gap < lo || gap > hi {
					t.Fatalf("interval %v for jitter %v outside [%v, %v]", gap, r, lo, hi)
				}
				seenLo, seenHi = min(seenLo, gap), max(seenHi, gap)
				now = m.nextTx
			}
			// The whole range is used, not a corner of it.
			if seenLo > lo+iv/100 || seenHi < hi-iv/100 {
				t.Errorf("intervals span [%v, %v], want close to [%v, %v]", seenLo, seenHi, lo, hi)
			}
		})
	}
}

// TestMachineQuietTransmission covers the cases where RFC 5880 §6.8.7 forbids
// periodic packets: the peer wants none, or runs Demand mode towards us.
func TestMachineQuietTransmission(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*ControlPacket)
		quiet  bool
	}{
		{"ordinary peer", func(*ControlPacket) {}, false},
		{"required min rx 0", func(p *ControlPacket) { p.RequiredMinRxInterval = 0 }, true},
		{"demand mode", func(p *ControlPacket) { p.Demand = true }, true},
		{"demand mode, peer polls", func(p *ControlPacket) { p.Demand = true; p.Poll = true }, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := machineIn(t, StateUp)
			now := t0.Add(time.Millisecond)
			m.transmit(now) // the urgent packet of the Up transition
			f := peerPacket(StateUp)
			f.Final = true // ends the poll of the Up transition
			m.receive(&f, now)
			p := peerPacket(StateUp)
			tc.mutate(&p)
			m.receive(&p, now)
			if p.Poll {
				f, ok := m.transmit(now)
				if !ok || !f.Final {
					t.Fatalf("no Final for the peer's poll: %+v %v", f, ok)
				}
			}
			_, sent := m.transmit(now.Add(10 * time.Second))
			if sent == tc.quiet {
				t.Errorf("periodic packet sent: %v, want %v", sent, !tc.quiet)
			}
		})
	}
}
