package h2

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// TestUpgrade serves an h2c Upgrade: the test answers the HTTP/1.1 request
// with 101 as the proxy would and hands it to ServeConn; the response to
// it arrives on stream 1, with the HTTP2-Settings applied, and a second
// request on the same connection works.
func TestUpgrade(t *testing.T) {
	srv := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		_, _ = io.WriteString(w, r.Proto+" "+r.Method+" "+r.URL.Path+" "+string(b)+" upgrade="+r.Header.Get("Upgrade"))
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		br := bufio.NewReader(c)
		req, err := http.ReadRequest(br)
		if err != nil {
			t.Errorf("read upgrade request: %v", err)
			_ = c.Close()
			return
		}
		settings, err := base64.RawURLEncoding.DecodeString(req.Header.Get("HTTP2-Settings"))
		if err != nil {
			t.Errorf("HTTP2-Settings: %v", err)
		}
		body, _ := io.ReadAll(req.Body)
		req.Body = io.NopCloser(strings.NewReader(string(body)))
		_, _ = io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n")
		srv.ServeConn(&bufferedConn{Conn: c, r: br}, ConnOptions{UpgradeRequest: req, Settings: settings})
	}()
	t.Cleanup(func() { _ = ln.Close(); _ = srv.Close(); <-done })

	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = nc.Close() }()
	// SETTINGS_MAX_FRAME_SIZE 20000 and INITIAL_WINDOW_SIZE 5: the body
	// on stream 1 must come in 5-byte steps until WINDOW_UPDATE.
	settings := []byte{0, 5, 0, 0, 0x4e, 0x20, 0, 4, 0, 0, 0, 5}
	_, err = io.WriteString(nc, "POST /up HTTP/1.1\r\nHost: up.test\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"+
		"HTTP2-Settings: "+base64.RawURLEncoding.EncodeToString(settings)+"\r\nContent-Length: 4\r\n\r\nping")
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(nc)
	res, err := http.ReadResponse(br, nil)
	if err != nil || res.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade response %v, %v; want 101", res, err)
	}
	rc := &rawConn{nc: &bufferedConn{Conn: nc, r: br}}
	rc.init()
	if _, err := io.WriteString(nc, clientPreface); err != nil {
		t.Fatal(err)
	}
	if err := rc.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	want := "HTTP/2.0 POST /up ping upgrade="
	var got []byte
	for len(got) < len(want) {
		f, err := rc.next(t)
		if err != nil {
			t.Fatal(err)
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			if f.StreamID != 1 || f.PseudoValue("status") != "200" {
				t.Fatalf("HEADERS on stream %d status %q, want stream 1 status 200", f.StreamID, f.PseudoValue("status"))
			}
		case *http2.DataFrame:
			if f.StreamID != 1 || len(f.Data()) > 5 {
				t.Fatalf("DATA of %d bytes on stream %d, want stream 1 in steps of at most 5 bytes", len(f.Data()), f.StreamID)
			}
			got = append(got, f.Data()...)
			_ = rc.write(func() error { return rc.fr.WriteWindowUpdate(1, uint32(len(f.Data()))) })
		default:
			t.Fatalf("unexpected %v", f)
		}
	}
	if string(got) != want {
		t.Fatalf("stream 1 body %q, want %q", got, want)
	}
	if err := rc.request(3, "GET", "/second", true); err != nil {
		t.Fatal(err)
	}
	for {
		f, err := rc.next(t)
		if err != nil {
			t.Fatal(err)
		}
		if h, ok := f.(*http2.MetaHeadersFrame); ok && h.StreamID == 3 {
			if h.PseudoValue("status") != "200" {
				t.Fatalf("stream 3 status %q", h.PseudoValue("status"))
			}
			break
		}
	}
}

// bufferedConn reads through r, which may hold bytes read past the
// HTTP/1.1 part of the connection.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// TestShutdown: an open stream finishes after Shutdown began, the client
// sees GOAWAY naming it, a stream opened after it is not processed,
// Active counts the draining connection, and Shutdown returns once the
// stream is done and the connection closed.
func TestShutdown(t *testing.T) {
	release := make(chan struct{})
	handled := make(chan string, 4)
	ts := startServer(t, false, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handled <- r.URL.Path
		if r.URL.Path == "/slow" {
			<-release
		}
		_, _ = io.WriteString(w, "done "+r.URL.Path)
	}), nil)
	rc := dialRaw(t, ts.addr)
	if err := rc.request(1, "GET", "/slow", true); err != nil {
		t.Fatal(err)
	}
	if p := <-handled; p != "/slow" {
		t.Fatalf("handler got %s", p)
	}
	if n := ts.srv.Active(); n != 1 {
		t.Fatalf("Active() = %d with one open stream, want 1", n)
	}
	shut := make(chan error, 1)
	go func() { shut <- ts.srv.Shutdown(context.Background()) }()
	for {
		f, err := rc.next(t)
		if err != nil {
			t.Fatalf("before GOAWAY: %v", err)
		}
		if g, ok := f.(*http2.GoAwayFrame); ok {
			if g.ErrCode != http2.ErrCodeNo || g.LastStreamID != 1 {
				t.Fatalf("GOAWAY %v last stream %d, want NO_ERROR and 1", g.ErrCode, g.LastStreamID)
			}
			break
		}
	}
	// A stream beyond the GOAWAY's last id is not processed.
	if err := rc.request(3, "GET", "/late", true); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned (%v) while a stream is open", err)
	default:
	}
	close(release)
	var body []byte
	ended := false
	for !ended {
		f, err := rc.next(t)
		if err != nil {
			t.Fatalf("stream 1 did not finish: %v", err)
		}
		switch f := f.(type) {
		case *http2.DataFrame:
			if f.StreamID != 1 {
				t.Fatalf("DATA on stream %d after GOAWAY", f.StreamID)
			}
			body = append(body, f.Data()...)
			ended = f.StreamEnded()
		case *http2.MetaHeadersFrame:
			if f.StreamID != 1 {
				t.Fatalf("HEADERS on stream %d after GOAWAY", f.StreamID)
			}
		}
	}
	if string(body) != "done /slow" {
		t.Fatalf("stream 1 body %q", body)
	}
	select {
	case err := <-shut:
		if err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Shutdown did not return after the last stream ended")
	}
	if _, err := rc.next(t); !errors.Is(err, io.EOF) && !isReset(err) {
		t.Fatalf("after Shutdown the connection reads %v, want EOF", err)
	}
	select {
	case p := <-handled:
		t.Fatalf("stream for %s was processed after GOAWAY", p)
	default:
	}
	if n := ts.srv.Active(); n != 0 {
		t.Fatalf("Active() = %d after Shutdown, want 0", n)
	}
	// A connection handed over after Shutdown (its preface was read just
	// then) gets a GOAWAY naming no stream, so its client knows none was
	// processed, and is closed.
	late, err := net.Dial("tcp", ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = late.Close() }()
	_ = late.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(late, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(late, late)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("a connection after Shutdown ended (%v) without GOAWAY", err)
		}
		if ga, ok := f.(*http2.GoAwayFrame); ok {
			if ga.LastStreamID != 0 || ga.ErrCode != http2.ErrCodeNo {
				t.Fatalf("GOAWAY after Shutdown: last stream %d, %v; want 0, NO_ERROR", ga.LastStreamID, ga.ErrCode)
			}
			break
		}
	}
	if _, err := io.Copy(io.Discard, late); err != nil && !isReset(err) {
		t.Fatalf("after the GOAWAY: %v, want the connection closed", err)
	}
}

// isReset reports a connection reset by the peer (a close with unread
// input), as opposed to a timeout.
func isReset(err error) bool {
	var ne *net.OpError
	return errors.As(err, &ne) && !ne.Timeout()
}

// TestIdleTimeout: a connection without streams for IdleTimeout gets a
// GOAWAY and is closed; one with an open stream is not.
func TestIdleTimeout(t *testing.T) {
	release := make(chan struct{})
	ts := startServer(t, false, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			<-release
		}
	}), func(s *Server) { s.IdleTimeout = 50 * time.Millisecond })
	rc := dialRaw(t, ts.addr)
	if err := rc.request(1, "GET", "/hold", true); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the stream to be active", func() bool { return ts.srv.Active() == 1 })
	// Well past the idle timeout, with the stream open: still served.
	time.Sleep(200 * time.Millisecond)
	if ts.srv.Active() != 1 {
		t.Fatal("the connection closed while a stream was open")
	}
	close(release)
	sawGoAway := false
	for {
		f, err := rc.next(t)
		if err != nil {
			if !sawGoAway {
				t.Fatalf("connection ended without GOAWAY: %v", err)
			}
			break
		}
		if g, ok := f.(*http2.GoAwayFrame); ok {
			if g.ErrCode != http2.ErrCodeNo || g.LastStreamID != 1 {
				t.Fatalf("GOAWAY %v last %d, want NO_ERROR 1", g.ErrCode, g.LastStreamID)
			}
			sawGoAway = true
		}
	}
}

// TestExpectContinue: 100 Continue goes out when the handler first reads
// the body, not before.
func TestExpectContinue(t *testing.T) {
	read := make(chan struct{})
	ts := startServer(t, false, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-read
		b, _ := io.ReadAll(r.Body)
		_, _ = w.Write(b)
	}), nil)
	rc := dialRaw(t, ts.addr)
	if err := rc.request(1, "POST", "/c", false, "expect", "100-continue", "content-length", "2"); err != nil {
		t.Fatal(err)
	}
	// Nothing may arrive before the handler reads: a PING round trip
	// shows what the server sent so far.
	_ = rc.write(func() error { return rc.fr.WritePing(false, [8]byte{1}) })
	f, err := rc.next(t)
	if p, ok := f.(*http2.PingFrame); err != nil || !ok || !p.IsAck() {
		t.Fatalf("before the body read: %v %v, want only the PING ACK", f, err)
	}
	close(read)
	f, err = rc.next(t)
	if h, ok := f.(*http2.MetaHeadersFrame); err != nil || !ok || h.PseudoValue("status") != "100" {
		t.Fatalf("after the body read: %v %v, want HEADERS 100", f, err)
	}
	_ = rc.write(func() error { return rc.fr.WriteData(1, true, []byte("ok")) })
	f, err = rc.next(t)
	if h, ok := f.(*http2.MetaHeadersFrame); err != nil || !ok || h.PseudoValue("status") != "200" {
		t.Fatalf("final response: %v %v, want HEADERS 200", f, err)
	}
}

// TestUnreadBodyReset: a handler that answers without reading the whole
// request body ends the stream with the response, then RST_STREAM
// NO_ERROR (RFC 9113 §8.1), and the connection window is given back.
func TestUnreadBodyReset(t *testing.T) {
	ts := startServer(t, false, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "early")
	}), nil)
	rc := dialRaw(t, ts.addr)
	if err := rc.request(1, "POST", "/u", false); err != nil {
		t.Fatal(err)
	}
	_ = rc.write(func() error { return rc.fr.WriteData(1, false, make([]byte, 1000)) })
	var order []string
	for len(order) < 3 {
		f, err := rc.next(t)
		if err != nil {
			t.Fatal(err)
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			order = append(order, "HEADERS")
		case *http2.DataFrame:
			if f.StreamEnded() {
				order = append(order, "DATA+END_STREAM")
			}
		case *http2.RSTStreamFrame:
			order = append(order, "RST_STREAM "+f.ErrCode.String())
		}
	}
	if got := strings.Join(order, ", "); got != "HEADERS, DATA+END_STREAM, RST_STREAM NO_ERROR" {
		t.Fatalf("frames %s, want HEADERS, DATA+END_STREAM, RST_STREAM NO_ERROR", got)
	}
	// What the client sent before it saw the reset (more body, then
	// trailers) is ignored: no error, and the connection lives on.
	_ = rc.write(func() error { return rc.fr.WriteData(1, false, make([]byte, 1000)) })
	rc.hbuf.Reset()
	_ = rc.henc.WriteField(hpack.HeaderField{Name: "x-trailer", Value: "t"})
	_ = rc.write(func() error {
		return rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: rc.hbuf.Bytes(), EndStream: true, EndHeaders: true})
	})
	_ = rc.write(func() error { return rc.fr.WritePing(false, [8]byte{7}) })
	f, err := rc.next(t)
	if p, ok := f.(*http2.PingFrame); err != nil || !ok || !p.IsAck() {
		t.Fatalf("after late body and trailers on the reset stream: %v, %v; want only the PING ACK", f, err)
	}
}

// TestDeadlines: through http.ResponseController, a read deadline fails a
// body read that waits for data, and a write deadline resets a stream
// whose response is stuck behind the client's flow-control window.
func TestDeadlines(t *testing.T) {
	results := make(chan error, 2)
	ts := startServer(t, false, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		switch r.URL.Path {
		case "/read":
			if err := rc.SetReadDeadline(time.Now().Add(20 * time.Millisecond)); err != nil {
				results <- err
				return
			}
			_, err := r.Body.Read(make([]byte, 10))
			results <- err
		case "/write":
			if err := rc.SetWriteDeadline(time.Now().Add(20 * time.Millisecond)); err != nil {
				results <- err
				return
			}
			_, err := w.Write(make([]byte, 64<<10)) // beyond the client's window of 0
			results <- err
		}
	}), nil)
	rc := dialRaw(t, ts.addr)
	// A stream window of 0: no response DATA can leave.
	_ = rc.write(func() error { return rc.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0}) })
	if err := rc.request(1, "POST", "/read", false); err != nil {
		t.Fatal(err)
	}
	if err := <-results; !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("body read past the read deadline: %v, want os.ErrDeadlineExceeded", err)
	}
	if err := rc.request(3, "GET", "/write", true); err != nil {
		t.Fatal(err)
	}
	if err := <-results; !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("write past the write deadline: %v, want os.ErrDeadlineExceeded", err)
	}
	for {
		f, err := rc.next(t)
		if err != nil {
			t.Fatal(err)
		}
		if r, ok := f.(*http2.RSTStreamFrame); ok && r.StreamID == 3 {
			if r.ErrCode != http2.ErrCodeInternal {
				t.Fatalf("stream 3 reset with %v, want INTERNAL_ERROR", r.ErrCode)
			}
			break
		}
	}
}

// TestPrefaceTimeouts: a client that never finishes its preface is cut off
// after ReadHeaderTimeout; one that sends the preface and no request is
// closed after IdleTimeout (GOAWAY first).
func TestPrefaceTimeouts(t *testing.T) {
	ts := startServer(t, false, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}), func(s *Server) {
		s.ReadHeaderTimeout = 50 * time.Millisecond
		s.IdleTimeout = 50 * time.Millisecond
	})
	nc, err := net.Dial("tcp", ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = nc.Close() }()
	if _, err := io.WriteString(nc, clientPreface[:10]); err != nil {
		t.Fatal(err)
	}
	_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	// The server's SETTINGS come first; then the connection must end.
	if _, err := io.Copy(io.Discard, nc); err != nil && !isReset(err) {
		t.Fatalf("half a preface: %v, want the server to close the connection", err)
	}

	rc := dialRaw(t, ts.addr)
	if code := rc.readUntilGoAway(t); code != http2.ErrCodeNo {
		t.Fatalf("idle connection got GOAWAY %v, want NO_ERROR", code)
	}
	if _, err := rc.next(t); err == nil {
		t.Fatal("frames after the idle GOAWAY, want the connection closed")
	}
}

// TestBaseContextEnds: when the context a connection was served with
// ends, its running handlers' contexts are canceled (they are not
// children of it: see conn.streamBase) and the connection closes; the
// streams' contexts still carry its values.
func TestBaseContextEnds(t *testing.T) {
	type key struct{}
	base, cancel := context.WithCancel(context.WithValue(context.Background(), key{}, "base value"))
	defer cancel()
	started := make(chan string, 1)
	ended := make(chan error, 1)
	srv := &Server{Log: slog.New(slog.DiscardHandler), Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, _ := r.Context().Value(key{}).(string)
		started <- v
		<-r.Context().Done()
		ended <- r.Context().Err()
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	served := make(chan struct{})
	go func() {
		defer close(served)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		srv.ServeConn(c, ConnOptions{Context: base})
	}()
	rc := dialRaw(t, ln.Addr().String())
	if err := rc.request(1, "GET", "/", true); err != nil {
		t.Fatal(err)
	}
	select {
	case v := <-started:
		if v != "base value" {
			t.Fatalf("the stream's context carries %q, want the base context's value", v)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the handler did not start")
	}
	cancel()
	select {
	case err := <-ended:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("handler context ended with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the handler's context stayed alive after the base context ended")
	}
	select {
	case <-served:
	case <-time.After(10 * time.Second):
		t.Fatal("ServeConn did not return after the base context ended")
	}
}

// TestSendTimeout: a client that opens its flow-control windows wide and
// then reads nothing from its socket has its connection closed once the
// send timeout passes without progress, ending the handler's writes.
func TestSendTimeout(t *testing.T) {
	wrote := make(chan error, 1)
	ts := startServer(t, false, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		chunk := bytes.Repeat([]byte("z"), 32<<10)
		for range 512 { // 16 MiB
			if _, err := w.Write(chunk); err != nil {
				wrote <- err
				return
			}
		}
		wrote <- nil
	}), func(s *Server) { s.SendTimeout = 200 * time.Millisecond })
	rc := dialRaw(t, ts.addr)
	if tc, ok := rc.nc.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(16 << 10)
	}
	const wide = 1<<31 - 1
	if err := rc.write(func() error {
		if err := rc.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: wide}); err != nil {
			return err
		}
		return rc.fr.WriteWindowUpdate(0, wide-65535)
	}); err != nil {
		t.Fatal(err)
	}
	if err := rc.request(1, "GET", "/big", true); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-wrote:
		if err == nil {
			t.Fatal("16 MiB were written to a client that reads nothing")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the handler's writes to a client that reads nothing never failed")
	}
}
