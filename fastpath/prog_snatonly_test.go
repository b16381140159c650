package fastpath

import (
	"net/netip"
	"testing"

	fpbpf "github.com/novaedge/novaedge/gen/bpf/fastpath"
)

// TestNodeConfigSNATOnly checks when the agent tells the program that every
// NAT mapping is an SNAT one (FP_CFG_NAT_SNAT_ONLY): only with a NAT VIP and
// none keeping the client address.
func TestNodeConfigSNATOnly(t *testing.T) {
	vip := func(port uint16, f Forward) VIP {
		return VIP{Name: "v", Addr: netip.MustParseAddr("192.0.2.10"), Port: port, Proto: ProtoTCP, Forward: f}
	}
	const (
		nat      = uint32(fpbpf.FastpathFpConfigFlagsFP_CFG_NAT)
		snatOnly = uint32(fpbpf.FastpathFpConfigFlagsFP_CFG_NAT_SNAT_ONLY)
	)
	for _, tc := range []struct {
		name string
		vips []VIP
		want uint32
	}{
		{"no VIPs", nil, 0},
		{"DSR only", []VIP{vip(80, ForwardDSRL2), vip(81, ForwardDSRIPIP)}, 0},
		{"SNAT", []VIP{vip(80, ForwardNAT)}, nat | snatOnly},
		{"SNAT and DSR", []VIP{vip(80, ForwardNAT), vip(81, ForwardDSRL2)}, nat | snatOnly},
		{"keeping the client", []VIP{vip(80, ForwardNATKeepClient)}, nat},
		{"SNAT and keeping the client", []VIP{vip(80, ForwardNAT), vip(81, ForwardNATKeepClient)}, nat},
		{"slow path only", []VIP{vip(80, ForwardPass)}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := nodeConfig(Config{VIPs: tc.vips, Node: Node{V4: netip.MustParseAddr("10.0.0.1")}})
			if got := n.Flags & (nat | snatOnly); got != tc.want {
				t.Errorf("flags %#x, want %#x", got, tc.want)
			}
		})
	}
}

// TestProgSNATOnly checks the program with FP_CFG_NAT_SNAT_ONLY: replies to
// the node's SNAT ports are translated as before (IPv4 and IPv6), and a
// packet of another shape is handed to the kernel without the fp_nat
// lookup, which a mapping planted under its key proves: with the flag
// cleared, the same packet is translated through that mapping.
func TestProgSNATOnly(t *testing.T) {
	n := newProgNet(t)
	snatOnly := func() fpbpf.FastpathNodeConfig {
		c := progDefaultConfig()
		c.Flags |= uint32(fpbpf.FastpathFpConfigFlagsFP_CFG_NAT_SNAT_ONLY)
		return c
	}

	t.Run("replies to SNAT ports are translated", func(t *testing.T) {
		for _, tc := range []struct {
			name          string
			client, vip   netip.Addr
			node          netip.Addr
			be            netip.AddrPort
			pkt           func(src, dst netip.Addr, sport, dport uint16) progPkt
			proto         uint8
			forwardedSYNs bool
		}{
			{"IPv4 TCP", progClient4, progVIP4, progNode4, be4a, tcpTo, ipTCP, true},
			{"IPv6 UDP", progClient6, progVIP6, progNode6, be6a, udpTo, ipUDP, false},
		} {
			t.Run(tc.name, func(t *testing.T) {
				e := newProgEnv(t, n, progSmallTables)
				e.setConfig(snatOnly())
				e.addFastVIP(progVIP{addr: tc.vip, port: 80, proto: tc.proto, id: 1, forward: fwdNAT}, tc.be)
				c := tc.pkt(tc.client, tc.vip, 40123, 80)
				if tc.forwardedSYNs {
					c = c.flags(true, false, false, false)
				}
				e.send(c, xdpTX)
				port := e.mustCT(c).NatPort
				before := e.counters()
				out := e.send(tc.pkt(tc.be.Addr(), tc.node, tc.be.Port(), port), xdpTX)
				e.wantCounters(before, counts{cRX: 1, cNATReply: 1, cTX: 1})
				f := decodeFrame(t, out)
				sport, dport := f.ports()
				wantEqual(t, "reply source port", sport, 80)
				wantEqual(t, "reply destination port", dport, 40123)
			})
		}
	})

	t.Run("other shapes skip the lookup", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			dst  netip.Addr
			port uint16
		}{
			{"below the port range", progNode4, progNATMin - 1},
			{"above the port range", progNode4, progNATMax + 1},
			{"to another address", progClient4, progNATMin},
		} {
			t.Run(tc.name, func(t *testing.T) {
				e := newProgEnv(t, n, progSmallTables)
				e.addFastVIP(progVIP{addr: progVIP4, port: 80, proto: ipTCP, id: 1, forward: fwdNAT}, be4a)
				c := tcpTo(progClient4, progVIP4, 40123, 80).flags(true, false, false, false)
				e.send(c, xdpTX)
				real := progFlowKey(be4a.Addr(), progNode4, be4a.Port(), e.mustCT(c).NatPort, ipTCP)
				nv, ok := e.nat(real)
				if !ok {
					t.Fatalf("no mapping under %+v", real)
				}
				planted := progFlowKey(be4a.Addr(), tc.dst, be4a.Port(), tc.port, ipTCP)
				if err := e.objs.FpNat.Put(planted, nv); err != nil {
					t.Fatal(err)
				}
				reply := tcpTo(be4a.Addr(), tc.dst, be4a.Port(), tc.port)

				e.setConfig(snatOnly())
				before := e.counters()
				e.send(reply, xdpPass)
				e.wantCounters(before, counts{cRX: 1, cPassNotVIP: 1})

				e.setConfig(progDefaultConfig())
				before = e.counters()
				e.send(reply, xdpTX)
				e.wantCounters(before, counts{cRX: 1, cNATReply: 1, cTX: 1})
			})
		}
	})
}
