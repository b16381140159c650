package failover

import (
	"fmt"
	"slices"
	"time"
)

// PeerState is what a node knows of another node of the VIP.
type PeerState int

const (
	// Unknown: no heartbeat state; counts as alive.
	Unknown PeerState = iota
	// Up: heartbeats flow both ways.
	Up
	// Lost: this node stopped hearing the peer (its detection time
	// expired).
	Lost
	// SaysLost: the peer told this node it stopped hearing it.
	SaysLost
)

func (s PeerState) String() string {
	switch s {
	case Up:
		return "up"
	case Lost:
		return "lost"
	case SaysLost:
		return "says it lost us"
	default:
		return "unknown"
	}
}

// Assignment is who serves one VIP, as the controller (or the standalone
// configuration) decided.
type Assignment struct {
	VIP      string
	Active   string
	Standbys []string
}

// Peer is what this node knows of one other node.
type Peer struct {
	State PeerState
	// UpSince is when the session last came Up (zero unless Up).
	UpSince time.Time
	// LostSince is when this node stopped hearing it (Lost), or when it
	// said it stopped hearing this node (SaysLost); zero otherwise.
	LostSince time.Time
}

// Timing are the durations the rules wait.
type Timing struct {
	// HoldDown is how long the active waits after its first standby came
	// back before it reclaims the VIP (a detection time is enough).
	HoldDown time.Duration
	// Grace is how long a standby that took over keeps the VIP while the
	// assignment still names the active it lost. By then the controller
	// has seen whether that active's agent still renews its Lease: if it
	// had died, the controller promotes this standby; if the assignment
	// still names the old active, it is alive and only the path between
	// the two nodes failed, so the standby yields (the controller's
	// assignment wins). Longer than the agents' Lease duration.
	Grace time.Duration
}

// Decision is whether this node answers for the VIP, and why.
type Decision struct {
	Serve  bool
	Reason string
}

// Decide applies the package's rules for node self. peers holds what self
// knows of the other nodes of a; missing nodes are Unknown.
func Decide(self string, a Assignment, peers map[string]Peer, now time.Time, tm Timing) Decision {
	holdDown := tm.HoldDown
	state := func(n string) Peer { return peers[n] }
	switch {
	case a.Active == self:
		if len(a.Standbys) == 0 {
			return Decision{true, "active, no standby"}
		}
		first := a.Standbys[0]
		p := state(first)
		switch {
		case p.State == SaysLost && tm.Grace > 0 && !p.LostSince.IsZero() && now.Sub(p.LostSince) >= tm.Grace:
			// The standby yields at the end of its grace (the assignment
			// still names us), so the active must take the VIP back then,
			// or a lasting one-way loss leaves nobody answering.
			return Decision{true, fmt.Sprintf("active: standby %s lost our heartbeats %s ago, but its grace is over and the assignment still names us", first, now.Sub(p.LostSince).Round(time.Millisecond))}
		case p.State == SaysLost:
			return Decision{false, fmt.Sprintf("active, but standby %s lost our heartbeats and takes over", first)}
		case p.State == Up && now.Sub(p.UpSince) < holdDown:
			return Decision{false, fmt.Sprintf("active, waiting %s after standby %s came back before reclaiming", holdDown-now.Sub(p.UpSince), first)}
		}
		return Decision{true, "active"}
	case slices.Contains(a.Standbys, self):
		// No active assigned (none could serve) counts as a lost one.
		if a.Active != "" && state(a.Active).State != Lost {
			return Decision{false, fmt.Sprintf("standby: active %s is %s", a.Active, state(a.Active).State)}
		}
		for _, s := range a.Standbys {
			if s == self {
				break
			}
			if state(s).State != Lost {
				return Decision{false, fmt.Sprintf("standby: earlier standby %s is %s", s, state(s).State)}
			}
		}
		if a.Active == "" {
			return Decision{true, "standby: no active assigned and no earlier standby alive"}
		}
		if lost := state(a.Active).LostSince; tm.Grace > 0 && !lost.IsZero() && now.Sub(lost) >= tm.Grace {
			return Decision{false, fmt.Sprintf("standby: lost active %s %s ago, but the assignment still names it: it is alive, only the path between us failed", a.Active, now.Sub(lost).Round(time.Millisecond))}
		}
		return Decision{true, fmt.Sprintf("standby took over: lost the heartbeats of active %s and of every earlier standby", a.Active)}
	}
	return Decision{false, "not assigned"}
}
