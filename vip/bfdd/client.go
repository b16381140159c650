package bfdd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/vip/bfd"
	"github.com/novaedge/novaedge/vip/internal/eventq"
)

// Defaults of ClientOptions.
const (
	DefaultAckTimeout = 5 * time.Second
	DefaultRetry      = time.Second
)

// ClientOptions configure a Client.
type ClientOptions struct {
	// Socket is the daemon's Unix socket. Required.
	Socket string
	// Name identifies this agent in the daemon's log.
	Name string
	// Logger receives (re)attaches and losses of the daemon. Nil discards.
	Logger *slog.Logger
	// AckTimeout bounds the wait of AddSession and RemoveSession for the
	// daemon's answer. Zero means DefaultAckTimeout.
	AckTimeout time.Duration
	// Retry is the wait between attempts to reach the daemon. Zero means
	// DefaultRetry.
	Retry time.Duration
}

// Client drives the sessions of a novaedge-bfdd. It has the methods of a
// bfd.Speaker that the VIP manager uses, and keeps the wanted sessions
// itself: when the daemon is out of reach they wait, and every (re)attach
// hands the daemon the whole set again. Safe for concurrent use.
type Client struct {
	opts ClientOptions
	log  *slog.Logger
	conn *grpc.ClientConn
	rpc  pb.BFDDaemonClient

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	ready  chan struct{}
	once   sync.Once

	mu       sync.Mutex
	desired  map[bfd.SessionKey]bfd.SessionConfig
	gen      uint64
	stream   pb.BFDDaemon_AttachClient
	waiters  map[uint64]chan *pb.BFDApplied
	problem  string
	rejected map[bfd.SessionKey]string
	subs     eventq.Fanout[bfd.StateChange]
	closed   bool
}

// Dial returns a client of the daemon at opts.Socket. It attaches only
// after Ready: the daemon takes the first set it hears as the whole set, so
// an agent that attached before it had added all its sessions would take
// down the ones it was about to adopt. It does not wait for the daemon
// either: sessions added before it answers are handed over when it does.
func Dial(opts ClientOptions) (*Client, error) {
	if opts.Socket == "" {
		return nil, errors.New("bfd daemon socket: empty")
	}
	if opts.AckTimeout <= 0 {
		opts.AckTimeout = DefaultAckTimeout
	}
	if opts.Retry <= 0 {
		opts.Retry = DefaultRetry
	}
	conn, err := grpc.NewClient("unix://"+opts.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("bfd daemon socket %s: %w", opts.Socket, err)
	}
	c := &Client{
		opts:     opts,
		log:      opts.Logger,
		conn:     conn,
		rpc:      pb.NewBFDDaemonClient(conn),
		done:     make(chan struct{}),
		ready:    make(chan struct{}),
		desired:  map[bfd.SessionKey]bfd.SessionConfig{},
		waiters:  map[uint64]chan *pb.BFDApplied{},
		rejected: map[bfd.SessionKey]string{},
		problem:  "novaedge-bfdd at " + opts.Socket + ": not attached yet",
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	go c.run()
	return c, nil
}

// AddSession adds cfg to the wanted sessions. With the daemon attached it
// waits for the daemon's answer and returns its error for the session;
// otherwise the session waits for the daemon.
func (c *Client) AddSession(cfg bfd.SessionConfig) (bfd.SessionKey, error) {
	cfg, err := cfg.Normalized()
	if err != nil {
		return bfd.SessionKey{}, err
	}
	key := cfg.Key()
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return key, bfd.ErrClosed
	}
	if _, ok := c.desired[key]; ok {
		c.mu.Unlock()
		return key, fmt.Errorf("session %v: %w", key, bfd.ErrSessionExists)
	}
	c.desired[key] = cfg
	w := c.syncLocked()
	c.mu.Unlock()
	if msg := c.await(w, key); msg != "" {
		c.mu.Lock()
		if c.desired[key] == cfg {
			delete(c.desired, key)
			delete(c.rejected, key) // reported to the caller instead
		}
		c.mu.Unlock()
		return key, fmt.Errorf("novaedge-bfdd: %s", msg)
	}
	return key, nil
}

// RemoveSession removes the session with key from the wanted sessions and
// waits for the daemon to take it down.
func (c *Client) RemoveSession(key bfd.SessionKey) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return bfd.ErrClosed
	}
	if _, ok := c.desired[key]; !ok {
		c.mu.Unlock()
		return fmt.Errorf("session %v: %w", key, bfd.ErrNoSession)
	}
	delete(c.desired, key)
	delete(c.rejected, key)
	w := c.syncLocked()
	c.mu.Unlock()
	c.await(w, key)
	return nil
}

// Sessions returns the daemon's sessions; none while it is out of reach
// (Problem says so).
func (c *Client) Sessions() []bfd.SessionState {
	ctx, cancel := context.WithTimeout(c.ctx, c.opts.AckTimeout)
	defer cancel()
	resp, err := c.rpc.Sessions(ctx, &pb.BFDSessionsRequest{})
	if err != nil {
		return nil
	}
	var out []bfd.SessionState
	for _, p := range resp.GetSessions() {
		st, err := fromState(p)
		if err != nil {
			c.log.Warn("novaedge-bfdd reported a session this agent cannot read", "error", err)
			continue
		}
		out = append(out, st)
	}
	return out
}

// Problem says what keeps wanted sessions from running: the daemon out of
// reach, or sessions it rejected. Empty when there is nothing to say.
func (c *Client) Problem() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	parts := []string{}
	if c.problem != "" {
		parts = append(parts, c.problem)
	}
	for _, k := range slices.SortedFunc(maps.Keys(c.rejected), func(a, b bfd.SessionKey) int { return strings.Compare(a.String(), b.String()) }) {
		parts = append(parts, c.rejected[k])
	}
	return strings.Join(parts, "; ")
}

// Socket is the daemon's socket.
func (c *Client) Socket() string { return c.opts.Socket }

// Subscribe returns the sessions' state changes as the daemon reports them
// and a function that ends the subscription. After every (re)attach, each
// session is reported once with its current state (From == To, At when it
// entered it). The channel closes with the client.
func (c *Client) Subscribe() (<-chan bfd.StateChange, func()) { return c.subs.Subscribe() }

// Close detaches from the daemon without taking sessions down: those with
// the C bit stay Up for the next agent, the daemon takes the others down.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	if c.stream != nil {
		_ = c.stream.CloseSend()
	}
	c.mu.Unlock()
	c.cancel()
	<-c.done
	err := c.conn.Close()
	c.subs.Close()
	return err
}

// syncLocked sends the wanted set to the attached daemon and returns the
// channel its answer arrives on; nil when no daemon is attached.
func (c *Client) syncLocked() chan *pb.BFDApplied {
	if c.stream == nil {
		return nil
	}
	c.gen++
	req := &pb.BFDAttachRequest{Generation: c.gen, Client: c.opts.Name}
	for _, k := range slices.SortedFunc(maps.Keys(c.desired), func(a, b bfd.SessionKey) int { return strings.Compare(a.String(), b.String()) }) {
		req.Sessions = append(req.Sessions, toSpec(c.desired[k]))
	}
	w := make(chan *pb.BFDApplied, 1)
	c.waiters[c.gen] = w
	if err := c.stream.Send(req); err != nil {
		// The reader sees the stream fail and attaches again.
		delete(c.waiters, c.gen)
		return nil
	}
	return w
}

// await waits for an answer and returns the daemon's error for key, if
// any.
func (c *Client) await(w chan *pb.BFDApplied, key bfd.SessionKey) string {
	if w == nil {
		return ""
	}
	t := time.NewTimer(c.opts.AckTimeout)
	defer t.Stop()
	select {
	case a, ok := <-w:
		if !ok {
			return ""
		}
		for _, e := range a.GetErrors() {
			if cfg, err := fromSpec(e.GetSession()); err == nil && cfg.Key() == key {
				return e.GetError()
			}
		}
	case <-t.C:
		c.log.Warn("novaedge-bfdd did not answer in time; the session is handed over when it does", "session", key, "timeout", c.opts.AckTimeout)
	}
	return ""
}

// Ready says the wanted set is complete: the client attaches (and from
// then on hands over every change as it comes). Safe to call again.
func (c *Client) Ready() { c.once.Do(func() { close(c.ready) }) }

// run attaches to the daemon, again and again while the client lives.
func (c *Client) run() {
	defer close(c.done)
	select {
	case <-c.ready:
	case <-c.ctx.Done():
		return
	}
	for {
		err := c.attachOnce()
		if c.ctx.Err() != nil {
			return
		}
		if status.Code(err) == codes.Aborted {
			// A newer agent took over (an upgrade while this one drains):
			// attaching again would take the sessions back from it.
			c.mu.Lock()
			c.problem = "novaedge-bfdd at " + c.opts.Socket + ": a newer agent attached; this one no longer drives the sessions"
			c.mu.Unlock()
			c.log.Warn("a newer agent attached to novaedge-bfdd; leaving the sessions to it", "socket", c.opts.Socket)
			return
		}
		c.mu.Lock()
		msg := fmt.Sprintf("novaedge-bfdd at %s: %v", c.opts.Socket, err)
		if c.problem != msg {
			c.log.Warn("lost novaedge-bfdd; the sessions wait for it", "socket", c.opts.Socket, "error", err)
		}
		c.problem = msg
		c.mu.Unlock()
		select {
		case <-c.ctx.Done():
			return
		case <-time.After(c.opts.Retry):
		}
	}
}

func (c *Client) attachOnce() error {
	ctx, cancel := context.WithCancel(c.ctx)
	defer cancel()
	stream, err := c.rpc.Attach(ctx)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.stream = stream
	w := c.syncLocked()
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.stream = nil
		for g, w := range c.waiters {
			close(w)
			delete(c.waiters, g)
		}
		c.mu.Unlock()
	}()
	if w == nil {
		return errors.New("send the sessions: stream closed")
	}
	attached := false
	for {
		resp, err := stream.Recv()
		if err != nil {
			return err
		}
		switch k := resp.GetKind().(type) {
		case *pb.BFDAttachResponse_Applied:
			c.applied(k.Applied, !attached)
			attached = true
		case *pb.BFDAttachResponse_Change:
			ev, err := fromChange(k.Change)
			if err != nil {
				c.log.Warn("novaedge-bfdd sent a state change this agent cannot read", "error", err)
				continue
			}
			c.subs.Publish(ev)
		}
	}
}

// applied records the daemon's answer to one set and wakes its waiter.
func (c *Client) applied(a *pb.BFDApplied, first bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if first {
		c.log.Info("attached to novaedge-bfdd", "socket", c.opts.Socket, "sessions", len(c.desired))
	}
	c.problem = ""
	if w, ok := c.waiters[a.GetGeneration()]; ok {
		w <- a
		delete(c.waiters, a.GetGeneration())
	}
	if a.GetGeneration() != c.gen {
		return // an older set: a newer answer follows
	}
	clear(c.rejected)
	for _, e := range a.GetErrors() {
		cfg, err := fromSpec(e.GetSession())
		if err != nil {
			continue
		}
		c.rejected[cfg.Key()] = e.GetError()
	}
}
