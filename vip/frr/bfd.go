package frr

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/novaedge/novaedge/vip/bfd"
	"github.com/novaedge/novaedge/vip/internal/eventq"
)

// DefaultBFDPoll is how often BFDPeers reads FRR's sessions when
// BFDOptions.Poll is zero: bfdd tells nobody but its own daemons about
// state changes, so a change is seen at most this much later.
const DefaultBFDPoll = 100 * time.Millisecond

// BFDRunning reports whether FRR's bfdd runs with its vty socket in dir
// (empty: DefaultSocketDir): then it holds UDP port 3784 and the node's
// sessions belong there.
func BFDRunning(dir string) bool {
	_, err := os.Stat(filepath.Join(cmp.Or(dir, DefaultSocketDir), "bfdd.vty"))
	return err == nil
}

// BFDOptions configure BFDPeers.
type BFDOptions struct {
	// SocketDir and Vtysh as in Options.
	SocketDir string
	Vtysh     string
	// Poll is the interval of state reads. Zero means DefaultBFDPoll.
	Poll time.Duration
	// Logger receives state changes and failures. Nil discards.
	Logger *slog.Logger
	// StateFile records the peers written, so that the next agent removes
	// those it no longer wants (after Ready) and never one it did not
	// write. Empty: peers left by an earlier agent stay until removed by
	// hand.
	StateFile string
}

// BFDPeers runs BFD sessions in FRR's bfdd, as "peer" entries of its bfd
// block, for a node where bfdd runs: one BFD speaker per node. It has the
// methods of a bfd.Speaker that the VIP manager uses. bfdd outlives the
// agent, so Close removes only the sessions without the C bit (the L2
// heartbeats, which must end with their agent) and leaves the others to
// the next agent; a session's C bit is otherwise not FRR's to send.
type BFDPeers struct {
	opts BFDOptions
	log  *slog.Logger

	mu      sync.Mutex
	closed  bool
	desired map[bfd.SessionKey]bfd.SessionConfig
	last    map[bfd.SessionKey]bfd.SessionState
	subs    eventq.Fanout[bfd.StateChange]
	// earlier are the peers an earlier agent wrote (StateFile) that this
	// one has not adopted yet; Ready removes them.
	earlier map[bfd.SessionKey]bool
	ready   bool

	stop chan struct{}
	done chan struct{}
}

// NewBFDPeers starts reading FRR's sessions.
func NewBFDPeers(opts BFDOptions) (*BFDPeers, error) {
	opts.SocketDir = cmp.Or(opts.SocketDir, DefaultSocketDir)
	opts.Vtysh = cmp.Or(opts.Vtysh, DefaultVtysh)
	opts.Poll = cmp.Or(opts.Poll, DefaultBFDPoll)
	if opts.Poll < 10*time.Millisecond {
		return nil, fmt.Errorf("bfd poll %v: below 10ms", opts.Poll)
	}
	p := &BFDPeers{opts: opts, log: opts.Logger, desired: map[bfd.SessionKey]bfd.SessionConfig{},
		last: map[bfd.SessionKey]bfd.SessionState{}, stop: make(chan struct{}), done: make(chan struct{})}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	earlier, err := p.load()
	if err != nil {
		return nil, err
	}
	p.earlier = earlier
	go p.run()
	return p, nil
}

// Ready says the wanted sessions are all added: the peers an earlier agent
// wrote and this one did not adopt are removed from bfdd.
func (p *BFDPeers) Ready() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ready || p.closed {
		return
	}
	p.ready = true
	for k := range p.earlier {
		if err := p.vtysh("configure terminal", "bfd", "no "+peerLine(k)); err != nil {
			p.log.Warn("cannot remove a bfd peer an earlier agent wrote", "session", k, "error", err)
			continue
		}
		p.log.Info("removed a bfd peer an earlier agent wrote and this one does not want", "session", k)
	}
	p.earlier = nil
	p.saveLocked()
}

// peerRecord is one recorded peer.
type peerRecord struct {
	Peer      netip.Addr `json:"peer"`
	Local     netip.Addr `json:"local"`
	Interface string     `json:"interface,omitempty"`
}

func (p *BFDPeers) load() (map[bfd.SessionKey]bool, error) {
	out := map[bfd.SessionKey]bool{}
	if p.opts.StateFile == "" {
		return out, nil
	}
	b, err := os.ReadFile(p.opts.StateFile)
	if errors.Is(err, os.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("bfd peers state file: %w", err)
	}
	var recs []peerRecord
	if err := json.Unmarshal(b, &recs); err != nil {
		return nil, fmt.Errorf("bfd peers state file %s: %w", p.opts.StateFile, err)
	}
	for _, r := range recs {
		out[bfd.SessionKey{Peer: r.Peer, Local: r.Local, Interface: r.Interface}] = true
	}
	return out, nil
}

// saveLocked records the peers written: the wanted ones, and those of an
// earlier agent not yet removed.
func (p *BFDPeers) saveLocked() {
	if p.opts.StateFile == "" {
		return
	}
	var recs []peerRecord
	for k := range p.desired {
		recs = append(recs, peerRecord{Peer: k.Peer, Local: k.Local, Interface: k.Interface})
	}
	for k := range p.earlier {
		recs = append(recs, peerRecord{Peer: k.Peer, Local: k.Local, Interface: k.Interface})
	}
	slices.SortFunc(recs, func(a, b peerRecord) int {
		return cmp.Or(a.Peer.Compare(b.Peer), a.Local.Compare(b.Local), strings.Compare(a.Interface, b.Interface))
	})
	b, err := json.MarshalIndent(recs, "", " ")
	if err == nil {
		err = os.MkdirAll(filepath.Dir(p.opts.StateFile), 0o755)
	}
	if err == nil {
		err = os.WriteFile(p.opts.StateFile, b, 0o644)
	}
	if err != nil {
		p.log.Warn("cannot record the bfd peers written; the next agent will not remove them", "file", p.opts.StateFile, "error", err)
	}
}

// peerLine is the bfd block's line for the session's key.
func peerLine(k bfd.SessionKey) string {
	s := "peer " + k.Peer.String() + " local-address " + k.Local.String()
	if k.Interface != "" {
		s += " interface " + k.Interface
	}
	return s
}

// AddSession writes the session into bfdd (an existing one, left by an
// earlier agent, is adopted with the timers set again).
func (p *BFDPeers) AddSession(cfg bfd.SessionConfig) (bfd.SessionKey, error) {
	cfg, err := cfg.Normalized()
	if err != nil {
		return bfd.SessionKey{}, err
	}
	key := cfg.Key()
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.closed:
		return key, bfd.ErrClosed
	}
	if _, ok := p.desired[key]; ok {
		return key, fmt.Errorf("session %v: %w", key, bfd.ErrSessionExists)
	}
	cmds := []string{"configure terminal", "bfd", peerLine(key),
		fmt.Sprintf("detect-multiplier %d", cfg.DetectMultiplier),
		fmt.Sprintf("receive-interval %d", max(cfg.RequiredMinRx.Milliseconds(), 10)),
		fmt.Sprintf("transmit-interval %d", max(cfg.DesiredMinTx.Milliseconds(), 10)),
		"no shutdown"}
	if err := p.vtysh(cmds...); err != nil {
		return key, fmt.Errorf("session %v in FRR's bfdd: %w", key, err)
	}
	p.desired[key] = cfg
	delete(p.earlier, key)
	p.saveLocked()
	p.log.Info("bfd session added to FRR's bfdd", "session", key)
	return key, nil
}

// RemoveSession deletes the session from bfdd, which sends AdminDown.
func (p *BFDPeers) RemoveSession(key bfd.SessionKey) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return bfd.ErrClosed
	}
	if _, ok := p.desired[key]; !ok {
		return fmt.Errorf("session %v: %w", key, bfd.ErrNoSession)
	}
	delete(p.desired, key)
	delete(p.last, key)
	if err := p.vtysh("configure terminal", "bfd", "no "+peerLine(key)); err != nil {
		// Still written: recorded for the next agent to remove.
		if p.earlier == nil {
			p.earlier = map[bfd.SessionKey]bool{}
		}
		p.earlier[key] = true
		p.saveLocked()
		return fmt.Errorf("session %v in FRR's bfdd: %w", key, err)
	}
	p.saveLocked()
	return nil
}

// Sessions returns the state of this agent's sessions as bfdd last
// reported it.
func (p *BFDPeers) Sessions() []bfd.SessionState {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []bfd.SessionState
	for k, cfg := range p.desired {
		st, ok := p.last[k]
		if !ok {
			st = bfd.SessionState{SessionKey: k, State: bfd.StateDown, RemoteState: bfd.StateDown}
		}
		st.Config = cfg
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b bfd.SessionState) int { return strings.Compare(a.String(), b.String()) })
	return out
}

// Subscribe returns the state changes seen from now on.
func (p *BFDPeers) Subscribe() (<-chan bfd.StateChange, func()) { return p.subs.Subscribe() }

// Close stops reading and removes the sessions without the C bit; bfdd
// keeps the others for the next agent.
func (p *BFDPeers) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	var errs []error
	for k, cfg := range p.desired {
		if cfg.ControlPlaneIndependent {
			continue
		}
		if err := p.vtysh("configure terminal", "bfd", "no "+peerLine(k)); err != nil {
			errs = append(errs, fmt.Errorf("session %v in FRR's bfdd: %w", k, err))
			continue
		}
		delete(p.desired, k)
	}
	p.saveLocked()
	p.mu.Unlock()
	p.subs.Close()
	close(p.stop)
	<-p.done
	return errors.Join(errs...)
}

func (p *BFDPeers) vtysh(cmds ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := runVtysh(ctx, p.opts.Vtysh, p.opts.SocketDir, cmds...)
	text := strings.TrimSpace(out)
	// vtysh reports a refused command on its output, not always in its
	// exit status.
	if err == nil && strings.Contains(text, "% ") {
		err = errors.New("refused")
	}
	if err != nil {
		return fmt.Errorf("vtysh %s: %w: %s", strings.Join(cmds[1:], " / "), err, text)
	}
	return nil
}

// frrBFDPeer is one session of bfdd's show bfd peers json.
type frrBFDPeer struct {
	Multihop         bool   `json:"multihop"`
	Peer             string `json:"peer"`
	Local            string `json:"local"`
	Interface        string `json:"interface"`
	ID               uint32 `json:"id"`
	RemoteID         uint32 `json:"remote-id"`
	Status           string `json:"status"`
	Diagnostic       string `json:"diagnostic"`
	RemoteDiagnostic string `json:"remote-diagnostic"`
	ReceiveInterval  uint32 `json:"receive-interval"`
	TransmitInterval uint32 `json:"transmit-interval"`
	DetectMultiplier uint8  `json:"detect-multiplier"`
	RemoteReceive    uint32 `json:"remote-receive-interval"`
	RemoteTransmit   uint32 `json:"remote-transmit-interval"`
	RemoteDetect     uint8  `json:"remote-detect-multiplier"`
}

var frrStates = map[string]bfd.State{"shutdown": bfd.StateAdminDown, "down": bfd.StateDown, "init": bfd.StateInit, "up": bfd.StateUp}

// frrDiags maps bfdd's diagnostic texts to codes.
var frrDiags = map[string]bfd.Diag{
	"ok": bfd.DiagNone, "control detection time expired": bfd.DiagControlDetectionExpired,
	"echo function failed": bfd.DiagEchoFailed, "neighbor signaled session down": bfd.DiagNeighborDown,
	"forwarding plane reset": bfd.DiagForwardingPlaneReset, "path down": bfd.DiagPathDown,
	"concatenated path down": bfd.DiagConcatenatedPathDown, "administratively down": bfd.DiagAdminDown,
	"reverse concatenated path down": bfd.DiagReverseConcatPathDown,
}

// parseBFDPeers converts bfdd's sessions into states by key.
func parseBFDPeers(out []byte, now time.Time) (map[bfd.SessionKey]bfd.SessionState, error) {
	var peers []frrBFDPeer
	if err := json.Unmarshal(out, &peers); err != nil {
		return nil, fmt.Errorf("show bfd peers json: %w", err)
	}
	m := map[bfd.SessionKey]bfd.SessionState{}
	for _, fp := range peers {
		peer, err1 := netip.ParseAddr(fp.Peer)
		local, err2 := netip.ParseAddr(fp.Local)
		state, ok := frrStates[fp.Status]
		if fp.Multihop || err1 != nil || err2 != nil || !ok {
			continue // not one of ours (no local address), or unknown
		}
		ms := func(v uint32) time.Duration { return time.Duration(v) * time.Millisecond }
		st := bfd.SessionState{
			SessionKey:             bfd.SessionKey{Peer: peer, Local: local, Interface: fp.Interface},
			State:                  state,
			Diag:                   frrDiags[fp.Diagnostic],
			RemoteDiag:             frrDiags[fp.RemoteDiagnostic],
			RemoteState:            bfd.StateDown,
			LocalDiscriminator:     fp.ID,
			RemoteDiscriminator:    fp.RemoteID,
			RemoteDetectMultiplier: fp.RemoteDetect,
			RemoteDesiredMinTx:     ms(fp.RemoteTransmit),
			RemoteRequiredMinRx:    ms(fp.RemoteReceive),
			TxInterval:             ms(max(fp.TransmitInterval, fp.RemoteReceive)),
			RxInterval:             ms(max(fp.RemoteTransmit, fp.ReceiveInterval)),
			LastChange:             now,
		}
		switch {
		case state == bfd.StateUp || state == bfd.StateInit:
			st.RemoteState = bfd.StateUp
		case st.RemoteDiag == bfd.DiagAdminDown:
			st.RemoteState = bfd.StateAdminDown
		}
		st.DetectionTime = time.Duration(fp.RemoteDetect) * st.RxInterval
		m[st.SessionKey] = st
	}
	return m, nil
}

// run polls bfdd and reports the changes of this agent's sessions.
func (p *BFDPeers) run() {
	defer close(p.done)
	t := time.NewTicker(p.opts.Poll)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		out, err := runVtysh(ctx, p.opts.Vtysh, p.opts.SocketDir, "show bfd peers json")
		cancel()
		var now map[bfd.SessionKey]bfd.SessionState
		if err == nil {
			now, err = parseBFDPeers([]byte(out), time.Now())
		} else {
			err = fmt.Errorf("show bfd peers json: %w: %s", err, strings.TrimSpace(out))
		}
		if err != nil {
			if !failing {
				p.log.Warn("cannot read FRR's bfd sessions", "error", err)
			}
			failing = true
			continue
		}
		failing = false
		p.update(now)
	}
}

func (p *BFDPeers) update(now map[bfd.SessionKey]bfd.SessionState) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k := range p.desired {
		st, ok := now[k]
		if !ok {
			continue // not written yet, or removed by someone else
		}
		prev, known := p.last[k]
		if known && prev.State == st.State {
			st.LastChange = prev.LastChange
			p.last[k] = st
			continue
		}
		from := bfd.StateDown
		if known {
			from = prev.State
		}
		p.last[k] = st
		if from == st.State {
			continue
		}
		ev := bfd.StateChange{SessionKey: k, From: from, To: st.State, Diag: st.Diag,
			RemoteState: st.RemoteState, RemoteDiag: st.RemoteDiag, At: st.LastChange}
		p.log.Info("bfd session state changed (FRR's bfdd)", "session", k, "from", from, "to", st.State, "diag", st.Diag)
		p.subs.Publish(ev)
	}
}
