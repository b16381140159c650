package upstream

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/novaedge/novaedge/slowpath/internal/mono"
)

// hostPool is the connections to one endpoint address.
type hostPool struct {
	t    *Transport
	addr string

	mu sync.Mutex
	// idle are connections waiting for a request, most recently used
	// last: requests take the warmest, the idle timer closes from the
	// front.
	idle []*conn
	// open counts connections open or being dialed, for MaxConnsPerHost.
	open int
	// waiters wait for a connection (MaxConnsPerHost reached), first come
	// first served.
	waiters []chan *conn
	// timer closes idle connections after IdleConnTimeout and removes the
	// pool from its Transport once it has no connection; nil when not
	// armed.
	timer *time.Timer
	// gone: removed from the Transport; a request that found it there
	// must look the address up again.
	gone bool
}

// getConn returns a connection to addr: an idle one (checked for a close
// from the server first if check is set), a new one, or, at
// MaxConnsPerHost, the next one released.
func (t *Transport) getConn(ctx context.Context, addr string, check bool) (*conn, error) {
	for {
		v, ok := t.pools.Load(addr)
		if !ok {
			v, _ = t.pools.LoadOrStore(addr, &hostPool{t: t, addr: addr})
		}
		p := v.(*hostPool)
		c, err, gone := p.get(ctx, check)
		if !gone {
			return c, err
		}
	}
}

func (p *hostPool) get(ctx context.Context, check bool) (c *conn, err error, gone bool) {
	var now time.Duration
	p.mu.Lock()
	if p.gone {
		p.mu.Unlock()
		return nil, nil, true
	}
	for len(p.idle) > 0 {
		c = p.idle[len(p.idle)-1]
		p.idle[len(p.idle)-1] = nil
		p.idle = p.idle[:len(p.idle)-1]
		if d := p.t.IdleConnTimeout; d > 0 {
			if now == 0 {
				now = mono.Now()
			}
			if now-c.idleAt >= d {
				p.open--
				p.mu.Unlock()
				c.close()
				p.mu.Lock()
				continue
			}
		}
		p.mu.Unlock()
		if check && !c.alive() {
			p.discard(c)
			p.mu.Lock()
			continue
		}
		return c, nil, false
	}
	if limit := p.t.MaxConnsPerHost; limit <= 0 || p.open < limit {
		p.open++
		p.mu.Unlock()
		c, err = p.dial(ctx)
		return c, err, false
	}
	// At the limit: wait for a connection released (or a slot freed by
	// one closed, signalled with nil).
	ch := make(chan *conn, 1)
	p.waiters = append(p.waiters, ch)
	p.mu.Unlock()
	select {
	case c = <-ch:
	case <-ctx.Done():
		p.mu.Lock()
		for i, w := range p.waiters {
			if w == ch {
				p.waiters = append(p.waiters[:i], p.waiters[i+1:]...)
				p.mu.Unlock()
				return nil, fmt.Errorf("wait for a connection to %s: %w", p.addr, ctxErr(ctx)), false
			}
		}
		p.mu.Unlock()
		// Handed a connection or a slot as the context ended: pass it on.
		if c = <-ch; c != nil {
			p.put(c)
		} else {
			p.release()
		}
		return nil, fmt.Errorf("wait for a connection to %s: %w", p.addr, ctxErr(ctx)), false
	}
	if c == nil {
		c, err = p.dial(ctx) // the slot of a closed connection is ours
		return c, err, false
	}
	return c, nil, false
}

// dial opens a connection in a slot already counted in open.
func (p *hostPool) dial(ctx context.Context) (*conn, error) {
	nc, err := p.t.dial(ctx, p.addr)
	if err != nil {
		p.release()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("dial %s: %w", p.addr, ctxErr(ctx))
		}
		return nil, err
	}
	return newConn(p, nc), nil
}

// put makes c, at the end of a successful exchange, available to the next
// request.
func (p *hostPool) put(c *conn) {
	c.reused = true
	p.mu.Lock()
	if len(p.waiters) > 0 {
		ch := p.waiters[0]
		p.waiters = p.waiters[1:]
		p.mu.Unlock()
		ch <- c
		return
	}
	if len(p.idle) >= p.t.maxIdle() || p.gone {
		p.open--
		p.mu.Unlock()
		c.close()
		return
	}
	d := p.t.IdleConnTimeout
	if d > 0 {
		c.idleAt = mono.Now()
	}
	p.idle = append(p.idle, c)
	if d > 0 && p.timer == nil {
		p.timer = time.AfterFunc(d, p.sweep)
	}
	p.mu.Unlock()
}

// discard closes c, which cannot serve another request, and frees its
// slot.
func (p *hostPool) discard(c *conn) {
	c.close()
	p.release()
}

// release frees a slot counted in open: the first waiter may dial.
func (p *hostPool) release() {
	p.mu.Lock()
	if len(p.waiters) > 0 {
		ch := p.waiters[0]
		p.waiters = p.waiters[1:]
		p.mu.Unlock()
		ch <- nil
		return
	}
	p.open--
	if p.open == 0 && p.timer == nil {
		// Nothing left: let the timer remove the pool unless it is used
		// again meanwhile.
		p.timer = time.AfterFunc(max(p.t.IdleConnTimeout, time.Minute), p.sweep)
	}
	p.mu.Unlock()
}

// sweep closes connections idle for IdleConnTimeout, and removes a pool
// without connections from its Transport so that endpoints gone from the
// configuration leave nothing behind.
func (p *hostPool) sweep() {
	var expired []*conn
	p.mu.Lock()
	p.timer = nil
	if d := p.t.IdleConnTimeout; d > 0 {
		now := mono.Now()
		n := 0
		for n < len(p.idle) && now-p.idle[n].idleAt >= d {
			n++
		}
		expired = append(expired, p.idle[:n]...)
		clear(p.idle[:n])
		p.idle = p.idle[n:]
		p.open -= n
		if len(p.idle) > 0 {
			p.timer = time.AfterFunc(d-(now-p.idle[0].idleAt), p.sweep)
		}
	}
	// With connections left, the next put (or release of the last one)
	// arms the timer again.
	if p.open == 0 && len(p.waiters) == 0 {
		p.gone = true
		p.t.pools.CompareAndDelete(p.addr, p)
	}
	p.mu.Unlock()
	for _, c := range expired {
		c.close()
	}
}

func (p *hostPool) closeIdle() {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.open -= len(idle)
	p.mu.Unlock()
	for _, c := range idle {
		c.close()
	}
}
