package l2

import (
	"fmt"
	"log/slog"
	"time"
)

// GARPMode selects the form of the gratuitous ARP sent for IPv4 VIPs. Hosts
// differ in which form updates their caches, hence the choice.
type GARPMode int

const (
	// GARPRequest sends ARP requests with sender and target address both
	// the VIP and a zero target MAC (RFC 5227's ARP announcement), the form
	// MetalLB sends.
	GARPRequest GARPMode = iota
	// GARPReply sends unsolicited ARP replies with sender and target
	// address both the VIP and a broadcast target MAC.
	GARPReply
	// GARPBoth sends one of each per round.
	GARPBoth
)

// String returns the mode's name as used in logs.
func (m GARPMode) String() string {
	switch m {
	case GARPRequest:
		return "request"
	case GARPReply:
		return "reply"
	case GARPBoth:
		return "both"
	}
	return fmt.Sprintf("GARPMode(%d)", int(m))
}

// Defaults of the announcement schedule.
const (
	DefaultRepeat   = 5
	DefaultInterval = time.Second
)

// DefaultBindInterface is where VIPs are bound when Options.BindInterface is
// empty.
const DefaultBindInterface = "lo"

// Options configure an [Announcer].
type Options struct {
	// Logger receives conflicts, suppressed answers and I/O errors. Nil
	// discards them.
	Logger *slog.Logger
	// Clock is the time source of the lease and the schedule. Nil means the
	// system clock.
	Clock Clock
	// GARP is the form of gratuitous ARP for IPv4 VIPs. The zero value is
	// GARPRequest.
	GARP GARPMode
	// Repeat is how many rounds of announcements a takeover sends: one at
	// once, the others Interval apart. Zero means DefaultRepeat (5).
	Repeat int
	// Interval is the time between two rounds. Zero means DefaultInterval
	// (1 s).
	Interval time.Duration
	// BindInterface is the link VIPs are bound on, away from the announce
	// interface so that the kernel never answers for them. Empty means
	// DefaultBindInterface ("lo").
	BindInterface string
}

func (o Options) withDefaults() (Options, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Clock == nil {
		o.Clock = systemClock{}
	}
	switch o.GARP {
	case GARPRequest, GARPReply, GARPBoth:
	default:
		return o, fmt.Errorf("options: garp mode %d is unknown", int(o.GARP))
	}
	switch {
	case o.Repeat < 0:
		return o, fmt.Errorf("options: repeat %d is negative", o.Repeat)
	case o.Repeat == 0:
		o.Repeat = DefaultRepeat
	}
	switch {
	case o.Interval < 0:
		return o, fmt.Errorf("options: interval %v is negative", o.Interval)
	case o.Interval == 0:
		o.Interval = DefaultInterval
	}
	if o.BindInterface == "" {
		o.BindInterface = DefaultBindInterface
	}
	return o, nil
}
