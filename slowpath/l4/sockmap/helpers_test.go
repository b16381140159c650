package sockmap

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"

	"github.com/cilium/ebpf"
)

// newSplicer returns a Splicer closed at the end of the test. A kernel
// without sockmap fails the test with the reason: there is no skip.
func newSplicer(t *testing.T) *Splicer {
	t.Helper()
	s, err := New(Options{})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// listen returns a TCP listener on 127.0.0.1 closed at the end of the test.
func listen(t *testing.T) *net.TCPListener {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	return ln
}

// connPair returns both ends of a fresh TCP connection on 127.0.0.1:
// the dialled one and the accepted one.
func connPair(t *testing.T, ln *net.TCPListener) (dialed, accepted *net.TCPConn) {
	t.Helper()
	type res struct {
		c   *net.TCPConn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := ln.AcceptTCP()
		ch <- res{c, err}
	}()
	d, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() {
		_ = d.Close()
		_ = r.c.Close()
	})
	return d, r.c
}

// proxied is a client and an upstream connection with a splice between them:
// client <-> a (proxy's accepted side) ~ b (proxy's dialled side) <-> upstream.
type proxied struct {
	client, upstream *net.TCPConn
	result           chan spliceResult
}

type spliceResult struct {
	stats Stats
	err   error
}

// spliced maps a proxy-side connection to a channel closed once its pair is
// in the maps (testHookSpliced).
var spliced sync.Map

func init() {
	testHookSpliced = func(a *net.TCPConn) {
		if ch, ok := spliced.Load(a); ok {
			close(ch.(chan struct{}))
		}
	}
}

// startSplice connects client to a and b to upstream, lets before run with
// the four connections before the splice starts (to send bytes the proxy
// will not read), splices a and b in the background and returns once the
// pair is spliced in the kernel: a splice that falls back to copying, or
// fails to start, fails the test.
func startSplice(t *testing.T, ctx context.Context, s *Splicer, pendingA, pendingB []byte, before func(client, a, b, upstream *net.TCPConn)) proxied {
	t.Helper()
	p, a := startSpliceAny(t, ctx, s, pendingA, pendingB, before)
	ch, _ := spliced.Load(a)
	select {
	case <-ch.(chan struct{}):
	case r := <-p.result:
		t.Fatalf("Splice returned before splicing: %+v, %v", r.stats, r.err)
	}
	return p
}

// startSpliceAny is startSplice without waiting for the kernel splice; it
// also returns a.
func startSpliceAny(t *testing.T, ctx context.Context, s *Splicer, pendingA, pendingB []byte, before func(client, a, b, upstream *net.TCPConn)) (proxied, *net.TCPConn) {
	t.Helper()
	front, back := listen(t), listen(t)
	client, a := connPair(t, front)
	b, upstream := connPair(t, back)
	if before != nil {
		before(client, a, b, upstream)
	}
	spliced.Store(a, make(chan struct{}))
	t.Cleanup(func() { spliced.Delete(a) })
	res := make(chan spliceResult, 1)
	go func() {
		st, err := s.Splice(ctx, a, b, pendingA, pendingB)
		res <- spliceResult{st, err}
	}()
	return proxied{client: client, upstream: upstream, result: res}, a
}

// mapEntries counts the entries of m.
func mapEntries(t *testing.T, m *ebpf.Map) int {
	t.Helper()
	var key uint64
	n := 0
	it := m.Iterate()
	var v []byte
	for it.Next(&key, &v) {
		n++
	}
	if err := it.Err(); err != nil {
		t.Fatalf("iterate %v: %v", m, err)
	}
	return n
}

// assertEmpty fails unless every map of s is empty: a finished splice leaves
// nothing behind.
func assertEmpty(t *testing.T, s *Splicer) {
	t.Helper()
	for name, m := range map[string]*ebpf.Map{
		"sockmap_peers":   s.objs.SockmapPeers,
		"sockmap_spliced": s.objs.SockmapSpliced,
		"sockmap_stats":   s.objs.SockmapStats,
	} {
		if n := mapEntries(t, m); n != 0 {
			t.Errorf("%s holds %d entries after the splice ended", name, n)
		}
	}
}

// readAll reads c to EOF.
func readAll(t *testing.T, c io.Reader) []byte {
	t.Helper()
	b, err := io.ReadAll(c)
	if err != nil {
		t.Errorf("read: %v", err)
	}
	return b
}
