package l2

import (
	"bytes"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"
	"github.com/mdlayher/ndp"
)

func TestOptionsDefaults(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      Options
		wantErr string
		check   func(Options) bool
	}{
		{"zero value", Options{}, "", func(o Options) bool {
			return o.Repeat == DefaultRepeat && o.Interval == DefaultInterval && o.BindInterface == "lo" && o.GARP == GARPRequest && o.Clock != nil && o.Logger != nil
		}},
		{"kept", Options{Repeat: 2, Interval: time.Millisecond, BindInterface: "dummy0", GARP: GARPBoth}, "", func(o Options) bool {
			return o.Repeat == 2 && o.Interval == time.Millisecond && o.BindInterface == "dummy0" && o.GARP == GARPBoth
		}},
		{"negative repeat", Options{Repeat: -1}, "repeat -1 is negative", nil},
		{"negative interval", Options{Interval: -time.Second}, "interval -1s is negative", nil},
		{"unknown garp mode", Options{GARP: 7}, "garp mode 7 is unknown", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.in.withDefaults()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !tc.check(got) {
				t.Fatalf("withDefaults() = %+v, %v", got, err)
			}
		})
	}
}

func TestAnnounceRejectsBadInput(t *testing.T) {
	a, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	a.Renew(time.Now().Add(time.Hour))
	for _, tc := range []struct {
		name, iface, addr, want string
	}{
		{"multicast", "eth0", "224.0.0.1", "announce 224.0.0.1 on eth0: not a unicast address"},
		{"loopback", "eth0", "127.0.0.2", "announce 127.0.0.2 on eth0: not a unicast address"},
		{"link-local", "eth0", "fe80::1", "announce fe80::1 on eth0: not a unicast address"},
		{"mapped", "eth0", "::ffff:192.0.2.1", "use 192.0.2.1"},
		{"zone", "eth0", "fd00::1%eth0", "zone is not allowed"},
		{"no interface", "", "192.0.2.1", "announce 192.0.2.1: interface name is empty"},
		{"bind interface", "lo", "192.0.2.1", "announce 192.0.2.1 on lo: the announce interface is the bind interface"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := a.Announce(tc.iface, netip.MustParseAddr(tc.addr))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Announce(%q, %s) = %v, want an error containing %q", tc.iface, tc.addr, err, tc.want)
			}
		})
	}
	t.Run("expired lease", func(t *testing.T) {
		b, _ := New(Options{})
		err := b.Announce("eth0", netip.MustParseAddr("192.0.2.1"))
		if err == nil || !strings.Contains(err.Error(), "announce 192.0.2.1 on eth0: lease expired") {
			t.Fatalf("Announce before Renew = %v, want lease expired", err)
		}
	})
}

func TestGARPFrames(t *testing.T) {
	mac := mustMAC("02:00:5e:00:00:09")
	vip := netip.MustParseAddr("198.51.100.7")
	for _, tc := range []struct {
		mode GARPMode
		ops  []uint16
	}{
		{GARPRequest, []uint16{layers.ARPRequest}},
		{GARPReply, []uint16{layers.ARPReply}},
		{GARPBoth, []uint16{layers.ARPRequest, layers.ARPReply}},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			frames := garpFrames(tc.mode, mac, vip)
			if len(frames) != len(tc.ops) {
				t.Fatalf("%d frames, want %d", len(frames), len(tc.ops))
			}
			for i, f := range frames {
				eth, a := arpOf(f)
				if a == nil {
					t.Fatalf("frame %d is not ARP: % x", i, f)
				}
				if a.Operation != tc.ops[i] || !bytes.Equal(eth.DstMAC, broadcast()) || !bytes.Equal(eth.SrcMAC, mac) ||
					!bytes.Equal(a.SourceHwAddress, mac) || !bytes.Equal(a.SourceProtAddress, vip.AsSlice()) || !bytes.Equal(a.DstProtAddress, vip.AsSlice()) {
					t.Errorf("frame %d: op %d eth %v→%v sender %v/%v target %v, want op %d, %v→broadcast, sender %v/%v, target %v",
						i, a.Operation, eth.SrcMAC, eth.DstMAC, net.HardwareAddr(a.SourceHwAddress), net.IP(a.SourceProtAddress), net.IP(a.DstProtAddress), tc.ops[i], mac, mac, vip, vip)
				}
				p, ok := parseARP(f)
				if !ok || p.senderIP != vip || p.targetIP != vip || p.op != tc.ops[i] {
					t.Errorf("frame %d does not parse back: %+v %v", i, p, ok)
				}
			}
		})
	}
}

func TestParseND(t *testing.T) {
	vip := netip.MustParseAddr("fd00:db8:12::100")
	good := neighbourSolicitation(nodeMAC, clientIP6, vip, vip, true)
	corrupt := func(off int) []byte {
		f := bytes.Clone(good)
		f[off] ^= 0x01
		return f
	}
	for _, tc := range []struct {
		name  string
		frame []byte
		ok    bool
	}{
		{"valid solicitation", good, true},
		{"bad checksum", corrupt(len(good) - 1), false},
		{"hop limit 254", corrupt(offHopLimit), false},
		{"not ICMPv6", corrupt(offNextHdr), false},
		{"truncated", good[:offICMPType+2], false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, ok := parseND(tc.frame)
			if ok != tc.ok {
				t.Fatalf("parseND ok = %v, want %v", ok, tc.ok)
			}
			if !ok {
				return
			}
			ns, isNS := p.msg.(*ndp.NeighborSolicitation)
			if !isNS || ns.TargetAddress != vip || p.src != clientIP6 || !bytes.Equal(linkLayer(ns.Options, ndp.Source), clientMAC) {
				t.Errorf("parsed %+v, want a solicitation for %s from %s with its source MAC", p, vip, clientIP6)
			}
		})
	}
}

func TestNAFrame(t *testing.T) {
	vip := netip.MustParseAddr("fd00:db8:12::100")
	f, err := naFrame(nodeMAC, clientMAC, vip, clientIP6, vip, true)
	if err != nil {
		t.Fatal(err)
	}
	eth, ip, na := naOf(t, f)
	if na == nil {
		t.Fatalf("not an advertisement: % x", f)
	}
	if !bytes.Equal(eth.DstMAC, clientMAC) || !ip.SrcIP.Equal(vip.AsSlice()) || !ip.DstIP.Equal(clientIP6.AsSlice()) || ip.HopLimit != 255 ||
		!na.Solicited() || !na.Override() || na.Router() || !bytes.Equal(tlla(na), nodeMAC) {
		t.Errorf("advertisement %+v %+v %+v", eth, ip, na)
	}
	if _, ok := parseND(f); !ok {
		t.Error("own advertisement does not pass parseND (checksum or layout)")
	}
}

// FuzzParse feeds arbitrary frames to both parsers, which read outside
// input from the wire: they must not panic.
func FuzzParse(f *testing.F) {
	f.Add(neighbourSolicitation(nodeMAC, clientIP6, vip6, vip6, true))
	f.Add(arpRequestFrame(broadcast(), probeIP4, vip4))
	f.Fuzz(func(t *testing.T, b []byte) {
		parseND(b)
		parseARP(b)
	})
}
