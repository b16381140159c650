package e2e

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/novaedge/novaedge/fastpath"
)

// uploadPort is where the path MTU test's backend takes uploads, and the
// port of its DSR VIP entries.
const uploadPort = 8090

// backendMTU is the MTU of the path MTU test's link to its backend: the
// client's link has 1500, so the client's full-sized segments, which the
// backend's MSS (backendMTU - 40 or 60) lets through, no longer fit once
// the node encapsulates them.
const backendMTU = 1400

// TestDSRPathMTU uploads 1 MiB over TCP through a DSR IPIP (and
// IPv6-in-IPv6) VIP whose backend sits behind a link with a smaller MTU
// than the client's. The node's fast path cannot send the encapsulated
// full-sized segments; it answers the client with ICMP "fragmentation
// needed" / ICMPv6 "packet too big" from the VIP, the client's kernel
// lowers its path MTU to the VIP, and the upload completes byte for byte.
// A fast path that dropped those segments silently would stall the upload
// until the deadline.
//
//	client (1500) ─ node (fast path) ─ b1 (MTU 1400, decap, VIPs on lo)
func TestDSRPathMTU(t *testing.T) {
	l := newLab(t)
	client := l.netns("client", false)
	node := l.netns("node", true)
	be := l.netns("b1", false)
	clientIf, nodeIf := linkClient(l, client, node)
	l.attachPass(client, clientIf)
	node.addAddr("lo", pfx(node4, 32), pfx(node6, 128))
	nodeDev, beDev, be4, be6 := linkBackend(l, node, be, backendMTU)
	be.addAddr("lo", pfx(vip4, 32), pfx(vip6, 128))
	l.attachDecap(be, beDev)
	serveUploads(t, be)

	vip := func(name string, addr, backend netip.Addr) fastpath.VIP {
		return fastpath.VIP{Name: name, Addr: addr, Port: uploadPort, Proto: fastpath.ProtoTCP, Forward: fastpath.ForwardDSRIPIP,
			Backends: []fastpath.Backend{{Addr: backend, Port: uploadPort, Weight: 1}}}
	}
	fp := l.fastpath(node, "node", []string{nodeIf, nodeDev},
		fastpath.Config{VIPs: []fastpath.VIP{vip("up4", vip4, be4), vip("up6", vip6, be6)}, Node: nodeConfig()})

	for _, tc := range []struct {
		name string
		vip  netip.Addr
		// mtu is what the client must learn: the link's MTU less the
		// outer header.
		mtu int
	}{
		{"ipip4", vip4, backendMTU - 20},
		{"ip6ip6", vip6, backendMTU - 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := fp.counters(t)
			upload(t, client, netip.AddrPortFrom(tc.vip, uploadPort), 1<<20)
			d := diff(before, fp.counters(t))
			d.grew(t, "icmp_too_big_sent", "redirect")
			d.still(t, "drop_frag_needed")
			wantPathMTU(t, client, tc.vip, tc.mtu)
		})
	}
}

// upload sends n random bytes from namespace n to vip over TCP, half-closes
// and checks that the server's answer (the bytes' count and SHA-256) is
// that of what was sent, all within patience.
func upload(t *testing.T, n *netNS, vip netip.AddrPort, size int) {
	t.Helper()
	data := make([]byte, size)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	want := fmt.Sprintf("%d %s\n", size, hex.EncodeToString(sum[:]))
	f, err := dialTCP(n, netip.AddrPort{}, vip, patience)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.conn.Close() }()
	if err := f.conn.SetDeadline(time.Now().Add(patience)); err != nil {
		t.Fatal(err)
	}
	if _, err := f.conn.Write(data); err != nil {
		t.Fatalf("upload %d bytes to %s: %v (a full-sized segment that never arrives stalls it)", size, vip, err)
	}
	if err := f.conn.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatalf("half-close: %v", err)
	}
	got, err := io.ReadAll(f.r)
	if err != nil {
		t.Fatalf("upload of %d bytes to %s: no answer: %v (a full-sized segment that never arrives stalls it)", size, vip, err)
	}
	if string(got) != want {
		t.Fatalf("the backend received %q, want %q", got, want)
	}
}

// serveUploads accepts TCP connections on uploadPort in namespace n and
// answers each, once the client half-closes, with the count and SHA-256
// of the bytes it sent.
func serveUploads(t *testing.T, n *netNS) {
	serveTCP(t, n, uploadPort, func(c net.Conn) {
		h := sha256.New()
		size, err := io.Copy(h, c)
		if err != nil {
			return
		}
		_, _ = fmt.Fprintf(c, "%d %s\n", size, hex.EncodeToString(h.Sum(nil)))
	})
}

// serveTCP accepts TCP connections on port in namespace n and runs handle
// on each, until the test ends; it then closes the listener and every
// connection still open and waits for the handlers.
func serveTCP(t *testing.T, n *netNS, port uint16, handle func(net.Conn)) {
	t.Helper()
	var ln net.Listener
	n.must(func() error {
		var err error
		ln, err = net.Listen("tcp", fmt.Sprintf(":%d", port))
		return err
	})
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]struct{}{}
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[c] = struct{}{}
			mu.Unlock()
			wg.Go(func() {
				defer func() {
					mu.Lock()
					delete(conns, c)
					mu.Unlock()
					_ = c.Close()
				}()
				_ = c.SetDeadline(time.Now().Add(patience))
				handle(c)
			})
		}
	})
}

// linkClient links namespace client to peer (its gateway: gw4, gw6) with
// MTU 1500 and routes the client's traffic through it; it returns the
// client's and the peer's interface.
func linkClient(l *lab, client, peer *netNS) (clientIf, peerIf string) {
	clientIf, peerIf = l.id+"c", l.id+"nc"
	l.veth(end{client, clientIf, []netip.Prefix{pfx(client4, 24), pfx(client6, 64)}},
		end{peer, peerIf, []netip.Prefix{pfx(gw4, 24), pfx(gw6, 64)}}, 1500)
	client.ip("route", "add", "default", "via", gw4.String())
	client.ip("-6", "route", "add", "default", "via", gw6.String())
	return clientIf, peerIf
}

// linkBackend links node to backend namespace be with the given MTU and
// routes be's traffic through node; it returns node's and be's interface
// and be's addresses.
func linkBackend(l *lab, node, be *netNS, mtu int) (nodeDev, beDev string, be4, be6 netip.Addr) {
	nodeDev, beDev = l.id+"n1", l.id+"b1"
	be4, be6 = backendLink4(1, 2), backendLink6(1, 2)
	l.veth(end{node, nodeDev, []netip.Prefix{pfx(backendLink4(1, 1), 24), pfx(backendLink6(1, 1), 64)}},
		end{be, beDev, []netip.Prefix{pfx(be4, 24), pfx(be6, 64)}}, mtu)
	be.ip("route", "add", "default", "via", backendLink4(1, 1).String())
	be.ip("-6", "route", "add", "default", "via", backendLink6(1, 1).String())
	return nodeDev, beDev, be4, be6
}

// wantPathMTU checks that namespace n's route to dst learned the path MTU
// mtu (from an ICMP "fragmentation needed" / "packet too big").
func wantPathMTU(t *testing.T, n *netNS, dst netip.Addr, mtu int) {
	t.Helper()
	family := "-4"
	if dst.Is6() {
		family = "-6"
	}
	route := n.exec("ip", family, "route", "get", dst.String())
	if !strings.Contains(route, fmt.Sprintf(" mtu %d", mtu)) {
		t.Errorf("%s's route to %s has not learned the path MTU %d:\n%s", n.name, dst, mtu, route)
	}
}
