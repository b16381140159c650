package wbatch

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// pair returns a connected loopback TCP pair: the client end (written
// through a Writer) and the server end.
func pair(t *testing.T) (*net.TCPConn, *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s := <-accepted
	if s == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { _ = c.Close(); _ = s.Close() })
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

// TestOrder: deferred messages of many connections arrive whole and in
// order with the direct writes around them, as each owner wrote them.
func TestOrder(t *testing.T) {
	const conns, rounds = 16, 50
	b := new(Batcher)
	var wg sync.WaitGroup
	for i := range conns {
		c, s := pair(t)
		w := new(Writer)
		w.Reset(c, b)
		if w.rc == nil {
			t.Fatal("a *net.TCPConn is not batched")
		}
		var want bytes.Buffer
		for r := range rounds {
			want.WriteString(strings.Repeat("d", r) + "|deferred|")
			want.WriteString("direct|")
		}
		wg.Add(2)
		go func() {
			defer wg.Done()
			for r := range rounds {
				w.Defer()
				if _, err := w.Write([]byte(strings.Repeat("d", r) + "|deferred|")); err != nil {
					t.Errorf("conn %d: deferred write: %v", i, err)
					return
				}
				if _, err := w.Write([]byte("direct|")); err != nil {
					t.Errorf("conn %d: direct write: %v", i, err)
					return
				}
			}
			// The last message is a deferred one: Sync sends it.
			w.Defer()
			_, _ = w.Write([]byte("end"))
			if err := w.Sync(); err != nil {
				t.Errorf("conn %d: sync: %v", i, err)
			}
		}()
		go func() {
			defer wg.Done()
			want.WriteString("end")
			got := make([]byte, want.Len())
			_ = s.SetReadDeadline(time.Now().Add(20 * time.Second))
			if _, err := io.ReadFull(s, got); err != nil {
				t.Errorf("conn %d: read: %v", i, err)
				return
			}
			if !bytes.Equal(got, want.Bytes()) {
				t.Errorf("conn %d: got %q, want %q", i, got, want.Bytes())
			}
		}()
	}
	wg.Wait()
}

// TestBurstWithoutSync: a deferred message goes out without the owner
// doing anything more (the owner waits for the answer).
func TestBurstWithoutSync(t *testing.T) {
	c, s := pair(t)
	w := new(Writer)
	w.Reset(c, new(Batcher))
	w.Defer()
	if _, err := w.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	go func() {
		buf := make([]byte, 4)
		if _, err := io.ReadFull(s, buf); err == nil && string(buf) == "ping" {
			_, _ = s.Write([]byte("pong"))
		}
	}()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "pong" {
		t.Fatalf("answer %q, %v; want pong", buf, err)
	}
}

// TestLargeMessageSlowReader: a deferred message larger than the socket
// can take at once is finished by a goroutine of its own while the peer
// reads slowly; a direct write after it waits for it.
func TestLargeMessageSlowReader(t *testing.T) {
	c, s := pair(t)
	_ = c.SetWriteBuffer(16 << 10)
	_ = s.SetReadBuffer(16 << 10)
	w := new(Writer)
	w.Reset(c, new(Batcher))
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB: more than both buffers
	w.Defer()
	if _, err := w.Write(big); err != nil {
		t.Fatal(err)
	}
	// Let the Batcher try (the socket takes a part) before reading: it
	// hands the rest over, and nothing reads, so that lasts.
	if !eventually(func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.busy
	}) {
		t.Error("the Batcher wrote 1 MiB to a socket with a 16 KiB buffer without handing the rest over")
	}
	done := make(chan error, 1)
	go func() {
		_, err := w.Write([]byte("tail"))
		done <- err
	}()
	got, err := io.ReadAll(io.LimitReader(s, int64(len(big)+4)))
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("direct write after the large message: %v", err)
	}
	if !bytes.Equal(got[:len(big)], big) || string(got[len(big):]) != "tail" {
		t.Fatalf("peer got %d bytes, not the message and its tail in order", len(got))
	}
}

// TestFailedWriteClosesConnection: a deferred write to a peer that reset
// the connection closes it, so the owner's read ends, and Sync reports it.
func TestFailedWriteClosesConnection(t *testing.T) {
	c, s := pair(t)
	_ = s.SetLinger(0)
	_ = s.Close() // RST
	// Wait for the RST to reach c (the state it leaves is TCP_CLOSE):
	// before, writes would be accepted.
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var state uint8
	if !eventually(func() bool {
		if err := rc.Control(func(fd uintptr) {
			if info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
				state = info.State
			}
		}); err != nil {
			t.Fatal(err)
		}
		return state == unix.BPF_TCP_CLOSE
	}) {
		t.Fatalf("the peer's RST did not arrive (TCP state %d)", state)
	}
	w := new(Writer)
	w.Reset(c, new(Batcher))
	// The first write after the reset may still be accepted by the
	// kernel; the second fails.
	for range 2 {
		w.Defer()
		_, _ = w.Write([]byte("x"))
		time.Sleep(20 * time.Millisecond)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("read succeeded on a connection whose deferred write failed")
	}
	if err := w.Sync(); err == nil {
		t.Fatal("Sync reports no error after a failed deferred write")
	}
	w.Defer()
	if _, err := w.Write([]byte("y")); err == nil {
		t.Fatal("a deferred write after a failure succeeded")
	}
}

// TestOtherConnsDirect: a connection that is not a plain TCP or Unix one
// (here net.Pipe; TLS likewise) is written directly, Defer or not.
func TestOtherConnsDirect(t *testing.T) {
	a, b := net.Pipe()
	defer func() { _ = a.Close(); _ = b.Close() }()
	w := new(Writer)
	w.Reset(a, new(Batcher))
	got := make(chan string, 1)
	go func() {
		buf := make([]byte, 5)
		n, _ := io.ReadFull(b, buf)
		got <- string(buf[:n])
	}()
	w.Defer()
	// net.Pipe is synchronous: the write returns once the reader took it.
	if _, err := w.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	if s := <-got; s != "hello" {
		t.Fatalf("got %q", s)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
}

// TestResetWaits: Reset after Sync leaves nothing behind, and the Writer
// then serves another connection.
func TestResetWaits(t *testing.T) {
	b := new(Batcher)
	w := new(Writer)
	for range 3 {
		c, s := pair(t)
		w.Reset(c, b)
		w.Defer()
		if _, err := w.Write([]byte("msg")); err != nil {
			t.Fatal(err)
		}
		if err := w.Sync(); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 3)
		_ = s.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(s, buf); err != nil || string(buf) != "msg" {
			t.Fatalf("got %q, %v", buf, err)
		}
		w.Reset(nil, nil)
	}
	if err := w.Sync(); err != nil && !errors.Is(err, net.ErrClosed) {
		t.Fatal(err)
	}
}

// TestSendTimeout: a peer that stops reading makes a direct write fail,
// and a deferred one close the connection, once the send timeout passes
// without progress; a peer that reads keeps the connection alive past it.
func TestSendTimeout(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 4<<20) // far more than both buffers
	t.Run("direct write", func(t *testing.T) {
		c, _ := pair(t)
		_ = c.SetWriteBuffer(16 << 10)
		w := new(Writer)
		w.Reset(c, new(Batcher))
		w.SetSendTimeout(100 * time.Millisecond)
		if _, err := w.Write(big); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("write to a peer that reads nothing: %v, want a deadline error", err)
		}
	})
	t.Run("deferred write", func(t *testing.T) {
		c, _ := pair(t)
		_ = c.SetWriteBuffer(16 << 10)
		w := new(Writer)
		w.Reset(c, new(Batcher))
		w.SetSendTimeout(100 * time.Millisecond)
		w.Defer()
		if _, err := w.Write(big); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("owner's read: %v, want the connection closed by the timed-out write", err)
		}
		if err := w.Sync(); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("Sync: %v, want the deferred write's deadline error", err)
		}
	})
	t.Run("slow reader", func(t *testing.T) {
		c, s := pair(t)
		w := new(Writer)
		w.Reset(c, new(Batcher))
		w.SetSendTimeout(200 * time.Millisecond)
		// Messages spread over more than twice the timeout, each read at
		// once: the deadline is renewed, never hit.
		go func() { _, _ = io.Copy(io.Discard, s) }()
		for i := range 10 {
			w.Defer()
			if _, err := w.Write([]byte("tick")); err != nil {
				t.Fatalf("message %d: %v", i, err)
			}
			time.Sleep(50 * time.Millisecond)
			if _, err := w.Write([]byte("direct")); err != nil {
				t.Fatalf("message %d: %v", i, err)
			}
		}
		if err := w.Sync(); err != nil {
			t.Fatal(err)
		}
	})
}

// eventually polls cond for up to 10 s (a bound for a broken test, nothing
// is measured) and reports whether it held.
func eventually(cond func() bool) bool {
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}
