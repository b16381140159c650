package h2conform

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"
)

// gateConn is a connection whose writes wait for the test to open its
// gate, recording each write; reads and the rest come from net.Conn's zero
// value and are not used.
type gateConn struct {
	net.Conn
	gate    chan struct{} // closed: writes proceed
	entered chan struct{} // a write started (buffered)

	mu     sync.Mutex
	writes [][]byte
	fail   error
	closed chan struct{}
	once   sync.Once
}

func newGateConn() *gateConn {
	return &gateConn{gate: make(chan struct{}), entered: make(chan struct{}, 1000), closed: make(chan struct{})}
}

func (c *gateConn) Write(p []byte) (int, error) {
	c.entered <- struct{}{}
	select {
	case <-c.gate:
	case <-c.closed:
		return 0, net.ErrClosed
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fail != nil {
		return 0, c.fail
	}
	c.writes = append(c.writes, bytes.Clone(p))
	return len(p), nil
}

func (c *gateConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return nil
}

func (c *gateConn) written() ([]byte, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Join(c.writes, nil), len(c.writes)
}

// TestBatchGathersWrites: while one write is on the connection, the
// writes that follow are gathered and leave together, in order.
func TestBatchGathersWrites(t *testing.T) {
	c := newGateConn()
	var w batchWriter
	w.init(c)
	var want []byte
	frame := func(i int) []byte { return bytes.Repeat([]byte{byte(i)}, 9+i%40) }
	if _, err := w.Write(frame(0)); err != nil {
		t.Fatal(err)
	}
	want = append(want, frame(0)...)
	<-c.entered // the first write is on the connection, held at the gate
	for i := 1; i < 100; i++ {
		if _, err := w.Write(frame(i)); err != nil {
			t.Fatal(err)
		}
		want = append(want, frame(i)...)
	}
	close(c.gate)
	if err := w.wait(); err != nil {
		t.Fatal(err)
	}
	got, n := c.written()
	if !bytes.Equal(got, want) {
		t.Fatalf("the connection got %d bytes, not the %d written in order", len(got), len(want))
	}
	if n != 2 {
		t.Errorf("100 writes, the last 99 while the first was held, made %d writes to the connection, want 2", n)
	}
}

// TestBatchOrderUnderLoad: writes of random sizes from one goroutine, as
// x/net makes them, reach a real connection complete and in order.
func TestBatchOrderUnderLoad(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	got := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- nil
			return
		}
		b, _ := io.ReadAll(c)
		got <- b
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	var w batchWriter
	w.init(conn)
	var want []byte
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; len(want) < 3*maxPending; i++ {
		p := make([]byte, 1+rng.IntN(20_000))
		for j := range p {
			p[j] = byte(i + j)
		}
		if _, err := w.Write(p); err != nil {
			t.Fatal(err)
		}
		want = append(want, p...)
	}
	if err := w.close(); err != nil {
		t.Fatal(err)
	}
	if b := <-got; !bytes.Equal(b, want) {
		t.Fatalf("the peer read %d bytes, not the %d written in order", len(b), len(want))
	}
}

// TestBatchErrorShowsLater: a failed write on the connection is reported
// by the next Write.
func TestBatchErrorShowsLater(t *testing.T) {
	c := newGateConn()
	boom := errors.New("connection reset")
	c.fail = boom
	close(c.gate)
	var w batchWriter
	w.init(c)
	if _, err := w.Write([]byte("frame")); err != nil {
		t.Fatalf("the first write returns before reaching the connection: %v", err)
	}
	if err := w.wait(); !errors.Is(err, boom) {
		t.Fatalf("wait = %v, want %v", err, boom)
	}
	if _, err := w.Write([]byte("next")); !errors.Is(err, boom) {
		t.Fatalf("the next write = %v, want %v", err, boom)
	}
}

// TestBatchCloseWritesPending: close sends what is pending (a GOAWAY)
// before closing.
func TestBatchCloseWritesPending(t *testing.T) {
	c := newGateConn()
	var w batchWriter
	w.init(c)
	if _, err := w.Write([]byte("goaway")); err != nil {
		t.Fatal(err)
	}
	<-c.entered
	closed := make(chan error, 1)
	go func() { closed <- w.close() }()
	close(c.gate)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if got, _ := c.written(); string(got) != "goaway" {
		t.Fatalf("written before close: %q", got)
	}
	if _, err := w.Write([]byte("late")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("a write after close = %v, want net.ErrClosed", err)
	}
}

// TestBatchCloseDoesNotHang: a peer that reads nothing cannot keep a
// closing connection open; the blocked write fails with the close.
func TestBatchCloseDoesNotHang(t *testing.T) {
	old := closeFlushWait
	closeFlushWait = 10 * time.Millisecond
	t.Cleanup(func() { closeFlushWait = old })
	c := newGateConn() // the gate never opens
	var w batchWriter
	w.init(c)
	if _, err := w.Write([]byte("stuck")); err != nil {
		t.Fatal(err)
	}
	<-c.entered
	closed := make(chan error, 1)
	go func() { closed <- w.close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("close still waits for a write the peer never takes")
	}
	if err := w.wait(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("the blocked write ended with %v, want net.ErrClosed", err)
	}
}

// TestBatchBackpressure: past maxPending, a write waits for the
// connection instead of buffering without bound, and nothing is lost.
func TestBatchBackpressure(t *testing.T) {
	c := newGateConn()
	var w batchWriter
	w.init(c)
	big := bytes.Repeat([]byte{'x'}, maxPending)
	if _, err := w.Write(big[:1]); err != nil {
		t.Fatal(err)
	}
	<-c.entered
	if _, err := w.Write(big); err != nil { // fills the pending bytes
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if _, err := w.Write([]byte("y")); err != nil {
			t.Error(err)
		}
	}()
	// A write that should wait cannot be seen waiting; one that returns
	// while the connection has taken nothing is seen (given the time to).
	select {
	case <-done:
		t.Fatal("a write past maxPending returned while the connection took nothing")
	case <-time.After(50 * time.Millisecond):
	}
	w.mu.Lock()
	pending := len(w.buf)
	w.mu.Unlock()
	if pending > maxPending {
		t.Fatalf("%d bytes pending, more than maxPending", pending)
	}
	close(c.gate)
	<-done
	if err := w.wait(); err != nil {
		t.Fatal(err)
	}
	got, _ := c.written()
	if len(got) != 1+maxPending+1 || got[len(got)-1] != 'y' {
		t.Fatalf("the connection got %d bytes ending %q", len(got), got[len(got)-1:])
	}
}
