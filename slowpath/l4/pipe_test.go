package l4

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

type pipeOut struct {
	stats PipeStats
	err   error
}

// startPipe connects a client to an upstream through Pipe over loopback
// TCP and returns the test's ends of both connections. tick > 0 runs the
// internal variant with that read deadline period.
func startPipe(t *testing.T, ctx context.Context, idle, tick time.Duration) (client, upstream *net.TCPConn, done <-chan pipeOut) {
	t.Helper()
	client, proxyClient := tcpPair(t)
	proxyUpstream, upstream := tcpPair(t)
	ch := make(chan pipeOut, 1)
	go func() {
		var o pipeOut
		if tick > 0 {
			o.stats, o.err = pipeConns(ctx, proxyClient, proxyUpstream, idle, tick)
		} else {
			o.stats, o.err = Pipe(ctx, proxyClient, proxyUpstream, idle)
		}
		ch <- o
	}()
	return client, upstream, ch
}

func wait(t *testing.T, done <-chan pipeOut) pipeOut {
	t.Helper()
	select {
	case o := <-done:
		return o
	case <-time.After(waitFor):
		t.Fatal("Pipe did not return")
		return pipeOut{}
	}
}

func TestPipeEchoLarge(t *testing.T) {
	const size = 8 << 20
	data := make([]byte, size)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	want := sha256.Sum256(data)
	for _, tc := range []struct {
		name       string
		idle, tick time.Duration
		// rollovers > 0 pauses the client halfway until Pipe has
		// restarted io.Copy after a read deadline that many times.
		rollovers int
	}{
		{name: "no idle timeout"},
		{name: "idle timeout armed", idle: time.Minute},
		// Read deadlines expire during the transfer; io.Copy is
		// restarted each time and no byte may be lost or repeated.
		{name: "read deadline every millisecond", idle: time.Hour, tick: time.Millisecond, rollovers: 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int64
			if tc.rollovers > 0 {
				testHookCopy = func(io.Writer, io.Reader) { calls.Add(1) }
				t.Cleanup(func() { testHookCopy = nil })
			}
			client, upstream, done := startPipe(t, context.Background(), tc.idle, tc.tick)
			go func() {
				// Plain reads and writes, so the echo does not depend
				// on the code under test.
				_, _ = io.Copy(struct{ io.Writer }{upstream}, struct{ io.Reader }{upstream})
				_ = upstream.CloseWrite()
			}()
			go func() {
				_, _ = client.Write(data[:size/2])
				if tc.rollovers > 0 {
					// Two initial calls, then one per expired deadline.
					for end := time.Now().Add(waitFor); calls.Load() < int64(2+tc.rollovers) && time.Now().Before(end); {
						time.Sleep(time.Millisecond)
					}
				}
				_, _ = client.Write(data[size/2:])
				_ = client.CloseWrite()
			}()
			h := sha256.New()
			n, err := io.Copy(h, client)
			if err != nil {
				t.Fatalf("read echo: %v", err)
			}
			if n != size || !bytes.Equal(h.Sum(nil), want[:]) {
				t.Errorf("echo: %d bytes, hash mismatch %v", n, !bytes.Equal(h.Sum(nil), want[:]))
			}
			o := wait(t, done)
			if o.err != nil {
				t.Errorf("Pipe error: %v", o.err)
			}
			if n := calls.Load(); tc.rollovers > 0 && n < int64(2+tc.rollovers) {
				t.Errorf("io.Copy ran %d times, want at least %d", n, 2+tc.rollovers)
			}
			if o.stats != (PipeStats{ClientToUpstream: size, UpstreamToClient: size}) {
				t.Errorf("stats %+v", o.stats)
			}
		})
	}
}

func TestPipeHalfClose(t *testing.T) {
	response := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	for _, tc := range []struct {
		name     string
		client   func(c *net.TCPConn) (string, error)
		upstream func(c *net.TCPConn) error
		want     PipeStats
	}{
		{
			name: "client finishes sending first",
			client: func(c *net.TCPConn) (string, error) {
				if _, err := io.WriteString(c, "request"); err != nil {
					return "", err
				}
				if err := c.CloseWrite(); err != nil {
					return "", err
				}
				b, err := io.ReadAll(c)
				return string(b), err
			},
			upstream: func(c *net.TCPConn) error {
				// Reading to EOF proves the client's half-close
				// arrived; the response still has to get through.
				req, err := io.ReadAll(c)
				if err != nil {
					return fmt.Errorf("upstream read: %w", err)
				}
				if string(req) != "request" {
					return fmt.Errorf("upstream read %q, want %q", req, "request")
				}
				_, err = c.Write(response)
				return errors.Join(err, c.Close())
			},
			want: PipeStats{ClientToUpstream: 7, UpstreamToClient: int64(len(response))},
		},
		{
			name: "upstream finishes sending first",
			client: func(c *net.TCPConn) (string, error) {
				banner, err := io.ReadAll(c)
				if err != nil {
					return "", err
				}
				// After EOF from the upstream, the client still talks.
				if _, err := io.WriteString(c, "late request"); err != nil {
					return "", err
				}
				return string(banner), c.CloseWrite()
			},
			upstream: func(c *net.TCPConn) error {
				if _, err := c.Write(response); err != nil {
					return err
				}
				if err := c.CloseWrite(); err != nil {
					return err
				}
				req, err := io.ReadAll(c)
				if err != nil {
					return fmt.Errorf("upstream read: %w", err)
				}
				if string(req) != "late request" {
					return fmt.Errorf("upstream read %q, want %q", req, "late request")
				}
				return c.Close()
			},
			want: PipeStats{ClientToUpstream: 12, UpstreamToClient: int64(len(response))},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, upstream, done := startPipe(t, context.Background(), time.Minute, 0)
			upErr := make(chan error, 1)
			go func() { upErr <- tc.upstream(upstream) }()
			got, err := tc.client(client)
			if err != nil {
				t.Fatalf("client: %v", err)
			}
			if got != string(response) {
				t.Errorf("client got %d bytes, want the %d byte response", len(got), len(response))
			}
			if err := <-upErr; err != nil {
				t.Error(err)
			}
			o := wait(t, done)
			if o.err != nil {
				t.Errorf("Pipe error: %v", o.err)
			}
			if o.stats != tc.want {
				t.Errorf("stats %+v, want %+v", o.stats, tc.want)
			}
		})
	}
}

func TestPipeIdleTimeout(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, client, upstream *net.TCPConn)
	}{
		{name: "both sides silent", setup: func(*testing.T, *net.TCPConn, *net.TCPConn) {}},
		{name: "client half-closed, upstream silent", setup: func(t *testing.T, client, upstream *net.TCPConn) {
			check(t, client.CloseWrite())
			if b, err := io.ReadAll(upstream); err != nil || len(b) != 0 {
				t.Errorf("upstream read %q, %v", b, err)
			}
		}},
		{name: "client stops reading", setup: func(t *testing.T, client, upstream *net.TCPConn) {
			// The upstream fills every buffer on the way until Pipe's
			// write to the client blocks; no byte moves any more.
			go func() {
				chunk := make([]byte, 64<<10)
				for {
					if _, err := upstream.Write(chunk); err != nil {
						return
					}
				}
			}()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, upstream, done := startPipe(t, context.Background(), 20*time.Millisecond, 0)
			tc.setup(t, client, upstream)
			o := wait(t, done)
			if !errors.Is(o.err, ErrIdleTimeout) {
				t.Fatalf("Pipe error %v, want ErrIdleTimeout", o.err)
			}
		})
	}
}

func TestPipeContextEnds(t *testing.T) {
	errStop := errors.New("listener stopping")
	ctx, cancel := context.WithCancelCause(context.Background())
	client, upstream, done := startPipe(t, ctx, 0, 0)
	go func() {
		b := make([]byte, 4)
		_, _ = io.ReadFull(upstream, b)
		_, _ = upstream.Write([]byte("pong"))
	}()
	send(t, client, "ping")
	b := make([]byte, 4)
	if _, err := io.ReadFull(client, b); err != nil || string(b) != "pong" {
		t.Fatalf("round trip: %q, %v", b, err)
	}
	cancel(errStop)
	o := wait(t, done)
	if !errors.Is(o.err, errStop) {
		t.Errorf("Pipe error %v, want the cancellation cause", o.err)
	}
	if o.stats != (PipeStats{ClientToUpstream: 4, UpstreamToClient: 4}) {
		t.Errorf("stats %+v", o.stats)
	}
	// Both connections were closed: each peer sees EOF.
	if b, err := io.ReadAll(client); err != nil || len(b) != 0 {
		t.Errorf("client read %q, %v", b, err)
	}
	if b, err := io.ReadAll(upstream); err != nil || len(b) != 0 {
		t.Errorf("upstream read %q, %v", b, err)
	}

	t.Run("already cancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, _, done := startPipe(t, ctx, 0, 0)
		if o := wait(t, done); !errors.Is(o.err, context.Canceled) {
			t.Errorf("Pipe error %v, want context.Canceled", o.err)
		}
	})
}

func TestPipeUpstreamReset(t *testing.T) {
	client, upstream, done := startPipe(t, context.Background(), time.Minute, 0)
	check(t, upstream.SetLinger(0)) // Close sends RST
	check(t, upstream.Close())
	o := wait(t, done)
	if !errors.Is(o.err, syscall.ECONNRESET) {
		t.Errorf("Pipe error %v, want ECONNRESET", o.err)
	}
	if b, err := io.ReadAll(client); err != nil || len(b) != 0 {
		t.Errorf("client read %q, %v", b, err)
	}
}

func TestPipeWithoutHalfClose(t *testing.T) {
	// net.Pipe connections cannot half-close: when the client finishes,
	// Pipe ends both directions.
	cli, proxyCli := net.Pipe()
	proxyUp, up := net.Pipe()
	defer func() { _ = cli.Close() }()
	defer func() { _ = up.Close() }()
	done := make(chan pipeOut, 1)
	go func() {
		var o pipeOut
		o.stats, o.err = Pipe(context.Background(), proxyCli, proxyUp, time.Minute)
		done <- o
	}()
	got := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(up)
		got <- string(b)
	}()
	send(t, cli, "hello")
	check(t, cli.Close())
	if s := <-got; s != "hello" {
		t.Errorf("upstream got %q", s)
	}
	o := wait(t, done)
	if o.err != nil {
		t.Errorf("Pipe error %v", o.err)
	}
	if o.stats.ClientToUpstream != 5 {
		t.Errorf("stats %+v", o.stats)
	}
}

// TestSNIPassthroughSplices routes TLS connections by SNI through Pipe to
// TLS upstreams and checks, through testHookCopy, that every io.Copy Pipe
// made was between two *net.TCPConn — the condition for net's splice(2)
// path (net/splice_linux.go: (*TCPConn).ReadFrom splices from a *TCPConn).
// That the kernel then really splices was checked by hand with
//
//	go test -c && strace -f -e trace=splice ./l4.test -test.run SNIPassthrough
//
// which shows splice(2) calls moving the TLS records.
func TestSNIPassthroughSplices(t *testing.T) {
	ca, cert := testPKI(t)
	var mu sync.Mutex
	var copies []string
	testHookCopy = func(dst io.Writer, src io.Reader) {
		mu.Lock()
		defer mu.Unlock()
		copies = append(copies, fmt.Sprintf("%T <- %T", dst, src))
	}
	t.Cleanup(func() { testHookCopy = nil })

	// Two TLS upstreams that say who they are.
	upstreams := map[string]string{}
	for _, name := range []string{"a.example", "b.example"} {
		ln := listen(t)
		upstreams[name] = ln.Addr().String()
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					defer func() { _ = c.Close() }()
					s := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{cert}})
					line, err := bufio.NewReader(s).ReadString('\n')
					if err != nil {
						return
					}
					_, _ = fmt.Fprintf(s, "%s saw %s over %s", name, strings.TrimSpace(line), s.ConnectionState().ServerName)
					_ = s.Close()
				}()
			}
		}()
	}

	// The proxy: peek, route by SNI, pipe.
	front := listen(t)
	proxied := make(chan pipeOut, 2)
	go func() {
		for {
			c, err := front.Accept()
			if err != nil {
				return
			}
			go func() {
				hello, rc, err := PeekClientHello(c, time.Now().Add(waitFor))
				if err != nil {
					_ = rc.Close()
					proxied <- pipeOut{err: err}
					return
				}
				up, err := net.Dial("tcp", upstreams[hello.ServerName])
				if err != nil {
					_ = rc.Close()
					proxied <- pipeOut{err: err}
					return
				}
				var o pipeOut
				o.stats, o.err = Pipe(context.Background(), rc, up, time.Minute)
				proxied <- o
			}()
		}
	}()

	for _, name := range []string{"b.example", "a.example"} {
		c, err := tls.Dial("tcp", front.Addr().String(), &tls.Config{ServerName: name, RootCAs: ca.Pool()})
		if err != nil {
			t.Fatalf("dial %s: %v", name, err)
		}
		send(t, c, "ping\n")
		reply, err := io.ReadAll(c)
		_ = c.Close()
		if err != nil {
			t.Fatalf("read from %s: %v", name, err)
		}
		if want := name + " saw ping over " + name; string(reply) != want {
			t.Errorf("reply %q, want %q", reply, want)
		}
		o := <-proxied
		// The client's close_notify can reach the proxy after the upstream
		// closed its side; forwarding it then meets a reset. That is the
		// peers' doing, not the pipe's: the reply above was complete.
		if o.err != nil && !errors.Is(o.err, syscall.ECONNRESET) {
			t.Errorf("proxy: %v", o.err)
		}
		if o.stats.ClientToUpstream == 0 || o.stats.UpstreamToClient == 0 {
			t.Errorf("stats %+v", o.stats)
		}
	}

	mu.Lock()
	defer mu.Unlock()
	if len(copies) < 4 {
		t.Fatalf("saw %d io.Copy calls, want at least two per connection: %v", len(copies), copies)
	}
	for _, c := range copies {
		if c != "*net.TCPConn <- *net.TCPConn" {
			t.Errorf("io.Copy between %s, want *net.TCPConn on both sides", c)
		}
	}
}
