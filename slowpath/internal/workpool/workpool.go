// Package workpool runs functions on long-lived goroutines.
//
// HTTP/2 and HTTP/3 servers start a goroutine per stream. The proxy's
// handler runs deep (routing, filters, the upstream exchange), so each
// such goroutine grows its stack from the runtime's small start, copying
// it several times: perf/httpbench's h2c profile put runtime.copystack at
// 9 % of the agent's CPU. A worker of this pool keeps the stack it grew,
// so handing a stream's work to one costs two goroutine switches instead.
package workpool

import (
	"sync"
	"sync/atomic"
	"time"
)

// Pool is a set of worker goroutines; the zero value is not usable, call
// New.
type Pool struct {
	jobs    chan *job
	workers atomic.Int32
	idle    atomic.Int32
	max     int32
	keep    int32
	once    sync.Once
	every   time.Duration
}

type job struct {
	fn       func()
	done     chan struct{}
	panicked any
	async    bool // started by Go: nobody waits for done
}

var jobs = sync.Pool{New: func() any { return &job{done: make(chan struct{}, 1)} }}

// New returns a pool of at most max workers that keeps keep idle ones;
// every idle period, idle workers beyond keep exit.
func New(max, keep int, every time.Duration) *Pool {
	return &Pool{jobs: make(chan *job), max: int32(max), keep: int32(keep), every: every}
}

// Run calls fn on a worker and returns when it returns. A panic in fn is
// raised again in the caller (net/http's servers recover
// http.ErrAbortHandler there). When every worker is busy and the pool is
// full, fn runs on the caller's goroutine.
func (p *Pool) Run(fn func()) {
	j := jobs.Get().(*job)
	j.fn = fn
	select {
	case p.jobs <- j:
	default:
		if p.workers.Add(1) > p.max {
			p.workers.Add(-1)
			j.fn = nil
			jobs.Put(j)
			fn()
			return
		}
		p.once.Do(func() { go p.reap() })
		go p.work(j)
	}
	<-j.done
	v := j.panicked
	j.fn, j.panicked = nil, nil
	jobs.Put(j)
	if v != nil {
		panic(v)
	}
}

// Go calls fn on a worker and returns at once, for a caller that must
// never block (an HTTP/2 connection's frame reader starting a stream's
// handler). When every worker is busy and the pool is full, fn runs on a
// new goroutine of its own. A panic in fn is not recovered: fn must
// recover what it can handle, as a goroutine's function must.
func (p *Pool) Go(fn func()) {
	j := jobs.Get().(*job)
	j.fn, j.async = fn, true
	select {
	case p.jobs <- j:
		return
	default:
	}
	if p.workers.Add(1) > p.max {
		p.workers.Add(-1)
		j.fn, j.async = nil, false
		jobs.Put(j)
		go fn()
		return
	}
	p.once.Do(func() { go p.reap() })
	go p.work(j)
}

func (p *Pool) work(j *job) {
	defer p.workers.Add(-1)
	for {
		p.run(j)
		p.idle.Add(1)
		j = <-p.jobs
		p.idle.Add(-1)
		if j == nil {
			return
		}
	}
}

func (p *Pool) run(j *job) {
	if j.async {
		fn := j.fn
		j.fn, j.async = nil, false
		jobs.Put(j)
		fn()
		return
	}
	defer func() {
		j.panicked = recover()
		j.done <- struct{}{}
	}()
	j.fn()
}

// reap ends idle workers beyond keep, one period at a time, so that a
// burst of streams does not leave its goroutines behind.
func (p *Pool) reap() {
	t := time.NewTicker(p.every)
	defer t.Stop()
	for range t.C {
		for n := p.idle.Load() - p.keep; n > 0; n-- {
			select {
			case p.jobs <- nil:
			default:
				n = 0
			}
		}
	}
}
