package sockets

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
)

func TestOpenKeepsExistingSockets(t *testing.T) {
	s := NewSet()
	defer s.Close()
	ctx := context.Background()
	a := Key{"tcp", netip.MustParseAddrPort("127.0.0.1:0")}
	// Port 0 gives a new port per socket; pick real ports first.
	opened, err := s.Open(ctx, []Key{a})
	if err != nil || len(opened) != 1 {
		t.Fatalf("Open = %v, %v", opened, err)
	}
	port := opened[0].Listener.Addr().(*net.TCPAddr).Port
	s.CloseExcept(nil)

	k1 := Key{"tcp", netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(port))}
	k2 := Key{"udp", netip.MustParseAddrPort("127.0.0.1:0")}
	opened, err = s.Open(ctx, []Key{k1, k2})
	if err != nil || len(opened) != 2 {
		t.Fatalf("Open = %v, %v", opened, err)
	}
	first, _ := s.Get(k1)

	// A connection accepted before the next Open survives it.
	c, err := net.Dial("tcp", k1.Addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	srv, err := first.Listener.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Close() }()

	opened, err = s.Open(ctx, []Key{k1, k2})
	if err != nil || len(opened) != 0 {
		t.Fatalf("reopening the same keys: %v, %v", opened, err)
	}
	if again, _ := s.Get(k1); again != first {
		t.Fatal("the socket was replaced")
	}
	if closed := s.CloseExcept([]Key{k1}); len(closed) != 1 || closed[0] != k2 {
		t.Fatalf("CloseExcept closed %v, want [%v]", closed, k2)
	}
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatalf("the established connection was cut: %v", err)
	}
	buf := make([]byte, 1)
	if _, err := srv.Read(buf); err != nil || buf[0] != 'x' {
		t.Fatalf("read %q, %v", buf, err)
	}
	if got := s.Keys(); len(got) != 1 || got[0] != k1 {
		t.Fatalf("Keys = %v", got)
	}
}

func TestOpenReportsFailuresAndOpensTheRest(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = busy.Close() }()
	s := NewSet()
	defer s.Close()
	taken := Key{"tcp", netip.MustParseAddrPort(busy.Addr().String())}
	free := Key{"tcp", netip.MustParseAddrPort("127.0.0.1:0")}
	opened, err := s.Open(context.Background(), []Key{taken, free, {"sctp", free.Addr}})
	if len(opened) != 1 || opened[0].Key != free {
		t.Fatalf("opened %v, want only %v", opened, free)
	}
	if err == nil || !strings.Contains(err.Error(), "listen "+taken.String()) || !strings.Contains(err.Error(), "unknown network") {
		t.Fatalf("error %v does not name both failures", err)
	}
}

// TestFreebind: a VIP address that is not configured anywhere can be
// listened on (IPv4 and IPv6), as the slow path must do before the VIP is
// announced.
func TestFreebind(t *testing.T) {
	s := NewSet()
	defer s.Close()
	keys := []Key{
		{"tcp", netip.MustParseAddrPort("192.0.2.200:18443")},
		{"udp", netip.MustParseAddrPort("192.0.2.200:18443")},
		{"tcp", netip.MustParseAddrPort("[2001:db8::200]:18443")},
	}
	if _, err := s.Open(context.Background(), keys); err != nil {
		t.Fatalf("FREEBIND listen: %v", err)
	}
}
