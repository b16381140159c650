package sockets

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"path/filepath"
	"testing"
	"time"
)

// TestHandoff passes a TCP and a UDP socket to another set over a real
// Unix socket (SCM_RIGHTS): the successor accepts on them, and they stay
// open after the predecessor closes its copies.
func TestHandoff(t *testing.T) {
	a := NewSet()
	opened, err := a.Open(context.Background(), []Key{
		{"tcp", netip.MustParseAddrPort("127.0.0.1:0")},
		{"udp", netip.MustParseAddrPort("127.0.0.1:0")},
	})
	if err != nil {
		t.Fatal(err)
	}
	// Port 0 keys are what was asked; re-key them by the real ports as a
	// configuration would name them.
	tcpAddr := opened[0].Listener.Addr().String()
	udpAddr := opened[1].PacketConn.LocalAddr().String()
	a.CloseExcept(nil)
	a = NewSet()
	tcpKey := Key{"tcp", netip.MustParseAddrPort(tcpAddr)}
	udpKey := Key{"udp", netip.MustParseAddrPort(udpAddr)}
	if _, err := a.Open(context.Background(), []Key{tcpKey, udpKey}); err != nil {
		t.Fatal(err)
	}

	path := filepath.Join(t.TempDir(), "handoff.sock")
	handed := make(chan struct{})
	served := make(chan error, 1)
	go func() {
		served <- a.ServeHandoff(context.Background(), path, func() { close(handed) })
	}()

	b := NewSet()
	defer b.Close()
	keys, confirm := inherit(t, b, path) // the handoff listener may not be up yet
	if len(keys) != 2 {
		t.Fatalf("inherited %v", keys)
	}
	if err := confirm(); err != nil {
		t.Fatal(err)
	}
	<-handed
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	for _, k := range []Key{tcpKey, udpKey} {
		sock, _ := a.Get(k)
		c := any(sock.Listener)
		if sock.Listener == nil {
			c = sock.PacketConn
		}
		if !nonBlocking(t, c) {
			t.Fatalf("the handoff left %s in blocking mode", k)
		}
	}
	a.Close() // the predecessor's copies

	// The successor's listener accepts; the socket survived a's Close.
	sock, ok := b.Get(tcpKey)
	if !ok {
		t.Fatal("tcp socket not adopted")
	}
	c, err := net.Dial("tcp", tcpAddr)
	if err != nil {
		t.Fatalf("dial after the handoff: %v", err)
	}
	defer func() { _ = c.Close() }()
	sc, err := sock.Listener.Accept()
	if err != nil {
		t.Fatal(err)
	}
	_ = sc.Close()
	us, _ := b.Get(udpKey)
	uc, err := net.Dial("udp", udpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = uc.Close() }()
	_, _ = uc.Write([]byte("ping"))
	buf := make([]byte, 4)
	if n, _, err := us.PacketConn.ReadFrom(buf); err != nil || string(buf[:n]) != "ping" {
		t.Fatalf("udp after the handoff: %q %v", buf[:n], err)
	}

	if _, _, err := NewSet().Inherit(filepath.Join(t.TempDir(), "none.sock")); !errors.Is(err, ErrNoPredecessor) {
		t.Fatalf("Inherit without a predecessor: %v", err)
	}
}

func TestParseKey(t *testing.T) {
	for _, s := range []string{"tcp 127.0.0.1:80", "udp [::1]:443"} {
		k, err := ParseKey(s)
		if err != nil || k.String() != s {
			t.Errorf("ParseKey(%q) = %v, %v", s, k, err)
		}
	}
	for _, s := range []string{"", "tcp", "sctp 1.2.3.4:5", "tcp 1.2.3.4"} {
		if _, err := ParseKey(s); err == nil {
			t.Errorf("ParseKey(%q) accepted", s)
		}
	}
}

func waitABit() { time.Sleep(10 * time.Millisecond) }
