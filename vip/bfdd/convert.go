package bfdd

import (
	"fmt"
	"net/netip"
	"time"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/vip/bfd"
)

func toSpec(c bfd.SessionConfig) *pb.BFDSessionSpec {
	return &pb.BFDSessionSpec{
		Peer:                    c.Peer.String(),
		Local:                   c.Local.String(),
		Interface:               c.Interface,
		DetectMultiplier:        uint32(c.DetectMultiplier),
		DesiredMinTxUs:          uint64(c.DesiredMinTx / time.Microsecond),
		RequiredMinRxUs:         uint64(c.RequiredMinRx / time.Microsecond),
		ControlPlaneIndependent: c.ControlPlaneIndependent,
	}
}

// fromSpec checks a spec from the wire; the error names the field.
func fromSpec(s *pb.BFDSessionSpec) (bfd.SessionConfig, error) {
	var c bfd.SessionConfig
	var err error
	if c.Peer, err = netip.ParseAddr(s.GetPeer()); err != nil {
		return c, fmt.Errorf("peer %q: %w", s.GetPeer(), err)
	}
	if c.Local, err = netip.ParseAddr(s.GetLocal()); err != nil {
		return c, fmt.Errorf("local %q: %w", s.GetLocal(), err)
	}
	if s.GetDetectMultiplier() > 255 {
		return c, fmt.Errorf("detect_multiplier %d: above 255", s.GetDetectMultiplier())
	}
	const maxUs = uint64(time.Hour / time.Microsecond)
	if s.GetDesiredMinTxUs() > maxUs || s.GetRequiredMinRxUs() > maxUs {
		return c, fmt.Errorf("desired_min_tx_us %d / required_min_rx_us %d: above an hour", s.GetDesiredMinTxUs(), s.GetRequiredMinRxUs())
	}
	c.Interface = s.GetInterface()
	c.DetectMultiplier = uint8(s.GetDetectMultiplier())
	c.DesiredMinTx = time.Duration(s.GetDesiredMinTxUs()) * time.Microsecond
	c.RequiredMinRx = time.Duration(s.GetRequiredMinRxUs()) * time.Microsecond
	c.ControlPlaneIndependent = s.GetControlPlaneIndependent()
	n, err := c.Normalized()
	if err != nil {
		return c, fmt.Errorf("session %v: %w", c.Key(), err)
	}
	return n, nil
}

func toChange(ev bfd.StateChange, initial bool) *pb.BFDStateChange {
	return &pb.BFDStateChange{
		Peer:        ev.Peer.String(),
		Local:       ev.Local.String(),
		Interface:   ev.Interface,
		From:        uint32(ev.From),
		To:          uint32(ev.To),
		Diag:        uint32(ev.Diag),
		RemoteState: uint32(ev.RemoteState),
		RemoteDiag:  uint32(ev.RemoteDiag),
		AtUnixNano:  unixNano(ev.At),
		Initial:     initial,
	}
}

func fromChange(c *pb.BFDStateChange) (bfd.StateChange, error) {
	peer, err := netip.ParseAddr(c.GetPeer())
	if err != nil {
		return bfd.StateChange{}, fmt.Errorf("peer %q: %w", c.GetPeer(), err)
	}
	local, err := netip.ParseAddr(c.GetLocal())
	if err != nil {
		return bfd.StateChange{}, fmt.Errorf("local %q: %w", c.GetLocal(), err)
	}
	for _, v := range []uint32{c.GetFrom(), c.GetTo(), c.GetRemoteState()} {
		if v > uint32(bfd.StateUp) {
			return bfd.StateChange{}, fmt.Errorf("state %d: not an RFC 5880 state", v)
		}
	}
	return bfd.StateChange{
		SessionKey:  bfd.SessionKey{Peer: peer, Local: local, Interface: c.GetInterface()},
		From:        bfd.State(c.GetFrom()),
		To:          bfd.State(c.GetTo()),
		Diag:        bfd.Diag(c.GetDiag()),
		RemoteState: bfd.State(c.GetRemoteState()),
		RemoteDiag:  bfd.Diag(c.GetRemoteDiag()),
		At:          fromUnixNano(c.GetAtUnixNano()),
	}, nil
}

func toState(s bfd.SessionState) *pb.BFDSessionState {
	us := func(d time.Duration) uint64 { return uint64(d / time.Microsecond) }
	return &pb.BFDSessionState{
		Config:                        toSpec(s.Config),
		State:                         uint32(s.State),
		RemoteState:                   uint32(s.RemoteState),
		Diag:                          uint32(s.Diag),
		RemoteDiag:                    uint32(s.RemoteDiag),
		LocalDiscriminator:            s.LocalDiscriminator,
		RemoteDiscriminator:           s.RemoteDiscriminator,
		RemoteDetectMultiplier:        uint32(s.RemoteDetectMultiplier),
		RemoteDesiredMinTxUs:          us(s.RemoteDesiredMinTx),
		RemoteRequiredMinRxUs:         us(s.RemoteRequiredMinRx),
		RemoteControlPlaneIndependent: s.RemoteControlPlaneIndependent,
		TxIntervalUs:                  us(s.TxInterval),
		RxIntervalUs:                  us(s.RxInterval),
		DetectionTimeUs:               us(s.DetectionTime),
		Polling:                       s.Polling,
		LastChangeUnixNano:            unixNano(s.LastChange),
		LastReceivedUnixNano:          unixNano(s.LastReceived),
		PacketsSent:                   s.Counters.PacketsSent,
		PacketsReceived:               s.Counters.PacketsReceived,
		SendErrors:                    s.Counters.SendErrors,
		Ups:                           s.Counters.Ups,
		Downs:                         s.Counters.Downs,
	}
}

func fromState(p *pb.BFDSessionState) (bfd.SessionState, error) {
	cfg, err := fromSpec(p.GetConfig())
	if err != nil {
		return bfd.SessionState{}, err
	}
	us := func(v uint64) time.Duration { return time.Duration(v) * time.Microsecond }
	return bfd.SessionState{
		SessionKey:                    cfg.Key(),
		State:                         bfd.State(p.GetState()),
		RemoteState:                   bfd.State(p.GetRemoteState()),
		Diag:                          bfd.Diag(p.GetDiag()),
		RemoteDiag:                    bfd.Diag(p.GetRemoteDiag()),
		LocalDiscriminator:            p.GetLocalDiscriminator(),
		RemoteDiscriminator:           p.GetRemoteDiscriminator(),
		Config:                        cfg,
		RemoteDetectMultiplier:        uint8(min(p.GetRemoteDetectMultiplier(), 255)),
		RemoteDesiredMinTx:            us(p.GetRemoteDesiredMinTxUs()),
		RemoteRequiredMinRx:           us(p.GetRemoteRequiredMinRxUs()),
		RemoteControlPlaneIndependent: p.GetRemoteControlPlaneIndependent(),
		TxInterval:                    us(p.GetTxIntervalUs()),
		RxInterval:                    us(p.GetRxIntervalUs()),
		DetectionTime:                 us(p.GetDetectionTimeUs()),
		Polling:                       p.GetPolling(),
		LastChange:                    fromUnixNano(p.GetLastChangeUnixNano()),
		LastReceived:                  fromUnixNano(p.GetLastReceivedUnixNano()),
		Counters: bfd.Counters{
			PacketsSent:     p.GetPacketsSent(),
			PacketsReceived: p.GetPacketsReceived(),
			SendErrors:      p.GetSendErrors(),
			Ups:             p.GetUps(),
			Downs:           p.GetDowns(),
		},
	}, nil
}

// unixNano keeps the zero time zero on the wire.
func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromUnixNano(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}
