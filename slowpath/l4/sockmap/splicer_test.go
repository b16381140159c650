package sockmap

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/novaedge/novaedge/slowpath/l4/sockmap/internal/sockopt"
)

func TestSupported(t *testing.T) {
	// Loading is the verifier test: Supported loads and attaches the
	// program.
	if err := Supported(); err != nil {
		t.Fatalf("Supported: %v", err)
	}
}

func TestNewRejectsNegativeMaxPairs(t *testing.T) {
	if _, err := New(Options{MaxPairs: -1}); err == nil {
		t.Fatal("New(MaxPairs: -1) succeeded")
	}
}

func random(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// echo copies upstream's input back to it until EOF, then half-closes it.
func echo(t *testing.T, upstream *net.TCPConn) {
	t.Helper()
	if _, err := io.Copy(upstream, upstream); err != nil {
		t.Errorf("echo: %v", err)
	}
	if err := upstream.CloseWrite(); err != nil {
		t.Errorf("echo close write: %v", err)
	}
}

func TestSpliceEcho(t *testing.T) {
	s := newSplicer(t)
	tests := []struct {
		name               string
		pendingA, pendingB int
		// early bytes are sent by the client before the splice starts and
		// never read by the proxy: the kernel must still deliver them.
		early   int
		payload int
	}{
		{name: "nothing", payload: 0},
		{name: "one byte", payload: 1},
		{name: "64 KiB", payload: 64 << 10},
		{name: "pending both ways", pendingA: 517, pendingB: 93, payload: 64 << 10},
		{name: "unread bytes only", early: 1000},
		{name: "pending and unread", pendingA: 300, pendingB: 7, early: 4096, payload: 1 << 20},
		{name: "32 MiB", payload: 32 << 20},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pendingA, pendingB := random(t, tc.pendingA), random(t, tc.pendingB)
			early, payload := random(t, tc.early), random(t, tc.payload)
			p := startSplice(t, context.Background(), s, pendingA, pendingB, func(client, _, _, _ *net.TCPConn) {
				if _, err := client.Write(early); err != nil {
					t.Fatal(err)
				}
			})
			var wg sync.WaitGroup
			wg.Go(func() { echo(t, p.upstream) })
			wg.Go(func() {
				if _, err := p.client.Write(payload); err != nil {
					t.Errorf("client write: %v", err)
				}
				if err := p.client.CloseWrite(); err != nil {
					t.Errorf("client close write: %v", err)
				}
			})
			got := readAll(t, p.client)
			wg.Wait()
			sent := bytes.Join([][]byte{pendingA, early, payload}, nil)
			want := append(append([]byte(nil), pendingB...), sent...)
			if len(got) != len(want) || sha256.Sum256(got) != sha256.Sum256(want) {
				t.Errorf("client received %d bytes (sha256 %x), want %d (sha256 %x)", len(got), sha256.Sum256(got), len(want), sha256.Sum256(want))
			}
			r := <-p.result
			if r.err != nil {
				t.Errorf("Splice: %v", r.err)
			}
			wantStats := Stats{AToB: int64(len(sent)), BToA: int64(len(want))}
			if r.stats != wantStats {
				t.Errorf("Splice stats %+v, want %+v", r.stats, wantStats)
			}
			assertEmpty(t, s)
		})
	}
}

func TestSplicePendingFirst(t *testing.T) {
	s := newSplicer(t)
	// The upstream's own bytes were sent before the splice and not read by
	// the proxy; pendingB was read from it earlier, so it must come first.
	p := startSplice(t, context.Background(), s, []byte("GET / HTTP/1.1\r\n"), []byte("HTTP/1.1 101 "), func(client, _, _, upstream *net.TCPConn) {
		if _, err := upstream.Write([]byte("Switching Protocols\r\n")); err != nil {
			t.Fatal(err)
		}
		if _, err := client.Write([]byte("Host: x\r\n")); err != nil {
			t.Fatal(err)
		}
	})
	if _, err := p.client.Write([]byte("\r\n")); err != nil {
		t.Fatal(err)
	}
	if err := p.client.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if got, want := string(readAll(t, p.upstream)), "GET / HTTP/1.1\r\nHost: x\r\n\r\n"; got != want {
		t.Errorf("upstream received %q, want %q", got, want)
	}
	if err := p.upstream.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if got, want := string(readAll(t, p.client)), "HTTP/1.1 101 Switching Protocols\r\n"; got != want {
		t.Errorf("client received %q, want %q", got, want)
	}
	if r := <-p.result; r.err != nil {
		t.Errorf("Splice: %v", r.err)
	}
	assertEmpty(t, s)
}

func TestSpliceHalfClose(t *testing.T) {
	s := newSplicer(t)
	for _, first := range []string{"client", "upstream"} {
		t.Run(first+" ends first", func(t *testing.T) {
			p := startSplice(t, context.Background(), s, nil, nil, nil)
			closer, other := p.client, p.upstream
			if first == "upstream" {
				closer, other = other, closer
			}
			if _, err := closer.Write([]byte("request")); err != nil {
				t.Fatal(err)
			}
			if err := closer.CloseWrite(); err != nil {
				t.Fatal(err)
			}
			// The other side sees the EOF, and only then answers: the
			// direction towards the half-closed side must still work.
			if got := string(readAll(t, other)); got != "request" {
				t.Errorf("%s received %q before EOF, want %q", first, got, "request")
			}
			if _, err := other.Write([]byte("response after EOF")); err != nil {
				t.Fatal(err)
			}
			if err := other.CloseWrite(); err != nil {
				t.Fatal(err)
			}
			if got := string(readAll(t, closer)); got != "response after EOF" {
				t.Errorf("received %q, want %q", got, "response after EOF")
			}
			r := <-p.result
			if r.err != nil {
				t.Errorf("Splice: %v", r.err)
			}
			want := Stats{AToB: 7, BToA: 18}
			if first == "upstream" {
				want = Stats{AToB: 18, BToA: 7}
			}
			if r.stats != want {
				t.Errorf("stats %+v, want %+v", r.stats, want)
			}
			assertEmpty(t, s)
		})
	}
}

func TestSpliceReset(t *testing.T) {
	s := newSplicer(t)
	for _, side := range []string{"client", "upstream"} {
		t.Run(side, func(t *testing.T) {
			p := startSplice(t, context.Background(), s, nil, nil, nil)
			victim, other := p.client, p.upstream
			if side == "upstream" {
				victim, other = other, victim
			}
			// Bytes flow first, so the splice is known to be running.
			if _, err := victim.Write([]byte("ping")); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 4)
			if _, err := io.ReadFull(other, buf); err != nil {
				t.Fatal(err)
			}
			if err := victim.SetLinger(0); err != nil {
				t.Fatal(err)
			}
			_ = victim.Close() // linger 0: RST
			r := <-p.result
			if !errors.Is(r.err, ErrReset) {
				t.Errorf("Splice returned %v, want ErrReset", r.err)
			}
			// The survivor's connection is closed by Splice.
			if _, err := io.ReadAll(other); err != nil && !isConnReset(err) {
				t.Errorf("survivor read: %v", err)
			}
			assertEmpty(t, s)
		})
	}
}

func isConnReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op)
}

func TestSpliceContextEnds(t *testing.T) {
	s := newSplicer(t)
	cause := errors.New("route removed")
	ctx, cancel := context.WithCancelCause(context.Background())
	p := startSplice(t, ctx, s, nil, nil, nil)
	if _, err := p.client.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(p.upstream, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	cancel(cause)
	if r := <-p.result; !errors.Is(r.err, cause) {
		t.Errorf("Splice returned %v, want %v", r.err, cause)
	}
	// Both connections are closed: the client and upstream see EOF.
	for name, c := range map[string]*net.TCPConn{"client": p.client, "upstream": p.upstream} {
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Errorf("%s: read succeeded after the splice ended", name)
		}
	}
	assertEmpty(t, s)
}

func TestSplicerClose(t *testing.T) {
	s, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := startSplice(t, context.Background(), s, nil, nil, nil)
	if _, err := p.client.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(p.upstream, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if r := <-p.result; !errors.Is(r.err, ErrClosed) {
		t.Errorf("Splice returned %v, want ErrClosed", r.err)
	}
	front := listen(t)
	a, b := connPair(t, front)
	if _, err := s.Splice(context.Background(), a, b, nil, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Splice after Close returned %v, want ErrClosed", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestSpliceManyPairs(t *testing.T) {
	s := newSplicer(t)
	const pairs, size = 64, 1 << 20
	var wg sync.WaitGroup
	for i := range pairs {
		p := startSplice(t, context.Background(), s, []byte(fmt.Sprintf("pair %d:", i)), nil, nil)
		payload := random(t, size)
		wg.Go(func() { echo(t, p.upstream) })
		wg.Go(func() {
			if _, err := p.client.Write(payload); err != nil {
				t.Errorf("pair %d: write: %v", i, err)
			}
			if err := p.client.CloseWrite(); err != nil {
				t.Errorf("pair %d: close write: %v", i, err)
			}
		})
		wg.Go(func() {
			got := readAll(t, p.client)
			want := append([]byte(fmt.Sprintf("pair %d:", i)), payload...)
			if sha256.Sum256(got) != sha256.Sum256(want) {
				t.Errorf("pair %d: received %d bytes, want %d, contents differ", i, len(got), len(want))
			}
			if r := <-p.result; r.err != nil {
				t.Errorf("pair %d: Splice: %v", i, r.err)
			}
		})
	}
	wg.Wait()
	assertEmpty(t, s)
}

func TestSpliceFallsBackToCopying(t *testing.T) {
	s := newSplicer(t)
	// The client's FIN arrives before Splice: a socket map refuses a socket
	// in CLOSE_WAIT, so the pair is copied, and nothing is lost.
	p, _ := startSpliceAny(t, context.Background(), s, []byte("peeked "), nil, func(client, a, _, _ *net.TCPConn) {
		if _, err := client.Write([]byte("request")); err != nil {
			t.Fatal(err)
		}
		if err := client.CloseWrite(); err != nil {
			t.Fatal(err)
		}
		// Splice must see the FIN: wait for it without reading.
		for {
			st, err := sockopt.New(a)
			if err != nil {
				t.Fatal(err)
			}
			if ok, err := st.Established(); err != nil || !ok {
				break
			}
			runtime.Gosched()
		}
	})
	if got := string(readAll(t, p.upstream)); got != "peeked request" {
		t.Errorf("upstream received %q, want %q", got, "peeked request")
	}
	if _, err := p.upstream.Write([]byte("response")); err != nil {
		t.Fatal(err)
	}
	if err := p.upstream.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if got := string(readAll(t, p.client)); got != "response" {
		t.Errorf("client received %q, want %q", got, "response")
	}
	r := <-p.result
	if r.err != nil {
		t.Errorf("Splice: %v", r.err)
	}
	if want := (Stats{Copied: true, AToB: 14, BToA: 8}); r.stats != want {
		t.Errorf("stats %+v, want %+v", r.stats, want)
	}
	assertEmpty(t, s)
}

func TestSpliceDeliversUnreadBytesWithoutMoreTraffic(t *testing.T) {
	s := newSplicer(t)
	// Both peers sent bytes the proxy never read, then wait for an answer:
	// no further segment comes to make the kernel look at the queues.
	p := startSplice(t, context.Background(), s, nil, nil, func(client, a, b, upstream *net.TCPConn) {
		if _, err := client.Write([]byte("client hello")); err != nil {
			t.Fatal(err)
		}
		if _, err := upstream.Write([]byte("server banner")); err != nil {
			t.Fatal(err)
		}
		// Make sure the bytes are queued on the proxy's sockets.
		for _, c := range []*net.TCPConn{a, b} {
			st, err := sockopt.New(c)
			if err != nil {
				t.Fatal(err)
			}
			for {
				n, err := st.Unread()
				if err != nil {
					t.Fatal(err)
				}
				if n > 0 {
					break
				}
				runtime.Gosched()
			}
		}
	})
	for _, tc := range []struct {
		name string
		c    *net.TCPConn
		want string
	}{
		{"upstream", p.upstream, "client hello"},
		{"client", p.client, "server banner"},
	} {
		// A hang guard, not a performance bound: without the nudge the
		// bytes never come.
		if err := tc.c.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(tc.want))
		if _, err := io.ReadFull(tc.c, got); err != nil || string(got) != tc.want {
			t.Errorf("%s read %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}
	_ = p.client.CloseWrite()
	_ = p.upstream.CloseWrite()
	if r := <-p.result; r.err != nil {
		t.Errorf("Splice: %v", r.err)
	}
	assertEmpty(t, s)
}
