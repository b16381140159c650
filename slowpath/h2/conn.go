package h2

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// clientPreface is what every HTTP/2 client sends first (RFC 9113 §3.4).
const clientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// Rapid-reset bound: a client may reset (or have refused) resetBurst
// streams at once and resetRate per second after that; beyond it the
// connection ends with ENHANCE_YOUR_CALM.
const (
	resetBurst = 1000
	resetRate  = 200
)

// conn is one HTTP/2 connection. Its reader goroutine (serve) reads frames
// and runs the state machine; handlers run on workers. Every field below
// mu is guarded by it: the reader takes it per frame, a handler per write
// or body read, so the state machine and the frame encoder are never
// used concurrently and frames reach the buffer in the order decided.
type conn struct {
	srv    *Server
	nc     net.Conn
	br     *bufio.Reader
	fr     *http2.Framer // reads: reader goroutine only; writes: under mu
	hd     headerDecoder // reader goroutine only
	ctx    context.Context
	cancel context.CancelCauseFunc
	// streamBase is the parent of the streams' contexts: ctx's values
	// without its cancellation, so that a stream's context is not
	// registered with ctx (a lock and a map insert and delete per
	// stream, 4 % of the CPU under h2load); the connection cancels its
	// open streams itself when it ends, and ends when ctx's parent does.
	streamBase context.Context
	stopBase   func() bool
	tls        *tls.ConnectionState
	remoteAddr string
	upgrade    *http.Request
	upSettings []byte

	mu sync.Mutex
	// cond is signalled when the send windows grow, pending bytes
	// drain, a stream ends or a handler returns.
	cond sync.Cond
	out  writeBuf

	henc       *hpack.Encoder
	hbuf       bytes.Buffer
	peerMaxFrm uint32 // the client's SETTINGS_MAX_FRAME_SIZE
	peerWindow int32  // the client's SETTINGS_INITIAL_WINDOW_SIZE
	sendWindow int64  // connection send window

	recvWindow  int32 // what the client may still send on the connection
	recvUnacked int32 // consumed or discarded, not yet given back

	streams     map[uint32]*stream
	maxClientID uint32 // highest stream the client opened
	active      int    // streams open or with a handler running
	handlers    int    // handlers running
	maxStreams  uint32

	goAwaySent bool
	goAwayID   uint32
	peerGoAway bool // the client sent GOAWAY
	closed     bool // the connection is ending; no stream starts
	closeErr   error
	idleTimer  *time.Timer

	resetTokens float64
	resetAt     time.Time

	// reset holds the last streams we reset: frames the client sent
	// before it saw our RST_STREAM (body, trailers) are ignored, as RFC
	// 9113 §5.1 asks, rather than taken for frames on a closed stream.
	reset    [32]uint32
	resetIdx int
}

func newConn(s *Server, nc net.Conn, o ConnOptions) *conn {
	base := o.Context
	if base == nil {
		base = context.Background()
	}
	c := &conn{
		srv:         s,
		nc:          nc,
		tls:         o.TLS,
		remoteAddr:  nc.RemoteAddr().String(),
		upgrade:     o.UpgradeRequest,
		upSettings:  o.Settings,
		peerMaxFrm:  16384,
		peerWindow:  65535,
		sendWindow:  65535,
		recvWindow:  65535,
		streams:     make(map[uint32]*stream),
		maxStreams:  s.maxStreams(),
		resetTokens: resetBurst,
	}
	c.ctx, c.cancel = context.WithCancelCause(base)
	c.streamBase = context.WithoutCancel(c.ctx)
	if base.Done() != nil {
		c.stopBase = context.AfterFunc(base, func() { c.closeNow(context.Cause(base)) })
	}
	c.cond.L = &c.mu
	c.out.init(c)
	c.br = bufio.NewReaderSize(nc, 16<<10)
	c.fr = http2.NewFramer(&c.out, c.br)
	c.fr.SetMaxReadFrameSize(maxFrameSize)
	// Header blocks are read and decoded by readHeaderBlock, not the
	// Framer (ReadMetaHeaders stays nil): see headers.go.
	c.hd.init(s.maxHeaderBytes())
	c.henc = hpack.NewEncoder(&c.hbuf)
	return c
}

// connError is a connection error to answer with GOAWAY.
type connError struct {
	code   http2.ErrCode
	reason string
}

func (e connError) Error() string { return fmt.Sprintf("connection error %v: %s", e.code, e.reason) }

// start queues the server preface, our SETTINGS and the connection
// window, before anything else (a GOAWAY from Shutdown) can be written.
func (c *conn) start() {
	c.mu.Lock()
	defer c.mu.Unlock()
	settings := []http2.Setting{
		{ID: http2.SettingMaxConcurrentStreams, Val: c.maxStreams},
		{ID: http2.SettingInitialWindowSize, Val: streamWindow},
		{ID: http2.SettingMaxFrameSize, Val: maxFrameSize},
		{ID: http2.SettingMaxHeaderListSize, Val: c.srv.maxHeaderBytes()},
	}
	_ = c.fr.WriteSettings(settings...)
	_ = c.fr.WriteWindowUpdate(0, connWindow-65535)
	c.recvWindow = connWindow
}

// serve runs the connection: preface, frames, then the end.
func (c *conn) serve() {
	err := c.run()
	c.mu.Lock()
	var ce connError
	switch {
	case errors.As(err, &ce):
		c.writeGoAwayLocked(ce.code, ce.reason)
	case c.closeErr == nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed):
		c.srv.logger().Debug("h2: connection ends", "remote", c.remoteAddr, "err", err)
	}
	if c.closeErr == nil {
		c.closeErr = err
	}
	c.closed = true
	c.cancel(err)
	if c.stopBase != nil {
		c.stopBase()
	}
	for _, st := range c.streams {
		c.resetLocked(st, errConnClosed)
	}
	c.cond.Broadcast()
	c.mu.Unlock()
	// Write what is pending (a GOAWAY, last responses) and close, then
	// wait for the handlers: ServeConn returns once they all have.
	_ = c.out.close()
	c.mu.Lock()
	for c.handlers > 0 {
		c.cond.Wait()
	}
	if c.idleTimer != nil {
		c.idleTimer.Stop()
	}
	c.mu.Unlock()
}

var errConnClosed = errors.New("h2: connection closed")

func (c *conn) run() error {
	if t := c.srv.ReadHeaderTimeout; t > 0 {
		_ = c.nc.SetReadDeadline(time.Now().Add(t))
	}
	c.mu.Lock()
	if c.upgrade != nil {
		if err := c.upgradeLocked(); err != nil {
			c.mu.Unlock()
			return err
		}
	}
	c.out.kick()
	c.mu.Unlock()

	var pre [len(clientPreface)]byte
	if _, err := io.ReadFull(c.br, pre[:]); err != nil {
		return fmt.Errorf("read client preface: %w", err)
	}
	if string(pre[:]) != clientPreface {
		return connError{http2.ErrCodeProtocol, "invalid client preface"}
	}
	first := true
	for {
		fh, err := c.fr.ReadFrameHeader()
		if err != nil {
			if errors.Is(err, http2.ErrFrameTooLarge) {
				return connError{http2.ErrCodeFrameSize, fmt.Sprintf("%v frame of %d bytes", fh.Type, fh.Length)}
			}
			return c.readError(fh, err)
		}
		if first && fh.Type != http2.FrameSettings {
			// §3.4: the preface's SETTINGS frame comes first.
			return connError{http2.ErrCodeProtocol, "first frame is not SETTINGS"}
		}
		if fh.Type == http2.FrameHeaders {
			// Decoded without the lock: the block's CONTINUATIONs
			// may still be on their way.
			if err := c.readHeaderBlock(fh); err != nil {
				return err
			}
			c.mu.Lock()
			if stop, err := c.unlockAfterFrame(c.onHeaders(&c.hd.blk)); stop {
				return err
			}
			continue
		}
		f, err := c.fr.ReadFrameForHeader(fh)
		if err != nil {
			if err := c.readError(fh, err); err != nil {
				return err
			}
			first = false
			continue
		}
		if first {
			if sf, ok := f.(*http2.SettingsFrame); !ok || sf.IsAck() {
				return connError{http2.ErrCodeProtocol, "first frame is not SETTINGS"}
			}
			first = false
			if c.srv.ReadHeaderTimeout > 0 {
				_ = c.nc.SetReadDeadline(time.Time{})
			}
			c.mu.Lock()
			if c.active == 0 {
				// A connection that never opens a stream is idle too.
				c.onIdleLocked()
			}
			c.mu.Unlock()
		}
		c.mu.Lock()
		if stop, err := c.unlockAfterFrame(c.processLocked(f)); stop {
			return err
		}
	}
}

// unlockAfterFrame ends the processing of a frame, whose error is err:
// it starts writing what the frame produced and unlocks c.mu. stop says
// the connection ends, with the error to return (read on to the client's
// close if the frame closed it).
func (c *conn) unlockAfterFrame(err error) (stop bool, _ error) {
	c.out.kick()
	done := c.closed
	c.mu.Unlock()
	switch {
	case err != nil:
		return true, err
	case done:
		return true, c.drain()
	}
	return false, nil
}

// drain reads until the client closes or the linger deadline closeLocked
// set passes; frames are no longer processed.
func (c *conn) drain() error {
	_, _ = io.Copy(io.Discard, c.br)
	return c.closeErr
}

// readError turns a Framer error into the connection's answer: nil after a
// stream error was answered with RST_STREAM, the error to end with
// otherwise.
func (c *conn) readError(fh http2.FrameHeader, err error) error {
	var se http2.StreamError
	var ce http2.ConnectionError
	switch {
	case errors.As(err, &se):
		// HEADERS never get here: readHeaderBlock reads them.
		c.mu.Lock()
		defer c.mu.Unlock()
		err := c.streamErrorLocked(se.StreamID, se.Code)
		c.out.kick()
		return err
	case errors.As(err, &ce):
		reason := "malformed frame"
		if d := c.fr.ErrorDetail(); d != nil {
			reason = d.Error()
		}
		return connError{http2.ErrCode(ce), reason}
	}
	return err
}

// streamErrorLocked resets stream id with code (RFC 9113 §5.4.2).
func (c *conn) streamErrorLocked(id uint32, code http2.ErrCode) error {
	if st := c.streams[id]; st != nil {
		c.resetLocked(st, streamErr(code))
	}
	return c.writeRSTLocked(id, code)
}

// processLocked applies one frame.
func (c *conn) processLocked(f http2.Frame) error {
	switch f := f.(type) {
	case *http2.DataFrame:
		return c.onData(f)
	case *http2.PriorityFrame:
		if f.StreamDep == f.StreamID {
			return c.streamErrorLocked(f.StreamID, http2.ErrCodeProtocol)
		}
		return nil
	case *http2.RSTStreamFrame:
		return c.onRST(f)
	case *http2.SettingsFrame:
		return c.onSettings(f)
	case *http2.PushPromiseFrame:
		return connError{http2.ErrCodeProtocol, "PUSH_PROMISE from a client"}
	case *http2.PingFrame:
		if f.IsAck() {
			return nil
		}
		if c.out.flooded() {
			return connError{http2.ErrCodeEnhanceYourCalm, "PING flood: client reads no replies"}
		}
		return c.fr.WritePing(true, f.Data)
	case *http2.GoAwayFrame:
		// The client is leaving: finish its streams, then close.
		c.peerGoAway = true
		if c.active == 0 {
			c.closeLocked(nil)
		}
		return nil
	case *http2.WindowUpdateFrame:
		return c.onWindowUpdate(f)
	}
	// Unknown frame types are ignored (§5.5).
	return nil
}

func (c *conn) isIdleID(id uint32) bool { return id%2 == 0 || id > c.maxClientID }

func (c *conn) onData(f *http2.DataFrame) error {
	id, n := f.StreamID, int32(f.Length)
	if n > c.recvWindow {
		return connError{http2.ErrCodeFlowControl, "DATA beyond the connection window"}
	}
	c.recvWindow -= n
	st := c.streams[id]
	if st == nil || st.remoteDone {
		if c.isIdleID(id) {
			return connError{http2.ErrCodeProtocol, "DATA on an idle stream"}
		}
		c.refundLocked(nil, n)
		if st == nil && c.wasResetLocked(id) {
			return nil
		}
		return c.streamErrorLocked(id, http2.ErrCodeStreamClosed)
	}
	if n > st.recvWindow {
		c.refundLocked(nil, n)
		return c.streamErrorLocked(id, http2.ErrCodeFlowControl)
	}
	st.recvWindow -= n
	data := f.Data()
	if pad := n - int32(len(data)); pad > 0 {
		c.refundLocked(st, pad)
	}
	st.received += int64(len(data))
	if st.declared >= 0 && (st.received > st.declared || f.StreamEnded() && st.received != st.declared) {
		c.refundLocked(nil, int32(len(data)))
		return c.streamErrorLocked(id, http2.ErrCodeProtocol)
	}
	if st.bodyClosed || st.resetErr != nil {
		c.refundLocked(nil, int32(len(data)))
	} else if len(data) > 0 {
		st.buf = append(st.buf, data...)
	}
	if f.StreamEnded() {
		c.endRemoteLocked(st)
	}
	st.bodyCond.Signal()
	return nil
}

// endRemoteLocked records the client's END_STREAM.
func (c *conn) endRemoteLocked(st *stream) {
	st.remoteDone = true
	st.bodyCond.Signal()
	if st.localDone {
		c.closeStreamLocked(st)
	}
}

// onHeaders applies a decoded header block: a request, or trailers.
func (c *conn) onHeaders(b *headerBlock) error {
	id := b.streamID
	if id%2 == 0 {
		return connError{http2.ErrCodeProtocol, "HEADERS on an even stream"}
	}
	if st := c.streams[id]; st != nil {
		if b.invalid != nil {
			c.srv.logger().Debug("h2: malformed trailers", "remote", c.remoteAddr, "stream", id, "err", b.invalid)
			return c.streamErrorLocked(id, http2.ErrCodeProtocol)
		}
		if st.remoteDone {
			return c.streamErrorLocked(id, http2.ErrCodeStreamClosed)
		}
		return c.onTrailers(st, b)
	}
	if id <= c.maxClientID {
		if c.wasResetLocked(id) {
			return nil // trailers sent before our RST_STREAM arrived
		}
		// §5.1.1: a new stream's id exceeds every earlier one.
		return connError{http2.ErrCodeProtocol, "HEADERS on a closed stream"}
	}
	c.maxClientID = id
	if b.invalid != nil {
		// A malformed request opened (and closed) its stream.
		c.srv.logger().Debug("h2: malformed request", "remote", c.remoteAddr, "stream", id, "err", b.invalid)
		return c.writeRSTLocked(id, http2.ErrCodeProtocol)
	}
	if b.hasPriority && b.streamDep == id {
		return c.streamErrorLocked(id, http2.ErrCodeProtocol)
	}
	if c.goAwaySent && id > c.goAwayID {
		// After GOAWAY new streams are not processed; the client
		// retries them elsewhere.
		return nil
	}
	if b.truncated {
		return c.writeTooLargeLocked(id, b.endStream)
	}
	if c.closed || uint32(c.active) >= c.maxStreams {
		if !c.chargeResetLocked() {
			return connError{http2.ErrCodeEnhanceYourCalm, "too many refused or reset streams"}
		}
		return c.writeRSTLocked(id, http2.ErrCodeRefusedStream)
	}
	st := newStream(c, id)
	if err := st.buildRequest(b.fields, b.endStream); err != nil {
		st.free()
		return c.writeRSTLocked(id, http2.ErrCodeProtocol)
	}
	c.startStreamLocked(st, b.endStream)
	return nil
}

// startStreamLocked opens st and starts its handler.
func (c *conn) startStreamLocked(st *stream, endStream bool) {
	st.sendWindow = int64(c.peerWindow)
	st.recvWindow = streamWindow
	st.inMap = true
	c.streams[st.id] = st
	c.active++
	c.handlers++
	if c.idleTimer != nil {
		c.idleTimer.Stop()
	}
	if endStream {
		st.remoteDone = true
	}
	c.srv.pool.Go(st.run)
}

// writeTooLargeLocked answers a request whose header list exceeded
// MaxHeaderBytes with 431 (RFC 9113 §10.5.1), without opening it.
func (c *conn) writeTooLargeLocked(id uint32, ended bool) error {
	c.hbuf.Reset()
	_ = c.henc.WriteField(hpack.HeaderField{Name: ":status", Value: "431"})
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.hbuf.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
		return err
	}
	if !ended {
		return c.writeRSTLocked(id, http2.ErrCodeNo)
	}
	return nil
}

// onTrailers applies the trailers b of open stream st: they end it.
func (c *conn) onTrailers(st *stream, b *headerBlock) error {
	// Pseudo-header fields come first, if any; a truncated list is not
	// passed on in part (431 is no answer once the request is running).
	if !b.endStream || b.truncated || len(b.fields) > 0 && strings.HasPrefix(b.fields[0].Name, ":") {
		return c.streamErrorLocked(st.id, http2.ErrCodeProtocol)
	}
	if st.declared >= 0 && st.received != st.declared {
		return c.streamErrorLocked(st.id, http2.ErrCodeProtocol)
	}
	// The handler sees them when its body read returns EOF (moveTrailers),
	// not before: its goroutine owns req.Trailer.
	for _, hf := range b.fields {
		key := canonicalKey(hf.Name)
		if !validTrailer(key) {
			return c.streamErrorLocked(st.id, http2.ErrCodeProtocol)
		}
		st.trailers = append(st.trailers, hf)
	}
	c.endRemoteLocked(st)
	return nil
}

func (c *conn) onRST(f *http2.RSTStreamFrame) error {
	if c.isIdleID(f.StreamID) {
		return connError{http2.ErrCodeProtocol, "RST_STREAM on an idle stream"}
	}
	st := c.streams[f.StreamID]
	if st == nil {
		return nil
	}
	c.resetLocked(st, streamErr(f.ErrCode))
	if !st.handlerDone && !c.chargeResetLocked() {
		return connError{http2.ErrCodeEnhanceYourCalm, "too many reset streams"}
	}
	return nil
}

// chargeResetLocked takes a token for a refused or client-reset stream and
// reports whether the client stays within the rapid-reset bound.
func (c *conn) chargeResetLocked() bool {
	now := time.Now()
	if !c.resetAt.IsZero() {
		c.resetTokens = min(resetBurst, c.resetTokens+now.Sub(c.resetAt).Seconds()*resetRate)
	}
	c.resetAt = now
	c.resetTokens--
	return c.resetTokens >= 0
}

func (c *conn) onSettings(f *http2.SettingsFrame) error {
	if f.IsAck() {
		return nil
	}
	if err := c.applySettingsLocked(f.ForeachSetting); err != nil {
		return err
	}
	if c.out.flooded() {
		return connError{http2.ErrCodeEnhanceYourCalm, "SETTINGS flood: client reads no replies"}
	}
	return c.fr.WriteSettingsAck()
}

// applySettingsLocked applies the client's settings in order (§6.5.3).
func (c *conn) applySettingsLocked(each func(func(http2.Setting) error) error) error {
	return each(func(s http2.Setting) error {
		if err := s.Valid(); err != nil {
			var ce http2.ConnectionError
			if errors.As(err, &ce) {
				return connError{http2.ErrCode(ce), "invalid " + s.ID.String()}
			}
			return connError{http2.ErrCodeProtocol, "invalid " + s.ID.String()}
		}
		switch s.ID {
		case http2.SettingHeaderTableSize:
			c.henc.SetMaxDynamicTableSizeLimit(s.Val)
		case http2.SettingMaxFrameSize:
			c.peerMaxFrm = s.Val
		case http2.SettingInitialWindowSize:
			// §6.9.2: the change applies to every open stream's window.
			delta := int64(s.Val) - int64(c.peerWindow)
			c.peerWindow = int32(s.Val)
			for _, st := range c.streams {
				st.sendWindow += delta
				if st.sendWindow > 1<<31-1 {
					return connError{http2.ErrCodeFlowControl, "SETTINGS_INITIAL_WINDOW_SIZE overflows a stream window"}
				}
			}
			c.cond.Broadcast()
		}
		return nil
	})
}

func (c *conn) onWindowUpdate(f *http2.WindowUpdateFrame) error {
	inc := int64(f.Increment)
	if f.StreamID == 0 {
		c.sendWindow += inc
		if c.sendWindow > 1<<31-1 {
			return connError{http2.ErrCodeFlowControl, "connection window above 2^31-1"}
		}
		c.cond.Broadcast()
		return nil
	}
	st := c.streams[f.StreamID]
	if st == nil {
		if c.isIdleID(f.StreamID) {
			return connError{http2.ErrCodeProtocol, "WINDOW_UPDATE on an idle stream"}
		}
		return nil
	}
	st.sendWindow += inc
	if st.sendWindow > 1<<31-1 {
		return c.streamErrorLocked(st.id, http2.ErrCodeFlowControl)
	}
	c.cond.Broadcast()
	return nil
}

// upgradeLocked applies an h2c Upgrade: the HTTP2-Settings payload, then
// the HTTP/1.1 request as stream 1, half-closed (remote).
func (c *conn) upgradeLocked() error {
	p := c.upSettings
	if len(p)%6 != 0 {
		return fmt.Errorf("h2c upgrade: HTTP2-Settings of %d bytes is not a list of settings", len(p))
	}
	err := c.applySettingsLocked(func(fn func(http2.Setting) error) error {
		for i := 0; i < len(p); i += 6 {
			s := http2.Setting{ID: http2.SettingID(uint16(p[i])<<8 | uint16(p[i+1])), Val: uint32(p[i+2])<<24 | uint32(p[i+3])<<16 | uint32(p[i+4])<<8 | uint32(p[i+5])}
			if err := fn(s); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("h2c upgrade: HTTP2-Settings: %w", err)
	}
	st := newStream(c, 1)
	st.fromUpgrade(c.upgrade)
	c.maxClientID = 1
	c.startStreamLocked(st, true)
	return nil
}

// goAwayLocked stops accepting streams above last and closes the
// connection once none is active.
func (c *conn) goAwayLocked(last uint32) {
	if !c.goAwaySent {
		c.goAwaySent = true
		c.goAwayID = last
	}
	if c.active == 0 {
		c.closeLocked(nil)
	}
}

// goAwayGraceful starts a graceful shutdown of the connection.
func (c *conn) goAwayGraceful() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	if !c.goAwaySent {
		_ = c.fr.WriteGoAway(c.maxClientID, http2.ErrCodeNo, nil)
		c.out.kick()
	}
	c.goAwayLocked(c.maxClientID)
}

// writeGoAwayLocked sends a GOAWAY for a connection error.
func (c *conn) writeGoAwayLocked(code http2.ErrCode, reason string) {
	if c.closed {
		return
	}
	_ = c.fr.WriteGoAway(c.maxClientID, code, []byte(reason))
	c.goAwaySent = true
	c.out.kick()
}

// closeLocked ends the connection gracefully (after GOAWAY, or idle):
// once pending frames are written, our side of the connection is shut
// (FIN, or TLS close_notify) and the reader drains what the client still
// sends until it closes too or lingerTime passes. Closing with unread
// input would make the kernel reset the connection, and the client could
// lose the last responses.
func (c *conn) closeLocked(err error) {
	if c.closed {
		return
	}
	c.closed = true
	if err == nil {
		err = errConnClosed
	}
	c.closeErr = err
	go func() {
		_ = c.out.wait(closeFlushWait)
		// The read deadline also wakes a reader blocked on a client
		// that sends nothing; the write deadline, a write (or a TLS
		// close_notify) blocked on one that reads nothing.
		deadline := time.Now().Add(lingerTime)
		_ = c.nc.SetReadDeadline(deadline)
		_ = c.nc.SetWriteDeadline(deadline)
		if cw, ok := c.nc.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
	}()
}

// lingerTime bounds how long a gracefully closed connection waits for the
// client to close its side.
const lingerTime = time.Second

// closeNow closes the connection without a goodbye.
func (c *conn) closeNow(err error) {
	c.mu.Lock()
	if c.closeErr == nil {
		c.closeErr = err
	}
	c.closed = true
	c.mu.Unlock()
	_ = c.nc.Close()
}

// onIdleLocked runs when the last active stream ends.
func (c *conn) onIdleLocked() {
	c.cond.Broadcast()
	if c.goAwaySent || c.peerGoAway {
		c.closeLocked(nil)
		return
	}
	if t := c.srv.IdleTimeout; t > 0 && !c.closed {
		if c.idleTimer == nil {
			c.idleTimer = time.AfterFunc(t, c.idleFired)
		} else {
			c.idleTimer.Reset(t)
		}
	}
}

func (c *conn) idleFired() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.active > 0 || c.closed {
		return
	}
	_ = c.fr.WriteGoAway(c.maxClientID, http2.ErrCodeNo, []byte("idle"))
	c.goAwaySent = true
	c.goAwayID = c.maxClientID
	c.out.kick()
	c.closeLocked(nil)
}

// refundLocked gives n received bytes back to the connection window (and
// to st's, when st is not nil and still open), sending WINDOW_UPDATE once
// a quarter of a window has gathered.
func (c *conn) refundLocked(st *stream, n int32) {
	if n <= 0 {
		return
	}
	c.recvUnacked += n
	if c.recvUnacked >= connWindow/4 && !c.closed {
		_ = c.fr.WriteWindowUpdate(0, uint32(c.recvUnacked))
		c.recvWindow += c.recvUnacked
		c.recvUnacked = 0
		c.out.kick()
	}
	if st == nil || st.remoteDone || st.resetErr != nil {
		return
	}
	st.recvUnacked += n
	if st.recvUnacked >= streamWindow/4 {
		_ = c.fr.WriteWindowUpdate(st.id, uint32(st.recvUnacked))
		st.recvWindow += st.recvUnacked
		st.recvUnacked = 0
		c.out.kick()
	}
}

func (c *conn) writeRSTLocked(id uint32, code http2.ErrCode) error {
	if c.closed {
		return nil
	}
	if c.out.flooded() {
		// Frames provoking resets keep coming and our answers pile up
		// unread.
		return connError{http2.ErrCodeEnhanceYourCalm, "RST_STREAM flood: client reads no replies"}
	}
	c.reset[c.resetIdx] = id
	c.resetIdx = (c.resetIdx + 1) % len(c.reset)
	return c.fr.WriteRSTStream(id, code)
}

// wasResetLocked reports whether we reset stream id recently.
func (c *conn) wasResetLocked(id uint32) bool {
	for _, r := range c.reset {
		if r == id {
			return true
		}
	}
	return false
}

// resetLocked ends st abruptly: its context is canceled, its body reader
// and writers wake with err, and it leaves the open set.
func (c *conn) resetLocked(st *stream, err error) {
	if st.resetErr == nil {
		st.resetErr = err
		st.cancel(nil)
		st.hook.Fire()
		c.refundLocked(nil, int32(len(st.buf)-st.off))
		st.buf, st.off = st.buf[:0], 0
	}
	st.remoteDone, st.localDone = true, true
	st.bodyCond.Broadcast()
	c.cond.Broadcast()
	c.closeStreamLocked(st)
}

// closeStreamLocked takes st out of the open set; it stays active until
// its handler returned too.
func (c *conn) closeStreamLocked(st *stream) {
	if st.inMap {
		delete(c.streams, st.id)
		st.inMap = false
	}
	c.releaseLocked(st)
}

// releaseLocked frees st once it is closed and its handler returned.
func (c *conn) releaseLocked(st *stream) {
	if st.inMap || !st.handlerDone || st.released {
		return
	}
	st.released = true
	c.active--
	if c.active == 0 {
		c.onIdleLocked()
	}
	st.free()
}

// streamErr is the error a stream's body reads and writes return after a
// RST_STREAM.
type streamErr http2.ErrCode

func (e streamErr) Error() string { return "h2: stream reset: " + http2.ErrCode(e).String() }
