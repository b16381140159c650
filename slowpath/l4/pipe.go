package l4

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// ErrIdleTimeout reports that Pipe closed a connection pair because no bytes
// moved either way for the idle time.
var ErrIdleTimeout = errors.New("idle timeout")

// PipeStats counts the bytes Pipe moved each way.
type PipeStats struct {
	// ClientToUpstream counts bytes written to the upstream, including the
	// peeked prefix of a ReplayConn client.
	ClientToUpstream int64
	// UpstreamToClient counts bytes written to the client.
	UpstreamToClient int64
}

// testHookCopy, when set by a test, sees the writer and reader of every
// io.Copy call Pipe makes, to prove that the bare *net.TCPConn values reach
// io.Copy.
var testHookCopy func(dst io.Writer, src io.Reader)

// Pipe copies both ways between client and upstream until both directions
// end, then closes both connections and returns the bytes moved each way and
// the first error, if any.
//
// A direction ends when its source reaches EOF; Pipe then half-closes the
// destination (CloseWrite, for *net.TCPConn, *tls.Conn, *ReplayConn, …) so
// that protocols which signal the end of a request by half-closing keep
// working while the other direction runs on. When the destination cannot
// half-close, Pipe ends both directions at once, without an error.
//
// Pipe also ends both directions, closing the connections, on the first
// read or write error (returned, wrapped), when ctx ends (returning
// context.Cause(ctx)), and when idle > 0 and no bytes moved either way for
// idle (returning ErrIdleTimeout). Idleness is observed at a granularity of
// idle/2, so an idle pair is closed between idle and 1.5×idle after its last
// byte; a single write blocked on a peer that does not read for that long
// counts as idle too. idle <= 0 disables the timeout.
//
// Zero-copy: on Linux, io.Copy from one *net.TCPConn into another uses
// splice(2) through a kernel pipe, so the bytes never enter user space
// (*net.TCPConn's ReadFrom calls net's spliceFrom). Pipe therefore copies
// between the bare connections: a *ReplayConn is unwrapped, its peeked bytes
// written first, and no counting or deadline wrapper is ever put around a
// connection. The idle timeout works with read deadlines instead, which end
// io.Copy between splice calls without losing data, and re-arms them; it
// never sets write deadlines, which could cut a splice off with bytes still
// in its pipe.
func Pipe(ctx context.Context, client, upstream net.Conn, idle time.Duration) (PipeStats, error) {
	// A floor on the deadline period keeps a tiny idle from spinning.
	return pipeConns(ctx, client, upstream, idle, max(idle/2, time.Millisecond))
}

// pipeConns is Pipe with the read deadline period (tick) chosen by the
// caller, which lets tests force many deadline expiries mid-transfer.
func pipeConns(ctx context.Context, client, upstream net.Conn, idle, tick time.Duration) (PipeStats, error) {
	p := &pipe{client: client, upstream: upstream, idle: idle, tick: tick, start: time.Now()}
	client, clientPrefix := unwrapReplay(client)
	upstream, upstreamPrefix := unwrapReplay(upstream)
	// Pipe owns the connections now; deadlines set earlier (e.g. for a
	// peek) would end the copy.
	_ = client.SetDeadline(time.Time{})
	_ = upstream.SetDeadline(time.Time{})

	stop := context.AfterFunc(ctx, func() { p.end(context.Cause(ctx)) })
	defer stop()

	var stats PipeStats
	var copies sync.WaitGroup
	copies.Go(func() {
		stats.ClientToUpstream = p.copy(upstream, client, clientPrefix, "client to upstream")
	})
	copies.Go(func() {
		stats.UpstreamToClient = p.copy(client, upstream, upstreamPrefix, "upstream to client")
	})

	done := make(chan struct{})
	var watchdog sync.WaitGroup
	if idle > 0 {
		watchdog.Go(func() { p.watch(done) })
	}
	copies.Wait()
	// Both directions are over: seal the result, so that a cancellation or
	// idle verdict arriving from now on changes nothing, and close.
	p.end(nil)
	close(done)
	watchdog.Wait()
	return stats, p.result()
}

// unwrapReplay returns the connection under a *ReplayConn together with the
// peeked bytes still to forward, so that io.Copy sees the bare connection.
func unwrapReplay(c net.Conn) (net.Conn, []byte) {
	rc, ok := c.(*ReplayConn)
	if !ok {
		return c, nil
	}
	prefix := rc.buf
	rc.buf = nil
	return rc.Conn, prefix
}

type pipe struct {
	client, upstream net.Conn // as passed in; closing them closes the bare ones
	idle, tick       time.Duration
	start            time.Time
	// last is when bytes last moved, as time since start (monotonic).
	last atomic.Int64

	mu    sync.Mutex
	ended bool
	err   error
}

// copy moves src to dst, prefix first, until src's EOF or the pipe ends,
// and returns the bytes written to dst.
func (p *pipe) copy(dst, src net.Conn, prefix []byte, dir string) int64 {
	var n int64
	if len(prefix) > 0 {
		m, err := dst.Write(prefix)
		n += int64(m)
		if err != nil {
			p.end(fmt.Errorf("copy %s: %w", dir, err))
			return n
		}
		p.touch()
	}
	for {
		if p.idle > 0 {
			if err := src.SetReadDeadline(time.Now().Add(p.tick)); err != nil {
				p.end(fmt.Errorf("copy %s: set read deadline: %w", dir, err))
				return n
			}
		}
		if h := testHookCopy; h != nil {
			h(dst, src)
		}
		m, err := io.Copy(dst, src)
		n += m
		if m > 0 {
			p.touch()
		}
		switch {
		case err == nil: // EOF
			p.closeWrite(dst)
			return n
		case p.idle > 0 && errors.Is(err, os.ErrDeadlineExceeded) && !p.isEnded():
			// Our own read deadline: re-arm it and go on; the watchdog
			// decides about idleness.
			continue
		default:
			p.end(fmt.Errorf("copy %s: %w", dir, err))
			return n
		}
	}
}

// closeWrite passes an EOF on to dst. Without half-close the peer can only
// learn of it by a full close, which ends the pipe.
func (p *pipe) closeWrite(dst net.Conn) {
	if cw, ok := dst.(closeWriter); ok {
		err := cw.CloseWrite()
		// Other errors (the peer already gone) surface in the other
		// direction's copy.
		if !errors.Is(err, errors.ErrUnsupported) {
			return
		}
	}
	p.end(nil)
}

// watch ends the pipe once no bytes moved for idle; it returns when done is
// closed.
func (p *pipe) watch(done <-chan struct{}) {
	t := time.NewTimer(p.idle)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			quiet := time.Since(p.start) - time.Duration(p.last.Load())
			if quiet >= p.idle {
				p.end(ErrIdleTimeout)
				return
			}
			t.Reset(p.idle - quiet)
		}
	}
}

func (p *pipe) touch() { p.last.Store(int64(time.Since(p.start))) }

// end records why the pipe ends (nil: a normal end) unless it has ended
// already, and closes both connections, which unblocks both copies.
func (p *pipe) end(err error) {
	p.mu.Lock()
	first := !p.ended
	if first {
		p.ended = true
		p.err = err
	}
	p.mu.Unlock()
	if first {
		_ = p.client.Close()
		_ = p.upstream.Close()
	}
}

func (p *pipe) isEnded() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ended
}

func (p *pipe) result() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}
