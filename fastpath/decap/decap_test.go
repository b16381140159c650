package decap

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/google/go-cmp/cmp"
	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	decapbpf "github.com/novaedge/novaedge/gen/bpf/decap"
)

// XDP verdicts (enum xdp_action).
const (
	xdpDrop = 1
	xdpPass = 2
)

// Header offsets in untagged test frames: the outer IP header starts after
// the 14-byte Ethernet header, the outer UDP header after a 20-byte IPv4 or
// 40-byte IPv6 one, the inner packet after the 8-byte UDP header.
const (
	offL3     = 14
	offAfter4 = offL3 + 20
	offAfter6 = offL3 + 40
	offGUEIn4 = offAfter4 + 8
	offGUEIn6 = offAfter6 + 8
	offTotLen = 2 // in an IPv4 header
	offPayLen = 4 // in an IPv6 header
	offUDPLen = 4 // in a UDP header
)

// field selects the counter a case expects to move.
type field func(*Counters) *uint64

var (
	cntIP4InIP4  field = func(c *Counters) *uint64 { return &c.IP4InIP4 }
	cntIP6InIP6  field = func(c *Counters) *uint64 { return &c.IP6InIP6 }
	cntIP6InIP4  field = func(c *Counters) *uint64 { return &c.IP6InIP4 }
	cntIP4InIP6  field = func(c *Counters) *uint64 { return &c.IP4InIP6 }
	cntGUEIP4    field = func(c *Counters) *uint64 { return &c.GUEIP4 }
	cntGUEIP6    field = func(c *Counters) *uint64 { return &c.GUEIP6 }
	cntPassed    field = func(c *Counters) *uint64 { return &c.Passed }
	cntNotLocal  field = func(c *Counters) *uint64 { return &c.NotLocal }
	cntFragments field = func(c *Counters) *uint64 { return &c.Fragments }
	cntMalformed field = func(c *Counters) *uint64 { return &c.Malformed }
)

// packetCase is one run of the program: a frame in, a verdict and a frame
// out, one counter up by one.
type packetCase struct {
	name string
	// port and local configure the program first (SetGUEPort,
	// SetLocalAddrs); zero values are the defaults.
	port  uint16
	local []netip.Addr
	in    []byte
	// verdict is the XDP action expected; out the frame after the
	// program, nil for in unchanged.
	verdict uint32
	out     []byte
	counter field
}

// encapCase is a valid encapsulated frame and what decapsulating it gives.
type encapCase struct {
	name    string
	in, out []byte
	counter field
}

// encapCases returns a frame for every encapsulation the fast path
// produces, each alone and behind an 802.1Q tag, with the frame expected out.
func encapCases(t *testing.T) []encapCase {
	inner4 := innerPacket(t, vip4, "inner ipv4")
	inner6 := innerPacket(t, vip6, "inner ipv6")
	var cs []encapCase
	for _, tagged := range []bool{false, true} {
		suffix := ""
		if tagged {
			suffix = " vlan"
		}
		add := func(name string, inner []byte, c field, outer ...gopacket.SerializableLayer) {
			in := frame(t, tagged, append(outer, gopacket.Payload(inner))...)
			out := frame(t, tagged, gopacket.Payload(inner))
			cs = append(cs, encapCase{name + suffix, in, out, c})
		}
		add("ipip", inner4, cntIP4InIP4, outer4(layers.IPProtocolIPv4, backend4))
		add("ip6ip6", inner6, cntIP6InIP6, outer6(layers.IPProtocolIPv6, backend6))
		add("ipv6 in ipv4", inner6, cntIP6InIP4, outer4(layers.IPProtocolIPv6, backend4))
		add("ipv4 in ipv6", inner4, cntIP4InIP6, outer6(layers.IPProtocolIPv4, backend6))
		add("gue ipv4 in ipv4", inner4, cntGUEIP4, outer4(layers.IPProtocolUDP, backend4), gue(DefaultGUEPort))
		add("gue ipv6 in ipv4", inner6, cntGUEIP4, outer4(layers.IPProtocolUDP, backend4), gue(DefaultGUEPort))
		add("gue ipv4 in ipv6", inner4, cntGUEIP6, outer6(layers.IPProtocolUDP, backend6), gue(DefaultGUEPort))
		add("gue ipv6 in ipv6", inner6, cntGUEIP6, outer6(layers.IPProtocolUDP, backend6), gue(DefaultGUEPort))
	}
	return cs
}

// packetCases returns the table of TestPackets.
func packetCases(t *testing.T) []packetCase {
	inner4 := innerPacket(t, vip4, "inner ipv4")
	inner6 := innerPacket(t, vip6, "inner ipv6")
	plain := func(inner []byte) []byte { return frame(t, false, gopacket.Payload(inner)) }
	ipip := frame(t, false, outer4(layers.IPProtocolIPv4, backend4), gopacket.Payload(inner4))
	ip6ip6 := frame(t, false, outer6(layers.IPProtocolIPv6, backend6), gopacket.Payload(inner6))
	ip4in6 := frame(t, false, outer6(layers.IPProtocolIPv4, backend6), gopacket.Payload(inner4))
	gue4 := frame(t, false, outer4(layers.IPProtocolUDP, backend4), gue(DefaultGUEPort), gopacket.Payload(inner4))
	gue6 := frame(t, false, outer6(layers.IPProtocolUDP, backend6), gue(DefaultGUEPort), gopacket.Payload(inner6))

	var cs []packetCase
	for _, e := range encapCases(t) {
		cs = append(cs, packetCase{name: e.name, in: e.in, verdict: xdpPass, out: e.out, counter: e.counter})
	}

	withOptions := outer4(layers.IPProtocolIPv4, backend4)
	// Router Alert (RFC 2113): 4 bytes, so IHL is 6.
	withOptions.Options = []layers.IPv4Option{{OptionType: 0x94, OptionLength: 4, OptionData: []byte{0, 0}}}
	// The checksum may be zero for GUE in IPv4 (RFC 768).
	gue4NoSum := patch(gue4, offAfter4+6, 0, 0)
	padding := make([]byte, 12)
	frag := func(flags layers.IPv4Flag, offset uint16) []byte {
		ip := outer4(layers.IPProtocolIPv4, backend4)
		ip.Flags, ip.FragOffset = flags, offset
		return frame(t, false, ip, gopacket.Payload(inner4))
	}
	// A hop-by-hop header (next header 41, Pad4) before ip6ip6.
	hopByHop := append([]byte{byte(layers.IPProtocolIPv6), 0, 1, 4, 0, 0, 0, 0}, inner6...)
	mapped := netip.AddrFrom16(backend4.As16())
	// A GUE variant 0 header (draft-ietf-intarea-gue): version 0, no options.
	gueV0 := append([]byte{0, 4, 0, 0}, inner4...)

	cs = append(cs, []packetCase{
		{name: "ipip outer options", in: frame(t, false, withOptions, gopacket.Payload(inner4)),
			verdict: xdpPass, out: plain(inner4), counter: cntIP4InIP4},
		{name: "gue ipv4 zero udp checksum", in: gue4NoSum, verdict: xdpPass, out: plain(inner4), counter: cntGUEIP4},
		{name: "ipip ethernet padding kept for the kernel to trim", in: append(bytes.Clone(ipip), padding...),
			verdict: xdpPass, out: append(plain(inner4), padding...), counter: cntIP4InIP4},
		{name: "gue configured port", port: 7777,
			in:      frame(t, false, outer4(layers.IPProtocolUDP, backend4), gue(7777), gopacket.Payload(inner4)),
			verdict: xdpPass, out: plain(inner4), counter: cntGUEIP4},
		{name: "allow-list hit ipip", local: []netip.Addr{backend4, backend6}, in: ipip,
			verdict: xdpPass, out: plain(inner4), counter: cntIP4InIP4},
		{name: "allow-list hit ip6ip6", local: []netip.Addr{backend4, backend6}, in: ip6ip6,
			verdict: xdpPass, out: plain(inner6), counter: cntIP6InIP6},
		{name: "allow-list hit gue ipv6", local: []netip.Addr{backend6}, in: gue6,
			verdict: xdpPass, out: plain(inner6), counter: cntGUEIP6},
		{name: "allow-list hit by ipv4-mapped entry", local: []netip.Addr{mapped}, in: ipip,
			verdict: xdpPass, out: plain(inner4), counter: cntIP4InIP4},

		// Untouched.
		{name: "plain ipv4 udp", in: plain(inner4), verdict: xdpPass, counter: cntPassed},
		{name: "plain ipv6 udp", in: plain(inner6), verdict: xdpPass, counter: cntPassed},
		{name: "plain ipv4 vlan", in: frame(t, true, gopacket.Payload(inner4)), verdict: xdpPass, counter: cntPassed},
		{name: "arp", in: frame(t, false, &layers.ARP{AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4,
			HwAddressSize: 6, ProtAddressSize: 4, Operation: layers.ARPRequest,
			SourceHwAddress: srcMAC, SourceProtAddress: lb4.AsSlice(),
			DstHwAddress: make([]byte, 6), DstProtAddress: backend4.AsSlice()}),
			verdict: xdpPass, counter: cntPassed},
		{name: "udp to another port", in: frame(t, false, outer4(layers.IPProtocolUDP, backend4), gue(DefaultGUEPort+1), gopacket.Payload(inner4)),
			verdict: xdpPass, counter: cntPassed},
		{name: "gue to the default port while another is set", port: 7777, in: gue4, verdict: xdpPass, counter: cntPassed},
		{name: "ipv6 extension header before ip6ip6", in: frame(t, false, outer6(layers.IPProtocolIPv6HopByHop, backend6), gopacket.Payload(hopByHop)),
			verdict: xdpPass, counter: cntPassed},
		{name: "allow-list miss ipip", local: []netip.Addr{other4, backend6}, in: ipip, verdict: xdpPass, counter: cntNotLocal},
		{name: "allow-list miss ip6ip6", local: []netip.Addr{backend4, other6}, in: ip6ip6, verdict: xdpPass, counter: cntNotLocal},
		{name: "allow-list miss ipv4 in ipv6", local: []netip.Addr{backend4}, in: ip4in6, verdict: xdpPass, counter: cntNotLocal},
		{name: "allow-list miss gue ipv4", local: []netip.Addr{other4}, in: gue4, verdict: xdpPass, counter: cntNotLocal},
		{name: "allow-list miss gue ipv4 with a bad payload", local: []netip.Addr{other4},
			in:      frame(t, false, outer4(layers.IPProtocolUDP, backend4), gue(DefaultGUEPort), gopacket.Payload(gueV0)),
			verdict: xdpPass, counter: cntNotLocal},
		{name: "ipv4 first fragment", in: frag(layers.IPv4MoreFragments, 0), verdict: xdpPass, counter: cntFragments},
		{name: "ipv4 later fragment", in: frag(0, 100), verdict: xdpPass, counter: cntFragments},

		// Malformed.
		{name: "outer ipv4 ihl 4", in: patch(ipip, offL3, 0x44), verdict: xdpDrop, counter: cntMalformed},
		{name: "outer ipv4 version 6", in: patch(ipip, offL3, 0x65), verdict: xdpDrop, counter: cntMalformed},
		{name: "outer ipv4 total length below its header", in: patch(ipip, offL3+offTotLen, be16(19)...),
			verdict: xdpDrop, counter: cntMalformed},
		{name: "outer ipv4 total length past the frame", in: patch(ipip, offL3+offTotLen, be16(u16at(ipip, offL3+offTotLen)+1)...),
			verdict: xdpDrop, counter: cntMalformed},
		{name: "outer ipv6 version 4", in: patch(ip6ip6, offL3, 0x40), verdict: xdpDrop, counter: cntMalformed},
		{name: "outer ipv6 payload length past the frame", in: patch(ip6ip6, offL3+offPayLen, be16(u16at(ip6ip6, offL3+offPayLen)+1)...),
			verdict: xdpDrop, counter: cntMalformed},
		{name: "ipip carrying ipv6", in: frame(t, false, outer4(layers.IPProtocolIPv4, backend4), gopacket.Payload(inner6)),
			verdict: xdpDrop, counter: cntMalformed},
		{name: "ip6ip6 carrying ipv4", in: frame(t, false, outer6(layers.IPProtocolIPv6, backend6), gopacket.Payload(inner4)),
			verdict: xdpDrop, counter: cntMalformed},
		{name: "ipip inner ihl 4", in: patch(ipip, offAfter4, 0x44), verdict: xdpDrop, counter: cntMalformed},
		{name: "ipip inner total length past the outer packet", in: patch(ipip, offAfter4+offTotLen, be16(uint16(len(inner4)+1))...),
			verdict: xdpDrop, counter: cntMalformed},
		{name: "ipv4 in ipv6 inner total length past the outer packet", in: patch(ip4in6, offAfter6+offTotLen, be16(uint16(len(inner4)+1))...),
			verdict: xdpDrop, counter: cntMalformed},
		{name: "ip6ip6 inner payload length past the outer packet", in: patch(ip6ip6, offAfter6+offPayLen, be16(uint16(len(inner6)-40+1))...),
			verdict: xdpDrop, counter: cntMalformed},
		{name: "gue variant 0 header", in: frame(t, false, outer4(layers.IPProtocolUDP, backend4), gue(DefaultGUEPort), gopacket.Payload(gueV0)),
			verdict: xdpDrop, counter: cntMalformed},
		{name: "gue empty", in: frame(t, false, outer4(layers.IPProtocolUDP, backend4), gue(DefaultGUEPort)),
			verdict: xdpDrop, counter: cntMalformed},
		{name: "gue udp length below its header", in: patch(gue4, offAfter4+offUDPLen, be16(7)...),
			verdict: xdpDrop, counter: cntMalformed},
		{name: "gue udp length past the ip payload", in: patch(gue4, offAfter4+offUDPLen, be16(u16at(gue4, offAfter4+offUDPLen)+1)...),
			verdict: xdpDrop, counter: cntMalformed},
		{name: "gue ipv6 inner payload length past the udp payload", in: patch(gue6, offGUEIn6+offPayLen, be16(uint16(len(inner6)-40+1))...),
			verdict: xdpDrop, counter: cntMalformed},
		{name: "gue ipv4 inner total length past the udp payload", in: patch(gue4, offGUEIn4+offTotLen, be16(uint16(len(inner4)+1))...),
			verdict: xdpDrop, counter: cntMalformed},
		{name: "ethernet only, ipv4 type", in: frame(t, false, gopacket.Payload(inner4))[:offL3], verdict: xdpDrop, counter: cntMalformed},
	}...)
	return cs
}

// run configures d for tc, runs tc.in through the program and checks the
// verdict, the frame out and that exactly tc.counter went up by one.
func run(t *testing.T, d *Decap, tc packetCase) {
	t.Helper()
	if err := d.SetGUEPort(tc.port); err != nil {
		t.Fatalf("SetGUEPort: %v", err)
	}
	if err := d.SetLocalAddrs(tc.local); err != nil {
		t.Fatalf("SetLocalAddrs: %v", err)
	}
	before, err := d.Stats()
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	opts := &ebpf.RunOptions{Data: tc.in, DataOut: make([]byte, len(tc.in))}
	verdict, err := d.objs.Decap.Run(opts)
	if err != nil {
		t.Fatalf("run program: %v", err)
	}
	after, err := d.Stats()
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}

	if verdict != tc.verdict {
		t.Errorf("verdict = %d, want %d", verdict, tc.verdict)
	}
	want := tc.out
	if want == nil {
		want = tc.in
	}
	if diff := cmp.Diff(want, opts.DataOut); diff != "" {
		t.Errorf("frame out (-want +got):\n%s", diff)
	}
	var wantDelta Counters
	*tc.counter(&wantDelta) = 1
	if diff := cmp.Diff(wantDelta, delta(before, after)); diff != "" {
		t.Errorf("counters moved (-want +got):\n%s", diff)
	}
}

// delta returns after - before, field by field.
func delta(before, after Counters) Counters {
	var d Counters
	for idx := range decapbpf.DecapCounterCOUNTER_MAX {
		*d.field(idx) = *after.field(idx) - *before.field(idx)
	}
	return d
}

func TestPackets(t *testing.T) {
	d := newDecap(t, Options{})
	for _, tc := range packetCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			run(t, d, tc)
		})
	}
}

// TestPacketsEthernetType checks the EtherType out against the inner
// packet's own version nibble, independently of the frames the table
// builds with the same helpers.
func TestPacketsEthernetType(t *testing.T) {
	d := newDecap(t, Options{})
	for _, e := range encapCases(t) {
		t.Run(e.name, func(t *testing.T) {
			opts := &ebpf.RunOptions{Data: e.in, DataOut: make([]byte, len(e.in))}
			if _, err := d.objs.Decap.Run(opts); err != nil {
				t.Fatalf("run program: %v", err)
			}
			p := gopacket.NewPacket(opts.DataOut, layers.LayerTypeEthernet, gopacket.Default)
			if el := p.ErrorLayer(); el != nil {
				t.Fatalf("decode frame out: %v", el.Error())
			}
			ip := p.Layer(layers.LayerTypeIPv4)
			if ip == nil {
				ip = p.Layer(layers.LayerTypeIPv6)
			}
			if ip == nil {
				t.Fatalf("no IP layer in frame out: %v", p)
			}
			udp, ok := p.Layer(layers.LayerTypeUDP).(*layers.UDP)
			if !ok || udp.DstPort != serverPort || udp.SrcPort != clientPort {
				t.Fatalf("frame out does not hold the client's datagram: %v", p)
			}
			if bytes.Contains(opts.DataOut[offL3:], lb4.AsSlice()) || bytes.Contains(opts.DataOut[offL3:], lb6.AsSlice()) {
				t.Errorf("the outer source address is still in the frame out: %x", opts.DataOut)
			}
			if _, tagged := p.Layer(layers.LayerTypeDot1Q).(*layers.Dot1Q); tagged != strings.HasSuffix(e.name, " vlan") {
				t.Errorf("802.1Q tag present = %v, want %v", tagged, !tagged)
			}
		})
	}
}

// TestTruncated cuts every encapsulated frame at each length from the
// Ethernet header to one byte short of whole: every cut is dropped and
// counted as malformed, and the program never reads past the end (the
// verifier would have refused it).
func TestTruncated(t *testing.T) {
	d := newDecap(t, Options{})
	for _, e := range encapCases(t) {
		t.Run(e.name, func(t *testing.T) {
			for n := offL3; n < len(e.in); n++ {
				t.Run(fmt.Sprint(n), func(t *testing.T) {
					run(t, d, packetCase{in: e.in[:n], verdict: xdpDrop, counter: cntMalformed})
				})
			}
		})
	}
}

func TestCountersCoverEveryIndex(t *testing.T) {
	var c Counters
	seen := make(map[*uint64]decapbpf.DecapCounter)
	for idx := range decapbpf.DecapCounterCOUNTER_MAX {
		f := c.field(idx)
		if f == nil {
			t.Errorf("counter %d has no Counters field", idx)
			continue
		}
		if prev, dup := seen[f]; dup {
			t.Errorf("counters %d and %d share a field", prev, idx)
		}
		seen[f] = idx
	}
}

func TestSetLocalAddrs(t *testing.T) {
	d := newDecap(t, Options{LocalAddrs: []netip.Addr{other4}})
	ipip := frame(t, false, outer4(layers.IPProtocolIPv4, backend4), gopacket.Payload(innerPacket(t, vip4, "x")))
	verdict := func() uint32 {
		t.Helper()
		before, err := d.Stats()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.objs.Decap.Run(&ebpf.RunOptions{Data: ipip, DataOut: make([]byte, len(ipip))}); err != nil {
			t.Fatal(err)
		}
		after, err := d.Stats()
		if err != nil {
			t.Fatal(err)
		}
		dc := delta(before, after)
		return uint32(dc.IP4InIP4)<<1 | uint32(dc.NotLocal)
	}
	const decapped, notLocal = 2, 1

	steps := []struct {
		name  string
		addrs []netip.Addr
		want  uint32
	}{
		{"from Options, another address", nil, notLocal},
		{"both", []netip.Addr{other4, backend4}, decapped},
		{"replaced by the other alone", []netip.Addr{other4}, notLocal},
		{"with a zone and duplicates", []netip.Addr{backend4, backend4, netip.MustParseAddr("fe80::1%eth0")}, decapped},
		{"off", []netip.Addr{}, decapped},
	}
	for i, s := range steps {
		if i > 0 {
			if err := d.SetLocalAddrs(s.addrs); err != nil {
				t.Fatalf("%s: SetLocalAddrs: %v", s.name, err)
			}
		}
		if got := verdict(); got != s.want {
			t.Errorf("%s: got %b, want %b (decapsulated, not local)", s.name, got, s.want)
		}
	}

	if err := d.SetLocalAddrs([]netip.Addr{{}}); err == nil {
		t.Error("SetLocalAddrs with an invalid address: no error")
	}
	many := make([]netip.Addr, d.objs.DecapAddrs.MaxEntries()+1)
	for i := range many {
		many[i] = netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)})
	}
	if err := d.SetLocalAddrs(many); err == nil {
		t.Errorf("SetLocalAddrs with %d addresses: no error", len(many))
	}
}

func TestClosed(t *testing.T) {
	d, err := Load(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := d.Stats(); !errors.Is(err, ErrClosed) {
		t.Errorf("Stats after Close: %v, want ErrClosed", err)
	}
	if _, err := d.Attach("lo", ModeGeneric); !errors.Is(err, ErrClosed) {
		t.Errorf("Attach after Close: %v, want ErrClosed", err)
	}
	if err := d.SetGUEPort(1); !errors.Is(err, ErrClosed) {
		t.Errorf("SetGUEPort after Close: %v, want ErrClosed", err)
	}
}

func TestLoadErrorShowsVerifierLog(t *testing.T) {
	log := []string{
		"0: R1=ctx() R10=fp0",
		"0: (61) r2 = *(u32 *)(r1 +0)",
		"invalid access to packet, off=14 size=2, R2(id=0,off=14,r=0)",
		"processed 12 insns (limit 1000000)",
	}
	ve := &ebpf.VerifierError{Cause: errors.New("permission denied"), Log: log}
	err := loadError(fmt.Errorf("program decap: %w", ve))

	var got *ebpf.VerifierError
	if !errors.As(err, &got) {
		t.Errorf("error %v does not wrap the *ebpf.VerifierError", err)
	}
	for _, line := range log {
		if !strings.Contains(err.Error(), line) {
			t.Errorf("error lacks verifier line %q:\n%v", line, err)
		}
	}

	plain := loadError(ebpf.ErrNotSupported)
	if !errors.Is(plain, ebpf.ErrNotSupported) {
		t.Errorf("error %v does not wrap its cause", plain)
	}
}
