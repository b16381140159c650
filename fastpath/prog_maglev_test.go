package fastpath

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/novaedge/novaedge/fastpath/flowhash"
	"github.com/novaedge/novaedge/fastpath/maglev"
	fpbpf "github.com/novaedge/novaedge/gen/bpf/fastpath"
)

// TestProgMaglevAgreesWithGo installs tables built by fastpath/maglev for
// 50 backends of varied weights and checks, for 1000 random IPv4 and IPv6
// TCP and UDP flows, that the program picks table[flowhash.Hash(flow) % M]:
// the Go side (inspection, tests, other nodes) and the kernel agree on
// every flow's backend.
func TestProgMaglevAgreesWithGo(t *testing.T) {
	n := newProgNet(t)
	e := newProgEnv(t, n, LoadOptions{MaxVIPs: 16, MaxBackends: 128, ConntrackSize: 16384, NATSize: 1024})
	if e.objs.MaglevSize != maglev.DefaultSize {
		t.Fatalf("program tables of %d slots, want the default %d", e.objs.MaglevSize, maglev.DefaultSize)
	}
	b, err := maglev.NewBuilder(e.objs.MaglevSize)
	if err != nil {
		t.Fatal(err)
	}
	addrOf := map[uint32]netip.AddrPort{}
	var all, even []maglev.Backend
	for i := range 50 {
		id := uint32(i + 1)
		a := onLink4(byte(20 + i/2))
		if i%2 == 1 {
			a = onLink6(byte(20 + i/2))
		}
		ap := netip.AddrPortFrom(a, uint16(8000+i))
		addrOf[id] = ap
		e.addBackend(id, ap)
		mb := maglev.Backend{Key: ap.String(), Weight: uint32(1 + i%7*10), ID: id}
		all = append(all, mb)
		if i%2 == 0 {
			even = append(even, mb)
		}
	}
	tables := map[uint32]maglev.Table{}
	for vipID, set := range map[uint32][]maglev.Backend{1: all, 2: all, 3: even, 4: all} {
		tab, err := b.Build(set)
		if err != nil {
			t.Fatal(err)
		}
		tables[vipID] = tab
		e.setTable(vipID, tab)
	}
	vips := []progVIP{
		{addr: progVIP4, port: 80, proto: ipTCP, id: 1, forward: fwdDSRIPIP},
		{addr: progVIP4, port: 53, proto: ipUDP, id: 2, forward: fwdDSRIPIP},
		{addr: progVIP6, port: 443, proto: ipTCP, id: 3, forward: fwdDSRIPIP},
		{addr: progVIP6, port: 53, proto: ipUDP, id: 4, forward: fwdDSRIPIP},
	}
	for _, v := range vips {
		e.addVIP(v)
	}

	rng := rand.New(rand.NewPCG(20240601, 4))
	picked := map[uint32]int{}
	for i := range 1000 {
		v := vips[rng.IntN(len(vips))]
		var src netip.Addr
		if v.addr.Is4() {
			src = netip.AddrFrom4([4]byte{byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32())})
		} else {
			var a [16]byte
			for j := range a {
				a[j] = byte(rng.Uint32())
			}
			a[0] = 0x20 // global unicast, never an IPv4-mapped form
			src = netip.AddrFrom16(a)
		}
		p := udpTo(src, v.addr, uint16(1+rng.IntN(65535)), v.port)
		if v.proto == ipTCP {
			p = tcpTo(src, v.addr, p.sport, v.port).flags(true, false, false, false)
		}
		hash := flowhash.Hash(flowhash.Flow{Src: src, Dst: v.addr, SrcPort: p.sport, DstPort: p.dport, Proto: p.proto})
		want := tables[v.id].Lookup(uint64(hash))
		picked[want]++

		name := fmt.Sprintf("flow %d %v:%d → %v:%d/%d", i, src, p.sport, v.addr, v.port, v.proto)
		verdict, out := e.run(p.frame(t))
		if verdict != xdpTX {
			t.Fatalf("%s: verdict %v, want XDP_TX", name, verdict)
		}
		ct := e.mustCT(p)
		if ct.BackendId != want || ct.Hash != hash {
			t.Errorf("%s: program chose backend %d (hash %#x), Go says %d (hash %#x)", name, ct.BackendId, ct.Hash, want, hash)
			continue
		}
		if got := decodeFrame(t, out).dst(); got != addrOf[want].Addr() {
			t.Errorf("%s: encapsulated to %v, want backend %d at %v", name, got, want, addrOf[want].Addr())
		}
	}
	// The flows must have exercised the table, not one corner of it.
	if len(picked) < 40 {
		t.Errorf("1000 flows reached only %d of 50 backends", len(picked))
	}
}

// TestProgClientAffinity: with FP_VIP_AFFINITY_CLIENT the program places
// every new flow of a client on table[flowhash.ClientHash(client) % M],
// whatever its source port, and without the flag the same flows spread over
// several backends.
func TestProgClientAffinity(t *testing.T) {
	n := newProgNet(t)
	e := newProgEnv(t, n, LoadOptions{MaxVIPs: 16, MaxBackends: 64, ConntrackSize: 4096, NATSize: 1024})
	b, err := maglev.NewBuilder(e.objs.MaglevSize)
	if err != nil {
		t.Fatal(err)
	}
	var set []maglev.Backend
	for i := range 10 {
		id := uint32(i + 1)
		ap := netip.AddrPortFrom(onLink4(byte(20+i)), 8080)
		e.addBackend(id, ap)
		set = append(set, maglev.Backend{Key: ap.String(), Weight: 1, ID: id})
	}
	tab, err := b.Build(set)
	if err != nil {
		t.Fatal(err)
	}
	e.setTable(1, tab)
	e.setTable(2, tab)
	sticky := progVIP{addr: progVIP4, port: 80, proto: ipTCP, id: 1, forward: fwdDSRIPIP, flags: uint32(fpbpf.FastpathFpVipFlagsFP_VIP_AFFINITY_CLIENT)}
	spread := progVIP{addr: progVIP4, port: 81, proto: ipTCP, id: 2, forward: fwdDSRIPIP}
	e.addVIP(sticky)
	e.addVIP(spread)

	for c := range 20 {
		client := netip.AddrFrom4([4]byte{198, 51, 100, byte(c + 1)})
		want := tab.Lookup(uint64(flowhash.ClientHash(client)))
		seen := map[uint32]bool{}
		for port := uint16(40000); port < 40016; port++ {
			p := tcpTo(client, progVIP4, port, sticky.port).flags(true, false, false, false)
			if verdict, _ := e.run(p.frame(t)); verdict != xdpTX {
				t.Fatalf("client %v port %d: verdict %v", client, port, verdict)
			}
			if got := e.mustCT(p).BackendId; got != want {
				t.Fatalf("client %v port %d: backend %d, want %d (the client's slot)", client, port, got, want)
			}
			q := tcpTo(client, progVIP4, port, spread.port).flags(true, false, false, false)
			if verdict, _ := e.run(q.frame(t)); verdict != xdpTX {
				t.Fatalf("client %v port %d (no affinity): verdict %v", client, port, verdict)
			}
			seen[e.mustCT(q).BackendId] = true
		}
		if len(seen) < 2 {
			t.Errorf("client %v: 16 connections without affinity reached %d backend(s); the test cannot tell affinity from chance", client, len(seen))
		}
	}
}
