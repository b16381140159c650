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
	"net/http/httptrace"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/slowpath/endpoint"
	"github.com/novaedge/novaedge/slowpath/health"
	"github.com/novaedge/novaedge/slowpath/internal/ctxhook"
	"github.com/novaedge/novaedge/slowpath/internal/httphead"
	"github.com/novaedge/novaedge/slowpath/lb"
	"github.com/novaedge/novaedge/slowpath/router"
	"github.com/novaedge/novaedge/slowpath/upstream"
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

// exchange is one client request on its way to a backend. Exchanges are
// pooled per Proxy (getExchange, putExchange): with the reverse proxy, its
// bound callbacks, the status writer and the response body wrapper inside,
// a proxied request allocates none of them.
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
	// start is when the request came (serveHTTP, serveRaw): the first
	// try's start as well, which saves reading the clock again.
	start time.Time

	// sw is the response writer serveHTTP hands on, recording the status.
	sw statusWriter
	// rp forwards the request; its callbacks are bound to this exchange
	// once, when the exchange is made.
	rp httputil.ReverseProxy
	// tried are the endpoints tried so far (the first len(tried)), and
	// wasTried the bound method the balancer asks.
	tried    [4]*endpoint.Endpoint
	ntried   int
	wasTried func(*endpoint.Endpoint) bool
	// body wraps the response body of the final try; bodyOpen says it was
	// handed out, and upgraded that an upgraded stream (which the hijacked
	// connection keeps after the handler returns) refers to the exchange,
	// which is then never reused.
	body     body
	bodyOpen bool
	upgraded bool

	// serveDirect's state: the client's writer (for 1xx responses), the
	// trace bound to got1xx, and the upstream request with its header and
	// URL.
	w         http.ResponseWriter
	trace     httptrace.ClientTrace
	outReq    http.Request
	outHeader http.Header
	outURL    url.URL
	// scratch holds the own client's response (and its header map) of
	// the current try: reused, since the exchange is reused only once the
	// response body is closed (putExchange).
	scratch upstream.Scratch
	// fwdVals backs rewriteOut's values of outHeader.
	fwdVals [5]string
	// rawFields: the request came by the raw path (serveRaw); reqFields
	// are its fields sent as they are, and respFields the response's
	// passed to the client.
	rawFields  bool
	reqFields  []httphead.Field
	respFields []httphead.Field
	// fwdLines are the forwarding fields of a raw request, as lines.
	fwdLines []byte
	// series is kept across uses of the exchange.
	series seriesCache
}

// getExchange returns a pooled or new exchange of p.
func (p *Proxy) getExchange() *exchange {
	if x, ok := p.exchanges.Get().(*exchange); ok {
		return x
	}
	x := &exchange{p: p}
	x.rp = httputil.ReverseProxy{
		Rewrite:        x.rewrite,
		Transport:      x,
		ErrorHandler:   x.errorHandler,
		ModifyResponse: x.modifyResponse,
		BufferPool:     bufPool,
		ErrorLog:       p.errLog(),
	}
	x.wasTried = x.triedBefore
	x.body.x = x
	x.trace.Got1xxResponse = x.got1xx
	return x
}

// putExchange returns x to the pool when nothing refers to it any more:
// its response body (if any) is closed and no upgraded stream uses it.
func (p *Proxy) putExchange(x *exchange) {
	if x.upgraded || (x.bodyOpen && !x.body.closed.Load()) {
		return
	}
	x.ln, x.m, x.be, x.reqID, x.hash, x.hasHash, x.cookie = nil, router.Match{}, nil, "", 0, false, nil
	x.ep.Store(nil)
	x.tries, x.retryHeld, x.lbReq, x.idle, x.start = 0, false, lb.Request{}, nil, time.Time{}
	x.sw = statusWriter{}
	x.tried, x.ntried = [4]*endpoint.Endpoint{}, 0
	x.body.reset()
	x.bodyOpen = false
	x.w = nil
	x.outReq = http.Request{}
	if len(x.outHeader) > 0 {
		clear(x.outHeader)
	}
	x.outURL = url.URL{}
	x.scratch.Clear()
	x.fwdVals = [5]string{}
	x.rawFields, x.reqFields, x.respFields, x.fwdLines = false, x.reqFields[:0], x.respFields[:0], x.fwdLines[:0]
	p.exchanges.Put(x)
}

// triedBefore reports whether e was tried already in this exchange.
func (x *exchange) triedBefore(e *endpoint.Endpoint) bool {
	return slices.Contains(x.tried[:x.ntried], e)
}

var bufPool = &bytePool{size: 32 << 10}

// bytePool is httputil.BufferPool over sync.Pool: copying bodies must not
// allocate per request. sync.Pool holds pointers, and the *[]byte a buffer
// travels in is kept in a pool of its own while the buffer is out, so Put
// does not allocate one either.
type bytePool struct {
	size    int
	bufs    sync.Pool // *[]byte holding a buffer
	holders sync.Pool // *[]byte holding nil
}

// Get returns a buffer of the pool's size.
func (b *bytePool) Get() []byte {
	h, ok := b.bufs.Get().(*[]byte)
	if !ok {
		return make([]byte, b.size)
	}
	v := *h
	*h = nil
	b.holders.Put(h)
	return v
}

// Put gives a buffer back.
func (b *bytePool) Put(v []byte) {
	h, ok := b.holders.Get().(*[]byte)
	if !ok {
		h = new([]byte)
	}
	*h = v
	b.bufs.Put(h)
}

func (p *Proxy) forward(x *exchange, w http.ResponseWriter, r *http.Request, ln *listener, m router.Match, be *backend) {
	x.ln, x.m, x.be = ln, m, be
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
		// byte either way for the route's idle timeout are ended. The own
		// servers let a request's context be canceled by its owner (an
		// HTTP/1.x connection's, an HTTP/2 stream's): no context per
		// request then.
		cancel, own := ctxhook.CancelFunc(ctx)
		if !own {
			var c context.CancelCauseFunc
			ctx, c = context.WithCancelCause(ctx)
			cancel = c
			defer c(nil)
		}
		x.idle = newIdleWatch(time.Duration(ms)*time.Millisecond, cancel)
		defer x.idle.stop()
	}
	if ms := m.Rule.Timeouts.GetRequestMs(); ms > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, time.Duration(ms)*time.Millisecond, errRequestTimeout)
		defer cancel()
	}
	if ctx != r.Context() {
		// One copy of the request for both contexts.
		r = r.WithContext(ctx)
	}
	if x.idle != nil && r.Body != nil && r.Body != http.NoBody {
		r.Body = &activityBody{ReadCloser: r.Body, w: x.idle}
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
	if isUpgrade(r) {
		// WebSocket and other upgrades: ReverseProxy's switch to a
		// bidirectional copy.
		x.rp.ServeHTTP(w, r)
		return
	}
	x.serveDirect(w, r)
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
func (x *exchange) rewrite(pr *httputil.ProxyRequest) { x.rewriteOut(pr.In, pr.Out) }

// rewriteOut makes out, a copy of the client's request in without its
// hop-by-hop fields, the upstream request.
func (x *exchange) rewriteOut(in, out *http.Request) {
	out.URL.Scheme = upstreamScheme(x.be.transport)
	out.URL.Host = x.be.name // replaced by the endpoint in RoundTrip
	if path, host, changed := x.m.Rule.Filters.Rewrite(in, x.m); changed {
		if path != "" {
			out.URL.Path, out.URL.RawPath = path, ""
		}
		if host != "" {
			out.Host = host
		}
	}
	proto := "http"
	if in.TLS != nil {
		proto = "https"
	}
	if x.rawFields {
		// No filters on the raw path (serveRaw): the forwarding fields
		// are all that is added.
		x.rawForwarding(in, out.Header, proto)
		return
	}
	// Append to the client's X-Forwarded-For, as Envoy and nginx do; the
	// backend sees the whole chain with the nearest hop last. The headers
	// are those of ProxyRequest.SetXForwarded, plus Forwarded (RFC 7239)
	// and the request ID, their values in one backing array.
	h, v := out.Header, x.fwdVals[:0]
	set := func(key, val string) {
		v = append(v, val)
		h[key] = v[len(v)-1 : len(v) : len(v)]
	}
	if clientIP, _, err := net.SplitHostPort(in.RemoteAddr); err == nil {
		if prior := in.Header["X-Forwarded-For"]; len(prior) > 0 {
			clientIP = strings.Join(prior, ", ") + ", " + clientIP
		}
		set("X-Forwarded-For", clientIP)
	} else {
		delete(h, "X-Forwarded-For")
	}
	set("X-Forwarded-Host", in.Host)
	set("X-Forwarded-Proto", proto)
	set("Forwarded", forwardedElem(in, proto))
	set(requestIDHeader, x.reqID)
	x.m.Rule.Filters.ApplyRequest(out) // also moves a rewritten Host header into out.Host
	// Mirrors get the request as the backend does: rewritten, with the
	// forwarding headers.
	for _, mi := range x.m.Rule.Filters.Mirrors() {
		x.p.mirror(out, mi)
	}
}

// forwardedElem is this hop's Forwarded element (RFC 7239), appended to
// the client's.
func forwardedElem(in *http.Request, proto string) string {
	b := appendForwardedElem(make([]byte, 0, 96), in, proto)
	if prev := in.Header.Values("Forwarded"); len(prev) > 0 {
		return strings.Join(prev, ", ") + ", " + string(b)
	}
	return string(b)
}

// appendForwardedElem appends this hop's Forwarded element.
func appendForwardedElem(b []byte, in *http.Request, proto string) []byte {
	b = append(b, "for="...)
	b = appendForwardedNode(b, remoteIP(in))
	b = append(b, ";host=\""...)
	for i := 0; i < len(in.Host); i++ {
		if in.Host[i] != '"' {
			b = append(b, in.Host[i])
		}
	}
	b = append(b, "\";proto="...)
	return append(b, proto...)
}

// appendForwardedNode appends an address as the Forwarded header wants it
// (RFC 7239: IPv6 quoted and bracketed).
func appendForwardedNode(b []byte, a netip.Addr) []byte {
	switch {
	case !a.IsValid():
		return append(b, "unknown"...)
	case a.Is6():
		b = append(b, `"[`...)
		b = a.AppendTo(b)
		return append(b, `]"`...)
	}
	return a.AppendTo(b)
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
	for try := 0; ; try++ {
		x.tries = try + 1
		now := x.start
		if try > 0 || now.IsZero() {
			now = time.Now()
		}
		x.lbReq = lb.Request{Now: now, Hash: x.hash, HasHash: x.hasHash, Tried: x.wasTried}
		ep := be.balancer.Pick(&x.lbReq)
		if ep == nil {
			return nil, errNoEndpoint
		}
		if x.ntried < len(x.tried) {
			x.tried[x.ntried] = ep
			x.ntried++
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
		var resp *http.Response
		var err error
		if t, own := be.transport.(*upstream.Transport); own && x.w != nil {
			// serveDirect's request: 1xx responses go to the client
			// without a trace in the request's context.
			resp, err = t.RoundTripScratch(out, x.trace.Got1xxResponse, &x.scratch)
		} else {
			resp, err = be.transport.RoundTrip(out)
		}
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
		end := time.Now()
		ep.ObserveLatency(end.Sub(now), end)
		x.report(ep, classifyStatus(resp.StatusCode))
		if try < maxRetries && retryOnStatus(retry, resp.StatusCode) && req.Context().Err() == nil && x.budget() {
			_, _ = io.CopyN(io.Discard, resp.Body, 64<<10)
			_ = resp.Body.Close()
			ep.End()
			cancel()
			backoff(req.Context(), retry, try)
			continue
		}
		resp.Body = x.wrapBody(resp, ep, cancel)
		return resp, nil
	}
}

func (x *exchange) report(ep *endpoint.Endpoint, res health.Result) {
	x.p.metrics.upstreamTry(&x.series, x.be.name, res)
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

// wrapBody returns the response body the exchange hands on: closing it
// ends the exchange once (the endpoint's request, the per-try context, the
// retry held). A 101 Switching Protocols body must stay writable for the
// upgraded connection (WebSocket); it outlives the handler, so it gets a
// wrapper of its own and the exchange is not reused.
func (x *exchange) wrapBody(resp *http.Response, ep *endpoint.Endpoint, cancel func()) io.ReadCloser {
	if rwc, ok := resp.Body.(io.ReadWriteCloser); ok && resp.StatusCode == http.StatusSwitchingProtocols {
		x.upgraded = true
		var once sync.Once
		finish := func() { once.Do(func() { ep.End(); cancel(); x.releaseRetry() }) }
		return &rwBody{ReadWriteCloser: rwc, done: finish, idle: x.idle}
	}
	b := &x.body
	b.ReadCloser, b.ep, b.cancel, b.idle = resp.Body, ep, cancel, x.idle
	x.bodyOpen = true
	return b
}

// body is the response body of a finished try, embedded in its exchange.
type body struct {
	io.ReadCloser
	x      *exchange
	ep     *endpoint.Endpoint
	cancel func()
	idle   *idleWatch
	closed atomic.Bool
}

func (b *body) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.idle.touch()
	}
	return n, err
}

// Close closes the body and, the first time, ends the exchange.
func (b *body) Close() error {
	err := b.ReadCloser.Close()
	if b.closed.CompareAndSwap(false, true) {
		b.ep.End()
		b.cancel()
		b.x.releaseRetry()
	}
	return err
}

func (b *body) reset() {
	b.ReadCloser, b.ep, b.cancel, b.idle = nil, nil, nil, nil
	b.closed.Store(false)
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
