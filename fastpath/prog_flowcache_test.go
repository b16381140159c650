package fastpath

import (
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"

	fpbpf "github.com/novaedge/novaedge/gen/bpf/fastpath"
)

func TestFlowCacheBits(t *testing.T) {
	for _, tc := range []struct {
		size    uint32
		bits    uint32
		wantErr bool
	}{
		{0, 10, false},
		{2, 1, false},
		{1024, 10, false},
		{1 << 20, 20, false},
		{1, 0, true},
		{3, 0, true},
		{65535, 0, true},
		{1 << 21, 0, true},
	} {
		bits, err := flowCacheBits(tc.size)
		if (err != nil) != tc.wantErr || (err == nil && bits != tc.bits) {
			t.Errorf("flowCacheBits(%d) = %d, %v; want %d (error %v)", tc.size, bits, err, tc.bits, tc.wantErr)
		}
	}
	if _, err := Spec(LoadOptions{FlowCacheSize: 3}); err == nil {
		t.Error("Spec accepted FlowCacheSize 3")
	}
}

// flowCopy returns the program's flow cache copy of k's flow, from the
// slot flowCacheSlot computes, on whichever CPU made it.
func (e *progEnv) flowCopy(k fpbpf.FastpathFlowKey) (fpbpf.FastpathFlowCacheEntry, bool) {
	e.t.Helper()
	k4, _ := ctKey4(k)
	for _, c := range e.flowCacheSlots(k) {
		if c.Key == k4 && c.Proto == k.Proto && c.ValidUntil != 0 {
			return c, true
		}
	}
	return fpbpf.FastpathFlowCacheEntry{}, false
}

// flowCacheSlots reads k's slot in every CPU's part of the flow cache.
func (e *progEnv) flowCacheSlots(k fpbpf.FastpathFlowKey) []fpbpf.FastpathFlowCacheEntry {
	e.t.Helper()
	idx, err := flowCacheIndexes(k, e.objs.FlowCacheBits)
	if err != nil {
		e.t.Fatal(err)
	}
	per := make([]fpbpf.FastpathFlowCacheEntry, len(idx))
	for c, i := range idx {
		if err := e.objs.FpFlowCache.Lookup(i, &per[c]); err != nil {
			e.t.Fatalf("read flow cache: %v", err)
		}
	}
	return per
}

// setCTBehind rewrites a flow's conntrack entry without PutConntrack, so
// the program's copy stays: the packets that follow show which one served.
func (e *progEnv) setCTBehind(k fpbpf.FastpathFlowKey, v fpbpf.FastpathCtValue) {
	e.t.Helper()
	k4, _ := ctKey4(k)
	m, _ := ct4Map(k.Proto, e.objs.FpCt4Tcp, e.objs.FpCt4Udp)
	if err := m.Put(&k4, &v); err != nil {
		e.t.Fatalf("write conntrack: %v", err)
	}
}

// TestProgFlowCache checks the flow cache: which packets make a copy of a
// conntrack entry, that the copy then serves the flow's packets instead of
// the entry, and every way a copy stops serving (state-changing flags, the
// agent writing the entry, a new VIP epoch, an inactive backend, the
// entry's refresh time).
func TestProgFlowCache(t *testing.T) {
	n := newProgNet(t)
	// The copies are per CPU: every run on the CPU that made them.
	n.pinCPU(t)
	tcpVIP := progVIP{addr: progVIP4, port: 80, proto: ipTCP, id: 1, forward: fwdDSRIPIP}
	udpVIP := progVIP{addr: progVIP4, port: 53, proto: ipUDP, id: 1, forward: fwdDSRIPIP}
	base := tcpTo(progClient4, progVIP4, 40123, 80)
	syn := base.flags(true, false, false, false)
	ack := base.flags(false, true, false, false)
	fin := base.flags(false, true, true, false)
	udp := udpTo(progClient4, progVIP4, 40123, 53)
	addrOf := map[uint32]netip.Addr{tcpVIP.id*16 + 1: be4a.Addr(), tcpVIP.id*16 + 2: be4b.Addr()}

	// open makes the TCP flow OPEN (its ACK, a conntrack hit, copies it)
	// and returns its backend and the other one.
	open := func(t *testing.T, e *progEnv) (uint32, uint32) {
		t.Helper()
		e.send(syn, xdpTX)
		if _, ok := e.flowCopy(keyOfPkt(syn)); ok {
			t.Fatal("a SYN flow was copied")
		}
		e.send(ack, xdpTX)
		ct := e.mustCT(ack)
		c, ok := e.flowCopy(keyOfPkt(ack))
		if !ok {
			t.Fatal("an open flow's hit made no copy")
		}
		wantEqual(t, "copy's backend", c.BackendId, ct.BackendId)
		wantEqual(t, "copy's VIP", c.VipId, ct.VipId)
		wantEqual(t, "copy's forward", c.Forward, fwdDSRIPIP)
		wantEqual(t, "copy's hash", c.Hash, ct.Hash)
		wantEqual(t, "copy's epoch", c.VipEpoch, e.epoch)
		wantEqual(t, "copy's refresh time", c.ValidUntil, ct.LastSeen+1_000_000_000)
		other := tcpVIP.id*16 + 1
		if ct.BackendId == other {
			other++
		}
		return ct.BackendId, other
	}
	// sentTo runs p and returns the backend its tunnel goes to.
	sentTo := func(t *testing.T, e *progEnv, p progPkt) netip.Addr {
		t.Helper()
		return decodeFrame(t, e.send(p, xdpTX)).dst()
	}

	for _, tc := range []struct {
		name string
		run  func(t *testing.T, e *progEnv)
	}{
		{"the copy serves the flow, counted as a conntrack hit", func(t *testing.T, e *progEnv) {
			orig, other := open(t, e)
			ct := e.mustCT(ack)
			ct.BackendId = other
			e.setCTBehind(keyOfPkt(ack), ct)
			before := e.counters()
			wantEqual(t, "backend", sentTo(t, e, ack), addrOf[orig])
			e.wantCounters(before, counts{cRX: 1, cCTHit: 1, cTX: 1})
		}},
		{"PutConntrack drops the copy", func(t *testing.T, e *progEnv) {
			_, other := open(t, e)
			ct := e.mustCT(ack)
			ct.BackendId = other
			e.putCT(ack, ct)
			if _, ok := e.flowCopy(keyOfPkt(ack)); ok {
				t.Fatal("the copy survived PutConntrack")
			}
			wantEqual(t, "backend", sentTo(t, e, ack), addrOf[other])
		}},
		{"a FIN drops the copy and a closing flow gets none", func(t *testing.T, e *progEnv) {
			open(t, e)
			e.send(fin, xdpTX)
			if _, ok := e.flowCopy(keyOfPkt(fin)); ok {
				t.Fatal("the copy survived a FIN")
			}
			wantEqual(t, "state", e.mustCT(fin).State, ctClosing)
			e.send(ack, xdpTX)
			if _, ok := e.flowCopy(keyOfPkt(ack)); ok {
				t.Fatal("a closing flow was copied")
			}
		}},
		{"a new VIP epoch retires the copy", func(t *testing.T, e *progEnv) {
			_, other := open(t, e)
			ct := e.mustCT(ack)
			ct.BackendId = other
			e.setCTBehind(keyOfPkt(ack), ct)
			e.setConfig(e.cfg)
			wantEqual(t, "backend", sentTo(t, e, ack), addrOf[other])
			c, ok := e.flowCopy(keyOfPkt(ack))
			if !ok || c.VipEpoch != e.epoch || c.BackendId != other {
				t.Fatalf("copy %+v (found %v), want one of epoch %d to backend %d", c, ok, e.epoch, other)
			}
		}},
		{"an inactive backend's copy does not serve", func(t *testing.T, e *progEnv) {
			orig, _ := open(t, e)
			e.putBackend(orig, netip.AddrPortFrom(addrOf[orig], 8080), 0)
			before := e.counters()
			// Conntrack then balances the flow anew, to the table's
			// (inactive) backend: a drop, not a frame to the copy's.
			e.send(ack, xdpDrop)
			e.wantCounters(before, counts{cRX: 1, cCTMiss: 1, cDropNoBackend: 1})
		}},
		{"past the entry's refresh time conntrack serves and is copied again", func(t *testing.T, e *progEnv) {
			_, other := open(t, e)
			ct := e.mustCT(ack)
			ct.BackendId = other
			e.setCTBehind(keyOfPkt(ack), ct)
			e.expireFlowCopies(t, keyOfPkt(ack))
			wantEqual(t, "backend", sentTo(t, e, ack), addrOf[other])
			if c, ok := e.flowCopy(keyOfPkt(ack)); !ok || c.BackendId != other {
				t.Fatalf("copy %+v (found %v), want one to backend %d", c, ok, other)
			}
		}},
		{"a UDP flow is copied at its second packet", func(t *testing.T, e *progEnv) {
			ids := e.addFastVIP(udpVIP, be4a, be4b)
			e.send(udp, xdpTX)
			if _, ok := e.flowCopy(keyOfPkt(udp)); ok {
				t.Fatal("a new UDP flow was copied")
			}
			orig := sentTo(t, e, udp)
			if _, ok := e.flowCopy(keyOfPkt(udp)); !ok {
				t.Fatal("a UDP hit made no copy")
			}
			ct := e.mustCT(udp)
			ct.BackendId = ids[0] + ids[1] - ct.BackendId
			e.setCTBehind(keyOfPkt(udp), ct)
			wantEqual(t, "backend", sentTo(t, e, udp), orig)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newProgEnv(t, n, progSmallTables)
			if tc.name != "a UDP flow is copied at its second packet" {
				e.addFastVIP(tcpVIP, be4a, be4b)
			}
			tc.run(t, e)
		})
	}

	t.Run("a valid copy keeps its slot from another flow", func(t *testing.T) {
		opts := progSmallTables
		opts.FlowCacheSize = 2
		e := newProgEnv(t, n, opts)
		e.addFastVIP(tcpVIP, be4a, be4b)
		a := ack
		b := ack
		for b.sport = a.sport + 1; flowCacheSlot(keyOfPkt(b), e.objs.FlowCacheBits) != flowCacheSlot(keyOfPkt(a), e.objs.FlowCacheBits); b.sport++ {
		}
		for _, p := range []progPkt{a, a, b, b} {
			e.send(p, xdpTX)
		}
		if _, ok := e.flowCopy(keyOfPkt(a)); !ok {
			t.Fatal("the first flow lost its copy to the second")
		}
		if _, ok := e.flowCopy(keyOfPkt(b)); ok {
			t.Fatal("the second flow took a valid copy's slot")
		}
		// Once the copy has expired, the slot goes to the next flow hit.
		e.expireFlowCopies(t, keyOfPkt(a))
		e.send(b, xdpTX)
		if _, ok := e.flowCopy(keyOfPkt(b)); !ok {
			t.Fatal("the second flow got no copy in an expired copy's slot")
		}
	})

	t.Run("a hit's counts wait in its slot until it is written again", func(t *testing.T) {
		opts := progSmallTables
		opts.FlowCacheSize = 2
		e := newProgEnv(t, n, opts)
		e.addFastVIP(tcpVIP, be4a, be4b)
		frameLen := uint64(len(ack.frame(t)))
		orig, _ := open(t, e)
		raw0, vip0, be0 := e.rawCounters(), e.rawTraffic(e.objs.FpVipStats, tcpVIP.id), e.rawTraffic(e.objs.FpBackendStats, orig)
		before := e.counters()
		vipBefore, beBefore := e.traffic(e.objs.FpVipStats, tcpVIP.id), e.traffic(e.objs.FpBackendStats, orig)

		for range 3 {
			e.send(ack, xdpTX)
		}
		c, ok := e.flowCopy(keyOfPkt(ack))
		if !ok || c.Packets != 3 || c.Bytes != 3*frameLen {
			t.Fatalf("slot %+v (found %v), want 3 packets of %d bytes counted in it", c, ok, 3*frameLen)
		}
		// The maps have not moved; the readers add the slot.
		e.wantRawCounters(raw0, counts{})
		wantEqual(t, "VIP traffic in the map", e.rawTraffic(e.objs.FpVipStats, tcpVIP.id), vip0)
		wantEqual(t, "backend traffic in the map", e.rawTraffic(e.objs.FpBackendStats, orig), be0)
		e.wantCounters(before, counts{cRX: 3, cCTHit: 3, cTX: 3})
		wantEqual(t, "VIP traffic read", e.traffic(e.objs.FpVipStats, tcpVIP.id),
			fpbpf.FastpathFpTraffic{Packets: vipBefore.Packets + 3, Bytes: vipBefore.Bytes + 3*frameLen})
		wantEqual(t, "backend traffic read", e.traffic(e.objs.FpBackendStats, orig),
			fpbpf.FastpathFpTraffic{Packets: beBefore.Packets + 3, Bytes: beBefore.Bytes + 3*frameLen})

		// The agent writing the entry keeps the slot's counts.
		ct := e.mustCT(ack)
		e.putCT(ack, ct)
		e.wantCounters(before, counts{cRX: 3, cCTHit: 3, cTX: 3})

		// The refresh (conntrack serves, copies again) moves them to the maps.
		e.send(ack, xdpTX)
		if c, ok := e.flowCopy(keyOfPkt(ack)); !ok || c.Packets != 0 {
			t.Fatalf("slot %+v (found %v) after the refresh, want a new copy with nothing counted", c, ok)
		}
		e.wantRawCounters(raw0, counts{cRX: 4, cCTHit: 4, cTX: 4})
		wantEqual(t, "VIP traffic in the map", e.rawTraffic(e.objs.FpVipStats, tcpVIP.id),
			fpbpf.FastpathFpTraffic{Packets: vip0.Packets + 4, Bytes: vip0.Bytes + 4*frameLen})
		e.wantCounters(before, counts{cRX: 4, cCTHit: 4, cTX: 4})

		// Another flow taking the slot adds the first flow's counts, to the first flow's backend.
		e.send(ack, xdpTX)
		e.send(ack, xdpTX)
		b := ack
		for b.sport = ack.sport + 1; flowCacheSlot(keyOfPkt(b), e.objs.FlowCacheBits) != flowCacheSlot(keyOfPkt(ack), e.objs.FlowCacheBits); b.sport++ {
		}
		e.send(b.flags(true, false, false, false), xdpTX)
		bBackend := e.mustCT(b).BackendId
		e.expireFlowCopies(t, keyOfPkt(ack))
		rawBe := e.rawTraffic(e.objs.FpBackendStats, orig)
		e.send(b, xdpTX)
		if c, ok := e.flowCopy(keyOfPkt(b)); !ok || c.Packets != 0 {
			t.Fatalf("second flow's slot %+v (found %v), want its copy with nothing counted", c, ok)
		}
		wantBe := rawBe.Packets + 2
		if bBackend == orig {
			wantBe++ // b's packet itself, counted on its conntrack path
		}
		wantEqual(t, "first flow's backend traffic in the map", e.rawTraffic(e.objs.FpBackendStats, orig).Packets, wantBe)
		e.wantCounters(before, counts{cRX: 8, cCTHit: 7, cCTMiss: 1, cCTCreated: 1, cTX: 8})
	})

	t.Run("without a VIP epoch nothing is copied", func(t *testing.T) {
		e := newProgEnvMode(t, n, progSmallTables, true)
		e.addFastVIP(tcpVIP, be4a, be4b)
		e.send(syn, xdpTX)
		e.send(ack, xdpTX)
		e.send(ack, xdpTX)
		if _, ok := e.flowCopy(keyOfPkt(ack)); ok {
			t.Fatal("a flow was copied with the VIP copies off")
		}
	})
}

// rawCounters reads fp_counters alone, without what flow cache slots hold.
func (e *progEnv) rawCounters() map[string]uint64 {
	e.t.Helper()
	c, err := ReadCounters(e.objs.FpCounters, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// wantRawCounters checks how far fp_counters alone moved since before.
func (e *progEnv) wantRawCounters(before map[string]uint64, want counts) {
	e.t.Helper()
	now := e.rawCounters()
	for name, v := range now {
		var w uint64
		for c, n := range want {
			if CounterName(c) == name {
				w = n
			}
		}
		if v-before[name] != w {
			e.t.Errorf("fp_counters %s moved by %d, want %d", name, v-before[name], w)
		}
	}
}

// rawTraffic reads an fp_vip_stats or fp_backend_stats entry alone.
func (e *progEnv) rawTraffic(m *ebpf.Map, id uint32) fpbpf.FastpathFpTraffic {
	e.t.Helper()
	t, err := readTraffic(m, id)
	if err != nil {
		e.t.Fatal(err)
	}
	return t
}

// expireFlowCopies makes the copies in k's flow cache slot, on every CPU,
// past their validity (as if the entry's refresh were due).
func (e *progEnv) expireFlowCopies(t *testing.T, k fpbpf.FastpathFlowKey) {
	t.Helper()
	idx, err := flowCacheIndexes(k, e.objs.FlowCacheBits)
	if err != nil {
		t.Fatal(err)
	}
	for c, fe := range e.flowCacheSlots(k) {
		if fe.ValidUntil == 0 {
			continue
		}
		fe.ValidUntil = 1
		if err := e.objs.FpFlowCache.Put(idx[c], &fe); err != nil {
			t.Fatal(err)
		}
	}
}
