package sockmap

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	sockmapbpf "github.com/novaedge/novaedge/gen/bpf/sockmap"
	"github.com/novaedge/novaedge/slowpath/l4"
	"github.com/novaedge/novaedge/slowpath/l4/sockmap/internal/sockopt"
)

// ErrClosed reports that the Splicer was closed, before or during a splice.
var ErrClosed = errors.New("splicer closed")

// ErrReset reports that a connection of a spliced pair was reset (or closed
// for sending by its peer) while bytes still had to reach it.
var ErrReset = errors.New("connection reset")

// testHookSpliced, when set by a test, is called with a once the pair is in
// the maps, so that tests know the kernel path is in use before sending.
var testHookSpliced func(a *net.TCPConn)

// DefaultMaxPairs is the number of pairs a Splicer holds at once when
// Options.MaxPairs is zero (SOCKMAP_MAX_PAIRS in bpf/sockmap_consts.h).
const DefaultMaxPairs = 65536

// Options configure a Splicer.
type Options struct {
	// MaxPairs bounds the pairs spliced at once; Splice fails for more.
	// Zero means DefaultMaxPairs.
	MaxPairs int
	// Logger receives debug messages about splices; nil discards them.
	Logger *slog.Logger
}

// Stats counts the bytes a splice moved each way, pending bytes included.
type Stats struct {
	// Copied is true when the pair was not spliced in the kernel but copied
	// by l4.Pipe, because a socket had already received or sent a FIN when
	// Splice started (a socket map accepts only established sockets).
	Copied bool
	// AToB counts bytes written to b: pendingA and what the kernel
	// redirected from a.
	AToB int64
	// BToA counts bytes written to a.
	BToA int64
}

// Splicer owns the loaded verdict program and its maps. It is safe for
// concurrent use; each Splice call handles one pair.
type Splicer struct {
	objs sockmapbpf.SockmapObjects
	log  *slog.Logger

	stop    context.Context
	stopNow context.CancelCauseFunc

	mu     sync.Mutex
	closed bool
	active sync.WaitGroup
}

// New loads the verdict program and its maps into the kernel and attaches
// the program to sockmap_spliced. The caller must Close the Splicer.
func New(opts Options) (*Splicer, error) {
	spec, err := sockmapbpf.LoadSockmap()
	if err != nil {
		return nil, fmt.Errorf("sockmap spec: %w", err)
	}
	if opts.MaxPairs < 0 {
		return nil, fmt.Errorf("max pairs %d: must not be negative", opts.MaxPairs)
	}
	if opts.MaxPairs > 0 {
		for _, m := range spec.Maps {
			m.MaxEntries = uint32(2 * opts.MaxPairs)
		}
	}
	s := &Splicer{log: opts.Logger}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if err := spec.LoadAndAssign(&s.objs, nil); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			// %+w prints the whole verifier log, as %+v does, and wraps.
			return nil, fmt.Errorf("load sockmap program: %+w", ve)
		}
		return nil, fmt.Errorf("load sockmap program: %w", err)
	}
	err = link.RawAttachProgram(link.RawAttachProgramOptions{
		Target:  s.objs.SockmapSpliced.FD(),
		Program: s.objs.SockmapVerdict,
		Attach:  ebpf.AttachSkSKBVerdict,
	})
	if err != nil {
		_ = s.objs.Close()
		return nil, fmt.Errorf("attach sk_skb verdict to sockhash: %w", err)
	}
	s.stop, s.stopNow = context.WithCancelCause(context.Background())
	return s, nil
}

// Supported reports why this kernel cannot splice with sockmap, or nil when
// it can: it loads and attaches the program (the verifier must accept it)
// and releases it again.
func Supported() error {
	s, err := New(Options{MaxPairs: 1})
	if err != nil {
		return err
	}
	return s.Close()
}

// Close ends every splice in progress (each returns ErrClosed and closes its
// connections), waits for them, then detaches the program and frees the maps.
// Splice calls after Close fail with ErrClosed.
func (s *Splicer) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.stopNow(ErrClosed)
	s.active.Wait()
	err := link.RawDetachProgram(link.RawDetachProgramOptions{
		Target:  s.objs.SockmapSpliced.FD(),
		Program: s.objs.SockmapVerdict,
		Attach:  ebpf.AttachSkSKBVerdict,
	})
	if err != nil {
		err = fmt.Errorf("detach sk_skb verdict: %w", err)
	}
	return errors.Join(err, s.objs.Close())
}

// enter registers a splice unless the Splicer is closed.
func (s *Splicer) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.active.Add(1)
	return true
}

// Splice writes pendingA (bytes already read from a) to b and pendingB to a,
// then splices a and b in the kernel until both directions end, and closes
// both connections. It returns the bytes moved each way and the first error.
//
// Splice owns a and b from the call on, like l4.Pipe: nobody else may read,
// write or set deadlines on them, and they are closed when Splice returns,
// also on error. Deadlines set earlier are cleared.
//
// A direction ends when its source sends a FIN: once every byte before it
// has been handed to the destination's send path, the destination is
// half-closed (CloseWrite), so half-closing protocols keep working while the
// other direction runs on. Both directions end, without an error, once each
// has. Splice ends both at once, closing the connections, when a connection
// is reset while bytes still have to reach it (ErrReset, wrapped), when ctx
// ends (context.Cause(ctx)), or when the Splicer is closed (ErrClosed). It
// has no idle timeout: the caller bounds a splice with ctx.
func (s *Splicer) Splice(ctx context.Context, a, b *net.TCPConn, pendingA, pendingB []byte) (Stats, error) {
	if !s.enter() {
		_ = a.Close()
		_ = b.Close()
		return Stats{}, ErrClosed
	}
	defer s.active.Done()
	p := &pair{s: s, conns: [2]*net.TCPConn{a, b}, done: make(chan struct{})}
	p.pending[0], p.pending[1] = pendingA, pendingB

	stopCtx := context.AfterFunc(ctx, func() { p.end(context.Cause(ctx)) })
	defer stopCtx()
	stopClose := context.AfterFunc(s.stop, func() { p.end(ErrClosed) })
	defer stopClose()

	var wg sync.WaitGroup
	if err := p.start(); errors.Is(err, errNotEstablished) {
		return p.copy(ctx)
	} else if err != nil {
		p.end(err)
	} else {
		for i := range 2 {
			wg.Go(func() { p.watch(i) })
		}
	}
	<-p.done
	// Wake the watchers out of the poller before the connections go away,
	// so that their error is not mistaken for a reset.
	for _, c := range p.conns {
		_ = c.SetReadDeadline(time.Unix(1, 0))
	}
	wg.Wait()
	stats := p.cleanup()
	for _, c := range p.conns {
		_ = c.Close()
	}
	return stats, p.err
}

// pair is one splice; index 0 is a, 1 is b, and direction i runs from
// conns[i] to conns[1-i].
type pair struct {
	s       *Splicer
	conns   [2]*net.TCPConn
	socks   [2]sockopt.Socket
	cookies [2]uint64
	pending [2][]byte
	// base[i] is what conns[i] had written before the splice.
	base [2]uint64
	// inserted records map entries to remove: peers and spliced per socket,
	// stats per socket.
	inPeers, inSpliced, inStats [2]bool
	// dirDone[i] is set once direction i has ended and its destination is
	// half-closed.
	dirDone [2]atomic.Bool

	mu    sync.Mutex
	ended bool
	err   error
	done  chan struct{}
}

// end records why the pair ends (nil: both directions finished) unless it
// has ended already.
func (p *pair) end(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended {
		return
	}
	p.ended, p.err = true, err
	close(p.done)
}

func (p *pair) isEnded() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// errNotEstablished reports that a socket could not enter a socket map
// because it had left the ESTABLISHED state.
var errNotEstablished = errors.New("socket not established")

// copy moves the pair with l4.Pipe after start found a socket that cannot be
// spliced. Bytes the kernel already redirected reach their destination
// first: Pipe's writes must not overtake them.
func (p *pair) copy(ctx context.Context) (Stats, error) {
	m := &p.s.objs
	for i := range 2 {
		if p.inSpliced[i] {
			_ = m.SockmapSpliced.Delete(p.cookies[i])
			p.inSpliced[i] = false
		}
	}
	var err error
	for i := range 2 {
		if p.inStats[i] && err == nil {
			err = p.waitSent(i)
		}
	}
	stats := p.cleanup()
	stats.Copied = true
	if err != nil {
		_ = p.conns[0].Close()
		_ = p.conns[1].Close()
		return stats, err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(p.s.stop, func() { cancel(ErrClosed) })
	defer stop()
	ps, err := l4.Pipe(ctx, p.conns[0], p.conns[1], 0)
	stats.AToB += ps.ClientToUpstream
	stats.BToA += ps.UpstreamToClient
	return stats, err
}

// start writes the pending bytes and inserts the pair into the maps.
func (p *pair) start() error {
	for i, c := range p.conns {
		// Splice owns the connections; an old deadline would end it.
		_ = c.SetDeadline(time.Time{})
		sock, err := sockopt.New(c)
		if err != nil {
			return err
		}
		p.socks[i] = sock
		if p.cookies[i], err = sock.Cookie(); err != nil {
			return err
		}
		if p.base[i], _, err = sock.Written(); err != nil {
			return err
		}
	}
	// Both at once: a peer may not read before its own write completes.
	var wg sync.WaitGroup
	var werr [2]error
	for i := range 2 {
		if len(p.pending[i]) > 0 {
			wg.Go(func() {
				if _, err := p.conns[1-i].Write(p.pending[i]); err != nil {
					werr[i] = fmt.Errorf("write %d pending bytes: %w", len(p.pending[i]), err)
				}
			})
		}
	}
	wg.Wait()
	if err := errors.Join(werr[0], werr[1]); err != nil {
		return err
	}

	m := &p.s.objs
	for i := range 2 {
		if err := m.SockmapStats.Update(p.cookies[i], sockmapbpf.SockmapDirStats{}, ebpf.UpdateNoExist); err != nil {
			return fmt.Errorf("add stats entry: %w", err)
		}
		p.inStats[i] = true
	}
	// Each socket becomes a redirect target before either is spliced, so
	// that no byte is ever judged while its peer is missing.
	for i := range 2 {
		err := p.socks[1-i].Control(func(fd uintptr) error {
			return m.SockmapPeers.Update(p.cookies[i], uint64(fd), ebpf.UpdateNoExist)
		})
		if err != nil {
			return p.insertError("sockmap_peers", err)
		}
		p.inPeers[i] = true
	}
	for i := range 2 {
		err := p.socks[i].Control(func(fd uintptr) error {
			return m.SockmapSpliced.Update(p.cookies[i], uint64(fd), ebpf.UpdateNoExist)
		})
		if err != nil {
			return p.insertError("sockmap_spliced", err)
		}
		p.inSpliced[i] = true
		// Bytes that arrived since the caller's last read sit in the
		// receive queue, which the program only sees on the next data
		// ready event.
		if err := p.socks[i].Nudge(); err != nil {
			return err
		}
	}
	if h := testHookSpliced; h != nil {
		h(p.conns[0])
	}
	p.s.log.Debug("sockmap splice started", "a", p.conns[0].RemoteAddr().String(), "b", p.conns[1].RemoteAddr().String())
	return nil
}

// insertError explains a failed insertion into a socket map: a socket that
// is no longer established (a FIN already went one way) gives
// errNotEstablished, for which Splice falls back to copying.
func (p *pair) insertError(m string, err error) error {
	for _, sock := range p.socks {
		if ok, serr := sock.Established(); serr == nil && !ok {
			return fmt.Errorf("add socket to %s: %w: %w", m, errNotEstablished, err)
		}
	}
	return fmt.Errorf("add socket to %s: %w", m, err)
}

// watch follows conns[i]: it waits for its end of stream, drains direction
// i and half-closes the destination, then watches for a reset while
// direction 1-i still writes to conns[i].
func (p *pair) watch(i int) {
	sock := p.socks[i]
	// inboundDone: direction 1-i has ended and shut down sending on
	// conns[i], so a hangup or a broken pipe there is our own doing: the
	// kernel reports EPIPE when the FIN it redirected after the last byte
	// (an empty skb) reaches the shut socket.
	inboundDone := func() bool { return p.dirDone[1-i].Load() }
	var fail error
	_, err := sock.Wait(func(ev sockopt.Events) bool {
		switch {
		case ev.Err != nil && (!sockopt.IsBrokenPipe(ev.Err) || !inboundDone()):
			fail = ev.Err
		case ev.Hangup && !inboundDone():
			// Only a reset shuts sending down before we do.
			fail = ErrReset
		}
		return fail != nil || ev.EOF
	})
	switch {
	case err != nil:
		if !p.isEnded() {
			p.end(fmt.Errorf("wait for end of stream on %s: %w", p.name(i), err))
		}
		return
	case fail != nil:
		p.end(p.resetError(i, fail))
		return
	}
	if err := p.drain(i); err != nil {
		p.end(err)
		return
	}
	// Marked before the half-close: the broken pipe it may cause on
	// conns[1-i] must already count as expected.
	p.dirDone[i].Store(true)
	if err := p.conns[1-i].CloseWrite(); err != nil {
		p.end(fmt.Errorf("half-close %s: %w", p.name(1-i), err))
		return
	}
	if inboundDone() {
		p.end(nil)
		return
	}
	// Direction 1-i still writes to conns[i]; a reset of conns[i] must end
	// the splice, since nothing else would notice it.
	_, err = sock.Wait(func(ev sockopt.Events) bool {
		switch {
		case ev.Err != nil && (!sockopt.IsBrokenPipe(ev.Err) || !inboundDone()):
			fail = ev.Err
		case ev.Hangup && !inboundDone():
			fail = ErrReset
		}
		return fail != nil || inboundDone()
	})
	switch {
	case err != nil || p.isEnded():
	case fail != nil:
		p.end(p.resetError(i, fail))
	default:
		p.end(nil)
	}
}

// resetError describes the failure of conns[i], wrapping ErrReset.
func (p *pair) resetError(i int, err error) error {
	if errors.Is(err, ErrReset) {
		return fmt.Errorf("%s: %w", p.name(i), ErrReset)
	}
	return fmt.Errorf("%s: %w: %w", p.name(i), ErrReset, err)
}

// drain waits until every byte that arrived on conns[i] before its FIN has
// entered the send path of conns[1-i].
func (p *pair) drain(i int) error {
	src := p.socks[i]
	wait := newBackoff()
	// An empty receive queue means the verdict program has judged, and
	// counted, every byte up to the FIN.
	for {
		n, err := src.Unread()
		if err != nil {
			return fmt.Errorf("drain %s: %w", p.name(i), err)
		}
		if n == 0 {
			break
		}
		if !wait.sleep(p.done) {
			return nil
		}
	}
	return p.waitSent(i)
}

// waitSent waits until the send path of conns[1-i] has taken the pending
// bytes and every byte the program redirected from conns[i] so far.
func (p *pair) waitSent(i int) error {
	dst := p.socks[1-i]
	wait := newBackoff()
	for {
		// Read on each round: a verdict still running when the caller
		// stopped the redirects may add to it.
		var st sockmapbpf.SockmapDirStats
		if err := p.s.objs.SockmapStats.Lookup(p.cookies[i], &st); err != nil {
			return fmt.Errorf("drain %s: read stats: %w", p.name(i), err)
		}
		target := p.base[1-i] + uint64(len(p.pending[i])) + st.RedirectedBytes
		n, closed, err := dst.Written()
		if err != nil {
			return fmt.Errorf("drain %s: %w", p.name(i), err)
		}
		if n >= target {
			return nil
		}
		if closed {
			return fmt.Errorf("%s closed with %d bytes not sent: %w", p.name(1-i), target-n, ErrReset)
		}
		if !wait.sleep(p.done) {
			return nil
		}
	}
}

// cleanup removes the pair's map entries and returns its byte counts.
func (p *pair) cleanup() Stats {
	m := &p.s.objs
	var stats Stats
	for i := range 2 {
		if p.inSpliced[i] {
			_ = m.SockmapSpliced.Delete(p.cookies[i])
		}
	}
	for i := range 2 {
		if p.inPeers[i] {
			_ = m.SockmapPeers.Delete(p.cookies[i])
		}
	}
	for i := range 2 {
		n := int64(len(p.pending[i]))
		if p.inStats[i] {
			var st sockmapbpf.SockmapDirStats
			if err := m.SockmapStats.Lookup(p.cookies[i], &st); err == nil {
				n += int64(st.RedirectedBytes)
			}
			_ = m.SockmapStats.Delete(p.cookies[i])
		}
		if i == 0 {
			stats.AToB = n
		} else {
			stats.BToA = n
		}
	}
	return stats
}

func (p *pair) name(i int) string {
	if i == 0 {
		return "a"
	}
	return "b"
}

// backoff spaces out polls of the kernel's queues while a direction drains:
// short at first, since the work queue usually catches up within
// microseconds, and bounded so that a stuck peer costs little CPU.
type backoff struct{ d time.Duration }

func newBackoff() *backoff { return &backoff{d: 20 * time.Microsecond} }

// sleep waits for the next poll; it returns false if done closed first.
func (b *backoff) sleep(done <-chan struct{}) bool {
	t := time.NewTimer(b.d)
	defer t.Stop()
	b.d = min(2*b.d, 10*time.Millisecond)
	select {
	case <-done:
		return false
	case <-t.C:
		return true
	}
}
