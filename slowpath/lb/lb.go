package lb

import (
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"time"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/slowpath/endpoint"
)

// Target is an endpoint with its configured weight. Weight must be at least
// 1: the snapshot marks weight-0 endpoints DRAINING, so the caller leaves
// them out, and New rejects a zero weight rather than guess whether it means
// "excluded" or "1".
type Target struct {
	EP     *endpoint.Endpoint
	Weight uint32
}

// Request carries what a pick may depend on. A nil *Request is the same as
// a zero Request.
type Request struct {
	// Now decides availability (ejection) and is the time EWMA reads at.
	// The zero value means time.Now().
	Now time.Time
	// Hash is the affinity key of RingHash and Maglev (see HashKey); it is
	// used only when HasHash is set. Without a key those policies pick like
	// Random. Any 64-bit value works: it is mixed with a bijective finaliser
	// before use, so keys need not be uniformly distributed.
	Hash    uint64
	HasHash bool
	// Tried reports endpoints this request has already tried (retries):
	// balancers avoid them while another eligible endpoint exists. Nil
	// means none. It is called during Pick, with RoundRobin's lock held, so
	// it must be fast and must not call back into the balancer.
	Tried func(*endpoint.Endpoint) bool
}

// Balancer picks an endpoint for each request.
type Balancer interface {
	// Pick returns an endpoint for req. It returns nil only when there are
	// no targets, or when no target is available and panic mode is off
	// (Options.PanicThresholdPercent 0). It does not allocate, and it
	// does not keep req; but called through this interface the compiler
	// cannot prove that, so a &Request{} literal at the call site escapes
	// to the heap: keep the Request in per-request state instead.
	Pick(req *Request) *endpoint.Endpoint
}

// Defaults and limits of Options.
const (
	// DefaultPanicThresholdPercent is the snapshot's (and Envoy's) default
	// panic threshold. Options' zero value disables panic mode; callers
	// that want the default pass this.
	DefaultPanicThresholdPercent = 50
	// DefaultRingMinSize and DefaultRingMaxSize bound the hash ring like
	// Envoy's ring_hash defaults.
	DefaultRingMinSize = 1024
	DefaultRingMaxSize = 8 << 20
	// DefaultMaglevTableSize is the Maglev paper's table size for small
	// backends (a prime).
	DefaultMaglevTableSize = 65537
	// MaxMaglevTableSize bounds the table (a table of this size costs
	// 64 MiB with more than 65536 targets, 32 MiB otherwise).
	MaxMaglevTableSize = 1 << 24
)

// Errors New wraps; callers test them with errors.Is.
var (
	// ErrUnknownPolicy: the LBPolicy value is not one this package knows.
	ErrUnknownPolicy = errors.New("unknown load-balancing policy")
	// ErrInvalidTarget: a target has a nil endpoint, weight 0 or an
	// address that another target already has.
	ErrInvalidTarget = errors.New("invalid target")
	// ErrInvalidOptions: an Options field is out of range.
	ErrInvalidOptions = errors.New("invalid options")
)

// Options tune New. The zero value is valid.
type Options struct {
	// PanicThresholdPercent: when the available share of endpoints (by
	// count) falls below this percentage, balancing ignores availability
	// and spreads over all endpoints (Envoy's panic mode). 0 disables panic
	// mode: unavailable endpoints are never picked and Pick returns nil
	// when none is available. This matches the snapshot, which already
	// turns an unset ProxyBackend field into 50 (see
	// DefaultPanicThresholdPercent) and passes an explicit 0 through. 100
	// enters panic mode as soon as any endpoint is unavailable. Values
	// above 100 are an error.
	PanicThresholdPercent uint32
	// Rand returns uniformly distributed 64-bit values. Nil means
	// math/rand/v2's global source. It must be safe for concurrent use if
	// Pick is called concurrently; tests inject a seeded source.
	Rand func() uint64
	// RingMinSize and RingMaxSize bound the number of RingHash ring
	// entries. Zero means DefaultRingMinSize and DefaultRingMaxSize.
	// Negative values, and a minimum above the maximum, are errors.
	RingMinSize, RingMaxSize int
	// MaglevTableSize is Maglev's lookup table size: a prime at least the
	// number of targets and at most MaxMaglevTableSize. Zero means
	// DefaultMaglevTableSize.
	MaglevTableSize uint64
}

// New builds the balancer of policy over targets. LB_POLICY_UNSPECIFIED is
// RoundRobin. An empty target list is valid: Pick then returns nil. Targets
// must have distinct addresses (consistent hashing keys on them) and weights
// of at least 1. RingHash and Maglev depend only on the set of {address,
// weight}, not on the order of targets.
func New(policy pb.LBPolicy, targets []Target, opts Options) (Balancer, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if err := validateTargets(targets); err != nil {
		return nil, err
	}
	switch policy {
	case pb.LBPolicy_LB_POLICY_UNSPECIFIED, pb.LBPolicy_LB_POLICY_ROUND_ROBIN:
		return newRoundRobin(newPool(targets, opts)), nil
	case pb.LBPolicy_LB_POLICY_RANDOM:
		return &random{pool: newPool(targets, opts)}, nil
	case pb.LBPolicy_LB_POLICY_P2C:
		return &p2c{pool: newPool(targets, opts)}, nil
	case pb.LBPolicy_LB_POLICY_EWMA:
		return &ewma{pool: newPool(targets, opts)}, nil
	case pb.LBPolicy_LB_POLICY_LEAST_CONN:
		return &leastConn{pool: newPool(targets, opts)}, nil
	case pb.LBPolicy_LB_POLICY_RING_HASH:
		return newRingHash(newPool(sortedByAddr(targets), opts), opts)
	case pb.LBPolicy_LB_POLICY_MAGLEV:
		return newMaglev(newPool(sortedByAddr(targets), opts), opts)
	default:
		return nil, fmt.Errorf("policy %d: %w", int32(policy), ErrUnknownPolicy)
	}
}

func (o *Options) validate() error {
	if o.PanicThresholdPercent > 100 {
		return fmt.Errorf("panic threshold %d%% above 100%%: %w", o.PanicThresholdPercent, ErrInvalidOptions)
	}
	if o.RingMinSize < 0 || o.RingMaxSize < 0 {
		return fmt.Errorf("negative ring size: %w", ErrInvalidOptions)
	}
	lo, hi := ringBounds(*o)
	if lo > hi {
		return fmt.Errorf("ring min size %d above max size %d: %w", lo, hi, ErrInvalidOptions)
	}
	if m := o.MaglevTableSize; m != 0 {
		if m > MaxMaglevTableSize {
			return fmt.Errorf("maglev table size %d above %d: %w", m, MaxMaglevTableSize, ErrInvalidOptions)
		}
		if !isPrime(m) {
			return fmt.Errorf("maglev table size %d is not prime: %w", m, ErrInvalidOptions)
		}
	}
	return nil
}

func validateTargets(targets []Target) error {
	seen := make(map[string]int, len(targets))
	for i, t := range targets {
		if t.EP == nil {
			return fmt.Errorf("target %d: nil endpoint: %w", i, ErrInvalidTarget)
		}
		if t.Weight == 0 {
			return fmt.Errorf("target %d (%s): weight 0: %w", i, t.EP.Addr, ErrInvalidTarget)
		}
		if j, dup := seen[t.EP.Addr]; dup {
			return fmt.Errorf("target %d (%s): same address as target %d: %w", i, t.EP.Addr, j, ErrInvalidTarget)
		}
		seen[t.EP.Addr] = i
	}
	return nil
}

// isPrime reports whether n is prime by trial division, which is quick for
// n up to MaxMaglevTableSize.
func isPrime(n uint64) bool {
	if n < 2 {
		return false
	}
	for d := uint64(2); d*d <= n; d++ {
		if n%d == 0 {
			return false
		}
	}
	return true
}

// pool is what every policy shares: the targets, their weights and the
// availability rules.
type pool struct {
	eps     []*endpoint.Endpoint
	weights []uint32
	cum     []uint64 // cum[i] is the sum of weights[0..i]
	total   uint64
	uniform bool // all weights equal: a weighted draw is a plain index
	thr     uint32
	rand    func() uint64
}

func newPool(targets []Target, opts Options) pool {
	p := pool{
		eps:     make([]*endpoint.Endpoint, len(targets)),
		weights: make([]uint32, len(targets)),
		cum:     make([]uint64, len(targets)),
		uniform: true,
		thr:     opts.PanicThresholdPercent,
		rand:    opts.Rand,
	}
	if p.rand == nil {
		p.rand = rand.Uint64
	}
	for i, t := range targets {
		p.eps[i], p.weights[i] = t.EP, t.Weight
		p.total += uint64(t.Weight)
		p.cum[i] = p.total
		if t.Weight != targets[0].Weight {
			p.uniform = false
		}
	}
	return p
}

// ctx is a Request resolved for one pick.
type ctx struct {
	now   time.Time
	tried func(*endpoint.Endpoint) bool
}

func newCtx(req *Request) ctx {
	var c ctx
	if req != nil {
		c.now, c.tried = req.Now, req.Tried
	}
	if c.now.IsZero() {
		c.now = time.Now()
	}
	return c
}

func (c *ctx) isTried(ep *endpoint.Endpoint) bool { return c.tried != nil && c.tried(ep) }

// fine reports whether ep may be returned whatever the rest of the pool
// looks like: it is available and untried. Policies try their natural
// choice first and look at the whole pool (view) only when it is not fine,
// which keeps the common case O(1) for every policy but RoundRobin and
// LeastConn.
func (c *ctx) fine(ep *endpoint.Endpoint) bool { return ep.Available(c.now) && !c.isTried(ep) }

// intn returns a uniform value in [0, n) (n > 0) by multiply-high, which
// avoids a division; its bias is at most n/2^64.
func (p *pool) intn(n uint64) uint64 {
	hi, _ := bits.Mul64(p.rand(), n)
	return hi
}

// search returns the index of the first cumulative weight above r.
func (p *pool) search(r uint64) int {
	lo, hi := 0, len(p.cum)-1
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if p.cum[m] > r {
			hi = m
		} else {
			lo = m + 1
		}
	}
	return lo
}

// weighted draws an index with probability proportional to its weight.
func (p *pool) weighted() int {
	if p.uniform {
		return int(p.intn(uint64(len(p.eps))))
	}
	return p.search(p.intn(p.total))
}

// weightedExcept draws an index other than x by weight (len(eps) >= 2).
func (p *pool) weightedExcept(x int) int {
	if p.uniform {
		i := int(p.intn(uint64(len(p.eps) - 1)))
		if i >= x {
			i++
		}
		return i
	}
	wx := uint64(p.weights[x])
	r := p.intn(p.total - wx)
	if r >= p.cum[x]-wx {
		r += wx // skip over x's range
	}
	return p.search(r)
}

// tally counts the pool's state for view.
type tally struct {
	avail, untried, availUntried int
}

func (t *tally) add(avail, tried bool) {
	if avail {
		t.avail++
	}
	if !tried {
		t.untried++
		if avail {
			t.availUntried++
		}
	}
}

// view is the pool's state for one pick: whether panic mode is on, whether
// tried endpoints must be avoided (strict) and whether anything is
// eligible at all.
type view struct {
	panic, strict, any bool
}

func (p *pool) viewOf(t tally) view {
	n := len(p.eps)
	v := view{panic: p.thr > 0 && uint64(t.avail)*100 < uint64(p.thr)*uint64(n)}
	if v.panic {
		v.strict, v.any = t.untried > 0, n > 0
	} else {
		v.strict, v.any = t.availUntried > 0, t.avail > 0
	}
	return v
}

// view scans the pool once.
func (p *pool) view(c *ctx) view {
	var t tally
	for _, ep := range p.eps {
		t.add(ep.Available(c.now), c.isTried(ep))
	}
	return p.viewOf(t)
}

// accepts reports whether ep may be picked under v.
func (v *view) accepts(c *ctx, ep *endpoint.Endpoint) bool {
	return v.acceptsState(ep.Available(c.now), c.isTried(ep))
}

func (v *view) acceptsState(avail, tried bool) bool {
	return (v.panic || avail) && (!v.strict || !tried)
}

// scanWeighted draws an index by weight among those v accepts, other than
// except (-1: none); -1 when there is none. It is exact and O(n), for the
// degraded case only.
func (p *pool) scanWeighted(c *ctx, v *view, except int) int {
	var sum uint64
	last := -1
	for i, ep := range p.eps {
		if i != except && v.accepts(c, ep) {
			sum += uint64(p.weights[i])
			last = i
		}
	}
	if sum == 0 {
		return -1
	}
	r := p.intn(sum)
	for i, ep := range p.eps {
		if i == except || !v.accepts(c, ep) {
			continue
		}
		w := uint64(p.weights[i])
		if r < w {
			return i
		}
		r -= w
	}
	// Health changed between the two passes; the first pass's last
	// candidate is as good an answer.
	return last
}

// pickRandom is the Random policy, also used by the hash policies for
// requests without a key.
func (p *pool) pickRandom(c *ctx) *endpoint.Endpoint {
	if len(p.eps) == 0 {
		return nil
	}
	// Accepting a weighted draw when it is fine, and redrawing among the
	// accepted ones otherwise, gives exactly the weighted distribution over
	// the accepted set: in panic mode an unavailable draw is accepted.
	i := p.weighted()
	if c.fine(p.eps[i]) {
		return p.eps[i]
	}
	v := p.view(c)
	if !v.any {
		return nil
	}
	if v.accepts(c, p.eps[i]) {
		return p.eps[i]
	}
	if i = p.scanWeighted(c, &v, -1); i < 0 {
		return nil
	}
	return p.eps[i]
}

// pickTwo draws two distinct indices by weight for P2C and EWMA, both
// acceptable for the pick; b is -1 when only one endpoint is acceptable
// and a is -1 when none is.
func (p *pool) pickTwo(c *ctx) (a, b int) {
	n := len(p.eps)
	if n == 0 {
		return -1, -1
	}
	a, b = p.weighted(), -1
	if n > 1 {
		b = p.weightedExcept(a)
	}
	if c.fine(p.eps[a]) && (b < 0 || c.fine(p.eps[b])) {
		return a, b
	}
	v := p.view(c)
	if !v.any {
		return -1, -1
	}
	if v.accepts(c, p.eps[a]) && (b < 0 || v.accepts(c, p.eps[b])) {
		return a, b
	}
	if a = p.scanWeighted(c, &v, -1); a < 0 {
		return -1, -1
	}
	return a, p.scanWeighted(c, &v, a)
}

// loadCmp compares the loads relative to weight ia/wa and ib/wb without
// division or overflow: -1, 0 or 1.
func loadCmp(ia int64, wa uint32, ib int64, wb uint32) int {
	// A negative count (End without Begin) is a caller bug; treat it as
	// idle rather than as a bonus.
	ua, ub := uint64(max(ia, 0)), uint64(max(ib, 0))
	h1, l1 := bits.Mul64(ua, uint64(wb))
	h2, l2 := bits.Mul64(ub, uint64(wa))
	switch {
	case h1 < h2 || (h1 == h2 && l1 < l2):
		return -1
	case h1 == h2 && l1 == l2:
		return 0
	default:
		return 1
	}
}

// mix is a bijective 64-bit finaliser (the splitmix64 output function): it
// spreads low-entropy keys, such as small integers, over the whole range
// the ring and the table are indexed by.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
