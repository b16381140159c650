package bfd

import (
	"errors"
	"fmt"
	"net/netip"
	"time"
)

// Defaults and limits of [SessionConfig].
const (
	// DefaultDetectMultiplier is used when SessionConfig.DetectMultiplier
	// is zero (the seeds' default).
	DefaultDetectMultiplier = 3
	// DefaultInterval is used when SessionConfig.DesiredMinTx or
	// RequiredMinRx is zero (the seeds' default).
	DefaultInterval = 300 * time.Millisecond
	// MinInterval is the shortest interval a session accepts: faster
	// sessions flap on a loaded node long before they detect anything
	// useful (FRR has the same floor).
	MinInterval = 10 * time.Millisecond
)

// Errors of the session API.
var (
	// ErrInvalidConfig wraps every rejection of a SessionConfig; the
	// message names the field.
	ErrInvalidConfig = errors.New("invalid bfd session config")
	// ErrEchoNotSupported is wrapped, together with ErrInvalidConfig, in
	// the error for a SessionConfig with EchoMode set.
	ErrEchoNotSupported = errors.New("bfd echo mode is not supported")
	// ErrSessionExists is returned by AddSession for a key already in use.
	ErrSessionExists = errors.New("bfd session already exists")
	// ErrNoSession is returned for a key with no session.
	ErrNoSession = errors.New("no such bfd session")
	// ErrClosed is returned by every method after Close.
	ErrClosed = errors.New("bfd speaker closed")
)

// SessionKey identifies a session: one per peer, local address and
// interface.
type SessionKey struct {
	Peer      netip.Addr
	Local     netip.Addr
	Interface string
}

func (k SessionKey) String() string {
	if k.Interface == "" {
		return fmt.Sprintf("%v<-%v", k.Peer, k.Local)
	}
	return fmt.Sprintf("%v<-%v%%%s", k.Peer, k.Local, k.Interface)
}

// SessionConfig configures one single-hop session.
type SessionConfig struct {
	// Peer is the neighbour's address, IPv4 or IPv6. Required. An IPv6
	// link-local peer needs Interface; zones are not accepted in addresses
	// (Interface says it).
	Peer netip.Addr
	// Local is the address the session sends from and the peer sends to, of
	// the same family as Peer. Required; it must be configured on the host
	// when the session is added.
	Local netip.Addr
	// Interface, when not empty, ties the session to one interface: packets
	// leave through it (SO_BINDTODEVICE) and are accepted only when they
	// arrive on it. Empty means the routing table picks the interface and
	// packets are accepted from any.
	Interface string
	// DetectMultiplier is how many packets in a row the peer may miss
	// before it declares us down. Zero means DefaultDetectMultiplier.
	DetectMultiplier uint8
	// DesiredMinTx is how often we would like to send while Up; the peer's
	// RequiredMinRx can slow it down. While the session is not Up at least
	// one second is used (RFC 5880 §6.8.3). Zero means DefaultInterval;
	// otherwise at least MinInterval.
	DesiredMinTx time.Duration
	// RequiredMinRx is the fastest rate we accept packets at. Zero means
	// DefaultInterval; otherwise at least MinInterval.
	RequiredMinRx time.Duration
	// ControlPlaneIndependent sets the C bit, which tells the peer that
	// this session survives a restart of the control plane it serves (so
	// the peer may keep forwarding through a graceful restart). Set it only
	// when that is true: when the speaker runs in a process that lives on
	// while the agent and its BGP speaker restart.
	ControlPlaneIndependent bool
	// EchoMode asks for the BFD echo function. It is not supported:
	// sessions asking for it are rejected with ErrEchoNotSupported.
	EchoMode bool
}

// Normalized checks c and returns it with the defaults applied, as
// AddSession would take it; the error names the field.
func (c SessionConfig) Normalized() (SessionConfig, error) { return c.normalize() }

// Key is the session's key.
func (c SessionConfig) Key() SessionKey { return c.key() }

// normalize checks c, applies defaults and returns the result.
func (c SessionConfig) normalize() (SessionConfig, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	if c.EchoMode {
		return c, fmt.Errorf("%w: EchoMode: %w (asynchronous mode only; turn echo off)", ErrInvalidConfig, ErrEchoNotSupported)
	}
	for _, f := range []struct {
		name string
		a    *netip.Addr
	}{{"Peer", &c.Peer}, {"Local", &c.Local}} {
		a := *f.a
		switch {
		case !a.IsValid():
			return c, bad("%s: address missing", f.name)
		case a.Zone() != "":
			return c, bad("%s: %v has a zone; set Interface instead", f.name, a)
		case a.IsUnspecified():
			return c, bad("%s: %v is unspecified", f.name, a)
		case a.IsMulticast():
			return c, bad("%s: %v is multicast", f.name, a)
		}
		*f.a = a.Unmap()
	}
	if c.Peer.Is4() != c.Local.Is4() {
		return c, bad("Local: %v is not of the same address family as Peer %v", c.Local, c.Peer)
	}
	if c.Peer == c.Local {
		return c, bad("Peer: %v is the local address", c.Peer)
	}
	if c.Interface == "" && (c.Peer.IsLinkLocalUnicast() || c.Local.IsLinkLocalUnicast()) && c.Peer.Is6() {
		return c, bad("Interface: required with the IPv6 link-local addresses %v and %v", c.Peer, c.Local)
	}
	if c.DetectMultiplier == 0 {
		c.DetectMultiplier = DefaultDetectMultiplier
	}
	for _, f := range []struct {
		name string
		d    *time.Duration
	}{{"DesiredMinTx", &c.DesiredMinTx}, {"RequiredMinRx", &c.RequiredMinRx}} {
		switch d := *f.d; {
		case d == 0:
			*f.d = DefaultInterval
		case d < MinInterval:
			return c, bad("%s: %v is below the minimum of %v", f.name, d, MinInterval)
		case d > maxInterval:
			return c, bad("%s: %v is above the maximum of %v", f.name, d, maxInterval)
		default:
			*f.d = d.Truncate(time.Microsecond)
		}
	}
	return c, nil
}

func (c SessionConfig) key() SessionKey {
	return SessionKey{Peer: c.Peer, Local: c.Local, Interface: c.Interface}
}

func (c SessionConfig) machineConfig() machineConfig {
	return machineConfig{
		DetectMult:              c.DetectMultiplier,
		DesiredMinTx:            c.DesiredMinTx,
		RequiredMinRx:           c.RequiredMinRx,
		ControlPlaneIndependent: c.ControlPlaneIndependent,
	}
}

// SessionState is a snapshot of one session. Remote fields are zero while
// no peer is known: before its first packet and after a detection timeout.
type SessionState struct {
	SessionKey
	State       State
	RemoteState State
	// Diag is our diagnostic: why State last changed (kept through Init, so
	// that it still says why the session is not Up).
	Diag       Diag
	RemoteDiag Diag
	// LocalDiscriminator and RemoteDiscriminator are My and Your
	// Discriminator of our packets.
	LocalDiscriminator  uint32
	RemoteDiscriminator uint32
	// Config is the session's configuration with defaults applied.
	Config SessionConfig
	// RemoteDetectMultiplier, RemoteDesiredMinTx and RemoteRequiredMinRx
	// are what the peer's last packet said.
	RemoteDetectMultiplier        uint8
	RemoteDesiredMinTx            time.Duration
	RemoteRequiredMinRx           time.Duration
	RemoteControlPlaneIndependent bool
	// TxInterval is the negotiated transmit interval before jitter: the
	// larger of our desired (at least one second while not Up) and the
	// peer's required interval.
	TxInterval time.Duration
	// RxInterval is the peer's agreed transmit interval, and DetectionTime
	// the peer's detect multiplier times it: how long without a packet
	// takes the session down.
	RxInterval    time.Duration
	DetectionTime time.Duration
	// Polling says a Poll Sequence (a timer change) awaits the peer's Final.
	Polling bool
	// LastChange is when State last changed (or the session was added);
	// LastReceived when the last packet from the peer was accepted (zero
	// before the first).
	LastChange   time.Time
	LastReceived time.Time
	Counters     Counters
}

// Counters count a session's packets and transitions since it was added.
type Counters struct {
	PacketsSent     uint64
	PacketsReceived uint64
	SendErrors      uint64
	// Ups counts transitions to Up; Downs transitions from Up to anything
	// else.
	Ups   uint64
	Downs uint64
}

// StateChange reports one transition of one session. A removed session
// reports a last change to AdminDown with DiagAdminDown.
type StateChange struct {
	SessionKey
	From, To State
	// Diag is our diagnostic after the change; RemoteState and RemoteDiag
	// what the peer last said (Down and no diagnostic once a detection
	// timeout forgot it).
	Diag        Diag
	RemoteState State
	RemoteDiag  Diag
	At          time.Time
}

// PathFailed reports whether the change means the path to the peer failed,
// which is what clients such as BGP act on: the session left Up for Down,
// and not because the peer took it administratively down (RFC 5882 §3.2
// tells clients not to treat that as a failure).
func (c StateChange) PathFailed() bool {
	return c.From == StateUp && c.To == StateDown && c.RemoteState != StateAdminDown
}

// Stats count the packets the speaker's listeners received and the ones it
// discarded before they reached a session.
type Stats struct {
	Received uint64
	// DroppedTTL counts packets whose TTL or hop limit was not 255: not
	// from a directly connected neighbour (RFC 5881 §5).
	DroppedTTL uint64
	// DroppedMalformed counts packets that break RFC 5880 §6.8.6.
	DroppedMalformed uint64
	// DroppedAuth counts packets with authentication, which is not
	// supported.
	DroppedAuth uint64
	// DroppedNoSession counts valid packets that match no session (by Your
	// Discriminator, or by addresses and interface when it is zero).
	DroppedNoSession uint64
}
