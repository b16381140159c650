package fastpath

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/novaedge/novaedge/fastpath/flowhash"
	fpbpf "github.com/novaedge/novaedge/gen/bpf/fastpath"
)

// This file holds the harness of the BPF_PROG_TEST_RUN tests of the XDP
// program: a network namespace whose FIB and neighbour table bpf_fib_lookup
// consults, the loaded program with helpers over its maps, a packet builder
// on gopacket, and checksum verification written independently of both the
// program and gopacket.

// progVerdict is an XDP action as the program returns it.
type progVerdict uint32

const (
	xdpAborted progVerdict = iota
	xdpDrop
	xdpPass
	xdpTX
	xdpRedirect
)

func (v progVerdict) String() string {
	switch v {
	case xdpAborted:
		return "XDP_ABORTED"
	case xdpDrop:
		return "XDP_DROP"
	case xdpPass:
		return "XDP_PASS"
	case xdpTX:
		return "XDP_TX"
	case xdpRedirect:
		return "XDP_REDIRECT"
	}
	return fmt.Sprintf("progVerdict(%d)", uint32(v))
}

// xdpMD is struct xdp_md, the context of an XDP test run. The kernel wants
// data_end equal to the input length and resolves ingress_ifindex in the
// network namespace of the calling thread.
type xdpMD struct {
	Data, DataEnd, DataMeta, IngressIfindex, RxQueueIndex, EgressIfindex uint32
}

// Short names of the program's enums, and constants of the test setup.
const (
	cRX                    = fpbpf.FastpathFpCounterFP_C_RX
	cPassNotIP             = fpbpf.FastpathFpCounterFP_C_PASS_NOT_IP
	cPassFragment          = fpbpf.FastpathFpCounterFP_C_PASS_FRAGMENT
	cPassNotVIP            = fpbpf.FastpathFpCounterFP_C_PASS_NOT_VIP
	cPassSlowPath          = fpbpf.FastpathFpCounterFP_C_PASS_SLOW_PATH
	cPassNoNeigh           = fpbpf.FastpathFpCounterFP_C_PASS_NO_NEIGH
	cPassEgressNoXDP       = fpbpf.FastpathFpCounterFP_C_PASS_EGRESS_NO_XDP
	cPassICMP              = fpbpf.FastpathFpCounterFP_C_PASS_ICMP
	cPassMalformed         = fpbpf.FastpathFpCounterFP_C_PASS_MALFORMED
	cPassOtherProto        = fpbpf.FastpathFpCounterFP_C_PASS_OTHER_PROTO
	cCTHit                 = fpbpf.FastpathFpCounterFP_C_CT_HIT
	cCTMiss                = fpbpf.FastpathFpCounterFP_C_CT_MISS
	cCTCreated             = fpbpf.FastpathFpCounterFP_C_CT_CREATED
	cCTExpired             = fpbpf.FastpathFpCounterFP_C_CT_EXPIRED
	cNATCreated            = fpbpf.FastpathFpCounterFP_C_NAT_CREATED
	cNATReply              = fpbpf.FastpathFpCounterFP_C_NAT_REPLY
	cICMPEcho              = fpbpf.FastpathFpCounterFP_C_ICMP_ECHO
	cICMPErrForwarded      = fpbpf.FastpathFpCounterFP_C_ICMP_ERROR_FORWARDED
	cTX                    = fpbpf.FastpathFpCounterFP_C_TX
	cRedirect              = fpbpf.FastpathFpCounterFP_C_REDIRECT
	cDropNoBackend         = fpbpf.FastpathFpCounterFP_C_DROP_NO_BACKEND
	cDropNATExhausted      = fpbpf.FastpathFpCounterFP_C_DROP_NAT_EXHAUSTED
	cDropFragNeeded        = fpbpf.FastpathFpCounterFP_C_DROP_FRAG_NEEDED
	cDropFamily            = fpbpf.FastpathFpCounterFP_C_DROP_FAMILY
	cDropNoNodeAddr        = fpbpf.FastpathFpCounterFP_C_DROP_NO_NODE_ADDR
	cDropFIB               = fpbpf.FastpathFpCounterFP_C_DROP_FIB
	cICMPTooBigSent        = fpbpf.FastpathFpCounterFP_C_ICMP_TOO_BIG_SENT
	cICMPNATToBackend      = fpbpf.FastpathFpCounterFP_C_ICMP_NAT_TO_BACKEND
	cICMPNATToClient       = fpbpf.FastpathFpCounterFP_C_ICMP_NAT_TO_CLIENT
	fwdPass                = uint8(fpbpf.FastpathFpForwardFP_FWD_PASS)
	fwdNAT                 = uint8(fpbpf.FastpathFpForwardFP_FWD_NAT)
	fwdNATKeepClient       = uint8(fpbpf.FastpathFpForwardFP_FWD_NAT_KEEP_CLIENT)
	fwdDSRIPIP             = uint8(fpbpf.FastpathFpForwardFP_FWD_DSR_IPIP)
	fwdDSRGUE              = uint8(fpbpf.FastpathFpForwardFP_FWD_DSR_GUE)
	fwdDSRL2               = uint8(fpbpf.FastpathFpForwardFP_FWD_DSR_L2)
	vipFlagEcho            = uint32(fpbpf.FastpathFpVipFlagsFP_VIP_ECHO)
	ctSYN                  = uint8(fpbpf.FastpathCtStateCT_SYN)
	ctOpen                 = uint8(fpbpf.FastpathCtStateCT_OPEN)
	ctClosing              = uint8(fpbpf.FastpathCtStateCT_CLOSING)
	ipTCP                  = uint8(layers.IPProtocolTCP)
	ipUDP                  = uint8(layers.IPProtocolUDP)
	progDefaultGUEPort     = 6080
	progOuterTTL           = 64
	progNATMin, progNATMax = 40000, 40999
)

// The test network. Everything lives in a namespace of the test's own, so
// fixed names and addresses cannot clash with the host or another test.
const (
	linkIn    = "fpt-in" // the interface the program "runs on"
	linkRedir = "fpt-rd" // another fast-path interface: its ifindex is in fp_tx_ports
	linkNoXDP = "fpt-nx" // an interface without the fast path
)

var (
	macIn     = progMAC("02:fe:00:00:00:01")
	macRedir  = progMAC("02:fe:00:00:00:02")
	macNoXDP  = progMAC("02:fe:00:00:00:03")
	macClient = progMAC("02:c1:00:00:00:01") // the source MAC of test frames
	macGW4    = progMAC("02:9a:7e:00:00:04")
	macGW6    = progMAC("02:9a:7e:00:00:06")

	progNode4 = netip.MustParseAddr("10.1.0.1")
	progNode6 = netip.MustParseAddr("fd01::1")
	progGW4   = netip.MustParseAddr("10.1.0.254")
	progGW6   = netip.MustParseAddr("fd01::fe")

	progVIP4    = netip.MustParseAddr("203.0.113.10")
	progVIP6    = netip.MustParseAddr("2001:db8:f::10")
	progClient4 = netip.MustParseAddr("198.51.100.7")  // routed via progGW4
	progClient6 = netip.MustParseAddr("2001:db8:c::7") // routed via progGW6

	// Backends on fpt-in have neighbour entries for host parts 10..99.
	beNoNeigh4   = netip.MustParseAddr("10.1.0.200")
	beNoNeigh6   = netip.MustParseAddr("fd01::200")
	beRedir4     = netip.MustParseAddr("10.3.0.10")
	beRedir6     = netip.MustParseAddr("fd03::10")
	beNoXDP4     = netip.MustParseAddr("10.4.0.10")
	beBlackhole4 = netip.MustParseAddr("10.5.0.10")
	beSmallMTU4  = netip.MustParseAddr("10.6.0.10")
	beSmallMTU6  = netip.MustParseAddr("fd06::10")
)

// The MTUs of the routes to beSmallMTU4 and beSmallMTU6 (IPv6 routes stay
// at 1280 or above).
const (
	progRouteMTU  = 300
	progRouteMTU6 = 1300
)

func progMAC(s string) net.HardwareAddr {
	m, err := net.ParseMAC(s)
	if err != nil {
		panic(err)
	}
	return m
}

// onLink4 and onLink6 are the addresses of the on-link backends n (10..99).
func onLink4(n byte) netip.Addr { return netip.AddrFrom4([4]byte{10, 1, 0, n}) }

func onLink6(n byte) netip.Addr {
	a := progNode6.As16()
	a[14], a[15] = 0, n
	return netip.AddrFrom16(a)
}

// progNeighMAC is the link-layer address the neighbour table holds for a
// backend: 02:be: and the address's last four bytes.
func progNeighMAC(a netip.Addr) net.HardwareAddr {
	b := a.AsSlice()
	return append(net.HardwareAddr{0x02, 0xbe}, b[len(b)-4:]...)
}

// progNet is a network namespace with the links, addresses, routes and
// neighbour entries the program's FIB lookups resolve against, and a
// goroutine locked to a thread inside it that runs everything that must
// happen there (test runs, devmap updates, sysctls).
type progNet struct {
	ns      netns.NsHandle
	h       *netlink.Handle
	work    chan func()
	ifindex map[string]int
}

func newProgNet(t testing.TB) *progNet {
	t.Helper()
	n := newBareNet(t)
	if err := n.setup(); err != nil {
		t.Fatalf("set up test network: %v", err)
	}
	return n
}

// newBareNet is a new network namespace with only lo, and its thread.
func newBareNet(t testing.TB) *progNet {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("these tests must run as root: they load XDP programs and create network namespaces")
	}
	n := &progNet{work: make(chan func()), ifindex: map[string]int{}}
	ready := make(chan error, 1)
	go func() {
		// The thread is never unlocked: it ends with the goroutine, and
		// with it its membership of the namespace.
		runtime.LockOSThread()
		ns, err := netns.New()
		if err != nil {
			ready <- fmt.Errorf("create network namespace: %w", err)
			return
		}
		n.ns = ns
		ready <- nil
		for f := range n.work {
			f()
		}
	}()
	if err := <-ready; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		close(n.work)
		if err := n.ns.Close(); err != nil {
			t.Errorf("close network namespace: %v", err)
		}
	})
	h, err := netlink.NewHandleAt(n.ns)
	if err != nil {
		t.Fatalf("netlink handle in the test namespace: %v", err)
	}
	t.Cleanup(h.Close)
	n.h = h
	lo, err := h.LinkByName("lo")
	if err == nil {
		err = h.LinkSetUp(lo)
	}
	if err != nil {
		t.Fatalf("bring lo up: %v", err)
	}
	return n
}

// do runs f on the thread inside the namespace.
func (n *progNet) do(f func()) {
	done := make(chan struct{})
	n.work <- func() {
		defer close(done)
		f()
	}
	<-done
}

func (n *progNet) setup() error {
	for _, l := range []struct {
		name string
		mac  net.HardwareAddr
		nets []string
	}{
		{linkIn, macIn, []string{"10.1.0.1/24", "fd01::1/64"}},
		{linkRedir, macRedir, []string{"10.3.0.1/24", "fd03::1/64"}},
		{linkNoXDP, macNoXDP, []string{"10.4.0.1/24"}},
	} {
		veth := &netlink.Veth{
			LinkAttrs: netlink.LinkAttrs{Name: l.name, HardwareAddr: l.mac, NumTxQueues: 1, NumRxQueues: 1},
			PeerName:  l.name + "p",
		}
		if err := n.h.LinkAdd(veth); err != nil {
			return fmt.Errorf("create veth %s: %w", l.name, err)
		}
		for _, name := range []string{l.name, l.name + "p"} {
			link, err := n.h.LinkByName(name)
			if err != nil {
				return fmt.Errorf("find %s: %w", name, err)
			}
			if err := n.h.LinkSetUp(link); err != nil {
				return fmt.Errorf("bring %s up: %w", name, err)
			}
			n.ifindex[name] = link.Attrs().Index
		}
		link, _ := n.h.LinkByName(l.name)
		for _, s := range l.nets {
			p := netip.MustParsePrefix(s)
			a := &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}}
			if p.Addr().Is6() {
				a.Flags = unix.IFA_F_NODAD
			}
			if err := n.h.AddrAdd(link, a); err != nil {
				return fmt.Errorf("add %s to %s: %w", s, l.name, err)
			}
		}
	}
	neigh := map[netip.Addr]string{progGW4: linkIn, progGW6: linkIn, beRedir4: linkRedir, beRedir6: linkRedir, beNoXDP4: linkNoXDP, beSmallMTU4: linkIn, beSmallMTU6: linkIn}
	for i := byte(10); i < 100; i++ {
		neigh[onLink4(i)] = linkIn
		neigh[onLink6(i)] = linkIn
	}
	for a, link := range neigh {
		mac := progNeighMAC(a)
		switch a {
		case progGW4:
			mac = macGW4
		case progGW6:
			mac = macGW6
		}
		fam := netlink.FAMILY_V4
		if a.Is6() {
			fam = netlink.FAMILY_V6
		}
		if err := n.h.NeighSet(&netlink.Neigh{
			LinkIndex: n.ifindex[link], Family: fam, State: netlink.NUD_PERMANENT,
			IP: a.AsSlice(), HardwareAddr: mac,
		}); err != nil {
			return fmt.Errorf("neighbour %s: %w", a, err)
		}
	}
	for _, r := range []*netlink.Route{
		{Dst: progIPNet("198.51.100.0/24"), Gw: progGW4.AsSlice(), LinkIndex: n.ifindex[linkIn]},
		{Dst: progIPNet("2001:db8:c::/64"), Gw: progGW6.AsSlice(), LinkIndex: n.ifindex[linkIn]},
		{Dst: progIPNet("10.5.0.0/24"), Type: unix.RTN_BLACKHOLE},
		{Dst: progIPNet("10.6.0.0/24"), LinkIndex: n.ifindex[linkIn], MTU: progRouteMTU, MTULock: true}, // unlocked, forwarding uses the device MTU
		{Dst: progIPNet("fd06::/64"), LinkIndex: n.ifindex[linkIn], MTU: progRouteMTU6, MTULock: true},
	} {
		if err := n.h.RouteAdd(r); err != nil {
			return fmt.Errorf("route %s: %w", r.Dst, err)
		}
	}
	// bpf_fib_lookup answers only for interfaces that forward.
	var err2 error
	n.do(func() {
		for _, f := range []string{"/proc/sys/net/ipv4/ip_forward", "/proc/sys/net/ipv6/conf/all/forwarding"} {
			if err := os.WriteFile(f, []byte("1"), 0o644); err != nil {
				err2 = fmt.Errorf("enable forwarding: %w", err)
				return
			}
		}
	})
	return err2
}

func progIPNet(s string) *net.IPNet {
	p := netip.MustParsePrefix(s)
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// progEnv is one loaded fast path with the default node configuration,
// run inside a progNet.
type progEnv struct {
	t    testing.TB
	net  *progNet
	objs *Objects
	// legacy keeps the prefilter and the VIP copies in conntrack off
	// (FP_CFG_VIP_FILTER clear, vip_epoch 0), as a program without an
	// agent runs; otherwise the env keeps them as the Manager does.
	legacy bool
	// cfg is the node configuration last written, epoch the last VIP epoch.
	cfg   fpbpf.FastpathNodeConfig
	epoch uint32
}

// progDefaultConfig is the node configuration every progEnv starts with.
func progDefaultConfig() fpbpf.FastpathNodeConfig {
	return fpbpf.FastpathNodeConfig{
		NodeV4:     progNode4.As4(),
		NodeV6:     progNode6.As16(),
		NatPortMin: progNATMin,
		NatPortMax: progNATMax,
		Flags:      uint32(fpbpf.FastpathFpConfigFlagsFP_CFG_NAT),
	}
}

// progSmallTables keeps the maps of a test small: a test creates dozens.
var progSmallTables = LoadOptions{MaglevSize: 251, MaxVIPs: 64, MaxBackends: 256, ConntrackSize: 4096, NATSize: 4096}

func newProgEnv(t testing.TB, n *progNet, opts LoadOptions) *progEnv {
	t.Helper()
	return newProgEnvMode(t, n, opts, false)
}

// newProgEnvMode is newProgEnv with the prefilter and the VIP copies off
// when legacy is set.
func newProgEnvMode(t testing.TB, n *progNet, opts LoadOptions, legacy bool) *progEnv {
	t.Helper()
	objs, err := Load(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := objs.Close(); err != nil {
			t.Errorf("close the program's objects: %v", err)
		}
	})
	e := &progEnv{t: t, net: n, objs: objs, legacy: legacy}
	e.setConfig(progDefaultConfig())
	return e
}

// setConfig writes the node configuration; unless legacy, with the
// prefilter on and a new VIP epoch, as the Manager would after a change.
func (e *progEnv) setConfig(c fpbpf.FastpathNodeConfig) {
	e.t.Helper()
	if !e.legacy {
		e.epoch++
		c.Flags |= uint32(fpbpf.FastpathFpConfigFlagsFP_CFG_VIP_FILTER)
		c.VipEpoch = e.epoch
	}
	if err := e.objs.FpConfig.Put(uint32(0), c); err != nil {
		e.t.Fatalf("write fp_config: %v", err)
	}
	e.cfg = c
}

func progFamily(a netip.Addr) uint8 {
	if a.Is4() {
		return uint8(fpbpf.FastpathFpFamilyFP_FAMILY_IPV4)
	}
	return uint8(fpbpf.FastpathFpFamilyFP_FAMILY_IPV6)
}

// progVIP is one VIP entry to install.
type progVIP struct {
	addr    netip.Addr
	port    uint16
	proto   uint8
	id      uint32
	forward uint8
	flags   uint32
	guePort uint16
}

func (e *progEnv) addVIP(v progVIP) {
	e.t.Helper()
	k := fpbpf.FastpathVipKey{Addr: flowhash.Addr16(v.addr), Port: v.port, Proto: v.proto, Family: progFamily(v.addr)}
	info := fpbpf.FastpathVipInfo{Id: v.id, Flags: v.flags, Forward: v.forward, GuePort: v.guePort}
	if !e.legacy && v.proto != 0 {
		// The filter bit first, the new epoch after, as the Manager does.
		b := vipFilterBit(v.addr, v.port, v.proto)
		var w uint64
		if err := e.objs.FpVipFilter.Lookup(b/64, &w); err != nil {
			e.t.Fatalf("read fp_vip_filter: %v", err)
		}
		if err := e.objs.FpVipFilter.Put(b/64, w|1<<(b%64)); err != nil {
			e.t.Fatalf("write fp_vip_filter: %v", err)
		}
	}
	if err := e.objs.FpVips.Put(k, info); err != nil {
		e.t.Fatalf("write VIP %v: %v", v, err)
	}
	e.setConfig(e.cfg)
}

// addBackend installs an active backend.
func (e *progEnv) addBackend(id uint32, ap netip.AddrPort) {
	e.t.Helper()
	e.putBackend(id, ap, uint8(fpbpf.FastpathFpBackendFlagsFP_BACKEND_ACTIVE))
}

func (e *progEnv) putBackend(id uint32, ap netip.AddrPort, flags uint8) {
	e.t.Helper()
	b := fpbpf.FastpathBackend{Addr: flowhash.Addr16(ap.Addr()), Port: ap.Port(), Family: progFamily(ap.Addr()), Flags: flags}
	if err := e.objs.FpBackends.Put(id, b); err != nil {
		e.t.Fatalf("write backend %d: %v", id, err)
	}
}

// setTable installs a VIP's Maglev table as the agent does: a new inner
// map, filled, then swapped in with one update of fp_maglev.
func (e *progEnv) setTable(vipID uint32, table []uint32) {
	e.t.Helper()
	m := e.objs.MaglevSize
	if len(table) != int(m) {
		e.t.Fatalf("table of %d slots, the program's tables have %d", len(table), m)
	}
	inner, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: m})
	if err != nil {
		e.t.Fatalf("create maglev table: %v", err)
	}
	keys := make([]uint32, m)
	for i := range keys {
		keys[i] = uint32(i)
	}
	if _, err := inner.BatchUpdate(keys, table, nil); err != nil {
		e.t.Fatalf("fill maglev table: %v", err)
	}
	if err := e.objs.FpMaglev.Put(vipID, inner); err != nil {
		e.t.Fatalf("install maglev table of VIP %d: %v", vipID, err)
	}
	// fp_maglev holds the table now; this descriptor is not needed.
	if err := inner.Close(); err != nil {
		e.t.Fatalf("close maglev table: %v", err)
	}
}

// fillTable installs a table whose slots cycle through ids.
func (e *progEnv) fillTable(vipID uint32, ids ...uint32) {
	e.t.Helper()
	table := make([]uint32, e.objs.MaglevSize)
	for i := range table {
		if len(ids) > 0 {
			table[i] = ids[i%len(ids)]
		}
	}
	e.setTable(vipID, table)
}

// addTxPort puts an interface of the test network into fp_tx_ports; the
// kernel resolves the ifindex in the namespace of the updating thread.
func (e *progEnv) addTxPort(link string) {
	e.t.Helper()
	idx := uint32(e.net.ifindex[link])
	var err error
	e.net.do(func() {
		err = e.objs.FpTxPorts.Put(idx, fpbpf.FastpathBpfDevmapVal{Ifindex: idx})
	})
	if err != nil {
		e.t.Fatalf("add %s to fp_tx_ports: %v", link, err)
	}
}

// runErr runs the program once on frame, received on fpt-in.
func (e *progEnv) runErr(frame []byte) (progVerdict, []byte, error) {
	out := make([]byte, len(frame)+256)
	opts := &ebpf.RunOptions{
		Data:    frame,
		DataOut: out,
		Context: xdpMD{DataEnd: uint32(len(frame)), IngressIfindex: uint32(e.net.ifindex[linkIn])},
	}
	var ret uint32
	var err error
	e.net.do(func() { ret, err = e.objs.NovaedgeFastpath.Run(opts) })
	return progVerdict(ret), opts.DataOut, err
}

func (e *progEnv) run(frame []byte) (progVerdict, []byte) {
	e.t.Helper()
	v, out, err := e.runErr(frame)
	if err != nil {
		e.t.Fatalf("run program: %v", err)
	}
	return v, out
}

// counters returns the non-zero counters, summed over CPUs.
func (e *progEnv) counters() map[fpbpf.FastpathFpCounter]uint64 {
	e.t.Helper()
	got := map[fpbpf.FastpathFpCounter]uint64{}
	for c := fpbpf.FastpathFpCounter(0); c < fpbpf.FastpathFpCounterFP_C_MAX; c++ {
		var per []uint64
		if err := e.objs.FpCounters.Lookup(uint32(c), &per); err != nil {
			e.t.Fatalf("read counter %d: %v", c, err)
		}
		var sum uint64
		for _, v := range per {
			sum += v
		}
		if sum != 0 {
			got[c] = sum
		}
	}
	// Flow cache hits wait in their slots (stats.go).
	pending, err := readPending(e.objs.FpFlowCache)
	if err != nil {
		e.t.Fatal(err)
	}
	if pending.packets != 0 {
		for _, c := range []fpbpf.FastpathFpCounter{fpbpf.FastpathFpCounterFP_C_RX, fpbpf.FastpathFpCounterFP_C_CT_HIT, fpbpf.FastpathFpCounterFP_C_TX} {
			got[c] += pending.packets
		}
	}
	return got
}

// wantCounters fails the test unless exactly the counters in want moved
// by exactly that much since before (a snapshot from counters).
func (e *progEnv) wantCounters(before, want map[fpbpf.FastpathFpCounter]uint64) {
	e.t.Helper()
	now := e.counters()
	delta := map[fpbpf.FastpathFpCounter]uint64{}
	for c, v := range now {
		if d := v - before[c]; d != 0 {
			delta[c] = d
		}
	}
	if !maps.Equal(delta, want) {
		e.t.Errorf("counters moved by\n  %s\nwant\n  %s", fmtCounters(delta), fmtCounters(want))
	}
}

func fmtCounters(m map[fpbpf.FastpathFpCounter]uint64) string {
	keys := slices.Sorted(maps.Keys(m))
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", progCounterName(k), m[k]))
	}
	return "{" + strings.Join(parts, " ") + "}"
}

var progCounterNames = []string{
	"RX", "PASS_NOT_IP", "PASS_FRAGMENT", "PASS_NOT_VIP", "PASS_SLOW_PATH", "PASS_NO_NEIGH",
	"PASS_EGRESS_NO_XDP", "PASS_FIB_OTHER", "PASS_ICMP", "PASS_MALFORMED", "PASS_OTHER_PROTO",
	"CT_HIT", "CT_MISS", "CT_CREATED", "CT_EXPIRED", "NAT_CREATED", "NAT_REPLY", "ICMP_ECHO",
	"ICMP_ERROR_FORWARDED", "TX", "REDIRECT", "DROP_MALFORMED", "DROP_NO_BACKEND",
	"DROP_NAT_EXHAUSTED", "DROP_FRAG_NEEDED", "DROP_HEADROOM", "DROP_FAMILY",
	"DROP_NO_NODE_ADDR", "DROP_FIB", "DROP_RST_NO_STATE", "ICMP_TOO_BIG_SENT",
	"ICMP_NAT_TO_BACKEND", "ICMP_NAT_TO_CLIENT",
}

func progCounterName(c fpbpf.FastpathFpCounter) string {
	if int(c) < len(progCounterNames) {
		return progCounterNames[c]
	}
	return fmt.Sprintf("counter(%d)", c)
}

// traffic reads one per-CPU packets/bytes entry, summed.
func (e *progEnv) traffic(m *ebpf.Map, id uint32) fpbpf.FastpathFpTraffic {
	e.t.Helper()
	var per []fpbpf.FastpathFpTraffic
	if err := m.Lookup(id, &per); err != nil {
		e.t.Fatalf("read traffic %d: %v", id, err)
	}
	var sum fpbpf.FastpathFpTraffic
	for _, v := range per {
		sum.Packets += v.Packets
		sum.Bytes += v.Bytes
	}
	// Flow cache hits wait in their slots (stats.go).
	pending, err := readPending(e.objs.FpFlowCache)
	if err != nil {
		e.t.Fatal(err)
	}
	p := pending.backends[id]
	if m == e.objs.FpVipStats {
		p = pending.vips[id]
	}
	sum.Packets += p.Packets
	sum.Bytes += p.Bytes
	return sum
}

func progFlowKey(src, dst netip.Addr, sport, dport uint16, proto uint8) fpbpf.FastpathFlowKey {
	return fpbpf.FastpathFlowKey{
		Src: flowhash.Addr16(src), Dst: flowhash.Addr16(dst),
		Sport: sport, Dport: dport, Proto: proto, Family: progFamily(src),
	}
}

// ct returns the conntrack entry of k, if there is one.
func (e *progEnv) ct(k fpbpf.FastpathFlowKey) (fpbpf.FastpathCtValue, bool) {
	e.t.Helper()
	var v fpbpf.FastpathCtValue
	err := e.objs.LookupConntrack(k, &v)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return v, false
	}
	if err != nil {
		e.t.Fatalf("read conntrack: %v", err)
	}
	return v, true
}

func (e *progEnv) nat(k fpbpf.FastpathFlowKey) (fpbpf.FastpathNatValue, bool) {
	e.t.Helper()
	var v fpbpf.FastpathNatValue
	err := e.objs.FpNat.Lookup(k, &v)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return v, false
	}
	if err != nil {
		e.t.Fatalf("read nat: %v", err)
	}
	return v, true
}

// natEntries returns every NAT mapping.
func (e *progEnv) natEntries() map[fpbpf.FastpathFlowKey]fpbpf.FastpathNatValue {
	e.t.Helper()
	out := map[fpbpf.FastpathFlowKey]fpbpf.FastpathNatValue{}
	var k fpbpf.FastpathFlowKey
	var v fpbpf.FastpathNatValue
	it := e.objs.FpNat.Iterate()
	for it.Next(&k, &v) {
		out[k] = v
	}
	if err := it.Err(); err != nil {
		e.t.Fatalf("iterate nat: %v", err)
	}
	return out
}

func (e *progEnv) ctCount() int {
	e.t.Helper()
	n := 0
	err := e.objs.RangeConntrack(func(fpbpf.FastpathFlowKey, fpbpf.FastpathCtValue) bool {
		n++
		return true
	})
	if err != nil {
		e.t.Fatalf("iterate conntrack: %v", err)
	}
	return n
}

// progPkt describes a test frame; zero values give an untagged frame from
// macClient to macIn.
type progPkt struct {
	vlan               uint16 // 802.1Q VLAN ID; 0 means untagged
	src, dst           netip.Addr
	proto              uint8 // TCP, UDP, ICMP(v6) or anything else (raw payload)
	sport, dport       uint16
	syn, ack, fin, rst bool
	payload            []byte
	tos                uint8
	ipOptions          bool // IPv4: a Router Alert option (IHL 6)
	v6Ext              bool // IPv6: hop-by-hop and destination options before L4
	v6Frag             bool // IPv6: a fragment header (first fragment, M set)
	mf                 bool // IPv4: more fragments
	df                 bool // IPv4: don't fragment
	fragOff            uint16
	udpNoCsum          bool // IPv4 UDP: checksum 0 ("none")
	icmpType, icmpCode uint8
	icmpID, icmpSeq    uint16 // echo identifier and sequence; the MTU of errors
	icmpQuote          []byte // IP header + 8 bytes quoted by an ICMP error
}

func tcpTo(src, dst netip.Addr, sport, dport uint16) progPkt {
	return progPkt{src: src, dst: dst, proto: ipTCP, sport: sport, dport: dport, ack: true, payload: []byte("hello, fast path")}
}

func udpTo(src, dst netip.Addr, sport, dport uint16) progPkt {
	return progPkt{src: src, dst: dst, proto: ipUDP, sport: sport, dport: dport, payload: []byte("datagram payload")}
}

func (p progPkt) flags(syn, ack, fin, rst bool) progPkt {
	p.syn, p.ack, p.fin, p.rst = syn, ack, fin, rst
	return p
}

func (p progPkt) tagged(id uint16) progPkt { p.vlan = id; return p }

func echoTo(src, dst netip.Addr) progPkt {
	typ := uint8(layers.ICMPv4TypeEchoRequest)
	proto := uint8(layers.IPProtocolICMPv4)
	if src.Is6() {
		typ, proto = layers.ICMPv6TypeEchoRequest, uint8(layers.IPProtocolICMPv6)
	}
	return progPkt{src: src, dst: dst, proto: proto, icmpType: typ, icmpID: 0x1234, icmpSeq: 7, payload: []byte("ping payload 0123456789")}
}

// tooBigAbout is the ICMP "fragmentation needed" / "packet too big" a router
// sends to the VIP about the VIP → client packet quote.
func tooBigAbout(t testing.TB, router netip.Addr, quoted progPkt) progPkt {
	q := ipPacketBytes(t, quoted)
	if router.Is4() {
		q = q[:int(q[0]&0xf)*4+8]
		return progPkt{src: router, dst: quoted.src, proto: uint8(layers.IPProtocolICMPv4), icmpType: 3, icmpCode: 4, icmpSeq: 1400, icmpQuote: q}
	}
	q = q[:40+8]
	return progPkt{src: router, dst: quoted.src, proto: uint8(layers.IPProtocolICMPv6), icmpType: 2, icmpSeq: 1400, icmpQuote: q}
}

var serializeOpts = gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}

// ipLayers returns the serializable layers of p from IP on.
func (p progPkt) ipLayers(t testing.TB) []gopacket.SerializableLayer {
	t.Helper()
	var ls []gopacket.SerializableLayer
	var netLayer gopacket.NetworkLayer
	if p.src.Is4() {
		ip := &layers.IPv4{
			Version: 4, TTL: 61, TOS: p.tos, Id: 0x4242, Protocol: layers.IPProtocol(p.proto),
			SrcIP: p.src.AsSlice(), DstIP: p.dst.AsSlice(), FragOffset: p.fragOff,
		}
		if p.mf {
			ip.Flags |= layers.IPv4MoreFragments
		}
		if p.df {
			ip.Flags |= layers.IPv4DontFragment
		}
		if p.ipOptions {
			ip.Options = []layers.IPv4Option{{OptionType: 148, OptionLength: 4, OptionData: []byte{0, 0}}}
		}
		ls, netLayer = append(ls, ip), ip
	} else {
		ip := &layers.IPv6{
			Version: 6, TrafficClass: p.tos, FlowLabel: 0x12345, HopLimit: 61,
			NextHeader: layers.IPProtocol(p.proto), SrcIP: p.src.AsSlice(), DstIP: p.dst.AsSlice(),
		}
		ls, netLayer = append(ls, ip), ip
		switch {
		case p.v6Ext:
			ip.NextHeader = layers.IPProtocolIPv6HopByHop
			ls = append(ls, gopacket.Payload{
				byte(layers.IPProtocolIPv6Destination), 0, 1, 4, 0, 0, 0, 0, // hop-by-hop, PadN
				p.proto, 0, 1, 4, 0, 0, 0, 0, // destination options, PadN
			})
		case p.v6Frag:
			ip.NextHeader = layers.IPProtocolIPv6Fragment
			ls = append(ls, gopacket.Payload{p.proto, 0, 0, 1, 0, 0, 0x12, 0x34})
		}
	}
	switch p.proto {
	case ipTCP:
		tcp := &layers.TCP{
			SrcPort: layers.TCPPort(p.sport), DstPort: layers.TCPPort(p.dport), Seq: 1000, Window: 512,
			SYN: p.syn, ACK: p.ack, FIN: p.fin, RST: p.rst,
		}
		if p.ack {
			tcp.Ack = 2000
		}
		if err := tcp.SetNetworkLayerForChecksum(netLayer); err != nil {
			t.Fatal(err)
		}
		ls = append(ls, tcp)
	case ipUDP:
		udp := &layers.UDP{SrcPort: layers.UDPPort(p.sport), DstPort: layers.UDPPort(p.dport)}
		if err := udp.SetNetworkLayerForChecksum(netLayer); err != nil {
			t.Fatal(err)
		}
		ls = append(ls, udp)
	case uint8(layers.IPProtocolICMPv4):
		ls = append(ls, &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(p.icmpType, p.icmpCode), Id: p.icmpID, Seq: p.icmpSeq})
		if p.icmpQuote != nil {
			ls = append(ls, gopacket.Payload(p.icmpQuote))
		}
	case uint8(layers.IPProtocolICMPv6):
		icmp := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(p.icmpType, p.icmpCode)}
		if err := icmp.SetNetworkLayerForChecksum(netLayer); err != nil {
			t.Fatal(err)
		}
		ls = append(ls, icmp)
		switch {
		case p.icmpQuote != nil:
			ls = append(ls, gopacket.Payload(binary.BigEndian.AppendUint32(nil, uint32(p.icmpSeq))), gopacket.Payload(p.icmpQuote))
		default:
			ls = append(ls, &layers.ICMPv6Echo{Identifier: p.icmpID, SeqNumber: p.icmpSeq})
		}
	}
	if len(p.payload) > 0 {
		ls = append(ls, gopacket.Payload(p.payload))
	}
	return ls
}

// ipPacketBytes serializes p from the IP header on.
func ipPacketBytes(t testing.TB, p progPkt) []byte {
	t.Helper()
	return serializePkt(t, p, p.ipLayers(t), 0)
}

// serializePkt serializes the layers of p, whose IP header is at l3.
func serializePkt(t testing.TB, p progPkt, ls []gopacket.SerializableLayer, l3 int) []byte {
	t.Helper()
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, serializeOpts, ls...); err != nil {
		t.Fatalf("serialize %+v: %v", p, err)
	}
	b := slices.Clone(buf.Bytes())
	if p.udpNoCsum && p.proto == ipUDP && p.src.Is4() {
		ihl := int(b[l3]&0xf) * 4
		b[l3+ihl+6], b[l3+ihl+7] = 0, 0
	}
	return b
}

// frame serializes p as an Ethernet frame.
func (p progPkt) frame(t testing.TB) []byte {
	t.Helper()
	eth := &layers.Ethernet{SrcMAC: macClient, DstMAC: macIn, EthernetType: layers.EthernetTypeIPv4}
	if p.src.Is6() {
		eth.EthernetType = layers.EthernetTypeIPv6
	}
	ls := []gopacket.SerializableLayer{eth}
	if p.vlan != 0 {
		ls = append(ls, &layers.Dot1Q{VLANIdentifier: p.vlan, Type: eth.EthernetType})
		eth.EthernetType = layers.EthernetTypeDot1Q
	}
	l3 := 14
	if p.vlan != 0 {
		l3 = 18
	}
	return serializePkt(t, p, append(ls, p.ipLayers(t)...), l3)
}

func progARPFrame(t testing.TB) []byte {
	t.Helper()
	buf := gopacket.NewSerializeBuffer()
	err := gopacket.SerializeLayers(buf, serializeOpts,
		&layers.Ethernet{SrcMAC: macClient, DstMAC: layers.EthernetBroadcast, EthernetType: layers.EthernetTypeARP},
		&layers.ARP{
			AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4, HwAddressSize: 6, ProtAddressSize: 4,
			Operation: layers.ARPRequest, SourceHwAddress: macClient, SourceProtAddress: progClient4.AsSlice(),
			DstHwAddress: make([]byte, 6), DstProtAddress: progVIP4.AsSlice(),
		})
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// progL2Len is the length of the Ethernet header and VLAN tag of a frame.
func progL2Len(frame []byte) int {
	if len(frame) >= 14 && binary.BigEndian.Uint16(frame[12:]) == uint16(layers.EthernetTypeDot1Q) {
		return 18
	}
	return 14
}

// Checksums, computed here independently of the program and of gopacket.

func csumAdd16(s uint32, b []byte) uint32 {
	for len(b) >= 2 {
		s += uint32(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint32(b[0]) << 8
	}
	return s
}

func csumFold16(s uint32) uint16 {
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

// checkChecksums verifies the checksums of an IP packet: the IPv4 header, the
// TCP, UDP, ICMP or ICMPv6 checksum, and recursively those of a packet
// tunnelled in IPIP, IPv6-in-IP or GUE (to one of guePorts). It returns
// the L4 protocol of the innermost packet.
func checkChecksums(ip []byte, guePorts ...uint16) (uint8, error) {
	if len(ip) < 20 {
		return 0, fmt.Errorf("IP packet of %d bytes", len(ip))
	}
	var proto uint8
	var l4 []byte
	var pseudo uint32
	switch ip[0] >> 4 {
	case 4:
		ihl := int(ip[0]&0xf) * 4
		tot := int(binary.BigEndian.Uint16(ip[2:]))
		if ihl < 20 || tot < ihl || tot > len(ip) {
			return 0, fmt.Errorf("IPv4 header: ihl %d, tot_len %d, %d bytes", ihl, tot, len(ip))
		}
		if csumFold16(csumAdd16(0, ip[:ihl])) != 0xffff {
			return 0, fmt.Errorf("IPv4 header checksum %#04x is wrong", binary.BigEndian.Uint16(ip[10:]))
		}
		proto, l4 = ip[9], ip[ihl:tot]
		pseudo = csumAdd16(csumAdd16(0, ip[12:20]), []byte{0, proto}) + uint32(len(l4))
	case 6:
		if len(ip) < 40 {
			return 0, fmt.Errorf("IPv6 packet of %d bytes", len(ip))
		}
		end := 40 + int(binary.BigEndian.Uint16(ip[4:]))
		if end > len(ip) {
			return 0, fmt.Errorf("IPv6 payload length %d beyond %d bytes", end-40, len(ip))
		}
		off, nh := 40, ip[6]
		for nh == 0 || nh == 43 || nh == 60 {
			if off+2 > end {
				return 0, errors.New("truncated IPv6 extension header")
			}
			nh, off = ip[off], off+(int(ip[off+1])+1)*8
		}
		if off > end {
			return 0, errors.New("truncated IPv6 extension header")
		}
		proto, l4 = nh, ip[off:end]
		pseudo = csumAdd16(0, ip[8:40]) + uint32(len(l4)) + uint32(proto)
	default:
		return 0, fmt.Errorf("IP version %d", ip[0]>>4)
	}
	switch proto {
	case 4, 41:
		return checkChecksums(l4, guePorts...)
	case ipTCP:
		if len(l4) < 20 || csumFold16(csumAdd16(pseudo, l4)) != 0xffff {
			return 0, fmt.Errorf("TCP checksum %#04x is wrong", binary.BigEndian.Uint16(l4[16:]))
		}
	case ipUDP:
		if len(l4) < 8 || int(binary.BigEndian.Uint16(l4[4:])) != len(l4) {
			return 0, fmt.Errorf("UDP length field does not match the %d bytes of the datagram", len(l4))
		}
		if slices.Contains(guePorts, binary.BigEndian.Uint16(l4[2:])) {
			if binary.BigEndian.Uint16(l4[6:]) != 0 {
				return 0, errors.New("GUE outer UDP checksum is not zero")
			}
			return checkChecksums(l4[8:], guePorts...)
		}
		if ip[0]>>4 == 4 && binary.BigEndian.Uint16(l4[6:]) == 0 {
			return proto, nil // no checksum
		}
		if csumFold16(csumAdd16(pseudo, l4)) != 0xffff {
			return 0, fmt.Errorf("UDP checksum %#04x is wrong", binary.BigEndian.Uint16(l4[6:]))
		}
	case 1:
		if csumFold16(csumAdd16(0, l4)) != 0xffff {
			return 0, errors.New("ICMP checksum is wrong")
		}
	case 58:
		if csumFold16(csumAdd16(pseudo, l4)) != 0xffff {
			return 0, errors.New("ICMPv6 checksum is wrong")
		}
	}
	return proto, nil
}

// progFrame is what gopacket makes of an output frame.
type progFrame struct {
	eth  *layers.Ethernet
	vlan *layers.Dot1Q
	ip4  *layers.IPv4
	ip6  *layers.IPv6
	tcp  *layers.TCP
	udp  *layers.UDP
	l3   []byte // the IP packet, from the header on
}

func (d progFrame) src() netip.Addr {
	if d.ip4 != nil {
		a, _ := netip.AddrFromSlice(d.ip4.SrcIP)
		return a
	}
	a, _ := netip.AddrFromSlice(d.ip6.SrcIP)
	return a
}

func (d progFrame) dst() netip.Addr {
	if d.ip4 != nil {
		a, _ := netip.AddrFromSlice(d.ip4.DstIP)
		return a
	}
	a, _ := netip.AddrFromSlice(d.ip6.DstIP)
	return a
}

func (d progFrame) ports() (uint16, uint16) {
	switch {
	case d.tcp != nil:
		return uint16(d.tcp.SrcPort), uint16(d.tcp.DstPort)
	case d.udp != nil:
		return uint16(d.udp.SrcPort), uint16(d.udp.DstPort)
	}
	return 0, 0
}

// decodeFrame parses the outermost headers of frame with gopacket (no
// tunnel decoding: the inner packet is compared byte by byte instead).
func decodeFrame(t testing.TB, frame []byte) progFrame {
	t.Helper()
	d := progFrame{l3: frame[progL2Len(frame):]}
	p := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
	for _, l := range p.Layers() {
		switch l := l.(type) {
		case *layers.Ethernet:
			d.eth = l
		case *layers.Dot1Q:
			d.vlan = l
		case *layers.IPv4:
			if d.ip4 != nil || d.ip6 != nil {
				return d
			}
			d.ip4 = l
		case *layers.IPv6:
			if d.ip4 != nil || d.ip6 != nil {
				return d
			}
			d.ip6 = l
		case *layers.TCP:
			d.tcp = l
		case *layers.UDP:
			d.udp = l
			return d
		}
	}
	if d.eth == nil || (d.ip4 == nil && d.ip6 == nil) {
		t.Fatalf("output frame does not decodeFrame as Ethernet + IP: %v", p)
	}
	return d
}

// addFastVIP installs a VIP entry, its backends (IDs v.id*16+1, +2, …) and
// a table cycling through them; it returns the backend IDs.
func (e *progEnv) addFastVIP(v progVIP, backends ...netip.AddrPort) []uint32 {
	e.t.Helper()
	var ids []uint32
	for i, b := range backends {
		id := v.id*16 + uint32(i) + 1
		e.addBackend(id, b)
		ids = append(ids, id)
	}
	e.addVIP(v)
	if len(ids) > 0 {
		e.fillTable(v.id, ids...)
	}
	return ids
}

// addAddrEntry marks addr as a VIP address (port 0, protocol 0).
func (e *progEnv) addAddrEntry(addr netip.Addr, flags uint32) {
	e.t.Helper()
	e.addVIP(progVIP{addr: addr, flags: flags})
}

// fixIPv4Checksum recomputes the header checksum of the IPv4 header at
// off, so that a test's corruption of one field is the only fault.
func fixIPv4Checksum(frame []byte, off int) {
	ihl := int(frame[off]&0xf) * 4
	if ihl < 20 || off+ihl > len(frame) {
		ihl = 20
	}
	frame[off+10], frame[off+11] = 0, 0
	binary.BigEndian.PutUint16(frame[off+10:], ^csumFold16(csumAdd16(0, frame[off:off+ihl])))
}

// hashOf is the flow hash the program computes for a client → VIP packet.
func hashOf(p progPkt) uint32 {
	return flowhash.Hash(flowhash.Flow{Src: p.src, Dst: p.dst, SrcPort: p.sport, DstPort: p.dport, Proto: p.proto})
}

// pinCPU keeps the namespace's thread, and so every test run through it,
// on one CPU: per-CPU map entries a run fills are then the ones the next
// run sees.
func (n *progNet) pinCPU(t testing.TB) {
	t.Helper()
	var err error
	n.do(func() {
		var set unix.CPUSet
		set.Set(0)
		err = unix.SchedSetaffinity(0, &set)
	})
	if err != nil {
		t.Fatalf("pin the test thread to CPU 0: %v", err)
	}
}

// inBothModes runs fn as two subtests: with the program as the agent runs
// it (prefilter, VIP copies in conntrack) and without them, named
// "<name> (legacy)".
func inBothModes(t *testing.T, n *progNet, name string, fn func(t *testing.T, e *progEnv)) {
	t.Helper()
	for _, legacy := range []bool{false, true} {
		sub := name
		if legacy {
			sub += " (legacy)"
		}
		t.Run(sub, func(t *testing.T) { fn(t, newProgEnvMode(t, n, progSmallTables, legacy)) })
	}
}
