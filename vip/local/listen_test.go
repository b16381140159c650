package local

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"
)

// TestListenFreebind listens, inside a test namespace, on VIPs that are not
// bound anywhere yet: a plain listener must fail (so the test can tell), one
// from ListenConfig must succeed, and once the Manager binds the address the
// listener serves traffic, which is the order the agent relies on.
func TestListenFreebind(t *testing.T) {
	tests := []struct {
		name    string
		network string
		address string
		vip     Address
		packet  bool
	}{
		{name: "tcp4", network: "tcp4", address: "192.0.2.77:0", vip: addr("192.0.2.77", "lo")},
		{name: "tcp with ipv4", network: "tcp", address: "192.0.2.78:0", vip: addr("192.0.2.78", "lo")},
		{name: "tcp6", network: "tcp6", address: "[2001:db8::77]:0", vip: addr("2001:db8::77", "lo")},
		{name: "tcp with ipv6", network: "tcp", address: "[2001:db8::78]:0", vip: addr("2001:db8::78", "lo")},
		{name: "udp4", network: "udp4", address: "192.0.2.79:0", vip: addr("192.0.2.79", "lo"), packet: true},
		{name: "udp6", network: "udp6", address: "[2001:db8::79]:0", vip: addr("2001:db8::79", "lo"), packet: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := newTestNS(t)
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()

			// Without FREEBIND the kernel refuses an address that is not
			// local.
			err := n.run(func() error {
				var lc net.ListenConfig
				var c io.Closer
				var err error
				if tc.packet {
					c, err = lc.ListenPacket(ctx, tc.network, tc.address)
				} else {
					c, err = lc.Listen(ctx, tc.network, tc.address)
				}
				if err == nil {
					_ = c.Close()
				}
				return err
			})
			if !errors.Is(err, syscall.EADDRNOTAVAIL) {
				t.Fatalf("plain listen on %s %s: %v, want EADDRNOTAVAIL (else this test proves nothing)", tc.network, tc.address, err)
			}

			var ln net.Listener
			var pc net.PacketConn
			if err := n.run(func() error {
				var err error
				if tc.packet {
					pc, err = ListenPacket(ctx, tc.network, tc.address)
				} else {
					ln, err = Listen(ctx, tc.network, tc.address)
				}
				return err
			}); err != nil {
				t.Fatalf("listen with FREEBIND on %s %s: %v", tc.network, tc.address, err)
			}
			var local net.Addr
			if tc.packet {
				t.Cleanup(func() { _ = pc.Close() })
				local = pc.LocalAddr()
			} else {
				t.Cleanup(func() { _ = ln.Close() })
				local = ln.Addr()
			}
			ap, err := netip.ParseAddrPort(local.String())
			if err != nil {
				t.Fatal(err)
			}
			if ap.Addr().Unmap() != tc.vip.Prefix.Addr() {
				t.Fatalf("listener bound to %s, want %s", ap, tc.vip.Prefix.Addr())
			}

			m, err := New(Options{Handle: n.h, Logger: testLogger(t)})
			if err != nil {
				t.Fatal(err)
			}
			if err := m.Apply([]Address{tc.vip}); err != nil {
				t.Fatal(err)
			}
			if tc.packet {
				checkUDP(t, ctx, n, pc, tc.network, ap)
			} else {
				checkTCP(t, ctx, n, ln, tc.network, ap)
			}
		})
	}
}

// checkTCP dials the listener from inside the namespace and reads back what
// it sent through the accepted connection.
func checkTCP(t *testing.T, ctx context.Context, n *testNS, ln net.Listener, network string, to netip.AddrPort) {
	t.Helper()
	accepted := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			accepted <- err
			return
		}
		defer func() { _ = c.Close() }()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		_, err = io.Copy(c, io.LimitReader(c, 4))
		accepted <- err
	}()
	var got []byte
	if err := n.run(func() error {
		var d net.Dialer
		c, err := d.DialContext(ctx, network, to.String())
		if err != nil {
			return err
		}
		defer func() { _ = c.Close() }()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte("ping")); err != nil {
			return err
		}
		got = make([]byte, 4)
		_, err = io.ReadFull(c, got)
		return err
	}); err != nil {
		t.Fatalf("talk to %s: %v", to, err)
	}
	if err := <-accepted; err != nil {
		t.Fatalf("serve on %s: %v", to, err)
	}
	if string(got) != "ping" {
		t.Fatalf("echo from %s = %q, want %q", to, got, "ping")
	}
}

// checkUDP sends a datagram to the packet conn from inside the namespace.
func checkUDP(t *testing.T, ctx context.Context, n *testNS, pc net.PacketConn, network string, to netip.AddrPort) {
	t.Helper()
	if err := n.run(func() error {
		var d net.Dialer
		c, err := d.DialContext(ctx, network, to.String())
		if err != nil {
			return err
		}
		defer func() { _ = c.Close() }()
		_, err = c.Write([]byte("ping"))
		return err
	}); err != nil {
		t.Fatalf("send to %s: %v", to, err)
	}
	_ = pc.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 16)
	k, _, err := pc.ReadFrom(buf)
	if err != nil {
		t.Fatalf("receive on %s: %v", to, err)
	}
	if string(buf[:k]) != "ping" {
		t.Fatalf("received %q on %s, want %q", buf[:k], to, "ping")
	}
}
