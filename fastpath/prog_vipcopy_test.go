package fastpath

import (
	"testing"

	"github.com/novaedge/novaedge/fastpath/flowhash"
	fpbpf "github.com/novaedge/novaedge/gen/bpf/fastpath"
)

// TestProgVIPCopy follows the copy of a flow's VIP entry in its conntrack
// entry: made at the first packet, used instead of a VIP lookup while the
// epoch holds, and replaced by a lookup after the agent's next change.
func TestProgVIPCopy(t *testing.T) {
	n := newProgNet(t)
	e := newProgEnv(t, n, progSmallTables)
	vip := progVIP{addr: progVIP4, port: 80, proto: ipTCP, id: 1, forward: fwdDSRIPIP}
	e.addFastVIP(vip, be4a)
	p := tcpTo(progClient4, progVIP4, 40000, 80)

	e.send(p, xdpTX)
	ct := e.mustCT(p)
	wantEqual(t, "copied forward", ct.Forward, fwdDSRIPIP)
	wantEqual(t, "copied epoch", ct.VipEpoch, e.epoch)

	// The VIP entry changes behind the program's back (no new epoch): the
	// copy is used, so the packet is still tunnelled. This is what saves
	// the lookup; the agent always bumps the epoch.
	pass := vip
	pass.forward = fwdPass
	k := fpbpf.FastpathVipKey{Addr: flowhash.Addr16(progVIP4), Port: 80, Proto: ipTCP, Family: progFamily(progVIP4)}
	if err := e.objs.FpVips.Put(k, fpbpf.FastpathVipInfo{Id: 1, Forward: fwdPass}); err != nil {
		t.Fatal(err)
	}
	before := e.counters()
	e.send(p, xdpTX)
	e.wantCounters(before, counts{cRX: 1, cCTHit: 1, cTX: 1})

	// With the epoch the agent writes, the lookup sees the slow-path entry.
	e.addVIP(pass)
	before = e.counters()
	e.send(p, xdpPass)
	e.wantCounters(before, counts{cRX: 1, cPassSlowPath: 1})

	// Back to the fast path with another forwarding mode: the flow keeps
	// its backend and takes the new mode, and its copy is renewed.
	l2 := vip
	l2.forward = fwdDSRL2
	e.addVIP(l2)
	before = e.counters()
	e.send(p, xdpTX)
	e.wantCounters(before, counts{cRX: 1, cCTHit: 1, cTX: 1})
	ct = e.mustCT(p)
	wantEqual(t, "renewed forward", ct.Forward, fwdDSRL2)
	wantEqual(t, "renewed epoch", ct.VipEpoch, e.epoch)
	wantEqual(t, "backend", ct.BackendId, uint32(1*16+1))
}

// TestProgVIPFilter checks that the prefilter turns away traffic to no VIP
// entry before any lookup, lets the entries' traffic through (the Go and C
// bit functions agree), and serves whole-VIP entries by port 0.
func TestProgVIPFilter(t *testing.T) {
	n := newProgNet(t)
	e := newProgEnv(t, n, progSmallTables)
	e.addFastVIP(progVIP{addr: progVIP4, port: 80, proto: ipTCP, id: 1, forward: fwdDSRL2}, be4a)
	e.addFastVIP(progVIP{addr: progVIP4, port: 0, proto: ipUDP, id: 2, forward: fwdDSRL2}, be4b)
	other := tcpTo(progClient4, progVIP4, 40000, 81)

	// A conntrack entry with a current copy for a port that is no VIP's:
	// the prefilter passes the packet before conntrack is looked at.
	e.putCT(other, fpbpf.FastpathCtValue{BackendId: 17, VipId: 1, State: ctOpen, Forward: fwdDSRL2, VipEpoch: e.epoch, LastSeen: 1 << 62})
	before := e.counters()
	e.send(other, xdpPass)
	e.wantCounters(before, counts{cRX: 1, cPassNotVIP: 1})

	for _, p := range []progPkt{tcpTo(progClient4, progVIP4, 40000, 80), udpTo(progClient4, progVIP4, 40000, 5353)} {
		before := e.counters()
		e.send(p, xdpTX)
		e.wantCounters(before, counts{cRX: 1, cCTMiss: 1, cCTCreated: 1, cTX: 1})
	}

	// Without its bit, the port's own VIP traffic is turned away too: the
	// program reads the filter at the bit the Go side computes.
	b := vipFilterBit(progVIP4, 80, ipTCP)
	var w uint64
	if err := e.objs.FpVipFilter.Lookup(b/64, &w); err != nil {
		t.Fatal(err)
	}
	if w&(1<<(b%64)) == 0 {
		t.Fatalf("bit %d of VIP %v:80 not set", b, progVIP4)
	}
	if err := e.objs.FpVipFilter.Put(b/64, w&^(1<<(b%64))); err != nil {
		t.Fatal(err)
	}
	before = e.counters()
	e.send(tcpTo(progClient4, progVIP4, 40001, 80), xdpPass)
	e.wantCounters(before, counts{cRX: 1, cPassNotVIP: 1})
}
