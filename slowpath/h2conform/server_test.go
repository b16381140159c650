package h2conform

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/novaedge/novaedge/slowpath/internal/testcert"
)

const serverName = "h2conform.test"

// testServer is an http.Server configured by Configure on a loopback
// listener, plaintext (HTTP/1.1 and HTTP/2 with prior knowledge) or TLS
// (ALPN h2 and http/1.1).
type testServer struct {
	addr string
	ca   *testcert.CA // nil: plaintext
}

func startServer(t *testing.T, useTLS bool, opts Options, connState func(net.Conn, http.ConnState)) *testServer {
	t.Helper()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, "hello from "+r.Proto+"\n")
	})
	protos := new(http.Protocols)
	protos.SetHTTP1(true)
	protos.SetHTTP2(true)
	protos.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: h, Protocols: protos, ConnState: connState, ErrorLog: log.New(io.Discard, "", 0)}
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{addr: raw.Addr().String()}
	ln := net.Listener(raw)
	if useTLS {
		ts.ca, err = testcert.NewCA("test")
		if err != nil {
			t.Fatal(err)
		}
		certPEM, keyPEM, err := ts.ca.Leaf(serverName)
		if err != nil {
			t.Fatal(err)
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		// As the slow path does: the listener returns *tls.Conn and
		// net/http handshakes.
		ln = tlsListener{Listener: raw, cfg: &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}}}
	}
	cl, err := Configure(srv, ln, opts)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(cl)
	}()
	t.Cleanup(func() {
		_ = srv.Close()
		<-done
	})
	return ts
}

type tlsListener struct {
	net.Listener
	cfg *tls.Config
}

func (l tlsListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return tls.Server(c, l.cfg), nil
}

// dial opens a connection that speaks HTTP/2 (the preface and an empty
// SETTINGS sent).
func (ts *testServer) dial(t *testing.T) *client {
	t.Helper()
	c, err := net.Dial("tcp", ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	// Bounds a failing test, not a measurement.
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	if ts.ca != nil {
		tc := tls.Client(c, &tls.Config{RootCAs: ts.ca.Pool(), ServerName: serverName, NextProtos: []string{"h2"}})
		if err := tc.Handshake(); err != nil {
			t.Fatal(err)
		}
		if p := tc.ConnectionState().NegotiatedProtocol; p != "h2" {
			t.Fatalf("ALPN negotiated %q", p)
		}
		c = tc
	}
	cl := &client{t: t, c: c, fr: http2.NewFramer(c, c)}
	cl.enc = hpack.NewEncoder(&cl.buf)
	cl.fr.AllowIllegalWrites = true
	cl.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if _, err := io.WriteString(c, clientPreface); err != nil {
		t.Fatal(err)
	}
	cl.must(cl.fr.WriteSettings())
	return cl
}

// client is a frame-level HTTP/2 client.
type client struct {
	t   *testing.T
	c   net.Conn
	fr  *http2.Framer
	enc *hpack.Encoder
	buf bytes.Buffer
}

func (c *client) must(err error) {
	c.t.Helper()
	if err != nil {
		c.t.Fatal(err)
	}
}

// block encodes a GET of / with extra fields (a pseudo-header among them
// replaces the default), with the connection's HPACK encoder (so repeated
// fields come from its dynamic table).
func (c *client) block(extra ...string) []byte {
	c.buf.Reset()
	fields := []string{":method", "GET", ":scheme", "https", ":path", "/", ":authority", serverName}
	for i := 0; i+1 < len(extra); i += 2 {
		if j := slices.Index(fields, extra[i]); j >= 0 && strings.HasPrefix(extra[i], ":") {
			fields[j+1] = extra[i+1]
			continue
		}
		fields = append(fields, extra[i], extra[i+1])
	}
	for i := 0; i+1 < len(fields); i += 2 {
		c.must(c.enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]}))
	}
	return bytes.Clone(c.buf.Bytes())
}

func (c *client) get(stream uint32, extra ...string) {
	c.t.Helper()
	c.must(c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: stream, BlockFragment: c.block(extra...), EndHeaders: true, EndStream: true}))
}

// outcome is what a case waits for.
type outcome struct {
	kind   string // "status", "data", "rst", "goaway", "ack"
	stream uint32
	code   http2.ErrCode
	status string
	length int
}

func status(stream uint32, s string) outcome {
	return outcome{kind: "status", stream: stream, status: s}
}
func rst(stream uint32, code http2.ErrCode) outcome {
	return outcome{kind: "rst", stream: stream, code: code}
}
func goaway(code http2.ErrCode) outcome { return outcome{kind: "goaway", code: code} }
func data(stream uint32, length int) outcome {
	return outcome{kind: "data", stream: stream, length: length}
}
func settingsAck() outcome { return outcome{kind: "ack"} }

func (o outcome) String() string {
	return fmt.Sprintf("%s stream=%d code=%v status=%q length=%d", o.kind, o.stream, o.code, o.status, o.length)
}

// expect reads frames until want arrives; a frame that rules it out (a
// reset of the stream, a GOAWAY, a close) fails the test.
func (c *client) expect(want outcome) {
	c.t.Helper()
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			c.t.Fatalf("waiting for %v: %v", want, err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if f.IsAck() {
				if want.kind == "ack" {
					return
				}
				continue
			}
			c.must(c.fr.WriteSettingsAck())
		case *http2.MetaHeadersFrame:
			switch {
			case want.kind == "status" && f.StreamID == want.stream:
				if got := f.PseudoValue("status"); got != want.status {
					c.t.Fatalf("stream %d: status %s, want %s", f.StreamID, got, want.status)
				}
				return
			case want.kind == "rst" && f.StreamID == want.stream, want.kind == "goaway":
				c.t.Fatalf("stream %d answered with status %s, want %v", f.StreamID, f.PseudoValue("status"), want)
			}
		case *http2.DataFrame:
			if want.kind == "data" && f.StreamID == want.stream {
				if len(f.Data()) != want.length {
					c.t.Fatalf("stream %d: DATA of %d bytes, want %d", f.StreamID, len(f.Data()), want.length)
				}
				return
			}
		case *http2.RSTStreamFrame:
			if f.StreamID == want.stream {
				if want.kind != "rst" || f.ErrCode != want.code {
					c.t.Fatalf("stream %d reset with %v, want %v", f.StreamID, f.ErrCode, want)
				}
				return
			}
		case *http2.GoAwayFrame:
			if want.kind != "goaway" || f.ErrCode != want.code {
				c.t.Fatalf("GOAWAY %v, want %v", f.ErrCode, want)
			}
			return
		}
	}
}

// TestServerAnswers: frame sequences and the answer RFC 9113 requires,
// from the x/net server behind the filter, over h2c and over TLS.
func TestServerAnswers(t *testing.T) {
	const (
		protocolError = http2.ErrCodeProtocol
		streamClosed  = http2.ErrCodeStreamClosed
	)
	tests := []struct {
		name string
		run  func(c *client)
	}{
		{"valid request", func(c *client) {
			c.get(1)
			c.expect(status(1, "200"))
		}},
		{"te: trailers", func(c *client) {
			c.get(1, "te", "trailers")
			c.expect(status(1, "200"))
		}},
		{"connection", func(c *client) {
			c.get(1, "connection", "keep-alive")
			c.expect(rst(1, protocolError))
		}},
		{"keep-alive", func(c *client) {
			c.get(1, "keep-alive", "timeout=5")
			c.expect(rst(1, protocolError))
		}},
		{"proxy-connection", func(c *client) {
			c.get(1, "proxy-connection", "close")
			c.expect(rst(1, protocolError))
		}},
		{"transfer-encoding", func(c *client) {
			c.get(1, "transfer-encoding", "chunked")
			c.expect(rst(1, protocolError))
		}},
		{"upgrade", func(c *client) {
			c.get(1, "upgrade", "websocket")
			c.expect(rst(1, protocolError))
		}},
		{"te other than trailers", func(c *client) {
			c.get(1, "te", "trailers, deflate")
			c.expect(rst(1, protocolError))
		}},
		{"uppercase field name (the server's own check)", func(c *client) {
			c.get(1, "X-Upper", "1")
			c.expect(rst(1, protocolError))
		}},
		{"connection field in a CONTINUATION", func(c *client) {
			b := c.block("x-a", "1", "connection", "close")
			c.must(c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: b[:3], EndStream: true}))
			c.must(c.fr.WriteContinuation(1, false, b[3:len(b)-2]))
			c.must(c.fr.WriteContinuation(1, true, b[len(b)-2:]))
			c.expect(rst(1, protocolError))
		}},
		{"connection field in a padded HEADERS", func(c *client) {
			c.must(c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: c.block("connection", "close"), EndHeaders: true, EndStream: true, PadLength: 9}))
			c.expect(rst(1, protocolError))
		}},
		{"connection field in a full HEADERS frame", func(c *client) {
			var b []byte
			for n := defaultMaxFrameSize; len(b) == 0 || len(b) > defaultMaxFrameSize; n-- {
				c.enc = hpack.NewEncoder(&c.buf) // only the last try is sent
				b = c.block("x-fill", strings.Repeat("~", n), "connection", "close")
			}
			c.must(c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: b, EndHeaders: true, EndStream: true}))
			c.expect(rst(1, protocolError))
		}},
		{"the connection outlives a reset request and its body", func(c *client) {
			c.must(c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: c.block(":method", "POST", "connection", "close"), EndHeaders: true}))
			c.expect(rst(1, protocolError))
			c.must(c.fr.WriteData(1, true, []byte("body in flight")))
			c.expect(rst(1, streamClosed))
			c.get(3)
			c.expect(status(3, "200"))
		}},
		{"HPACK stays in step across rewritten blocks", func(c *client) {
			c.get(1, "connection", "close")
			c.expect(rst(1, protocolError))
			c.get(3, "connection", "close") // now from the dynamic table
			c.expect(rst(3, protocolError))
			c.get(5, "x-later", "1")
			c.expect(status(5, "200"))
		}},
		{"repeated SETTINGS_INITIAL_WINDOW_SIZE applies in order", func(c *client) {
			c.must(c.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 100}, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1}))
			c.expect(settingsAck())
			c.get(1)
			c.expect(data(1, 1))
		}},
		{"repeated setting with an invalid window", func(c *client) {
			c.must(c.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1}, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 31}))
			c.expect(goaway(http2.ErrCodeFlowControl))
		}},
		{"repeated setting with an invalid ENABLE_PUSH", func(c *client) {
			c.must(c.fr.WriteSettings(http2.Setting{ID: http2.SettingEnablePush, Val: 0}, http2.Setting{ID: http2.SettingEnablePush, Val: 2}))
			c.expect(goaway(protocolError))
		}},
		{"over 100 settings (the server's flood guard)", func(c *client) {
			ss := make([]http2.Setting, 101)
			for i := range ss {
				ss[i] = http2.Setting{ID: http2.SettingID(0x100 + i), Val: 1}
			}
			c.must(c.fr.WriteSettings(ss...))
			c.expect(goaway(protocolError))
		}},
		{"HEADERS over SETTINGS_MAX_FRAME_SIZE", func(c *client) {
			b := c.block("x-big", strings.Repeat("~", defaultMaxFrameSize))
			c.must(c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: b, EndHeaders: true, EndStream: true}))
			c.expect(goaway(http2.ErrCodeFrameSize))
		}},
		{"DATA of SETTINGS_MAX_FRAME_SIZE", func(c *client) {
			c.must(c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: c.block(":method", "POST"), EndHeaders: true}))
			c.must(c.fr.WriteData(1, true, make([]byte, defaultMaxFrameSize)))
			c.expect(status(1, "200"))
		}},
	}
	for _, transport := range []struct {
		name string
		tls  bool
	}{{"h2c", false}, {"tls", true}} {
		t.Run(transport.name, func(t *testing.T) {
			ts := startServer(t, transport.tls, Options{StrictPreface: true}, nil)
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) { tc.run(ts.dial(t)) })
			}
		})
	}
}

// TestPlaintextFirstLine: what a plaintext connection's first line gets.
func TestPlaintextFirstLine(t *testing.T) {
	for _, tc := range []struct {
		name   string
		strict bool
		send   string
		want   string // start of the answer; "": closed without one
	}{
		{"HTTP/1.1", true, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", "HTTP/1.1 200 OK"},
		{"HTTP/1.0", true, "GET / HTTP/1.0\r\n\r\n", "HTTP/1.0 200 OK"},
		{"bad HTTP/1.1 request", true, "GET / HTTP/1.1\r\n\r\n", "HTTP/1.1 400 Bad Request"},
		{"invalid preface, strict", true, "INVALID CONNECTION PREFACE\r\n\r\n", ""},
		{"invalid preface, not strict", false, "INVALID CONNECTION PREFACE\r\n\r\n", "HTTP/1.1 400 Bad Request"},
		{"broken preface", false, "PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := startServer(t, false, Options{StrictPreface: tc.strict}, nil)
			c, err := net.Dial("tcp", ts.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = c.Close() }()
			_ = c.SetDeadline(time.Now().Add(20 * time.Second))
			if _, err := io.WriteString(c, tc.send); err != nil {
				t.Fatal(err)
			}
			line, err := bufio.NewReader(c).ReadString('\n')
			if tc.want == "" {
				if line != "" || !errors.Is(err, io.EOF) {
					t.Fatalf("got %q, %v; want the connection closed without an answer", line, err)
				}
				return
			}
			if !strings.HasPrefix(line, tc.want) {
				t.Fatalf("got %q (%v), want %q", line, err, tc.want)
			}
		})
	}
}

// connTracker mirrors the slow path's drain bookkeeping: connections in
// StateNew or StateActive are busy.
type connTracker struct {
	mu     sync.Mutex
	states map[net.Conn]http.ConnState
	events chan http.ConnState
}

func (ct *connTracker) hook(c net.Conn, st http.ConnState) {
	ct.mu.Lock()
	if st == http.StateClosed || st == http.StateHijacked {
		delete(ct.states, c)
	} else {
		ct.states[c] = st
	}
	ct.mu.Unlock()
	ct.events <- st
}

func (ct *connTracker) busy() int {
	ct.mu.Lock()
	defer ct.mu.Unlock()
	n := 0
	for _, st := range ct.states {
		if st == http.StateNew || st == http.StateActive {
			n++
		}
	}
	return n
}

func (ct *connTracker) tracked() int {
	ct.mu.Lock()
	defer ct.mu.Unlock()
	return len(ct.states)
}

// waitFor reads hook events until st has been reported n times.
func (ct *connTracker) waitFor(t *testing.T, st http.ConnState, n int) {
	t.Helper()
	timeout := time.After(20 * time.Second) // bounds a failing test
	for n > 0 {
		select {
		case got := <-ct.events:
			if got == st {
				n--
			}
		case <-timeout:
			t.Fatalf("no %v from ConnState", st)
		}
	}
}

// TestConnState: an idle HTTP/2 connection counts as idle, not busy, for
// ConnState bookkeeping (so a drain does not wait for it), and a closed
// one leaves nothing behind, with TLS (two identities, handed over) as
// with h2c (one).
func TestConnState(t *testing.T) {
	for _, tc := range []struct {
		name   string
		tls    bool
		closed int // StateClosed reports at the end
	}{{"h2c", false, 1}, {"tls", true, 2}} {
		t.Run(tc.name, func(t *testing.T) {
			ct := &connTracker{states: map[net.Conn]http.ConnState{}, events: make(chan http.ConnState, 64)}
			ts := startServer(t, tc.tls, Options{StrictPreface: true}, ct.hook)
			c := ts.dial(t)
			c.get(1)
			c.expect(status(1, "200"))
			// x/net reports StateIdle when the stream is done: once after
			// the connection starts, once after the request.
			ct.waitFor(t, http.StateIdle, 2)
			if n := ct.busy(); n != 0 {
				t.Fatalf("%d connections busy with the HTTP/2 connection idle", n)
			}
			_ = c.c.Close()
			ct.waitFor(t, http.StateClosed, tc.closed)
			if n := ct.tracked(); n != 0 {
				t.Fatalf("%d connections still tracked after close", n)
			}
		})
	}
}
