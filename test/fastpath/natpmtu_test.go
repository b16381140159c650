package e2e

import (
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/novaedge/novaedge/fastpath"
)

// downloadPort is where the NAT path MTU test's backend serves downloads.
const downloadPort = 8091

// smallMTU is the MTU the NAT path MTU test gives the node's end of one
// link at a time.
const smallMTU = 1400

// TestNATPathMTU moves 1 MiB over TCP each way through a NAT (SNAT) VIP,
// IPv4 and IPv6, while the node's end of one link has a smaller MTU
// (smallMTU) than the rest of the path. Only the node's end is small, so
// that both TCP ends offer a 1500-byte MTU's MSS and send segments the
// node cannot forward:
//
//   - upload: the link to the backend is small; the client's segments,
//     translated, are too big for it. The fast path must answer the client
//     with "fragmentation needed" / "packet too big" from the VIP, quoting
//     the client's own segment, and the client's kernel lowers its path
//     MTU to the VIP.
//   - download: the link to the client is small; the backend's segments,
//     translated back, are too big for it. The fast path must answer the
//     backend from the node's address, quoting the backend's segment to
//     the node's SNAT port, and the backend's kernel lowers its path MTU
//     to the node.
//
// Both transfers are checked byte for byte (SHA-256) within patience; a
// fast path that dropped the too-big segments would stall them.
//
//	client (1500) ─ [smallMTU on download] node [smallMTU on upload] ─ (1500) b1
func TestNATPathMTU(t *testing.T) {
	l := newLab(t)
	client := l.netns("client", false)
	node := l.netns("node", true)
	be := l.netns("b1", false)
	clientIf, nodeIf := linkClient(l, client, node)
	l.attachPass(client, clientIf)
	node.addAddr("lo", pfx(node4, 32), pfx(node6, 128))
	nodeDev, beDev, be4, be6 := linkBackend(l, node, be, 1500)
	l.attachPass(be, beDev)
	serveUploads(t, be)
	data := make([]byte, 1<<20)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	serveDownloads(t, be, data)

	vips := func(name string, addr, backend netip.Addr) []fastpath.VIP {
		var out []fastpath.VIP
		for _, port := range []uint16{uploadPort, downloadPort} {
			out = append(out, fastpath.VIP{Name: fmt.Sprintf("%s-%d", name, port), Addr: addr, Port: port,
				Proto: fastpath.ProtoTCP, Forward: fastpath.ForwardNAT,
				Backends: []fastpath.Backend{{Addr: backend, Port: port, Weight: 1}}})
		}
		return out
	}
	fp := l.fastpath(node, "node", []string{nodeIf, nodeDev},
		fastpath.Config{VIPs: append(vips("v4", vip4, be4), vips("v6", vip6, be6)...), Node: nodeConfig()})

	for _, tc := range []struct {
		name string
		vip  netip.Addr
		// small is the node's interface that gets smallMTU.
		small string
		// learner is the namespace that must learn smallMTU towards dst.
		learner *netNS
		dst     netip.Addr
		move    func(t *testing.T, vip netip.AddrPort)
	}{
		{"upload/ipv4", vip4, nodeDev, client, vip4, func(t *testing.T, vip netip.AddrPort) { upload(t, client, vip, 1<<20) }},
		{"upload/ipv6", vip6, nodeDev, client, vip6, func(t *testing.T, vip netip.AddrPort) { upload(t, client, vip, 1<<20) }},
		{"download/ipv4", vip4, nodeIf, be, node4, func(t *testing.T, vip netip.AddrPort) { download(t, client, vip, data) }},
		{"download/ipv6", vip6, nodeIf, be, node6, func(t *testing.T, vip netip.AddrPort) { download(t, client, vip, data) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A path MTU learned in an earlier case would shrink the
			// MSS the client offers in its SYN (the kernel takes it
			// from the route's MTU), and no segment would be too big.
			for _, n := range []*netNS{client, be} {
				n.ip("-4", "route", "flush", "cache")
				n.ip("-6", "route", "flush", "cache")
			}
			for _, dev := range []string{nodeIf, nodeDev} {
				mtu := 1500
				if dev == tc.small {
					mtu = smallMTU
				}
				node.ip("link", "set", "dev", dev, "mtu", strconv.Itoa(mtu))
			}
			port := uint16(uploadPort)
			if strings.HasPrefix(tc.name, "download") {
				port = downloadPort
			}
			before := fp.counters(t)
			tc.move(t, netip.AddrPortFrom(tc.vip, port))
			d := diff(before, fp.counters(t))
			d.grew(t, "icmp_too_big_sent", "nat_reply")
			d.still(t, "drop_frag_needed")
			wantPathMTU(t, tc.learner, tc.dst, smallMTU)
		})
	}
}

// download fetches what the download server of namespace n sends through
// vip and checks that it is want, byte for byte, within patience.
func download(t *testing.T, n *netNS, vip netip.AddrPort, want []byte) {
	t.Helper()
	f, err := dialTCP(n, netip.AddrPort{}, vip, patience)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.conn.Close() }()
	if err := f.conn.SetDeadline(time.Now().Add(patience)); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(f.r)
	if err != nil {
		t.Fatalf("download of %d bytes from %s: %v after %d bytes (a full-sized segment that never arrives stalls it)", len(want), vip, err, len(got))
	}
	if len(got) != len(want) || sha256.Sum256(got) != sha256.Sum256(want) {
		t.Fatalf("downloaded %d bytes with SHA-256 %x, want %d bytes with %x", len(got), sha256.Sum256(got), len(want), sha256.Sum256(want))
	}
}

// serveDownloads accepts TCP connections on downloadPort in namespace n
// and sends each data, then closes it.
func serveDownloads(t *testing.T, n *netNS, data []byte) {
	serveTCP(t, n, downloadPort, func(c net.Conn) { _, _ = c.Write(data) })
}

// TestNATRouterPathMTU downloads 1 MiB over TCP through a NAT (SNAT) VIP,
// IPv4 and IPv6, with a router between the client and the node whose link
// to the client has a smaller MTU (smallMTU; the router's end only, so
// that the client still offers a 1500-byte MTU's MSS). The router's
// kernel answers the backend's translated segments with "fragmentation
// needed" / "packet too big" to the VIP; the fast path must translate that
// error as about the backend's own segment to the node's SNAT port and
// forward it to the backend, whose kernel then lowers its path MTU to the
// node. Without that the error reaches only the node's kernel, which has
// no such connection, and the download stalls until patience runs out.
//
//	client (1500) ─ (smallMTU) router (1500) ─ node (fast path) ─ (1500) b1
func TestNATRouterPathMTU(t *testing.T) {
	l := newLab(t)
	client := l.netns("client", false)
	router := l.netns("router", true)
	node := l.netns("node", true)
	be := l.netns("b1", false)
	routerNode4, routerNode6 := netip.MustParseAddr("10.98.2.1"), netip.MustParseAddr("fd98:2::1")
	nodeRouter4, nodeRouter6 := netip.MustParseAddr("10.98.2.2"), netip.MustParseAddr("fd98:2::2")

	clientIf, routerC := l.id+"c", l.id+"rc"
	l.veth(end{client, clientIf, []netip.Prefix{pfx(client4, 24), pfx(client6, 64)}},
		end{router, routerC, []netip.Prefix{pfx(gw4, 24), pfx(gw6, 64)}}, 1500)
	router.ip("link", "set", "dev", routerC, "mtu", strconv.Itoa(smallMTU))
	client.ip("route", "add", "default", "via", gw4.String())
	client.ip("-6", "route", "add", "default", "via", gw6.String())

	routerN, nodeR := l.id+"rn", l.id+"nr"
	l.veth(end{router, routerN, []netip.Prefix{pfx(routerNode4, 24), pfx(routerNode6, 64)}},
		end{node, nodeR, []netip.Prefix{pfx(nodeRouter4, 24), pfx(nodeRouter6, 64)}}, 1500)
	l.attachPass(router, routerN)
	router.ip("route", "add", "default", "via", nodeRouter4.String())
	router.ip("-6", "route", "add", "default", "via", nodeRouter6.String())
	node.ip("route", "add", pfx(client4, 24).Masked().String(), "via", routerNode4.String())
	node.ip("-6", "route", "add", pfx(client6, 64).Masked().String(), "via", routerNode6.String())
	node.addAddr("lo", pfx(node4, 32), pfx(node6, 128))

	nodeDev, beDev, be4, be6 := linkBackend(l, node, be, 1500)
	l.attachPass(be, beDev)
	data := make([]byte, 1<<20)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	serveDownloads(t, be, data)

	vip := func(name string, addr, backend netip.Addr) fastpath.VIP {
		return fastpath.VIP{Name: name, Addr: addr, Port: downloadPort, Proto: fastpath.ProtoTCP, Forward: fastpath.ForwardNAT,
			Backends: []fastpath.Backend{{Addr: backend, Port: downloadPort, Weight: 1}}}
	}
	fp := l.fastpath(node, "node", []string{nodeR, nodeDev},
		fastpath.Config{VIPs: []fastpath.VIP{vip("down4", vip4, be4), vip("down6", vip6, be6)}, Node: nodeConfig()})

	for _, tc := range []struct {
		name      string
		vip, node netip.Addr
	}{
		{"ipv4", vip4, node4},
		{"ipv6", vip6, node6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := fp.counters(t)
			download(t, client, netip.AddrPortFrom(tc.vip, downloadPort), data)
			d := diff(before, fp.counters(t))
			d.grew(t, "icmp_nat_to_backend", "nat_reply")
			d.still(t, "drop_frag_needed", "icmp_too_big_sent")
			wantPathMTU(t, be, tc.node, smallMTU)
		})
	}
}
