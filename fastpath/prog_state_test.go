package fastpath

import (
	"net/netip"
	"testing"

	"github.com/novaedge/novaedge/fastpath/flowhash"
	fpbpf "github.com/novaedge/novaedge/gen/bpf/fastpath"
)

const nsec = uint64(1e9)

// keyOfPkt is the conntrack key of a client → VIP packet.
func keyOfPkt(p progPkt) fpbpf.FastpathFlowKey {
	return progFlowKey(p.src, p.dst, p.sport, p.dport, p.proto)
}

// mustCT returns the conntrack entry of p's flow or fails.
func (e *progEnv) mustCT(p progPkt) fpbpf.FastpathCtValue {
	e.t.Helper()
	ct, ok := e.ct(keyOfPkt(p))
	if !ok {
		e.t.Fatalf("no conntrack entry for %v:%d → %v:%d", p.src, p.sport, p.dst, p.dport)
	}
	return ct
}

func (e *progEnv) putCT(p progPkt, v fpbpf.FastpathCtValue) {
	e.t.Helper()
	if err := e.objs.PutConntrack(keyOfPkt(p), v); err != nil {
		e.t.Fatalf("write conntrack: %v", err)
	}
}

// send runs p and fails unless the verdict is want.
func (e *progEnv) send(p progPkt, want progVerdict) []byte {
	e.t.Helper()
	v, out := e.run(p.frame(e.t))
	if v != want {
		e.t.Fatalf("%v:%d → %v:%d: verdict %v, want %v; counters %s", p.src, p.sport, p.dst, p.dport, v, want, fmtCounters(e.counters()))
	}
	return out
}

// TestProgTCPStates follows the conntrack state of TCP flows through
// sequences of packets, and the entry's backend, VIP and hash.
func TestProgTCPStates(t *testing.T) {
	n := newProgNet(t)
	base := tcpTo(progClient4, progVIP4, 40123, 80)
	syn := base.flags(true, false, false, false)
	ack := base.flags(false, true, false, false)
	finAck := base.flags(false, true, true, false)
	rst := base.flags(false, false, false, true)
	const none = 0
	for _, tc := range []struct {
		name   string
		steps  []progPkt
		states []uint8 // after each step; none: no entry
	}{
		{"SYN creates a SYN entry", []progPkt{syn}, []uint8{ctSYN}},
		{"SYN, ACK opens it", []progPkt{syn, ack}, []uint8{ctSYN, ctOpen}},
		{"SYN, SYN stays SYN", []progPkt{syn, syn}, []uint8{ctSYN, ctSYN}},
		{"FIN closes an open flow", []progPkt{syn, ack, finAck}, []uint8{ctSYN, ctOpen, ctClosing}},
		{"ACK after FIN stays closing", []progPkt{syn, ack, finAck, ack}, []uint8{ctSYN, ctOpen, ctClosing, ctClosing}},
		{"RST closes a SYN flow", []progPkt{syn, rst}, []uint8{ctSYN, ctClosing}},
		{"a new SYN reopens a closing flow", []progPkt{syn, ack, finAck, syn}, []uint8{ctSYN, ctOpen, ctClosing, ctSYN}},
		{"a mid-flow ACK without an entry is open at once", []progPkt{ack}, []uint8{ctOpen}},
		{"a RST without an entry is forwarded but starts nothing", []progPkt{rst}, []uint8{none}},
		{"a FIN without an entry starts an open entry", []progPkt{finAck}, []uint8{ctOpen}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newProgEnv(t, n, progSmallTables)
			ids := e.addFastVIP(progVIP{addr: progVIP4, port: 80, proto: ipTCP, id: 3, forward: fwdDSRIPIP}, be4a, be4b)
			// fillTable cycles through ids: the slot of the hash decides.
			wantBackend := ids[int(hashOf(base)%e.objs.MaglevSize)%len(ids)]
			for i, p := range tc.steps {
				e.send(p, xdpTX)
				ct, ok := e.ct(keyOfPkt(p))
				if tc.states[i] == none {
					if ok {
						t.Fatalf("step %d: conntrack entry %+v, want none", i, ct)
					}
					continue
				}
				if !ok {
					t.Fatalf("step %d: no conntrack entry", i)
				}
				wantEqual(t, "state", ct.State, tc.states[i])
				wantEqual(t, "backend", ct.BackendId, wantBackend)
				wantEqual(t, "VIP", ct.VipId, 3)
				wantEqual(t, "hash", ct.Hash, hashOf(p))
				wantEqual(t, "NAT port", ct.NatPort, 0)
				if ct.LastSeen == 0 {
					t.Error("last_seen not set")
				}
			}
			if tc.states[len(tc.states)-1] == none && e.ctCount() != 0 {
				t.Errorf("%d conntrack entries, want none", e.ctCount())
			}
		})
	}
}

// TestProgNATState checks the mappings NAT creates, their use by replies
// and the allocation of SNAT ports.
func TestProgNATState(t *testing.T) {
	n := newProgNet(t)
	c := tcpTo(progClient4, progVIP4, 40123, 80).flags(true, false, false, false)

	t.Run("SNAT records the reply mapping", func(t *testing.T) {
		e := newProgEnv(t, n, progSmallTables)
		e.addFastVIP(progVIP{addr: progVIP4, port: 80, proto: ipTCP, id: 1, forward: fwdNAT}, be4a)
		e.send(c, xdpTX)
		ct := e.mustCT(c)
		if ct.NatPort < progNATMin || ct.NatPort > progNATMax {
			t.Fatalf("conntrack NAT port %d outside [%d, %d]", ct.NatPort, progNATMin, progNATMax)
		}
		nats := e.natEntries()
		if len(nats) != 1 {
			t.Fatalf("%d NAT entries, want 1: %v", len(nats), nats)
		}
		k := progFlowKey(be4a.Addr(), progNode4, be4a.Port(), ct.NatPort, ipTCP)
		nv, ok := nats[k]
		if !ok {
			t.Fatalf("no NAT entry under %+v; have %v", k, nats)
		}
		wantEqual(t, "client", nv.Client, flowhash.Addr16(progClient4))
		wantEqual(t, "client port", nv.ClientPort, c.sport)
		wantEqual(t, "VIP", nv.Vip, flowhash.Addr16(progVIP4))
		wantEqual(t, "VIP port", nv.VipPort, c.dport)
		wantEqual(t, "VIP ID", nv.VipId, 1)
		if nv.LastSeen == 0 {
			t.Error("last_seen not set")
		}
		// Later packets of the flow keep the port and create nothing.
		out := e.send(c.flags(false, true, false, false), xdpTX)
		sport, _ := decodeFrame(t, out).ports()
		wantEqual(t, "SNAT port of the second packet", sport, ct.NatPort)
		wantEqual(t, "NAT entries", len(e.natEntries()), 1)

		before := e.counters()
		reply := tcpTo(be4a.Addr(), progNode4, be4a.Port(), ct.NatPort)
		e.send(reply, xdpTX)
		e.wantCounters(before, counts{cRX: 1, cNATReply: 1, cTX: 1})
		// A reply to a port without a mapping is not ours.
		before = e.counters()
		e.send(tcpTo(be4a.Addr(), progNode4, be4a.Port(), ct.NatPort+1), xdpPass)
		e.wantCounters(before, counts{cRX: 1, cPassNotVIP: 1})
	})

	t.Run("DNAT keeping the client records the reply mapping", func(t *testing.T) {
		e := newProgEnv(t, n, progSmallTables)
		e.addFastVIP(progVIP{addr: progVIP6, port: 80, proto: ipUDP, id: 1, forward: fwdNATKeepClient}, be6a)
		p := udpTo(progClient6, progVIP6, 40123, 80)
		e.send(p, xdpTX)
		wantEqual(t, "conntrack NAT port", e.mustCT(p).NatPort, 0)
		wantEqual(t, "conntrack state", e.mustCT(p).State, ctOpen)
		k := progFlowKey(be6a.Addr(), progClient6, be6a.Port(), p.sport, ipUDP)
		nv, ok := e.nat(k)
		if !ok {
			t.Fatalf("no NAT entry under %+v; have %v", k, e.natEntries())
		}
		wantEqual(t, "client", nv.Client, flowhash.Addr16(progClient6))
		wantEqual(t, "client port", nv.ClientPort, p.sport)
		wantEqual(t, "VIP", nv.Vip, flowhash.Addr16(progVIP6))
		wantEqual(t, "VIP port", nv.VipPort, p.dport)
		wantEqual(t, "VIP ID", nv.VipId, 1)
		wantEqual(t, "NAT entries", len(e.natEntries()), 1)
	})

	t.Run("two clients with the same source port get different SNAT ports", func(t *testing.T) {
		e := newProgEnv(t, n, progSmallTables)
		cfg := progDefaultConfig()
		cfg.NatPortMin, cfg.NatPortMax = 40000, 40001
		e.setConfig(cfg)
		e.addFastVIP(progVIP{addr: progVIP4, port: 80, proto: ipTCP, id: 1, forward: fwdNAT}, be4a)
		a := c
		b := c
		b.src = netip.MustParseAddr("198.51.100.8")
		outA, outB := e.send(a, xdpTX), e.send(b, xdpTX)
		pa, _ := decodeFrame(t, outA).ports()
		pb, _ := decodeFrame(t, outB).ports()
		if pa == pb {
			t.Fatalf("both clients were given SNAT port %d", pa)
		}
		for _, pp := range []struct {
			port   uint16
			client netip.Addr
		}{{pa, a.src}, {pb, b.src}} {
			nv, ok := e.nat(progFlowKey(be4a.Addr(), progNode4, be4a.Port(), pp.port, ipTCP))
			if !ok {
				t.Fatalf("no NAT entry for port %d", pp.port)
			}
			wantEqual(t, "client of the mapping", nv.Client, flowhash.Addr16(pp.client))
		}
	})

	t.Run("NAT port range exhausted", func(t *testing.T) {
		e := newProgEnv(t, n, progSmallTables)
		cfg := progDefaultConfig()
		cfg.NatPortMin, cfg.NatPortMax = 40000, 40000
		e.setConfig(cfg)
		e.addFastVIP(progVIP{addr: progVIP4, port: 80, proto: ipTCP, id: 1, forward: fwdNAT}, be4a)
		e.send(c, xdpTX)
		b := c
		b.src = netip.MustParseAddr("198.51.100.8")
		before := e.counters()
		e.send(b, xdpDrop)
		e.wantCounters(before, counts{cRX: 1, cCTMiss: 1, cDropNATExhausted: 1})
		if _, ok := e.ct(keyOfPkt(b)); ok {
			t.Error("the refused flow has a conntrack entry")
		}
		nv, _ := e.nat(progFlowKey(be4a.Addr(), progNode4, be4a.Port(), 40000, ipTCP))
		wantEqual(t, "client of the only mapping", nv.Client, flowhash.Addr16(c.src))
	})

	t.Run("an idle mapping is taken over", func(t *testing.T) {
		e := newProgEnv(t, n, progSmallTables)
		cfg := progDefaultConfig()
		cfg.NatPortMin, cfg.NatPortMax = 40000, 40000
		cfg.TcpTimeout = 10
		e.setConfig(cfg)
		e.addFastVIP(progVIP{addr: progVIP4, port: 80, proto: ipTCP, id: 1, forward: fwdNAT}, be4a)
		e.send(c, xdpTX)
		// Both directions of the first flow fell silent 11 s ago.
		k := progFlowKey(be4a.Addr(), progNode4, be4a.Port(), 40000, ipTCP)
		nv, _ := e.nat(k)
		nv.LastSeen -= 11 * nsec
		if err := e.objs.FpNat.Put(k, nv); err != nil {
			t.Fatal(err)
		}
		ct := e.mustCT(c)
		ct.LastSeen -= 11 * nsec
		e.putCT(c, ct)
		b := c
		b.src = netip.MustParseAddr("198.51.100.8")
		out := e.send(b, xdpTX)
		sport, _ := decodeFrame(t, out).ports()
		wantEqual(t, "SNAT port", sport, 40000)
		nv, _ = e.nat(k)
		wantEqual(t, "client of the mapping", nv.Client, flowhash.Addr16(b.src))
	})
}

// TestProgConntrackPersistence checks that conntrack pins a flow to its
// backend across table changes, and when it lets go: the backend removed,
// the entry expired, the VIP redefined.
func TestProgConntrackPersistence(t *testing.T) {
	n := newProgNet(t)
	p := udpTo(progClient4, progVIP4, 40123, 53)
	v := progVIP{addr: progVIP4, port: 53, proto: ipUDP, id: 1, forward: fwdNAT}
	for _, tc := range []struct {
		name string
		// change happens after the flow's first packet went to backend A
		// (ID 1); the table now points at backend B (ID 2) only.
		change   func(e *progEnv)
		wantBE   uint32
		counters counts // of the second packet
	}{
		{
			name: "conntrack keeps the backend after the table changed", wantBE: 1,
			counters: counts{cRX: 1, cCTHit: 1, cTX: 1},
		},
		{
			name: "a flow whose backend became inactive is balanced anew", wantBE: 2,
			change:   func(e *progEnv) { e.putBackend(1, be4a, 0) },
			counters: counts{cRX: 1, cCTMiss: 1, cCTCreated: 1, cNATCreated: 1, cTX: 1},
		},
		{
			name: "an expired entry is counted and balanced anew", wantBE: 2,
			change: func(e *progEnv) {
				ct := e.mustCT(p)
				ct.LastSeen -= 61 * nsec // the default UDP timeout is 60 s
				e.putCT(p, ct)
			},
			counters: counts{cRX: 1, cCTExpired: 1, cCTMiss: 1, cCTCreated: 1, cNATCreated: 1, cTX: 1},
		},
		{
			name: "an entry within its configured timeout is kept", wantBE: 1,
			change: func(e *progEnv) {
				cfg := progDefaultConfig()
				cfg.UdpTimeout = 120
				e.setConfig(cfg)
				ct := e.mustCT(p)
				ct.LastSeen -= 61 * nsec
				e.putCT(p, ct)
			},
			counters: counts{cRX: 1, cCTHit: 1, cTX: 1},
		},
		{
			name: "an entry past its configured timeout expires", wantBE: 2,
			change: func(e *progEnv) {
				cfg := progDefaultConfig()
				cfg.UdpTimeout = 5
				e.setConfig(cfg)
				ct := e.mustCT(p)
				ct.LastSeen -= 6 * nsec
				e.putCT(p, ct)
			},
			counters: counts{cRX: 1, cCTExpired: 1, cCTMiss: 1, cCTCreated: 1, cNATCreated: 1, cTX: 1},
		},
		{
			name: "a VIP redefined under another ID balances its flows anew", wantBE: 2,
			change: func(e *progEnv) {
				v2 := v
				v2.id = 2
				e.addVIP(v2)
				e.fillTable(2, 2)
			},
			counters: counts{cRX: 1, cCTMiss: 1, cCTCreated: 1, cNATCreated: 1, cTX: 1},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newProgEnv(t, n, progSmallTables)
			e.addBackend(1, be4a)
			e.addBackend(2, be4b)
			e.addVIP(v)
			e.fillTable(1, 1)
			out := e.send(p, xdpTX)
			wantEqual(t, "first backend", decodeFrame(t, out).dst(), be4a.Addr())
			e.fillTable(1, 2)
			if tc.change != nil {
				tc.change(e)
			}
			before := e.counters()
			out = e.send(p, xdpTX)
			e.wantCounters(before, tc.counters)
			want := map[uint32]netip.Addr{1: be4a.Addr(), 2: be4b.Addr()}[tc.wantBE]
			wantEqual(t, "backend of the second packet", decodeFrame(t, out).dst(), want)
			wantEqual(t, "conntrack backend", e.mustCT(p).BackendId, tc.wantBE)
			// A new flow follows the table.
			q := p
			q.sport++
			wantEqual(t, "backend of a new flow", decodeFrame(t, e.send(q, xdpTX)).dst(), be4b.Addr())
		})
	}
}

// TestProgTrafficStats checks the per-VIP and per-backend packet and byte
// counts and the counters over a few flows.
func TestProgTrafficStats(t *testing.T) {
	n := newProgNet(t)
	e := newProgEnv(t, n, progSmallTables)
	e.addBackend(1, be4a)
	e.addBackend(2, be4b)
	e.addVIP(progVIP{addr: progVIP4, port: 80, proto: ipTCP, id: 5, forward: fwdNAT})
	e.addVIP(progVIP{addr: progVIP4, port: 443, proto: ipTCP, id: 6, forward: fwdDSRIPIP})
	e.fillTable(5, 1)
	e.fillTable(6, 2)
	a := tcpTo(progClient4, progVIP4, 40000, 80)
	b := tcpTo(progClient4, progVIP4, 40000, 443)
	b.payload = make([]byte, 200)
	var bytesA, bytesB uint64
	for _, p := range []progPkt{a.flags(true, false, false, false), a, a, b, b} {
		f := p.frame(t)
		if v, _ := e.run(f); v != xdpTX {
			t.Fatalf("verdict %v", v)
		}
		if p.dport == 80 {
			bytesA += uint64(len(f))
		} else {
			bytesB += uint64(len(f))
		}
	}
	// A dropped packet counts for its VIP, not for any backend.
	e.fillTable(6)
	c := b
	c.sport++
	fc := c.frame(t)
	if v, _ := e.run(fc); v != xdpDrop {
		t.Fatalf("verdict %v, want XDP_DROP", v)
	}
	for _, tc := range []struct {
		what string
		got  fpbpf.FastpathFpTraffic
		want fpbpf.FastpathFpTraffic
	}{
		{"VIP 5", e.traffic(e.objs.FpVipStats, 5), fpbpf.FastpathFpTraffic{Packets: 3, Bytes: bytesA}},
		{"VIP 6", e.traffic(e.objs.FpVipStats, 6), fpbpf.FastpathFpTraffic{Packets: 3, Bytes: bytesB + uint64(len(fc))}},
		{"backend 1", e.traffic(e.objs.FpBackendStats, 1), fpbpf.FastpathFpTraffic{Packets: 3, Bytes: bytesA}},
		{"backend 2", e.traffic(e.objs.FpBackendStats, 2), fpbpf.FastpathFpTraffic{Packets: 2, Bytes: bytesB}},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.what, tc.got, tc.want)
		}
	}
	e.wantCounters(nil, counts{
		cRX: 6, cCTMiss: 3, cCTCreated: 2, cCTHit: 3, cNATCreated: 1, cTX: 5, cDropNoBackend: 1,
	})
}

// TestProgNATMappingOfLiveFlowKept: a SNAT mapping must not be handed to
// another flow while the flow that owns it is still sending. Only replies
// refresh a mapping's last_seen (nat_reply); a flow whose backend stays
// silent for longer than the idle timeout (a one-way UDP stream, a long
// upload the backend does not answer at the UDP level) keeps its conntrack
// entry fresh, yet nat_alloc takes its port over. Both flows then leave
// as node:port → backend, which the backend sees as one flow, and the
// first flow's replies go to the second client.
func TestProgNATMappingOfLiveFlowKept(t *testing.T) {
	n := newProgNet(t)
	e := newProgEnv(t, n, progSmallTables)
	cfg := progDefaultConfig()
	cfg.NatPortMin, cfg.NatPortMax = 40000, 40000
	cfg.UdpTimeout = 10
	e.setConfig(cfg)
	e.addFastVIP(progVIP{addr: progVIP4, port: 53, proto: ipUDP, id: 1, forward: fwdNAT}, be4a)
	a := udpTo(progClient4, progVIP4, 40123, 53)
	e.send(a, xdpTX)
	// Flow a kept sending but the backend has not answered for 11 s,
	// longer than the 10 s UDP timeout: the mapping was last refreshed by
	// a reply 11 s ago, the conntrack entry (refreshed at most once a
	// second) 2 s ago. The next packet of flow a must refresh the mapping
	// too.
	k := progFlowKey(be4a.Addr(), progNode4, be4a.Port(), 40000, ipUDP)
	nv, ok := e.nat(k)
	if !ok {
		t.Fatal("no NAT mapping for the first flow")
	}
	nv.LastSeen -= 11 * nsec
	if err := e.objs.FpNat.Put(k, nv); err != nil {
		t.Fatal(err)
	}
	ck := progFlowKey(a.src, a.dst, a.sport, a.dport, ipUDP)
	cv, ok := e.ct(ck)
	if !ok {
		t.Fatal("no conntrack entry for the first flow")
	}
	cv.LastSeen -= 2 * nsec
	if err := e.objs.PutConntrack(ck, cv); err != nil {
		t.Fatal(err)
	}
	e.send(a, xdpTX) // a packet of flow a, a moment ago

	b := a
	b.src = netip.MustParseAddr("198.51.100.8")
	v, out := e.run(b.frame(t))
	if v == xdpTX {
		if sport, _ := decodeFrame(t, out).ports(); sport == 40000 {
			t.Errorf("a new flow was given SNAT port 40000, still used by the live flow %v:%d", a.src, a.sport)
		}
	}
	nv, _ = e.nat(k)
	if got := netip.AddrFrom4([4]byte(nv.Client[:4])); got != a.src {
		t.Errorf("the mapping of port 40000 now leads to %v, but flow %v:%d still uses it", got, a.src, a.sport)
	}
}

// TestProgStatelessRSTToSNATVIP: a RST without conntrack state is
// forwarded without creating state (handle_l4), but for FP_FWD_NAT that
// leaves nat_port at 0, so the RST leaves as node:0 → backend: a source
// port outside the SNAT range, which names no connection the backend has.
func TestProgStatelessRSTToSNATVIP(t *testing.T) {
	n := newProgNet(t)
	e := newProgEnv(t, n, progSmallTables)
	e.addFastVIP(progVIP{addr: progVIP4, port: 80, proto: ipTCP, id: 1, forward: fwdNAT}, be4a)
	rst := tcpTo(progClient4, progVIP4, 40123, 80).flags(false, false, false, true)
	v, out := e.run(rst.frame(t))
	if v == xdpTX || v == xdpRedirect {
		if sport, _ := decodeFrame(t, out).ports(); sport < progNATMin || sport > progNATMax {
			t.Errorf("stateless RST forwarded (%v) with SNAT source port %d, outside [%d, %d]", v, sport, progNATMin, progNATMax)
		}
	}
}

// TestProgNATWithoutNodeAddrCounted: a SNAT VIP without a node address of
// the backend's family is dropped, and the drop must be counted as
// FP_C_DROP_NO_NODE_ADDR as it is for DSR; nat_alloc fails on the missing
// address and handle_l4 counts FP_C_DROP_NAT_EXHAUSTED, which sends an
// operator to the port range instead.
func TestProgNATWithoutNodeAddrCounted(t *testing.T) {
	n := newProgNet(t)
	e := newProgEnv(t, n, progSmallTables)
	cfg := progDefaultConfig()
	cfg.NodeV6 = [16]byte{}
	e.setConfig(cfg)
	e.addFastVIP(progVIP{addr: progVIP6, port: 80, proto: ipTCP, id: 1, forward: fwdNAT}, be6a)
	e.send(tcpTo(progClient6, progVIP6, 40123, 80), xdpDrop)
	e.wantCounters(nil, counts{cRX: 1, cCTMiss: 1, cDropNoNodeAddr: 1})
}

// TestProgNexthopCacheKeepsRouteMTU: a frame too big for its route must be
// refused (dropped, or answered with "fragmentation needed" when it has
// DF) whether or not the backend's next hop is cached. bpf_fib_lookup
// checks the route's MTU (a locked route MTU, or a learned path MTU), but
// send_backend caches the egress device's MTU (bpf_check_mtu) and lets
// every frame up to it through the cache for NEXTHOP_TTL_NS: right after a
// small frame, a frame above the route MTU is sent instead of dropped.
// The runs stay on one CPU, so the big frames meet the per-CPU entry the
// small ones filled.
func TestProgNexthopCacheKeepsRouteMTU(t *testing.T) {
	n := newProgNet(t)
	n.pinCPU(t)
	e := newProgEnv(t, n, progSmallTables)
	e.addFastVIP(progVIP{addr: progVIP4, port: 80, proto: ipTCP, id: 1, forward: fwdDSRIPIP}, netip.AddrPortFrom(beSmallMTU4, 80))
	small := tcpTo(progClient4, progVIP4, 40000, 80)
	big := small
	big.payload = make([]byte, progRouteMTU) // 360 bytes encapsulated
	// With DF the client is told instead, cached next hop or not.
	bigDF := big
	bigDF.df = true
	for i := range 8 {
		e.send(small, xdpTX)
		if v, _ := e.run(big.frame(t)); v != xdpDrop {
			t.Fatalf("round %d: %d-byte packet to a backend behind a route of MTU %d: verdict %v, want XDP_DROP (FRAG_NEEDED) as without a cached next hop",
				i, 20+ipLen(ipPacketBytes(t, big)), progRouteMTU, v)
		}
		e.send(small, xdpTX)
		in := bigDF.frame(t)
		v, out := e.run(in)
		if v != xdpTX {
			t.Fatalf("round %d: %d-byte packet with DF to a backend behind a route of MTU %d: verdict %v, want XDP_TX (frag needed to the client)",
				i, 20+ipLen(ipPacketBytes(t, bigDF)), progRouteMTU, v)
		}
		wantTooBig(t, in, out, progRouteMTU-20)
	}
}
