package bfd

import (
	"net/netip"
	"strings"
	"testing"
	"time"
)

// TestSpeakersOverVeth runs two speakers in two namespaces joined by a veth
// pair, as the active and standby agents of an L2 VIP would: sessions over
// IPv4 and IPv6 come Up; silencing one side with nftables takes the other
// Down with diag 1 no earlier than one detection time after the last
// packet, the silenced side hears that and goes Down with diag 3; lifting
// the silence brings everything back Up.
func TestSpeakersOverVeth(t *testing.T) {
	a, b := newTestNS(t), newTestNS(t)
	link(t, a, "bfd-a", []string{"10.77.0.1/24", "fd77::1/64", "fe80::77:1/64"}, b, "bfd-b", []string{"10.77.0.2/24", "fd77::2/64", "fe80::77:2/64"})
	spA, spB := a.startSpeaker(t, Options{}), b.startSpeaker(t, Options{})
	evA, evB := watch(t, spA), watch(t, spB)

	type pair struct {
		name   string
		ka, kb SessionKey
	}
	addr := netip.MustParseAddr
	pairs := []pair{
		{
			// A binds to its interface, B lets routing decide.
			name: "ipv4",
			ka:   a.addSession(t, spA, SessionConfig{Peer: addr("10.77.0.2"), Local: addr("10.77.0.1"), Interface: "bfd-a", ControlPlaneIndependent: true}),
			kb:   b.addSession(t, spB, SessionConfig{Peer: addr("10.77.0.1"), Local: addr("10.77.0.2")}),
		},
		{
			name: "ipv6",
			ka:   a.addSession(t, spA, SessionConfig{Peer: addr("fd77::2"), Local: addr("fd77::1")}),
			kb:   b.addSession(t, spB, SessionConfig{Peer: addr("fd77::1"), Local: addr("fd77::2"), Interface: "bfd-b"}),
		},
		{
			name: "ipv6 link-local",
			ka:   a.addSession(t, spA, SessionConfig{Peer: addr("fe80::77:2"), Local: addr("fe80::77:1"), Interface: "bfd-a"}),
			kb:   b.addSession(t, spB, SessionConfig{Peer: addr("fe80::77:1"), Local: addr("fe80::77:2"), Interface: "bfd-b"}),
		},
	}
	for _, p := range pairs {
		evA.until(p.ka, StateUp)
		evB.until(p.kb, StateUp)
	}
	for _, p := range pairs {
		// Up is reached before the poll that lowers the interval ends.
		eventually(t, p.name+" timers settle", func() (bool, string) {
			sa, _ := spA.Session(p.ka)
			sb, _ := spB.Session(p.kb)
			ok := !sa.Polling && !sb.Polling && sa.TxInterval == 300*time.Millisecond && sb.TxInterval == 300*time.Millisecond
			return ok, "polling or not at 300ms yet"
		})
		sa, _ := spA.Session(p.ka)
		sb, _ := spB.Session(p.kb)
		if sa.RemoteDiscriminator != sb.LocalDiscriminator || sb.RemoteDiscriminator != sa.LocalDiscriminator {
			t.Errorf("%s: discriminators A %d/%d, B %d/%d do not match", p.name,
				sa.LocalDiscriminator, sa.RemoteDiscriminator, sb.LocalDiscriminator, sb.RemoteDiscriminator)
		}
		if sa.DetectionTime != 900*time.Millisecond || sb.DetectionTime != 900*time.Millisecond {
			t.Errorf("%s: detection times %v and %v, want 900ms", p.name, sa.DetectionTime, sb.DetectionTime)
		}
		if sb.RemoteControlPlaneIndependent != (p.name == "ipv4") {
			t.Errorf("%s: B sees the C bit %v, want what A set", p.name, sb.RemoteControlPlaneIndependent)
		}
	}

	unsilence := b.silence(t)
	for _, p := range pairs {
		downA := evA.until(p.ka, StateDown)
		if downA.Diag != DiagControlDetectionExpired {
			t.Errorf("%s: A went Down with %v, want control detection time expired", p.name, downA.Diag)
		}
		sa, _ := spA.Session(p.ka)
		if gap := downA.At.Sub(sa.LastReceived); gap < 900*time.Millisecond {
			t.Errorf("%s: A went Down %v after B's last packet, before the 900ms detection time", p.name, gap)
		}
		downB := evB.until(p.kb, StateDown)
		if downB.Diag != DiagNeighborDown || downB.At.Before(downA.At) {
			t.Errorf("%s: B went Down with %v at %v, want neighbor signaled down after A (%v)", p.name, downB.Diag, downB.At, downA.At)
		}
	}

	unsilence()
	for _, p := range pairs {
		evA.until(p.ka, StateUp)
		evB.until(p.kb, StateUp)
		if sa, _ := spA.Session(p.ka); sa.Counters.Ups != 2 || sa.Counters.Downs != 1 {
			t.Errorf("%s: A counters %+v, want 2 ups and 1 down", p.name, sa.Counters)
		}
	}
	if s := spA.Stats(); s.DroppedTTL+s.DroppedMalformed+s.DroppedAuth != 0 {
		t.Errorf("A dropped packets from a well-behaved peer: %+v", s)
	}
}

// TestSpeakersOnTheirOwnPort: two pairs of speakers share the namespaces,
// one pair on Port and one on another port (as the agents' L2 heartbeats
// run beside the node's BFD speaker for the routers): both sessions come
// Up, each on its own port, and neither pair hears the other.
func TestSpeakersOnTheirOwnPort(t *testing.T) {
	a, b := newTestNS(t), newTestNS(t)
	link(t, a, "bfd-a", []string{"10.78.0.1/24"}, b, "bfd-b", []string{"10.78.0.2/24"})
	const other = 3786
	addr := netip.MustParseAddr
	for _, port := range []uint16{0, other} {
		spA, spB := a.startSpeaker(t, Options{Port: port}), b.startSpeaker(t, Options{Port: port})
		evA, evB := watch(t, spA), watch(t, spB)
		ka := a.addSession(t, spA, SessionConfig{Peer: addr("10.78.0.2"), Local: addr("10.78.0.1")})
		kb := b.addSession(t, spB, SessionConfig{Peer: addr("10.78.0.1"), Local: addr("10.78.0.2")})
		evA.until(ka, StateUp)
		evB.until(kb, StateUp)
		if s := spA.Stats(); s.DroppedNoSession != 0 {
			t.Errorf("port %d: A got %d packets for no session of its own: the pairs hear each other", port, s.DroppedNoSession)
		}
	}
	if out := a.exec(t, "", "ss", "-Hlun", "sport = :3786"); !strings.Contains(out, "0.0.0.0:3786") {
		t.Errorf("nothing listens on UDP %d in A:\n%s", other, out)
	}
}
