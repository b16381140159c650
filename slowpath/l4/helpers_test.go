package l4

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/novaedge/novaedge/slowpath/internal/testcert"
)

// waitFor is how long a test waits for something that should happen at once;
// it only bounds a hang, it is not a timing assertion.
const waitFor = 20 * time.Second

var (
	pkiOnce   sync.Once
	pkiCA     *testcert.CA
	pkiServer tls.Certificate
	pkiErr    error
)

// testPKI returns a CA and a server certificate for a.example, b.example and
// 127.0.0.1, made once per test binary.
func testPKI(t testing.TB) (*testcert.CA, tls.Certificate) {
	t.Helper()
	pkiOnce.Do(func() {
		pkiCA, pkiErr = testcert.NewCA("l4 test CA")
		if pkiErr != nil {
			return
		}
		var certPEM, keyPEM []byte
		certPEM, keyPEM, pkiErr = pkiCA.Leaf("a.example", "b.example", "127.0.0.1")
		if pkiErr != nil {
			return
		}
		pkiServer, pkiErr = tls.X509KeyPair(certPEM, keyPEM)
	})
	if pkiErr != nil {
		t.Fatalf("test PKI: %v", pkiErr)
	}
	return pkiCA, pkiServer
}

// listen returns a TCP listener on 127.0.0.1, closed at the end of the test.
func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	return ln
}

// tcpPair returns both ends of a fresh loopback TCP connection, closed at
// the end of the test.
func tcpPair(t *testing.T) (dialed, accepted *net.TCPConn) {
	t.Helper()
	ln := listen(t)
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := ln.Accept()
		ch <- res{c, err}
	}()
	d, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { _ = d.Close(); _ = r.c.Close() })
	return d.(*net.TCPConn), r.c.(*net.TCPConn)
}

// captureClientHello returns the bytes a crypto/tls client sends first
// (its ClientHello records) for cfg.
func captureClientHello(t testing.TB, cfg *tls.Config) []byte {
	t.Helper()
	c1, c2 := net.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Fails once c2 closes, which is the point.
		_ = tls.Client(c1, cfg).Handshake()
		_ = c1.Close()
	}()
	var out []byte
	for {
		hdr := make([]byte, recordHeaderLen)
		if _, err := io.ReadFull(c2, hdr); err != nil {
			t.Fatalf("read record header: %v", err)
		}
		body := make([]byte, binary.BigEndian.Uint16(hdr[3:]))
		if _, err := io.ReadFull(c2, body); err != nil {
			t.Fatalf("read record: %v", err)
		}
		out = append(append(out, hdr...), body...)
		if _, err := ParseClientHello(out); err == nil {
			break
		}
	}
	_ = c2.Close()
	<-done
	return out
}

// check fails the test on err; for the test's own goroutine only.
func check(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// send writes s to w or fails the test; for the test's own goroutine only.
func send(t testing.TB, w io.Writer, s string) {
	t.Helper()
	if _, err := io.WriteString(w, s); err != nil {
		t.Fatal(err)
	}
}

// Builders for hand-made ClientHellos.

func u8vec(b ...byte) []byte { return append([]byte{byte(len(b))}, b...) }

func u16vec(b ...byte) []byte {
	return append(binary.BigEndian.AppendUint16(nil, uint16(len(b))), b...)
}

func u16s(vs ...uint16) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.BigEndian.AppendUint16(b, v)
	}
	return b
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func ext(typ uint16, data []byte) []byte {
	return cat(u16s(typ), u16vec(data...))
}

// sniEntry is one ServerNameList entry.
func sniEntry(typ byte, name string) []byte {
	return cat([]byte{typ}, u16vec([]byte(name)...))
}

func sniExt(entries ...[]byte) []byte { return ext(extServerName, u16vec(cat(entries...)...)) }

func alpnExt(protos ...string) []byte {
	var list []byte
	for _, p := range protos {
		list = append(list, u8vec([]byte(p)...)...)
	}
	return ext(extALPN, u16vec(list...))
}

func versionsExt(vs ...uint16) []byte { return ext(extSupportedVersions, u8vec(u16s(vs...)...)) }

// helloBody holds the fields of a ClientHello body, each already encoded
// with its length prefix so that tests can break any of them.
type helloBody struct {
	version, random, sessionID, suites, compression []byte
	// extensions is the whole extensions block with its length prefix;
	// nil omits it.
	extensions []byte
	trailing   []byte
}

func defaultBody() helloBody {
	return helloBody{
		version:     u16s(0x0303),
		random:      bytes.Repeat([]byte{0xab}, 32),
		sessionID:   u8vec(bytes.Repeat([]byte{1}, 32)...),
		suites:      u16vec(u16s(0x1301, 0x1302, 0xc02f)...),
		compression: u8vec(0),
		extensions:  exts(sniExt(sniEntry(0, "example.com")), alpnExt("h2"), versionsExt(0x0304, 0x0303)),
	}
}

func exts(e ...[]byte) []byte { return u16vec(cat(e...)...) }

func (h helloBody) bytes() []byte {
	return cat(h.version, h.random, h.sessionID, h.suites, h.compression, h.extensions, h.trailing)
}

// handshakeMsg frames body as a ClientHello handshake message.
func handshakeMsg(body []byte) []byte {
	return cat([]byte{handshakeTypeClientHelo, byte(len(body) >> 16), byte(len(body) >> 8), byte(len(body))}, body)
}

// records frames a handshake stream into handshake records of at most size
// bytes each.
func records(hs []byte, size int) []byte {
	var out []byte
	for len(hs) > 0 {
		n := min(size, len(hs))
		out = append(out, recordTypeHandshake, 3, 1, byte(n>>8), byte(n))
		out = append(out, hs[:n]...)
		hs = hs[n:]
	}
	return out
}

// helloRecords is a ClientHello from body in one record (or more when it
// is larger than a record may be).
func helloRecords(body []byte) []byte { return records(handshakeMsg(body), maxRecordLen) }

// reframe takes the records a TLS client wrote and frames their handshake
// payload again into records of at most size bytes.
func reframe(t testing.TB, recs []byte, size int) []byte {
	t.Helper()
	var hs []byte
	for len(recs) > 0 {
		if len(recs) < recordHeaderLen {
			t.Fatalf("reframe: partial record header")
		}
		n := int(binary.BigEndian.Uint16(recs[3:]))
		hs = append(hs, recs[recordHeaderLen:recordHeaderLen+n]...)
		recs = recs[recordHeaderLen+n:]
	}
	return records(hs, size)
}
