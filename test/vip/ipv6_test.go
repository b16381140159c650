package vip

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mdlayher/ndp"
	"github.com/vishvananda/netns"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/encoding/protojson"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/test/frr"
)

// The IPv6 topology: router (AS 65000) r-n fd87:1::1/64 and 10.87.1.1/24 ⟷
// n-r fd87:1::2/64 and 10.87.1.2/24 node (AS 65100) n-c fd87:2::2/64 ⟷
// c-n fd87:2::3/64 client. The node peers with the router over IPv6 for
// the IPv6 routes and over IPv4 for the IPv4 half of the dual-stack VIP
// (a session carries the routes of its own family); the IPv4 peer also
// gives the agent its router ID. The L2 VIP is in the client's /64 and
// names no interface: the agent picks n-c by the route of the subnet.
const (
	v6RouterAddr  = "fd87:1::1"
	v6NodeAddr    = "fd87:1::2"
	v6RouterAddr4 = "10.87.1.1"
	v6NodeAddr4   = "10.87.1.2"
	v6ClientAddr  = "fd87:2::3"
	v6BGPVIP      = "fd87:200::10"
	v6DualVIP4    = "10.87.200.20"
	v6DualVIP6    = "fd87:200::20"
	v6L2VIP       = "fd87:2::50"
)

const v6Config = `apiVersion: novaedge.io/v1alpha1
kind: ProxyVIP
metadata:
  name: bgp6-vip
spec:
  ipv6Address: ` + v6BGPVIP + `/128
  addressFamily: ipv6
  mode: BGP
  bgpConfig:
    localAS: 65100
    peers:
      - address: ` + v6RouterAddr + `
        as: 65000
        holdTime: 9s
    communities: ["65000:106"]
---
apiVersion: novaedge.io/v1alpha1
kind: ProxyVIP
metadata:
  name: dual-vip
spec:
  address: ` + v6DualVIP4 + `/32
  ipv6Address: ` + v6DualVIP6 + `/128
  addressFamily: dual
  mode: BGP
  bgpConfig:
    localAS: 65100
    peers:
      - address: ` + v6RouterAddr4 + `
        as: 65000
        holdTime: 9s
      - address: ` + v6RouterAddr + `
        as: 65000
        holdTime: 9s
    communities: ["65000:146"]
---
apiVersion: novaedge.io/v1alpha1
kind: ProxyVIP
metadata:
  name: l2-vip6
spec:
  ipv6Address: ` + v6L2VIP + `/128
  addressFamily: ipv6
  mode: L2ARP
`

const v6FRRConfig = `frr defaults traditional
hostname tor6
!
router bgp 65000
 bgp router-id ` + v6RouterAddr4 + `
 no bgp ebgp-requires-policy
 no bgp default ipv4-unicast
 neighbor ` + v6NodeAddr + ` remote-as 65100
 neighbor ` + v6NodeAddr + ` timers connect 1
 neighbor ` + v6NodeAddr4 + ` remote-as 65100
 neighbor ` + v6NodeAddr4 + ` timers connect 1
 address-family ipv4 unicast
  neighbor ` + v6NodeAddr4 + ` activate
 exit-address-family
 address-family ipv6 unicast
  neighbor ` + v6NodeAddr + ` activate
 exit-address-family
!
`

// v6Route is one BGP route the router must learn from the node: the prefix,
// the node's session it comes over, and its community.
type v6Route struct {
	prefix, peer, community string
}

var v6Routes = []v6Route{
	{v6BGPVIP + "/128", v6NodeAddr, "65000:106"},
	{v6DualVIP4 + "/32", v6NodeAddr4, "65000:146"},
	{v6DualVIP6 + "/128", v6NodeAddr, "65000:146"},
}

// frrHop is a next hop in FRR's "show ipv6 route … json".
type frrHop struct {
	IP        string `json:"ip"`
	Interface string `json:"interfaceName"`
	FIB       bool   `json:"fib"`
}

// routeHops returns the next hops zebra installed for a BGP prefix ("ip"
// for IPv4, "ipv6" for IPv6), as address%interface.
func routeHops(t *testing.T, r *frr.Router, prefix string) []string {
	t.Helper()
	fam := "ip"
	if netip.MustParsePrefix(prefix).Addr().Is6() {
		fam = "ipv6"
	}
	var out map[string][]struct {
		Protocol  string   `json:"protocol"`
		Selected  bool     `json:"selected"`
		Installed bool     `json:"installed"`
		Nexthops  []frrHop `json:"nexthops"`
	}
	r.JSON(t, "show "+fam+" route "+prefix+" json", &out)
	var hops []string
	for _, rt := range out[prefix] {
		if rt.Protocol != "bgp" || !rt.Selected || !rt.Installed {
			continue
		}
		for _, h := range rt.Nexthops {
			if h.FIB {
				hops = append(hops, h.IP+"%"+h.Interface)
			}
		}
	}
	slices.Sort(hops)
	return hops
}

// pathFrom returns the router's BGP path for prefix learnt from peer.
func pathFrom(t *testing.T, r *frr.Router, prefix, peer string) (found, stale bool, community string) {
	t.Helper()
	fam := "ipv4"
	if netip.MustParsePrefix(prefix).Addr().Is6() {
		fam = "ipv6"
	}
	var out frrPaths
	r.JSON(t, "show bgp "+fam+" unicast "+prefix+" json", &out)
	for _, p := range out.Paths {
		if p.Peer.PeerID == peer {
			if p.Community != nil {
				community = p.Community.String
			}
			return true, p.Stale, community
		}
	}
	return false, false, ""
}

// sessionState is the router's BGP state of the session with peer.
func sessionState(t *testing.T, r *frr.Router, peer string) string {
	t.Helper()
	var out map[string]frrNeighbor
	r.JSON(t, "show bgp neighbors "+peer+" json", &out)
	return out[peer].BGPState
}

// linkLocal6 returns the IPv6 link-local address of a link in a namespace.
func linkLocal6(t *testing.T, ns *frr.NetNS, link string) string {
	t.Helper()
	var out []struct {
		AddrInfo []struct {
			Local string `json:"local"`
			Scope string `json:"scope"`
		} `json:"addr_info"`
	}
	if err := json.Unmarshal([]byte(ns.IP(t, "-j", "-6", "addr", "show", "dev", link)), &out); err != nil || len(out) != 1 {
		t.Fatalf("ip -j -6 addr show dev %s: %v", link, err)
	}
	for _, a := range out[0].AddrInfo {
		if a.Scope == "link" {
			return a.Local
		}
	}
	t.Fatalf("%s in %s has no link-local address", link, ns.Name)
	return ""
}

// neigh6 returns the client's neighbour entry for addr on dev.
func neigh6(t *testing.T, ns *frr.NetNS, addr, dev string) (mac, state string) {
	t.Helper()
	var out []struct {
		LLAddr string   `json:"lladdr"`
		State  []string `json:"state"`
	}
	if err := json.Unmarshal([]byte(ns.IP(t, "-j", "-6", "neigh", "show", addr, "dev", dev)), &out); err != nil {
		t.Fatalf("ip -j -6 neigh show: %v", err)
	}
	if len(out) == 0 {
		return "", "none"
	}
	return out[0].LLAddr, strings.Join(out[0].State, ",")
}

// inNS runs f on a thread in the namespace. The thread is never unlocked:
// the runtime ends it with the goroutine instead of reusing a thread in
// another namespace.
func inNS(name string, f func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		h, err := netns.GetFromName(name)
		if err != nil {
			done <- err
			return
		}
		defer func() { _ = h.Close() }()
		if err := netns.Set(h); err != nil {
			done <- err
			return
		}
		done <- f()
	}()
	return <-done
}

// probe6 is probe for an IPv6 VIP: a UDP datagram from the client to port
// 9, which only an answer to the client's neighbour solicitation lets out,
// and the node kernel's ICMPv6 port unreachable, which a connected UDP
// socket reports as "connection refused".
func probe6(clientNS, vip string) error {
	return inNS(clientNS, func() error {
		c, err := net.Dial("udp6", net.JoinHostPort(vip, "9"))
		if err != nil {
			return err
		}
		defer func() { _ = c.Close() }()
		if _, err := c.Write([]byte("probe")); err != nil {
			return err
		}
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		_, err = c.Read(make([]byte, 16))
		if errors.Is(err, syscall.ECONNREFUSED) {
			return nil
		}
		return fmt.Errorf("no answer from the node (want connection refused): %w", err)
	})
}

// ndSniffer sees every IPv6 frame of one interface, both ways, through an
// AF_PACKET socket, and sends frames on it.
type ndSniffer struct {
	fd      int
	ifindex int
	mac     net.HardwareAddr
}

// ndFrame is a neighbour solicitation or advertisement seen on the wire.
type ndFrame struct {
	outgoing       bool // sent by this host
	ethSrc, ethDst net.HardwareAddr
	src, dst       netip.Addr
	hopLimit       uint8
	checksumOK     bool
	msg            ndp.Message
}

func (f ndFrame) String() string {
	dir := "in"
	if f.outgoing {
		dir = "out"
	}
	return fmt.Sprintf("%s %s>%s %s>%s hlim %d csum-ok %v %#v", dir, f.ethSrc, f.ethDst, f.src, f.dst, f.hopLimit, f.checksumOK, f.msg)
}

func newNDSniffer(t *testing.T, ns *frr.NetNS, ifname string) *ndSniffer {
	t.Helper()
	s := &ndSniffer{fd: -1}
	err := inNS(ns.Name, func() error {
		ifi, err := net.InterfaceByName(ifname)
		if err != nil {
			return err
		}
		s.ifindex, s.mac = ifi.Index, ifi.HardwareAddr
		// ETH_P_ALL, not ETH_P_IPV6: only sockets of all protocols see the
		// frames this host sends.
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
		if err != nil {
			return fmt.Errorf("packet socket: %w", err)
		}
		s.fd = fd
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi.Index}); err != nil {
			return fmt.Errorf("bind packet socket to %s: %w", ifname, err)
		}
		tv := unix.NsecToTimeval((50 * time.Millisecond).Nanoseconds())
		return unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	})
	if s.fd >= 0 {
		t.Cleanup(func() { _ = unix.Close(s.fd) })
	}
	if err != nil {
		t.Fatalf("neighbour discovery sniffer in %s: %v", ns.Name, err)
	}
	return s
}

// next returns the next neighbour discovery frame, or false when none came
// within the socket's timeout.
func (s *ndSniffer) next(t *testing.T) (ndFrame, bool) {
	t.Helper()
	buf := make([]byte, 2048)
	for {
		n, from, err := unix.Recvfrom(s.fd, buf, 0)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			return ndFrame{}, false
		}
		if err != nil {
			t.Fatalf("read packet socket: %v", err)
		}
		if f, ok := parseNDFrame(buf[:n]); ok {
			if ll, isLL := from.(*unix.SockaddrLinklayer); isLL {
				f.outgoing = ll.Pkttype == unix.PACKET_OUTGOING
			}
			return f, true
		}
	}
}

// drain discards what the socket has queued.
func (s *ndSniffer) drain(t *testing.T) {
	t.Helper()
	for {
		if _, ok := s.next(t); !ok {
			return
		}
	}
}

// await reads frames until one satisfies match, failing the test after
// frr.HangGuard with the first frames seen.
func (s *ndSniffer) await(t *testing.T, what string, match func(ndFrame) bool) ndFrame {
	t.Helper()
	var log []string
	deadline := time.Now().Add(frr.HangGuard)
	for time.Now().Before(deadline) {
		f, ok := s.next(t)
		if !ok {
			continue
		}
		if match(f) {
			return f
		}
		if len(log) < 20 {
			log = append(log, f.String())
		}
	}
	t.Fatalf("%s: not seen within %v; neighbour discovery frames seen:\n%s", what, frr.HangGuard, strings.Join(log, "\n"))
	return ndFrame{}
}

// send sends an Ethernet frame to dst.
func (s *ndSniffer) send(frame []byte, dst net.HardwareAddr) error {
	to := &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_IPV6), Ifindex: s.ifindex, Halen: 6}
	copy(to.Addr[:], dst)
	return unix.Sendto(s.fd, frame, 0, to)
}

// parseNDFrame decodes an Ethernet frame carrying an ICMPv6 neighbour
// solicitation or advertisement (without extension headers, as RFC 4861
// sends them).
func parseNDFrame(b []byte) (ndFrame, bool) {
	var f ndFrame
	if len(b) < 14+40+4 || binary.BigEndian.Uint16(b[12:14]) != unix.ETH_P_IPV6 {
		return f, false
	}
	ip := b[14:]
	plen := int(binary.BigEndian.Uint16(ip[4:6]))
	if ip[0]>>4 != 6 || ip[6] != unix.IPPROTO_ICMPV6 || len(ip) < 40+plen || plen < 4 {
		return f, false
	}
	icmp := ip[40 : 40+plen]
	if icmp[0] != byte(ipv6.ICMPTypeNeighborSolicitation) && icmp[0] != byte(ipv6.ICMPTypeNeighborAdvertisement) {
		return f, false
	}
	msg, err := ndp.ParseMessage(icmp)
	if err != nil {
		return f, false
	}
	f.ethDst, f.ethSrc = net.HardwareAddr(slices.Clone(b[0:6])), net.HardwareAddr(slices.Clone(b[6:12]))
	f.src, f.dst = netip.AddrFrom16([16]byte(ip[8:24])), netip.AddrFrom16([16]byte(ip[24:40]))
	f.hopLimit = ip[7]
	f.checksumOK = icmp6Sum(f.src, f.dst, icmp) == 0
	f.msg = msg
	return f, true
}

// icmp6Sum is the ones' complement sum over the IPv6 pseudo header and
// msg, complemented: zero when msg's checksum field is right (RFC 4443
// §2.3).
func icmp6Sum(src, dst netip.Addr, msg []byte) uint16 {
	var sum uint32
	add := func(b []byte) {
		for ; len(b) >= 2; b = b[2:] {
			sum += uint32(binary.BigEndian.Uint16(b))
		}
		if len(b) == 1 {
			sum += uint32(b[0]) << 8
		}
	}
	s, d := src.As16(), dst.As16()
	add(s[:])
	add(d[:])
	var tail [8]byte
	binary.BigEndian.PutUint32(tail[0:4], uint32(len(msg)))
	tail[7] = unix.IPPROTO_ICMPV6
	add(tail[:])
	add(msg)
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}

// nsFrame builds a neighbour solicitation frame for target from src (with
// the Source Link-Layer Address option) to dst at dstMAC.
func nsFrame(t *testing.T, srcMAC, dstMAC net.HardwareAddr, src, dst, target netip.Addr) []byte {
	t.Helper()
	msg := &ndp.NeighborSolicitation{
		TargetAddress: target,
		Options:       []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Source, Addr: srcMAC}},
	}
	icmp, err := ndp.MarshalMessageChecksum(msg, src, dst)
	if err != nil {
		t.Fatalf("build neighbour solicitation: %v", err)
	}
	f := make([]byte, 14+40+len(icmp))
	copy(f[0:6], dstMAC)
	copy(f[6:12], srcMAC)
	binary.BigEndian.PutUint16(f[12:14], unix.ETH_P_IPV6)
	ip := f[14:]
	ip[0] = 0x60
	binary.BigEndian.PutUint16(ip[4:6], uint16(len(icmp)))
	ip[6], ip[7] = unix.IPPROTO_ICMPV6, 255
	s, d := src.As16(), dst.As16()
	copy(ip[8:24], s[:])
	copy(ip[24:40], d[:])
	copy(ip[40:], icmp)
	return f
}

// isNA reports whether f is a valid neighbour advertisement (hop limit 255,
// right checksum) for target from the node's mac with Override set, the
// given Solicited flag and mac in the Target Link-Layer Address option,
// sent to dst at dstMAC.
func isNA(f ndFrame, target netip.Addr, mac net.HardwareAddr, solicited bool, dst netip.Addr, dstMAC net.HardwareAddr) bool {
	na, ok := f.msg.(*ndp.NeighborAdvertisement)
	if !ok || f.outgoing || !f.checksumOK || f.hopLimit != 255 || na.TargetAddress != target || !na.Override ||
		na.Router || na.Solicited != solicited || f.src != target || f.dst != dst ||
		!bytes.Equal(f.ethSrc, mac) || !bytes.Equal(f.ethDst, dstMAC) {
		return false
	}
	for _, o := range na.Options {
		if lla, ok := o.(*ndp.LinkLayerAddress); ok && lla.Direction == ndp.Target {
			return bytes.Equal(lla.Addr, mac)
		}
	}
	return false
}

// TestAgentIPv6: the agent binary peers with FRR over IPv6 and announces an
// IPv6 /128 and a dual-stack VIP (its /32 over the IPv4 session, its /128
// over the IPv6 one), with communities, kept through a SIGTERM by graceful
// restart and refreshed by the next agent; and it claims an IPv6 L2 VIP on
// the client's segment: an unsolicited neighbour advertisement at start,
// answers to the client's multicast solicitation (the client reaches the
// VIP at the node's MAC) and to unicast ones (neighbour unreachability
// detection), both the kernel's and one the test sends itself.
func TestAgentIPv6(t *testing.T) {
	frr.RequireRoot(t)
	frr.RequireTool(t, frr.VtyshCmd, "frr")
	frr.RequireTool(t, filepath.Join(frr.DaemonDir, "bgpd"), "frr")
	bin := buildAgent(t)

	rns := frr.NewNetNS(t, "nev6-r")
	nns := frr.NewNetNS(t, "nev6-n")
	cns := frr.NewNetNS(t, "nev6-c")
	frr.Link(t, rns, "r-n", []string{v6RouterAddr + "/64", v6RouterAddr4 + "/24"}, nns, "n-r", []string{v6NodeAddr + "/64", v6NodeAddr4 + "/24"})
	frr.Link(t, cns, "c-n", []string{v6ClientAddr + "/64"}, nns, "n-c", []string{"fd87:2::2/64"})
	router := frr.Start(t, rns,
		frr.Daemon{Name: "zebra", Config: "hostname tor6\n"},
		frr.Daemon{Name: "bgpd", Config: v6FRRConfig, Args: []string{"-p", "179"}})
	nodeMAC, _ := net.ParseMAC(linkMAC(t, nns, "n-c"))
	nodeLL := linkLocal6(t, nns, "n-r")
	vip := netip.MustParseAddr(v6L2VIP)
	client := netip.MustParseAddr(v6ClientAddr)

	// Open before the agent starts: the unsolicited advertisements go out
	// at once.
	sniffer := newNDSniffer(t, cns, "c-n")

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(v6Config), 0o644); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "agent.sock")
	agent := startAgent(t, nns, bin, dir, "first")

	// The agent's IPv6 updates carry the session's global address as the
	// next hop, no link-local one, so zebra installs that.
	hopsOK := func(r v6Route, hops []string) bool {
		if netip.MustParsePrefix(r.prefix).Addr().Is4() {
			return slices.Equal(hops, []string{v6NodeAddr4 + "%r-n"})
		}
		return slices.Equal(hops, []string{v6NodeAddr + "%r-n"})
	}

	t.Run("FRR learns the IPv6 and dual-stack VIPs", func(t *testing.T) {
		for _, r := range v6Routes {
			frr.Eventually(t, "router FIB: "+r.prefix+" via the node", func() (bool, string) {
				hops := routeHops(t, router, r.prefix)
				return hopsOK(r, hops), fmt.Sprintf("next hops %v (node %s, %s, link-local %s)", hops, v6NodeAddr4, v6NodeAddr, nodeLL)
			})
			if found, stale, comm := pathFrom(t, router, r.prefix, r.peer); !found || stale || comm != r.community {
				t.Errorf("FRR's path for %s from %s: found %v, stale %v, community %q; want a fresh path with %s", r.prefix, r.peer, found, stale, comm, r.community)
			}
		}
		// Each family goes over its own session only.
		if found, _, _ := pathFrom(t, router, v6DualVIP6+"/128", v6NodeAddr4); found {
			t.Errorf("FRR has %s/128 from the IPv4 session %s: want it over IPv6 only", v6DualVIP6, v6NodeAddr4)
		}
	})

	t.Run("the client sees the unsolicited neighbour advertisement", func(t *testing.T) {
		allNodes := netip.MustParseAddr("ff02::1")
		sniffer.await(t, "unsolicited NA for "+v6L2VIP+" from "+nodeMAC.String()+" to all-nodes", func(f ndFrame) bool {
			return isNA(f, vip, nodeMAC, false, allNodes, net.HardwareAddr{0x33, 0x33, 0, 0, 0, 1})
		})
	})

	t.Run("the client resolves the L2 VIP by NDP", func(t *testing.T) {
		sniffer.drain(t)
		// The unsolicited NA creates no entry (accept_untracked_na is 0):
		// the probe makes the client solicit.
		cns.IP(t, "-6", "neigh", "flush", "to", v6L2VIP, "dev", "c-n")
		frr.Eventually(t, "client reaches "+v6L2VIP, func() (bool, string) {
			if err := probe6(cns.Name, v6L2VIP); err != nil {
				return false, err.Error()
			}
			return true, ""
		})
		if mac, state := neigh6(t, cns, v6L2VIP, "c-n"); mac != nodeMAC.String() {
			t.Errorf("client's neighbour entry for %s: %q (%s), want the node's n-c MAC %s", v6L2VIP, mac, state, nodeMAC)
		}
		group, _ := ndp.SolicitedNodeMulticast(vip)
		sniffer.await(t, "the client's multicast solicitation for "+v6L2VIP, func(f ndFrame) bool {
			ns, ok := f.msg.(*ndp.NeighborSolicitation)
			return ok && f.outgoing && ns.TargetAddress == vip && f.dst == group
		})
		sniffer.await(t, "the node's solicited NA to the client", func(f ndFrame) bool {
			return isNA(f, vip, nodeMAC, true, client, sniffer.mac)
		})
	})

	t.Run("unicast solicitations (NUD) are answered", func(t *testing.T) {
		sniffer.drain(t)
		if err := sniffer.send(nsFrame(t, sniffer.mac, nodeMAC, client, vip, vip), nodeMAC); err != nil {
			t.Fatalf("send unicast NS: %v", err)
		}
		sniffer.await(t, "the node's NA to the test's unicast NS", func(f ndFrame) bool {
			return isNA(f, vip, nodeMAC, true, client, sniffer.mac)
		})

		// The kernel's own probe: a STALE entry that carries traffic goes
		// DELAY, then PROBE with a unicast NS to the cached MAC; only a
		// solicited NA makes it REACHABLE again (a UDP exchange confirms
		// nothing).
		sniffer.drain(t)
		cns.IP(t, "-6", "neigh", "replace", v6L2VIP, "lladdr", nodeMAC.String(), "dev", "c-n", "nud", "stale")
		if _, state := neigh6(t, cns, v6L2VIP, "c-n"); state != "STALE" {
			t.Fatalf("client's entry after nud stale: %s", state)
		}
		frr.Eventually(t, "client with a stale entry reaches "+v6L2VIP, func() (bool, string) {
			if err := probe6(cns.Name, v6L2VIP); err != nil {
				return false, err.Error()
			}
			return true, ""
		})
		sniffer.await(t, "the client kernel's unicast NS to the node's MAC", func(f ndFrame) bool {
			ns, ok := f.msg.(*ndp.NeighborSolicitation)
			return ok && f.outgoing && ns.TargetAddress == vip && f.dst == vip && bytes.Equal(f.ethDst, nodeMAC)
		})
		frr.Eventually(t, "client's entry REACHABLE again", func() (bool, string) {
			mac, state := neigh6(t, cns, v6L2VIP, "c-n")
			return mac == nodeMAC.String() && state == "REACHABLE", mac + " " + state
		})
	})

	t.Run("novaedgectl shows the announcements", func(t *testing.T) {
		var st *pb.VIPStatusResponse
		frr.Eventually(t, "vip status: all announced, both peers Established", func() (bool, string) {
			var err error
			if st, err = vipStatus(t, sock); err != nil {
				return false, err.Error()
			}
			ok := len(st.GetVips()) == 3 && len(st.GetBgp().GetPeers()) == 2
			for _, v := range st.GetVips() {
				ok = ok && v.GetAnnounced()
			}
			for _, p := range st.GetBgp().GetPeers() {
				ok = ok && p.GetState() == "Established"
			}
			return ok, protojson.Format(st)
		})
		want := map[string]string{
			"bgp6-vip": "BGP ANNOUNCE " + v6BGPVIP + " ",
			"dual-vip": "BGP ANNOUNCE " + v6DualVIP4 + "," + v6DualVIP6 + " ",
			"l2-vip6":  "L2ARP ACTIVE " + v6L2VIP + " n-c",
		}
		for _, v := range st.GetVips() {
			got := fmt.Sprintf("%s %s %s %s", v.GetMode(), v.GetRole(), strings.Join(v.GetAddresses(), ","), strings.Join(v.GetInterfaces(), ","))
			if got != want[v.GetVip()] {
				t.Errorf("vip %s: %q, want %q", v.GetVip(), got, want[v.GetVip()])
			}
		}
		if l2 := st.GetL2(); l2.GetUnsolicitedNas() == 0 || l2.GetSolicitedNas() < 3 || l2.GetGarps() != 0 || l2.GetConflicts() != 0 {
			t.Errorf("L2 counters %v: want unsolicited NAs, at least 3 solicited NAs (multicast, the test's unicast, the kernel's probe), no GARP, no conflict", l2)
		}
		if b := st.GetBgp(); b.GetLocalAs() != 65100 || b.GetRouterId() != v6NodeAddr4 || b.GetRestarting() || len(b.GetRoutes()) != 3 {
			t.Errorf("bgp status %v: want AS 65100, router ID %s (the source towards the IPv4 peer), not restarting, three routes", b, v6NodeAddr4)
		}
		if len(st.GetErrors()) > 0 {
			t.Errorf("agent problems: %v", st.GetErrors())
		}
		out, err := ctl(t, sock, "bgp", "peers", "-o", "json")
		if err != nil {
			t.Fatal(err)
		}
		var b pb.BGPStatus
		if err := protojson.Unmarshal([]byte(out), &b); err != nil {
			t.Fatalf("bgp peers -o json: %v: %s", err, out)
		}
		advertised := map[string]uint64{}
		for _, p := range b.GetPeers() {
			advertised[p.GetAddress()] = p.GetAdvertised()
		}
		if want := map[string]uint64{v6RouterAddr: 2, v6RouterAddr4: 1}; !maps.Equal(advertised, want) {
			t.Errorf("bgp peers: advertised by peer %v, want %v:\n%s", advertised, want, out)
		}
		out, err = ctl(t, sock, "bgp", "routes")
		var rows []string
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) > 0 {
				rows = append(rows, strings.Join(f, " "))
			}
		}
		wantRows := []string{
			"PREFIX VIP COMMUNITIES LOCAL-PREF MED",
			v6DualVIP4 + "/32 dual-vip 65000:146 - -",
			v6BGPVIP + "/128 bgp6-vip 65000:106 - -",
			v6DualVIP6 + "/128 dual-vip 65000:146 - -",
		}
		if err != nil || !slices.Equal(rows, wantRows) {
			t.Errorf("bgp routes (%v):\n%s\nwant the rows %q", err, out, wantRows)
		}
	})

	t.Run("SIGTERM keeps the routes through graceful restart", func(t *testing.T) {
		agent.stop(t)
		frr.Eventually(t, "FRR sees both sessions go", func() (bool, string) {
			s6, s4 := sessionState(t, router, v6NodeAddr), sessionState(t, router, v6NodeAddr4)
			return s6 != "Established" && s4 != "Established", s6 + " " + s4
		})
		for _, r := range v6Routes {
			frr.Eventually(t, "the node's path for "+r.prefix+" is stale", func() (bool, string) {
				found, stale, _ := pathFrom(t, router, r.prefix, r.peer)
				return found && stale, fmt.Sprintf("found %v stale %v", found, stale)
			})
			if hops := routeHops(t, router, r.prefix); !hopsOK(r, hops) {
				t.Errorf("router FIB for %s while the agent is away: %v, want the node's kept", r.prefix, hops)
			}
		}
	})

	var restarted *agentProc
	t.Run("a restarted agent refreshes the routes and announces the L2 VIP again", func(t *testing.T) {
		sniffer.drain(t)
		restarted = startAgent(t, nns, bin, dir, "restarted")
		for _, r := range v6Routes {
			frr.Eventually(t, "the node's path for "+r.prefix+" is fresh again", func() (bool, string) {
				found, stale, _ := pathFrom(t, router, r.prefix, r.peer)
				return found && !stale && sessionState(t, router, r.peer) == "Established", fmt.Sprintf("found %v stale %v", found, stale)
			})
			if hops := routeHops(t, router, r.prefix); !hopsOK(r, hops) {
				t.Errorf("router FIB for %s after the restart: %v", r.prefix, hops)
			}
		}
		st, err := vipStatus(t, sock)
		if err != nil {
			t.Fatal(err)
		}
		if !st.GetBgp().GetRestarting() {
			t.Errorf("bgp status after the restart %v: want restarting (the marker of the first run)", st.GetBgp())
		}
		sniffer.await(t, "unsolicited NA from the restarted agent", func(f ndFrame) bool {
			return isNA(f, vip, nodeMAC, false, netip.MustParseAddr("ff02::1"), net.HardwareAddr{0x33, 0x33, 0, 0, 0, 1})
		})
		frr.Eventually(t, "client reaches "+v6L2VIP+" after the restart", func() (bool, string) {
			if err := probe6(cns.Name, v6L2VIP); err != nil {
				return false, err.Error()
			}
			return true, ""
		})
	})

	// Agents before vip/l2 bound IPv6 VIPs with noprefixroute left a
	// main-table /128 through lo, which the VIP keeps across the upgrade
	// (SIGTERM leaves it bound). The manager picks the announce interface
	// by the main table, so it must look past that route: this fails
	// while vip/manager's hostRoutes.InterfaceFor takes the VIP's own
	// /128 through lo as the best match ("the route towards … is through
	// lo").
	t.Run("an upgraded agent announces an IPv6 L2 VIP an older agent left on lo", func(t *testing.T) {
		if restarted == nil {
			t.Fatal("the restarted agent did not start")
		}
		// The previous subtest's cleanup stopped it with SIGTERM.
		<-restarted.exited
		if restarted.err != nil {
			t.Fatalf("the restarted agent exited with %v", restarted.err)
		}
		nns.IP(t, "-6", "addr", "del", v6L2VIP+"/128", "dev", "lo")
		nns.IP(t, "-6", "addr", "add", v6L2VIP+"/128", "dev", "lo", "nodad", "preferred_lft", "0")
		if r := nns.IP(t, "-6", "route", "show", "table", "main", v6L2VIP); !strings.Contains(r, v6L2VIP+" dev lo") {
			t.Fatalf("the old agent's main-table route: %q, want %s dev lo", r, v6L2VIP)
		}
		sniffer.drain(t)
		startAgent(t, nns, bin, dir, "upgraded")
		frr.Eventually(t, "l2-vip6 announced on n-c", func() (bool, string) {
			v, s := l2VIPStateOf(t, sock, "l2-vip6")
			return v != nil && v.GetAnnounced() && slices.Equal(v.GetInterfaces(), []string{"n-c"}), s
		})
		sniffer.await(t, "unsolicited NA from the upgraded agent", func(f ndFrame) bool {
			return isNA(f, vip, nodeMAC, false, netip.MustParseAddr("ff02::1"), net.HardwareAddr{0x33, 0x33, 0, 0, 0, 1})
		})
	})
}

// l2VIPStateOf is the named VIP's line in the agent's vip status, with the
// status as text for failures.
func l2VIPStateOf(t *testing.T, sock, name string) (*pb.VIPAnnouncementStatus, string) {
	st, err := vipStatus(t, sock)
	if err != nil {
		return nil, err.Error()
	}
	for _, v := range st.GetVips() {
		if v.GetVip() == name {
			return v, protojson.Format(st)
		}
	}
	return nil, protojson.Format(st)
}
