package bfd

import "time"

// slowTxInterval is the least Desired Min TX Interval a session advertises
// while it is not Up (RFC 5880 §6.8.3), so that sessions towards peers that
// do not (yet) run BFD cost next to nothing.
const slowTxInterval = time.Second

// initialRemoteMinRx is bfd.RemoteMinRxInterval before the first packet
// from the peer (RFC 5880 §6.8.1): one microsecond, so that the local
// desired interval alone decides the rate.
const initialRemoteMinRx = time.Microsecond

// machineConfig is the part of a session the caller controls.
type machineConfig struct {
	DetectMult              uint8
	DesiredMinTx            time.Duration
	RequiredMinRx           time.Duration
	ControlPlaneIndependent bool
}

// transition is the outcome of one input to a machine: the state before and
// after, and the local diagnostic after.
type transition struct {
	from, to State
	diag     Diag
}

func (t transition) changed() bool { return t.from != t.to }

// machine is the state machine of one asynchronous-mode BFD session (RFC
// 5880 §6.2, §6.8). It does no I/O and reads no clock: every input carries
// the time, so tests step time exactly. The driver calls receive or expire
// for each event, then transmit, then arms a timer for deadline.
type machine struct {
	cfg        machineConfig
	localDiscr uint32
	// jitter returns a uniform value in [0, 1) for each transmission.
	jitter func() float64

	state     State
	localDiag Diag

	// What the peer last told us (bfd.Remote* of §6.8.1, and the rest of
	// its last packet).
	remoteDiscr      uint32
	remoteState      State
	remoteDiag       Diag
	remoteDemand     bool
	remoteCPI        bool
	remoteMinRx      time.Duration
	remoteDesiredTx  time.Duration
	remoteDetectMult uint8

	// advTx and advRx are bfd.DesiredMinTxInterval and
	// bfd.RequiredMinRxInterval: what the packets carry now. ackTx and ackRx
	// are the values the peer has acknowledged with a Final, the ones it may
	// still be working with; §6.8.3 keeps using them while a change that
	// would otherwise make it declare us down is being polled.
	advTx, advRx   time.Duration
	ackTx, ackRx   time.Duration
	poll           bool // a Poll Sequence is in progress
	pollTx, pollRx time.Duration
	final          bool // the peer polled: answer with F at once
	urgent         bool // send at once (state change, poll start)

	nextTx time.Time
	// detectFrom is when the last packet arrived; detecting says whether
	// the detection timer runs at all.
	detectFrom time.Time
	detecting  bool

	sent, received uint64
}

func newMachine(cfg machineConfig, localDiscr uint32, jitter func() float64, now time.Time) *machine {
	m := &machine{
		cfg:         cfg,
		localDiscr:  localDiscr,
		jitter:      jitter,
		state:       StateDown,
		remoteState: StateDown,
		remoteMinRx: initialRemoteMinRx,
		nextTx:      now, // the first packet goes out at once
	}
	m.advTx, m.advRx = m.wantTx(), cfg.RequiredMinRx
	m.ackTx, m.ackRx = m.advTx, m.advRx
	return m
}

// wantTx is the Desired Min TX Interval to advertise in the current state.
func (m *machine) wantTx() time.Duration {
	if m.state != StateUp {
		return max(m.cfg.DesiredMinTx, slowTxInterval)
	}
	return m.cfg.DesiredMinTx
}

// txBase is the local desired interval that paces transmission: an increase
// while Up waits for the peer's Final, so that the peer lengthens its
// detection time before we slow down (§6.8.3).
func (m *machine) txBase() time.Duration {
	if m.state == StateUp && m.advTx > m.ackTx {
		return m.ackTx
	}
	return m.advTx
}

// txInterval is the negotiated transmit interval before jitter: the slower
// of what we want and what the peer accepts.
func (m *machine) txInterval() time.Duration { return max(m.txBase(), m.remoteMinRx) }

// detectRx is the local Required Min RX Interval the detection time uses:
// a reduction while Up waits for the peer's Final, so that we do not expect
// the faster rate before the peer sends it (§6.8.3).
func (m *machine) detectRx() time.Duration {
	if m.state == StateUp && m.advRx < m.ackRx {
		return m.ackRx
	}
	return m.advRx
}

// rxInterval is the agreed transmit interval of the peer.
func (m *machine) rxInterval() time.Duration { return max(m.detectRx(), m.remoteDesiredTx) }

// detectionTime is the peer's detect multiplier times its agreed transmit
// interval (§6.8.4); zero before the first packet.
func (m *machine) detectionTime() time.Duration {
	return time.Duration(m.remoteDetectMult) * m.rxInterval()
}

// jittered shortens iv by a random 0–25% (§6.8.7), or to 75–90% of it when
// the local detect multiplier is 1, so that a single late packet cannot
// bring the session down.
func (m *machine) jittered(iv time.Duration) time.Duration {
	r := m.jitter()
	if m.cfg.DetectMult == 1 {
		return time.Duration(float64(iv) * (0.90 - 0.15*r))
	}
	return time.Duration(float64(iv) * (1 - 0.25*r))
}

// periodic reports whether periodic transmission is allowed: not when the
// peer asks for no packets (Required Min RX 0), nor when it runs Demand
// mode towards us with both ends Up, unless we need to poll (§6.8.7).
func (m *machine) periodic() bool {
	if m.remoteMinRx == 0 {
		return false
	}
	if m.remoteDemand && m.state == StateUp && m.remoteState == StateUp && !m.poll {
		return false
	}
	return true
}

// updateAdvertised recomputes the advertised intervals after a change of
// state or configuration; a change starts a Poll Sequence when there is a
// peer to poll (§6.8.3).
func (m *machine) updateAdvertised() {
	tx, rx := m.wantTx(), m.cfg.RequiredMinRx
	if tx == m.advTx && rx == m.advRx {
		return
	}
	m.advTx, m.advRx = tx, rx
	switch m.state {
	case StateInit, StateUp:
		if !m.poll {
			m.startPoll()
		}
		// Otherwise finishPoll sees that the values moved on and polls again.
	default:
		m.ackTx, m.ackRx = tx, rx
	}
}

func (m *machine) startPoll() {
	m.poll = true
	m.pollTx, m.pollRx = m.advTx, m.advRx
	m.urgent = true
}

// finishPoll ends the Poll Sequence on a Final: the peer now works with the
// values the poll carried.
func (m *machine) finishPoll() {
	if !m.poll {
		return
	}
	m.poll = false
	m.ackTx, m.ackRx = m.pollTx, m.pollRx
	if (m.advTx != m.ackTx || m.advRx != m.ackRx) && (m.state == StateInit || m.state == StateUp) {
		m.startPoll()
	}
}

func (m *machine) setState(s State, d Diag) {
	if s == m.state {
		return
	}
	m.state = s
	m.localDiag = d
	if s == StateDown || s == StateAdminDown {
		// A new peer incarnation knows only what our packets say from now on.
		m.poll = false
	}
	m.updateAdvertised()
	if s == StateDown || s == StateAdminDown {
		m.ackTx, m.ackRx = m.advTx, m.advRx
	}
	m.urgent = true
}

// honourFasterTx pulls the next transmission forward when the negotiated
// interval shrank, as §6.8.3 requires a faster rate to apply at once.
func (m *machine) honourFasterTx(now time.Time, before time.Duration) {
	if iv := m.txInterval(); iv < before && m.nextTx.After(now.Add(iv)) {
		m.nextTx = now.Add(m.jittered(iv))
	}
}

// receive applies a packet that passed the session-independent checks of
// §6.8.6 (see ControlPacket.UnmarshalBinary) and was selected for this
// session.
func (m *machine) receive(p *ControlPacket, now time.Time) transition {
	tr := transition{from: m.state}
	m.received++
	before := m.txInterval()
	m.remoteDiscr = p.MyDiscriminator
	m.remoteState = p.State
	m.remoteDiag = p.Diag
	m.remoteDemand = p.Demand
	m.remoteCPI = p.ControlPlaneIndependent
	m.remoteDetectMult = p.DetectMult
	m.remoteMinRx = p.RequiredMinRxInterval
	m.remoteDesiredTx = p.DesiredMinTxInterval
	if p.Final {
		m.finishPoll()
	}
	m.detectFrom, m.detecting = now, true
	if m.state == StateAdminDown {
		tr.to, tr.diag = m.state, m.localDiag
		return tr
	}
	if p.Poll {
		m.final = true
	}
	if p.State == StateAdminDown {
		if m.state != StateDown {
			m.setState(StateDown, DiagNeighborDown)
		}
	} else {
		switch m.state {
		case StateDown:
			switch p.State {
			case StateDown:
				// Keep the diagnostic: it still says why we are not Up.
				m.setState(StateInit, m.localDiag)
			case StateInit:
				m.setState(StateUp, DiagNone)
			}
		case StateInit:
			if p.State == StateInit || p.State == StateUp {
				m.setState(StateUp, DiagNone)
			}
		case StateUp:
			if p.State == StateDown {
				m.setState(StateDown, DiagNeighborDown)
			}
		}
	}
	m.honourFasterTx(now, before)
	tr.to, tr.diag = m.state, m.localDiag
	return tr
}

// expire runs the detection timer (§6.8.4): a Detection Time without a
// packet takes an Init or Up session Down with diag 1, and forgets the peer
// (bfd.RemoteDiscr is zeroed in any state).
func (m *machine) expire(now time.Time) transition {
	tr := transition{from: m.state, to: m.state, diag: m.localDiag}
	if !m.detecting || now.Before(m.detectFrom.Add(m.detectionTime())) {
		return tr
	}
	m.detecting = false
	m.remoteDiscr = 0
	m.remoteState = StateDown
	m.remoteDemand = false
	// Whatever the vanished peer asked for, a new one starts from scratch.
	m.remoteMinRx = initialRemoteMinRx
	if m.state == StateInit || m.state == StateUp {
		m.setState(StateDown, DiagControlDetectionExpired)
	}
	tr.to, tr.diag = m.state, m.localDiag
	return tr
}

// reconfigure applies new caller settings; changed intervals are polled.
func (m *machine) reconfigure(cfg machineConfig, now time.Time) {
	before := m.txInterval()
	m.cfg = cfg
	m.updateAdvertised()
	m.honourFasterTx(now, before)
}

// adminDown takes the session administratively down (§6.8.16); it keeps
// sending AdminDown packets so that the peer learns it.
func (m *machine) adminDown() transition {
	tr := transition{from: m.state}
	m.setState(StateAdminDown, DiagAdminDown)
	m.detecting = false
	tr.to, tr.diag = m.state, m.localDiag
	return tr
}

// transmit returns the packet to send at now, if any: an owed Final, an
// urgent packet after a state change or poll start, or the periodic one.
func (m *machine) transmit(now time.Time) (ControlPacket, bool) {
	due := m.periodic() && (m.urgent || !now.Before(m.nextTx))
	if !due && !m.final {
		return ControlPacket{}, false
	}
	p := ControlPacket{
		Diag:                    m.localDiag,
		State:                   m.state,
		ControlPlaneIndependent: m.cfg.ControlPlaneIndependent,
		DetectMult:              m.cfg.DetectMult,
		MyDiscriminator:         m.localDiscr,
		YourDiscriminator:       m.remoteDiscr,
		DesiredMinTxInterval:    m.advTx,
		RequiredMinRxInterval:   m.advRx,
		// Zero: we do not loop echo packets back (echo is not supported).
		RequiredMinEchoRxInterval: 0,
	}
	// A packet never carries both bits; the poll goes on in the next one.
	if m.final {
		p.Final = true
	} else {
		p.Poll = m.poll
	}
	m.final, m.urgent = false, false
	m.nextTx = now.Add(m.jittered(m.txInterval()))
	m.sent++
	return p, true
}

// deadline returns when expire or transmit next has work, and false when
// neither timer runs.
func (m *machine) deadline() (time.Time, bool) {
	var d time.Time
	ok := false
	if m.periodic() {
		d, ok = m.nextTx, true
	}
	if m.detecting {
		if t := m.detectFrom.Add(m.detectionTime()); !ok || t.Before(d) {
			d, ok = t, true
		}
	}
	return d, ok
}
