package h2

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// rawConn is a hand-driven HTTP/2 client for cases x/net's Transport
// hides (GOAWAY, RST_STREAM, 100-continue, exact frames).
type rawConn struct {
	wmu  sync.Mutex // the test's writes and next's ACKs
	nc   net.Conn
	fr   *http2.Framer
	hbuf bytes.Buffer
	henc *hpack.Encoder
}

// dialRaw connects to addr (h2c prior knowledge), sends the preface and
// an empty SETTINGS frame.
func dialRaw(t testing.TB, addr string) *rawConn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	rc := &rawConn{nc: nc}
	rc.init()
	if _, err := io.WriteString(nc, clientPreface); err != nil {
		t.Fatal(err)
	}
	if err := rc.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return rc
}

func (rc *rawConn) init() {
	rc.henc = hpack.NewEncoder(&rc.hbuf)
	rc.fr = http2.NewFramer(rc.nc, rc.nc)
	rc.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
}

// request sends a request's HEADERS on stream id.
func (rc *rawConn) request(id uint32, method, path string, end bool, extra ...string) error {
	rc.wmu.Lock()
	defer rc.wmu.Unlock()
	rc.hbuf.Reset()
	fields := append([]string{":method", method, ":scheme", "http", ":authority", "raw.test", ":path", path}, extra...)
	for i := 0; i+1 < len(fields); i += 2 {
		_ = rc.henc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	return rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: rc.hbuf.Bytes(), EndStream: end, EndHeaders: true})
}

// write runs a Framer write under the write lock.
func (rc *rawConn) write(fn func() error) error {
	rc.wmu.Lock()
	defer rc.wmu.Unlock()
	return fn()
}

// next reads the next frame, failing the test after 10 s without one;
// SETTINGS, its ACKs, PING and WINDOW_UPDATE are acknowledged or skipped.
func (rc *rawConn) next(t testing.TB) (http2.Frame, error) {
	t.Helper()
	for {
		_ = rc.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		f, err := rc.fr.ReadFrame()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("no frame from the server within 10s")
			}
			return nil, err
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = rc.write(rc.fr.WriteSettingsAck)
			}
			continue
		case *http2.WindowUpdateFrame:
			continue
		}
		return f, nil
	}
}

// readUntilGoAway reads frames until a GOAWAY and returns its code.
func (rc *rawConn) readUntilGoAway(t testing.TB) http2.ErrCode {
	t.Helper()
	for {
		f, err := rc.next(t)
		if err != nil {
			t.Errorf("connection ended without GOAWAY: %v", err)
			return 0
		}
		if g, ok := f.(*http2.GoAwayFrame); ok {
			return g.ErrCode
		}
	}
}

// newTestLogger logs text into buf, guarded by mu.
func newTestLogger(buf *bytes.Buffer, mu *sync.Mutex) *slog.Logger {
	return slog.New(slog.NewTextHandler(&lockedWriter{w: buf, mu: mu}, nil))
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
