package sockcheck

import (
	"net"
	"testing"
	"time"
)

// TestCheck: an idle connection, one with unread bytes, and one the peer
// closed, on real 127.0.0.1 sockets.
func TestCheck(t *testing.T) {
	cases := []struct {
		name string
		peer func(c net.Conn)
		want State
	}{
		{"idle", func(net.Conn) {}, Idle},
		{"bytes waiting", func(c net.Conn) { _, _ = c.Write([]byte("x")) }, Readable},
		{"closed by the peer", func(c net.Conn) { _ = c.Close() }, Closed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = ln.Close() }()
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = c.Close() }()
			peer, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = peer.Close() }()
			tc.peer(peer)
			k := For(c)
			// The peer's bytes or FIN take a moment to arrive.
			deadline := time.Now().Add(5 * time.Second)
			got := k.Check()
			for got != tc.want && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
				got = k.Check()
			}
			if got != tc.want {
				t.Fatalf("state %v, want %v", got, tc.want)
			}
			// Checking consumed nothing.
			if tc.want == Readable {
				b := make([]byte, 4)
				if n, err := c.Read(b); n != 1 || err != nil {
					t.Fatalf("read after check: %d %v", n, err)
				}
			}
		})
	}
	if got := (Checker{}).Check(); got != Unknown {
		t.Fatalf("zero Checker: %v", got)
	}
	a, b := net.Pipe()
	defer func() { _ = a.Close(); _ = b.Close() }()
	if got := For(a).Check(); got != Unknown {
		t.Fatalf("net.Pipe: %v", got)
	}
}
