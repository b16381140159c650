package slowpath

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/slowpath/endpoint"
	"github.com/novaedge/novaedge/slowpath/health"
	"github.com/novaedge/novaedge/slowpath/lb"
	"github.com/novaedge/novaedge/slowpath/router"
)

// maxReplayBody bounds the request bodies kept in memory for retries.
const maxReplayBody = 64 << 10

// Errors the upstream round trip reports to the error handler.
var (
	errNoEndpoint     = errors.New("no healthy endpoint")
	errOverloaded     = errors.New("backend overloaded (circuit breaker)")
	errPerTryTimeout  = errors.New("upstream did not answer within the per-try timeout")
	errRequestTimeout = errors.New("request timeout")
	errIdleTimeout    = errors.New("stream idle timeout")
)

// exchange is one client request on its way to a backend.
type exchange struct {
	p       *Proxy
	ln      *listener
	m       router.Match
	be      *backend
	reqID   string
	hash    uint64
	hasHash bool
	cookie  *http.Cookie // affinity cookie to set on the response
	ep      atomic.Pointer[endpoint.Endpoint]
	tries   int
	// retryHeld: a retry of this exchange counts against the budget.
	retryHeld bool
	// lbReq lives here so a pick does not allocate.
	lbReq lb.Request
	// idle watches the exchange's activity (nil: no idle timeout).
	idle *idleWatch
}

var bufPool = &bytePool{p: sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}}

// bytePool is httputil.BufferPool over sync.Pool: copying bodies must not
// allocate per request.
type bytePool struct{ p sync.Pool }

func (b *bytePool) Get() []byte  { return *(b.p.Get().(*[]byte)) }
func (b *bytePool) Put(v []byte) { b.p.Put(&v) }

func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, _ *Config, ln *listener, m router.Match, be *backend) {
	x := &exchange{p: p, ln: ln, m: m, be: be}
	x.reqID = r.Header.Get(requestIDHeader)
	if x.reqID == "" {
		x.reqID = newRequestID()
	}
	if hp := be.hash; hp != nil {
		x.hash, x.hasHash = lb.HashKey(r, hp, remoteIP(r))
		if !x.hasHash && hp.GetCookie() != "" {
			v := lb.NewCookieValue()
			x.hash, x.hasHash = lb.HashString(v), true
			x.cookie = &http.Cookie{Name: hp.GetCookie(), Value: v, Path: cmp.Or(hp.GetCookiePath(), "/"), HttpOnly: true}
			if ttl := hp.GetCookieTtlMs(); ttl > 0 {
				x.cookie.MaxAge = int((time.Duration(ttl) * time.Millisecond).Seconds())
			}
		}
	}

	st := be.state
	// Circuit breaking: maxRequests bounds requests in flight; with
	// maxConnections, requests beyond it wait for a connection, and at
	// most maxPendingRequests may wait.
	active := st.active.Load()
	if lim := be.limits.maxRequests; lim > 0 && active >= lim {
		x.fail(w, r, http.StatusServiceUnavailable, errOverloaded)
		return
	}
	if lim := be.limits; lim.maxConns > 0 && lim.maxPending > 0 && active >= lim.maxConns+lim.maxPending {
		x.fail(w, r, http.StatusServiceUnavailable, errOverloaded)
		return
	}
	st.active.Add(1)
	defer st.active.Add(-1)

	ctx := r.Context()
	if ms := m.Rule.Timeouts.GetIdleMs(); ms > 0 {
		// Streams (WebSocket, gRPC streaming, long downloads) that move no
		// byte either way for the route's idle timeout are ended.
		var cancel context.CancelCauseFunc
		ctx, cancel = context.WithCancelCause(ctx)
		x.idle = newIdleWatch(time.Duration(ms)*time.Millisecond, func() { cancel(errIdleTimeout) })
		defer x.idle.stop()
		defer cancel(nil)
		r = r.WithContext(ctx)
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = &activityBody{ReadCloser: r.Body, w: x.idle}
		}
	}
	if ms := m.Rule.Timeouts.GetRequestMs(); ms > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, time.Duration(ms)*time.Millisecond, errRequestTimeout)
		defer cancel()
		r = r.WithContext(ctx)
	}
	// A small request body is kept in memory when the rule may retry, so
	// a retry (or a mirror) can send it again, as Envoy buffers bodies for
	// retries; larger or unsized bodies are streamed and not retried.
	if m.Rule.Retry.GetMaxRetries() > 0 && r.GetBody == nil && r.Body != nil && r.Body != http.NoBody &&
		r.ContentLength > 0 && r.ContentLength <= maxReplayBody {
		buf, err := io.ReadAll(io.LimitReader(r.Body, maxReplayBody+1))
		if err != nil {
			var tooLarge *http.MaxBytesError
			if errors.As(err, &tooLarge) {
				x.errorHandler(w, r, err)
				return
			}
			writeError(w, r, http.StatusBadRequest, "request body could not be read")
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(buf))
		r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf)), nil }
	}
	rp := &httputil.ReverseProxy{
		Rewrite:        x.rewrite,
		Transport:      x,
		ErrorHandler:   x.errorHandler,
		ModifyResponse: x.modifyResponse,
		BufferPool:     bufPool,
		ErrorLog:       p.errLog(),
	}
	rp.ServeHTTP(w, r)
}

// remoteIP is the client's address.
func remoteIP(r *http.Request) netip.Addr {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

// rewrite builds the upstream request: URL rewrite and request header
// filters of the rule, X-Forwarded-For/-Host/-Proto and Forwarded, the
// request ID. The Host header is the client's unless the rule rewrites it.
func (x *exchange) rewrite(pr *httputil.ProxyRequest) {
	out := pr.Out
	out.URL.Scheme = upstreamScheme(x.be.transport)
	out.URL.Host = x.be.name // replaced by the endpoint in RoundTrip
	if path, host, changed := x.m.Rule.Filters.Rewrite(pr.In, x.m); changed {
		if path != "" {
			out.URL.Path, out.URL.RawPath = path, ""
		}
		if host != "" {
			out.Host = host
		}
	}
	// Append to the client's X-Forwarded-For, as Envoy and nginx do; the
	// backend sees the whole chain with the nearest hop last.
	if prior := pr.In.Header["X-Forwarded-For"]; len(prior) > 0 {
		out.Header["X-Forwarded-For"] = prior
	}
	pr.SetXForwarded()
	proto := "http"
	if pr.In.TLS != nil {
		proto = "https"
	}
	elem := "for=" + forwardedNode(remoteIP(pr.In)) + ";host=\"" + strings.ReplaceAll(pr.In.Host, `"`, "") + "\";proto=" + proto
	if prev := pr.In.Header.Values("Forwarded"); len(prev) > 0 {
		elem = strings.Join(prev, ", ") + ", " + elem
	}
	out.Header.Set("Forwarded", elem)
	out.Header.Set(requestIDHeader, x.reqID)
	x.m.Rule.Filters.ApplyRequest(out) // also moves a rewritten Host header into out.Host
	// Mirrors get the request as the backend does: rewritten, with the
	// forwarding headers.
	for _, mi := range x.m.Rule.Filters.Mirrors() {
		x.p.mirror(out, mi)
	}
}

// forwardedNode formats an address for the Forwarded header (RFC 7239:
// IPv6 quoted and bracketed).
func forwardedNode(a netip.Addr) string {
	if !a.IsValid() {
		return "unknown"
	}
	if a.Is6() {
		return `"[` + a.String() + `]"`
	}
	return a.String()
}

func (x *exchange) modifyResponse(resp *http.Response) error {
	x.m.Rule.Filters.ApplyResponseHeaders(resp.Header)
	if x.cookie != nil {
		resp.Header.Add("Set-Cookie", x.cookie.String())
	}
	return nil
}

// errorHandler answers a request whose upstream exchange failed: 503 when
// no endpoint could take it, 504 on timeouts, 502 for other upstream
// failures; gRPC calls get the matching grpc-status. One log line names
// route, backend and endpoint.
func (x *exchange) errorHandler(w http.ResponseWriter, r *http.Request, err error) {
	status := http.StatusBadGateway
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		writeError(w, r, http.StatusRequestEntityTooLarge, "request body larger than "+strconv.FormatInt(tooLarge.Limit, 10)+" bytes")
		return
	case errors.Is(err, errNoEndpoint), errors.Is(err, errOverloaded):
		status = http.StatusServiceUnavailable
	case errors.Is(err, errPerTryTimeout), errors.Is(err, context.DeadlineExceeded), errors.Is(context.Cause(r.Context()), errRequestTimeout),
		errors.Is(context.Cause(r.Context()), errIdleTimeout):
		status = http.StatusGatewayTimeout
	case errors.Is(err, context.Canceled) && r.Context().Err() != nil:
		// The client went away; nobody reads an answer.
		return
	}
	x.fail(w, r, status, err)
}

func (x *exchange) fail(w http.ResponseWriter, r *http.Request, status int, err error) {
	ep := "-"
	if e := x.ep.Load(); e != nil {
		ep = e.Addr
	}
	x.p.log.Warn("upstream request failed", "route", x.m.Rule.Route, "rule", x.m.Rule.Name, "backend", x.be.name,
		"endpoint", ep, "status", status, "tries", x.tries, "request_id", x.reqID, "error", err)
	if errors.Is(err, errOverloaded) {
		w.Header().Set("X-Novaedge-Overloaded", "true")
		x.p.metrics.overloaded.WithLabelValues(x.be.name).Inc()
	}
	writeError(w, r, status, upstreamMessage(status))
}

func upstreamMessage(status int) string {
	switch status {
	case http.StatusServiceUnavailable:
		return "no backend endpoint available"
	case http.StatusGatewayTimeout:
		return "backend did not answer in time"
	}
	return "backend connection failed"
}

// RoundTrip sends the request to an endpoint chosen by the backend's
// balancer and retries on another endpoint as the rule's retry policy
// allows: only replayable bodies, only idempotent methods unless allowed,
// within the backend's retry budget. Every try reports its outcome to
// outlier detection and its latency to the endpoint.
func (x *exchange) RoundTrip(req *http.Request) (*http.Response, error) {
	be, rule := x.be, x.m.Rule
	retry := rule.Retry
	maxRetries := 0
	if retry != nil && retryAllowed(req, retry) {
		maxRetries = int(retry.GetMaxRetries())
	}
	perTry := time.Duration(retry.GetPerTryTimeoutMs()) * time.Millisecond
	if perTry == 0 {
		perTry = time.Duration(rule.Timeouts.GetBackendRequestMs()) * time.Millisecond
	}
	var tried [4]*endpoint.Endpoint
	ntried := 0
	wasTried := func(e *endpoint.Endpoint) bool { return slices.Contains(tried[:ntried], e) }

	for try := 0; ; try++ {
		x.tries = try + 1
		now := time.Now()
		x.lbReq = lb.Request{Now: now, Hash: x.hash, HasHash: x.hasHash, Tried: wasTried}
		ep := be.balancer.Pick(&x.lbReq)
		if ep == nil {
			return nil, errNoEndpoint
		}
		if ntried < len(tried) {
			tried[ntried] = ep
			ntried++
		}
		x.ep.Store(ep)

		out := req
		if try > 0 {
			out = req.Clone(req.Context())
			if req.Body != nil && req.Body != http.NoBody {
				body, err := req.GetBody()
				if err != nil {
					return nil, err
				}
				out.Body = body
			}
		}
		out.URL.Host = ep.Addr
		// A per-try timeout needs a context of its own; without one the
		// request's context is enough (and saves two allocations).
		cancel := func() {}
		var timer *time.Timer
		if perTry > 0 {
			var ctx context.Context
			ctx, cancel = context.WithCancel(req.Context())
			timer = time.AfterFunc(perTry, cancel)
			out = out.WithContext(ctx)
		}

		ep.Begin()
		resp, err := be.transport.RoundTrip(out)
		timedOut := timer != nil && !timer.Stop()
		if err == nil && timedOut {
			// The timer fired as the headers arrived: the context is gone,
			// so the body could not be read; count it as the timeout it is.
			_ = resp.Body.Close()
			resp, err = nil, context.DeadlineExceeded
		}
		if err != nil {
			ep.End()
			cancel()
			res := classifyErr(err, timedOut)
			x.report(ep, res)
			if timedOut {
				err = errors.Join(errPerTryTimeout, err)
			}
			if try < maxRetries && retryOnResult(retry, res) && req.Context().Err() == nil && x.budget() {
				backoff(req.Context(), retry, try)
				continue
			}
			x.releaseRetry()
			return nil, err
		}
		ep.ObserveLatency(time.Since(now), time.Now())
		x.report(ep, classifyStatus(resp.StatusCode))
		if try < maxRetries && retryOnStatus(retry, resp.StatusCode) && req.Context().Err() == nil && x.budget() {
			_, _ = io.CopyN(io.Discard, resp.Body, 64<<10)
			_ = resp.Body.Close()
			ep.End()
			cancel()
			backoff(req.Context(), retry, try)
			continue
		}
		resp.Body = wrapBody(resp, x.idle, func() { ep.End(); cancel(); x.releaseRetry() })
		return resp, nil
	}
}

func (x *exchange) report(ep *endpoint.Endpoint, res health.Result) {
	x.p.metrics.upstream.WithLabelValues(x.be.name, resultName(res)).Inc()
	if o := x.be.state.outlier; o != nil {
		o.Report(ep, res)
	}
}

// budget reports whether one more retry fits the backend's retry budget:
// retries in flight may be at most the budget's share (default 20%) of the
// requests in flight, and always at least 3, as Envoy's retry budgets do,
// so retries cannot multiply the load on a failing backend.
// A granted retry counts as in flight until its try ends (releaseRetry).
func (x *exchange) budget() bool {
	x.releaseRetry()
	st := x.be.state
	pct := int64(x.m.Rule.Retry.GetBudgetPercent())
	if pct == 0 {
		pct = 20
	}
	allowed := max(3, st.active.Load()*pct/100)
	if st.retries.Add(1) > allowed {
		st.retries.Add(-1)
		return false
	}
	x.retryHeld = true
	x.p.metrics.retries.WithLabelValues(x.be.name).Inc()
	return true
}

// releaseRetry ends the retry this exchange holds in the budget, if any.
func (x *exchange) releaseRetry() {
	if x.retryHeld {
		x.retryHeld = false
		x.be.state.retries.Add(-1)
	}
}

// retryAllowed: a request is retried only if its body can be sent again and
// its method is idempotent (unless the policy allows others).
func retryAllowed(req *http.Request, rp *pb.RetryPolicy) bool {
	if req.Body != nil && req.Body != http.NoBody && req.GetBody == nil {
		return false
	}
	if rp.GetRetryNonIdempotent() {
		return true
	}
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return false
}

func classifyErr(err error, timedOut bool) health.Result {
	var op *net.OpError
	switch {
	case timedOut || errors.Is(err, context.DeadlineExceeded):
		return health.Timeout
	case errors.As(err, &op) && op.Op == "dial":
		return health.ConnectFailure
	}
	return health.Reset
}

func classifyStatus(code int) health.Result {
	switch {
	case code == http.StatusBadGateway || code == http.StatusServiceUnavailable || code == http.StatusGatewayTimeout:
		return health.GatewayError
	case code >= 500:
		return health.Failure5xx
	}
	return health.Success
}

func retryOnResult(rp *pb.RetryPolicy, res health.Result) bool {
	for _, c := range rp.GetRetryOn() {
		switch c {
		case "connection-failure":
			if res == health.ConnectFailure {
				return true
			}
		case "reset", "refused-stream":
			if res == health.Reset || res == health.Timeout {
				return true
			}
		case "5xx", "gateway-error":
			if res == health.ConnectFailure || res == health.Reset || res == health.Timeout {
				return true
			}
		}
	}
	return false
}

func retryOnStatus(rp *pb.RetryPolicy, code int) bool {
	for _, c := range rp.GetRetryOn() {
		switch c {
		case "5xx":
			if code >= 500 {
				return true
			}
		case "gateway-error":
			if code == 502 || code == 503 || code == 504 {
				return true
			}
		case "retriable-status-codes":
			if slices.Contains(rp.GetRetriableStatusCodes(), uint32(code)) {
				return true
			}
		}
	}
	return false
}

// backoff waits before retry number try+1: the policy's base (default
// 25ms, as Envoy) doubled per try, with full jitter, capped at 10× base.
func backoff(ctx context.Context, rp *pb.RetryPolicy, try int) {
	base := time.Duration(rp.GetBackoffMs()) * time.Millisecond
	if base == 0 {
		base = 25 * time.Millisecond
	}
	d := min(base<<try, 10*base)
	d = time.Duration(rand.Int64N(int64(d) + 1))
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// wrapBody calls done once when the response body is closed (the exchange
// is over). A 101 Switching Protocols body must stay writable for the
// upgraded connection (WebSocket).
func wrapBody(resp *http.Response, idle *idleWatch, done func()) io.ReadCloser {
	var once sync.Once
	finish := func() { once.Do(done) }
	if rwc, ok := resp.Body.(io.ReadWriteCloser); ok && resp.StatusCode == http.StatusSwitchingProtocols {
		return &rwBody{ReadWriteCloser: rwc, done: finish, idle: idle}
	}
	return &body{ReadCloser: resp.Body, done: finish, idle: idle}
}

type body struct {
	io.ReadCloser
	done func()
	idle *idleWatch
}

func (b *body) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.idle.touch()
	}
	return n, err
}

func (b *body) Close() error {
	err := b.ReadCloser.Close()
	b.done()
	return err
}

type rwBody struct {
	io.ReadWriteCloser
	done func()
	idle *idleWatch
}

func (b *rwBody) Read(p []byte) (int, error) {
	n, err := b.ReadWriteCloser.Read(p)
	if n > 0 {
		b.idle.touch()
	}
	return n, err
}

func (b *rwBody) Write(p []byte) (int, error) {
	n, err := b.ReadWriteCloser.Write(p)
	if n > 0 {
		b.idle.touch()
	}
	return n, err
}

func (b *rwBody) Close() error {
	err := b.ReadWriteCloser.Close()
	b.done()
	return err
}

// activityBody reports the client's request body bytes to the idle watch.
type activityBody struct {
	io.ReadCloser
	w *idleWatch
}

func (b *activityBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.w.touch()
	}
	return n, err
}

// idleWatch calls fire when no activity was seen for d. Activity costs an
// atomic store; the timer re-arms itself for the time left instead of
// being reset on every byte.
type idleWatch struct {
	d     time.Duration
	last  atomic.Int64 // Unix nanoseconds of the last activity
	timer *time.Timer
	fire  func()
}

func newIdleWatch(d time.Duration, fire func()) *idleWatch {
	w := &idleWatch{d: d, fire: fire}
	w.last.Store(time.Now().UnixNano())
	w.timer = time.AfterFunc(d, w.check)
	return w
}

func (w *idleWatch) check() {
	idle := time.Since(time.Unix(0, w.last.Load()))
	if idle >= w.d {
		w.fire()
		return
	}
	w.timer.Reset(w.d - idle)
}

// touch records activity; a nil watch ignores it.
func (w *idleWatch) touch() {
	if w != nil {
		w.last.Store(time.Now().UnixNano())
	}
}

func (w *idleWatch) stop() {
	if w != nil {
		w.timer.Stop()
	}
}

// mirror sends a copy of the outbound request r to the mirror's backend
// and discards the answer (Gateway API RequestMirror). Only requests without a body, or
// with a replayable one, are mirrored; the copy's Host gets "-shadow", as
// Envoy does, so the mirror can tell.
func (p *Proxy) mirror(r *http.Request, mi router.Mirror) {
	if mi.Percent < 100 && rand.Int64N(100) >= int64(mi.Percent) {
		return
	}
	cfg := p.cfg.Load()
	be := cfg.backends[mi.Backend]
	if be == nil {
		return
	}
	if r.Body != nil && r.Body != http.NoBody && r.GetBody == nil {
		return
	}
	ep := be.balancer.Pick(&lb.Request{Now: time.Now()})
	if ep == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 10*time.Second)
	out := r.Clone(ctx)
	out.RequestURI = ""
	host := r.Host
	if host == "" {
		host = r.URL.Host
	}
	out.URL.Scheme = upstreamScheme(be.transport)
	out.URL.Host = ep.Addr
	out.Host = hostOnly(host) + "-shadow"
	if r.GetBody != nil {
		if b, err := r.GetBody(); err == nil {
			out.Body = b
		}
	} else {
		out.Body = nil
	}
	go func() {
		defer cancel()
		resp, err := be.transport.RoundTrip(out)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}()
}

// errLog routes net/http's own messages (TLS handshake failures, hijack
// errors) to the debug level: they are about single clients.
func (p *Proxy) errLog() *log.Logger { return p.httpLog }

func hostOnly(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		return host
	}
	return h
}
