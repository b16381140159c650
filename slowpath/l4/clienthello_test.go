package l4

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// clientConn rewrites the first Write of a TLS client (its ClientHello) and
// can send it one byte per write, to exercise reassembly in PeekClientHello.
type clientConn struct {
	net.Conn
	reframe func(recs []byte) []byte // nil: as written
	oneByte bool
	sent    []byte // the first write as it went on the wire
}

func (c *clientConn) Write(b []byte) (int, error) {
	if c.sent != nil {
		return c.Conn.Write(b)
	}
	out := bytes.Clone(b)
	if c.reframe != nil {
		out = c.reframe(out)
	}
	c.sent = out
	if !c.oneByte {
		if _, err := c.Conn.Write(out); err != nil {
			return 0, err
		}
		return len(b), nil
	}
	for i := range out {
		if _, err := c.Conn.Write(out[i : i+1]); err != nil {
			return 0, err
		}
	}
	return len(b), nil
}

// trickleConn returns at most one byte per Read, so that PeekClientHello
// must reassemble its input whatever TCP does with the segments.
type trickleConn struct{ net.Conn }

func (c trickleConn) Read(b []byte) (int, error) { return c.Conn.Read(b[:min(1, len(b))]) }

type peekResult struct {
	hello  ClientHello
	peeked []byte
	state  tls.ConnectionState
	err    error
}

func TestPeekClientHelloThenRealHandshake(t *testing.T) {
	ca, cert := testPKI(t)
	for _, tc := range []struct {
		name       string
		cfg        *tls.Config
		reframe    func(t *testing.T, recs []byte) []byte
		oneByte    bool
		trickle    bool
		want       ClientHello
		wantProto  string
		wantVerTLS uint16
	}{
		{
			name:       "tls13 sni alpn",
			cfg:        &tls.Config{ServerName: "a.example", NextProtos: []string{"h2", "http/1.1"}},
			want:       ClientHello{ServerName: "a.example", ALPN: []string{"h2", "http/1.1"}, Versions: []uint16{tls.VersionTLS13, tls.VersionTLS12}},
			wantProto:  "h2",
			wantVerTLS: tls.VersionTLS13,
		},
		{
			name:       "tls12 only",
			cfg:        &tls.Config{ServerName: "b.example", NextProtos: []string{"http/1.1"}, MaxVersion: tls.VersionTLS12},
			want:       ClientHello{ServerName: "b.example", ALPN: []string{"http/1.1"}, Versions: []uint16{tls.VersionTLS12}},
			wantProto:  "http/1.1",
			wantVerTLS: tls.VersionTLS12,
		},
		{
			name:       "upper case server name is lowercased",
			cfg:        &tls.Config{ServerName: "A.Example"},
			want:       ClientHello{ServerName: "a.example", Versions: []uint16{tls.VersionTLS13, tls.VersionTLS12}},
			wantVerTLS: tls.VersionTLS13,
		},
		{
			name:       "ip literal sends no sni",
			cfg:        &tls.Config{ServerName: "127.0.0.1", NextProtos: []string{"http/1.1"}},
			want:       ClientHello{ALPN: []string{"http/1.1"}, Versions: []uint16{tls.VersionTLS13, tls.VersionTLS12}},
			wantProto:  "http/1.1",
			wantVerTLS: tls.VersionTLS13,
		},
		{
			name:       "one byte writes",
			cfg:        &tls.Config{ServerName: "a.example", NextProtos: []string{"h2"}},
			oneByte:    true,
			want:       ClientHello{ServerName: "a.example", ALPN: []string{"h2"}, Versions: []uint16{tls.VersionTLS13, tls.VersionTLS12}},
			wantProto:  "h2",
			wantVerTLS: tls.VersionTLS13,
		},
		{
			name:       "one byte reads",
			cfg:        &tls.Config{ServerName: "a.example", NextProtos: []string{"h2", "http/1.1"}},
			trickle:    true,
			want:       ClientHello{ServerName: "a.example", ALPN: []string{"h2", "http/1.1"}, Versions: []uint16{tls.VersionTLS13, tls.VersionTLS12}},
			wantProto:  "h2",
			wantVerTLS: tls.VersionTLS13,
		},
		{
			name: "split into five records",
			cfg:  &tls.Config{ServerName: "b.example", NextProtos: []string{"h2"}},
			reframe: func(t *testing.T, recs []byte) []byte {
				return reframe(t, recs, (len(recs)+4)/5)
			},
			want:       ClientHello{ServerName: "b.example", ALPN: []string{"h2"}, Versions: []uint16{tls.VersionTLS13, tls.VersionTLS12}},
			wantProto:  "h2",
			wantVerTLS: tls.VersionTLS13,
		},
		{
			name: "tls12 split into records and one byte writes",
			cfg:  &tls.Config{ServerName: "a.example", MaxVersion: tls.VersionTLS12},
			reframe: func(t *testing.T, recs []byte) []byte {
				return reframe(t, recs, (len(recs)+2)/3)
			},
			oneByte:    true,
			want:       ClientHello{ServerName: "a.example", Versions: []uint16{tls.VersionTLS12}},
			wantVerTLS: tls.VersionTLS12,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln := listen(t)
			results := make(chan peekResult, 1)
			go func() {
				var r peekResult
				defer func() { results <- r }()
				c, err := ln.Accept()
				if err != nil {
					r.err = err
					return
				}
				defer func() { _ = c.Close() }()
				if tc.trickle {
					c = trickleConn{c}
				}
				var rc net.Conn
				r.hello, rc, r.err = PeekClientHello(c, time.Now().Add(waitFor))
				if r.err != nil {
					return
				}
				r.peeked = bytes.Clone(rc.(*ReplayConn).Buffered())
				srv := tls.Server(rc, &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}})
				if r.err = srv.Handshake(); r.err != nil {
					return
				}
				r.state = srv.ConnectionState()
				_, r.err = io.WriteString(srv, "hello "+r.hello.ServerName)
				_ = srv.Close()
			}()

			raw, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = raw.Close() }()
			check(t, raw.(*net.TCPConn).SetNoDelay(true)) // one segment per one-byte write
			cc := &clientConn{Conn: raw, oneByte: tc.oneByte}
			if tc.reframe != nil {
				cc.reframe = func(recs []byte) []byte { return tc.reframe(t, recs) }
			}
			cfg := tc.cfg.Clone()
			cfg.RootCAs = ca.Pool()
			cli := tls.Client(cc, cfg)
			if err := cli.Handshake(); err != nil {
				t.Fatalf("client handshake: %v", err)
			}
			reply, err := io.ReadAll(cli)
			if err != nil {
				t.Fatalf("read reply: %v", err)
			}
			r := <-results
			if r.err != nil {
				t.Fatalf("server: %v", r.err)
			}
			if d := cmp.Diff(tc.want, r.hello); d != "" {
				t.Errorf("ClientHello (-want +got):\n%s", d)
			}
			// Nothing was consumed: the replayed prefix is exactly what
			// the client put on the wire before the server spoke.
			if !bytes.Equal(r.peeked, cc.sent) {
				t.Errorf("peeked %d bytes, client sent %d bytes first; they differ", len(r.peeked), len(cc.sent))
			}
			if got := string(reply); got != "hello "+tc.want.ServerName {
				t.Errorf("reply %q", got)
			}
			if got := strings.ToLower(r.state.ServerName); got != tc.want.ServerName {
				t.Errorf("tls server saw server name %q, want %q", got, tc.want.ServerName)
			}
			if r.state.NegotiatedProtocol != tc.wantProto {
				t.Errorf("negotiated protocol %q, want %q", r.state.NegotiatedProtocol, tc.wantProto)
			}
			if r.state.Version != tc.wantVerTLS {
				t.Errorf("version 0x%04x, want 0x%04x", r.state.Version, tc.wantVerTLS)
			}
		})
	}
}

func TestPeekClientHelloNotTLS(t *testing.T) {
	for _, tc := range []struct {
		name  string
		first string
	}{
		{"http request", "GET / HTTP/1.1\r\nHost: a.example\r\n\r\n"},
		{"single byte", "G"},
		{"handshake type byte without tls version", "\x16\x02abc"},
		{"sslv2 style hello", "\x80\x2e\x01\x03\x01"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, server := tcpPair(t)
			if _, err := io.WriteString(client, tc.first); err != nil {
				t.Fatal(err)
			}
			hello, rc, err := PeekClientHello(server, time.Now().Add(waitFor))
			if !errors.Is(err, ErrNotTLS) {
				t.Fatalf("err = %v, want ErrNotTLS", err)
			}
			if d := cmp.Diff(ClientHello{}, hello); d != "" {
				t.Errorf("hello (-want +got):\n%s", d)
			}
			// The stream goes on intact: the peeked bytes, then the rest.
			if _, err := io.WriteString(client, " and the rest"); err != nil {
				t.Fatal(err)
			}
			check(t, client.CloseWrite())
			got, err := io.ReadAll(rc)
			if err != nil {
				t.Fatalf("read replay: %v", err)
			}
			if want := tc.first + " and the rest"; string(got) != want {
				t.Errorf("replayed %q, want %q", got, want)
			}
		})
	}
}

func TestPeekClientHelloReadErrors(t *testing.T) {
	hello := helloRecords(defaultBody().bytes())
	for _, tc := range []struct {
		name  string
		send  []byte
		close bool
		// deadline in the past (or at once) when no more input comes.
		shortDeadline bool
		wantIs        error
	}{
		{name: "closed before any byte", close: true, wantIs: io.EOF},
		{name: "closed mid header", send: hello[:3], close: true, wantIs: io.ErrUnexpectedEOF},
		{name: "closed mid record", send: hello[:40], close: true, wantIs: io.ErrUnexpectedEOF},
		{name: "deadline mid record", send: hello[:40], shortDeadline: true, wantIs: os.ErrDeadlineExceeded},
		{name: "deadline before any byte", shortDeadline: true, wantIs: os.ErrDeadlineExceeded},
		{name: "malformed before eof", send: []byte{22, 3, 1, 0, 2, 1, 0, 23, 3, 3, 0, 1}, close: true, wantIs: ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, server := tcpPair(t)
			if _, err := client.Write(tc.send); err != nil {
				t.Fatal(err)
			}
			if tc.close {
				check(t, client.CloseWrite())
			}
			deadline := time.Now().Add(waitFor)
			if tc.shortDeadline {
				deadline = time.Now().Add(10 * time.Millisecond)
			}
			_, rc, err := PeekClientHello(server, deadline)
			if !errors.Is(err, tc.wantIs) {
				t.Fatalf("err = %v, want %v", err, tc.wantIs)
			}
			if rc == nil {
				t.Fatal("nil conn with error")
			}
			if got := rc.(*ReplayConn).Buffered(); !bytes.Equal(got, tc.send) {
				t.Errorf("buffered %x, want %x", got, tc.send)
			}
			// The read deadline used for the peek is cleared.
			if tc.shortDeadline {
				send(t, client, "x")
				b := make([]byte, 1)
				if _, err := io.ReadFull(server, b); err != nil {
					t.Errorf("read after peek: %v", err)
				}
			}
		})
	}
}

func TestPeekClientHelloReplaysBytesAfterHello(t *testing.T) {
	// A client may send more right behind its ClientHello (TLS 1.3 early
	// data, a pipelining test client); PeekClientHello must not lose it.
	hello := helloRecords(defaultBody().bytes())
	extra := []byte("\x17\x03\x03\x00\x05early")
	client, server := tcpPair(t)
	if _, err := client.Write(cat(hello, extra)); err != nil {
		t.Fatal(err)
	}
	check(t, client.CloseWrite())
	got, rc, err := PeekClientHello(server, time.Now().Add(waitFor))
	if err != nil {
		t.Fatal(err)
	}
	if got.ServerName != "example.com" {
		t.Errorf("server name %q", got.ServerName)
	}
	all, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(all, cat(hello, extra)) {
		t.Errorf("replayed %x\nwant     %x", all, cat(hello, extra))
	}
}

func TestParseClientHello(t *testing.T) {
	big := defaultBody()
	// Pad with the padding extension (21) to exactly MaxClientHelloSize;
	// it then needs two records.
	base := len(big.bytes())
	big.extensions = exts(sniExt(sniEntry(0, "example.com")), alpnExt("h2"), versionsExt(0x0304, 0x0303),
		ext(21, make([]byte, MaxClientHelloSize-base-4)))
	if n := len(big.bytes()); n != MaxClientHelloSize {
		t.Fatalf("padded body is %d bytes", n)
	}
	bigHello := helloRecords(big.bytes())

	with := func(f func(h *helloBody)) []byte {
		h := defaultBody()
		f(&h)
		return helloRecords(h.bytes())
	}
	def := ClientHello{ServerName: "example.com", ALPN: []string{"h2"}, Versions: []uint16{0x0304, 0x0303}}
	hs := handshakeMsg(defaultBody().bytes())

	for _, tc := range []struct {
		name string
		in   []byte
		want ClientHello
	}{
		{"default", helloRecords(defaultBody().bytes()), def},
		{"upper case sni lowercased", with(func(h *helloBody) {
			h.extensions = exts(sniExt(sniEntry(0, "WWW.Example.COM")))
		}), ClientHello{ServerName: "www.example.com", Versions: []uint16{0x0303}}},
		{"grease versions and unknown extensions", with(func(h *helloBody) {
			h.extensions = exts(ext(0x0a0a, nil), versionsExt(0x3a3a, 0x0304, 0x0303), ext(0xfe0d, []byte{1, 2, 3}))
		}), ClientHello{Versions: []uint16{0x0304, 0x0303}}},
		{"unknown name type skipped", with(func(h *helloBody) {
			h.extensions = exts(sniExt(sniEntry(7, "ignored"), sniEntry(0, "a.example")))
		}), ClientHello{ServerName: "a.example", Versions: []uint16{0x0303}}},
		{"no extensions", with(func(h *helloBody) { h.extensions = nil }), ClientHello{Versions: []uint16{0x0303}}},
		{"empty extensions block", with(func(h *helloBody) { h.extensions = exts() }), ClientHello{Versions: []uint16{0x0303}}},
		{"sni with digits and hyphens", with(func(h *helloBody) {
			h.extensions = exts(sniExt(sniEntry(0, "x-1.b2-c."+strings.Repeat("d", 63)+".example")))
		}), ClientHello{ServerName: "x-1.b2-c." + strings.Repeat("d", 63) + ".example", Versions: []uint16{0x0303}}},
		{"three alpn protocols", with(func(h *helloBody) {
			h.extensions = exts(alpnExt("h2", "http/1.1", "acme-tls/1"))
		}), ClientHello{ALPN: []string{"h2", "http/1.1", "acme-tls/1"}, Versions: []uint16{0x0303}}},
		{"sixteen records", cat(records(hs[:15], 1), records(hs[15:], maxRecordLen)), def},
		{"header split from body across records", cat(records(hs[:4], 4), records(hs[4:], maxRecordLen)), def},
		{"bytes after the hello ignored", cat(helloRecords(defaultBody().bytes()), []byte{0x14, 3, 3, 0, 1, 1}), def},
		{"largest allowed hello", bigHello, ClientHello{ServerName: "example.com", ALPN: []string{"h2"}, Versions: []uint16{0x0304, 0x0303}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseClientHello(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

func TestParseClientHelloErrors(t *testing.T) {
	with := func(f func(h *helloBody)) []byte {
		h := defaultBody()
		f(&h)
		return helloRecords(h.bytes())
	}
	withExts := func(e ...[]byte) []byte {
		return with(func(h *helloBody) { h.extensions = exts(e...) })
	}
	hello := helloRecords(defaultBody().bytes())
	hs := handshakeMsg(defaultBody().bytes())
	secondRecord := func(typ, major byte) []byte {
		r := cat(records(hs[:10], 10), records(hs[10:], maxRecordLen))
		r[15], r[16] = typ, major
		return r
	}
	tooLong := cat([]byte{22, 3, 1, 0x40, 0x01}, make([]byte, 0x4001))

	for _, tc := range []struct {
		name    string
		in      []byte
		wantIs  error
		wantMsg string
	}{
		{"http", []byte("GET / HTTP/1.1\r\n"), ErrNotTLS, ""},
		{"alert record", []byte{21, 3, 3, 0, 2, 2, 40}, ErrNotTLS, ""},
		{"not version 3", []byte{22, 2, 0, 0, 1, 1}, ErrNotTLS, ""},
		{"empty", nil, io.ErrUnexpectedEOF, ""},
		{"header only", hello[:5], io.ErrUnexpectedEOF, ""},
		{"truncated record", hello[:len(hello)-1], io.ErrUnexpectedEOF, ""},
		{"hello continues in a missing record", records(hs[:100], 100), io.ErrUnexpectedEOF, ""},
		{"empty record", []byte{22, 3, 1, 0, 0}, ErrMalformed, "record 0 is empty"},
		{"record too long", tooLong, ErrMalformed, "length 16385"},
		{"second record not handshake", secondRecord(23, 3), ErrMalformed, "record 1 has content type 23"},
		{"second record bad version", secondRecord(22, 2), ErrMalformed, "record 1 has version"},
		{"server hello", records(cat([]byte{2}, hs[1:]), maxRecordLen), ErrMalformed, "handshake type 2"},
		{"too large", records([]byte{1, 0, 0x40, 0x01}, 4), ErrMalformed, "length 16385 exceeds 16384"},
		{"seventeen records", cat(records(hs[:16], 1), records(hs[16:], maxRecordLen)), ErrMalformed, "more than 16 records"},
		{"one byte records", records(hs, 1), ErrMalformed, "more than 16 records"},
		{"legacy version 2", with(func(h *helloBody) { h.version = u16s(0x0200) }), ErrMalformed, "legacy version 0x0200"},
		{"truncated version", helloRecords([]byte{3}), ErrMalformed, "truncated version"},
		{"truncated random", helloRecords(cat(u16s(0x0303), make([]byte, 31))), ErrMalformed, "truncated random"},
		{"session id too long", with(func(h *helloBody) { h.sessionID = u8vec(make([]byte, 33)...) }), ErrMalformed, "session id length 33"},
		{"session id overruns", with(func(h *helloBody) { h.sessionID = []byte{200}; h.suites, h.compression, h.extensions = nil, nil, nil }), ErrMalformed, "truncated session id"},
		{"odd cipher suites", with(func(h *helloBody) { h.suites = u16vec(0x13, 0x01, 0x13) }), ErrMalformed, "cipher suites length 3"},
		{"no cipher suites", with(func(h *helloBody) { h.suites = u16vec() }), ErrMalformed, "cipher suites length 0"},
		{"no compression methods", with(func(h *helloBody) { h.compression = u8vec() }), ErrMalformed, "no compression methods"},
		{"compression overruns", with(func(h *helloBody) { h.compression = []byte{5, 0}; h.extensions = nil }), ErrMalformed, "truncated compression"},
		{"extensions overrun", with(func(h *helloBody) { h.extensions = cat(u16s(1000), []byte{0, 0, 0, 0}) }), ErrMalformed, "truncated extensions"},
		{"one byte where extensions belong", with(func(h *helloBody) { h.extensions = []byte{0} }), ErrMalformed, "truncated extensions"},
		{"trailing bytes", with(func(h *helloBody) { h.trailing = []byte{0} }), ErrMalformed, "1 trailing bytes"},
		{"truncated extension type", with(func(h *helloBody) { h.extensions = u16vec(0) }), ErrMalformed, "truncated extension type"},
		{"extension data overruns", with(func(h *helloBody) { h.extensions = u16vec(0, 1, 0, 9, 1) }), ErrMalformed, "truncated extension 1"},
		{"duplicate extension", withExts(alpnExt("h2"), alpnExt("h2")), ErrMalformed, "duplicate extension 16"},
		{"sni space", withExts(sniExt(sniEntry(0, "exa mple.com"))), ErrMalformed, "invalid character ' '"},
		{"sni underscore", withExts(sniExt(sniEntry(0, "a_b.example"))), ErrMalformed, "invalid character '_'"},
		{"sni non ascii", withExts(sniExt(sniEntry(0, "caf\xc3\xa9.example"))), ErrMalformed, "invalid character"},
		{"sni nul", withExts(sniExt(sniEntry(0, "a.example\x00.evil"))), ErrMalformed, "invalid character"},
		{"sni trailing dot", withExts(sniExt(sniEntry(0, "a.example."))), ErrMalformed, "ends with a dot"},
		{"sni leading dot", withExts(sniExt(sniEntry(0, ".a.example"))), ErrMalformed, "empty label"},
		{"sni empty label", withExts(sniExt(sniEntry(0, "a..example"))), ErrMalformed, "empty label"},
		{"sni label too long", withExts(sniExt(sniEntry(0, strings.Repeat("a", 64)+".example"))), ErrMalformed, "label longer than 63"},
		{"sni too long", withExts(sniExt(sniEntry(0, strings.Repeat("abcdefghi.", 25)+"abcd"))), ErrMalformed, "length 254 exceeds 253"},
		{"sni empty name", withExts(sniExt(sniEntry(0, ""))), ErrMalformed, "empty host_name"},
		{"sni two host names", withExts(sniExt(sniEntry(0, "a.example"), sniEntry(0, "b.example"))), ErrMalformed, "more than one host_name"},
		{"sni empty list", withExts(sniExt()), ErrMalformed, "empty server_name list"},
		{"sni no list", withExts(ext(extServerName, nil)), ErrMalformed, "server_name extension length"},
		{"sni data after list", withExts(ext(extServerName, cat(u16vec(sniEntry(0, "a.example")...), []byte{0}))), ErrMalformed, "server_name extension length"},
		{"sni entry truncated", withExts(ext(extServerName, u16vec(0, 0, 5, 'a'))), ErrMalformed, "truncated server_name entry"},
		{"sni entry type only", withExts(ext(extServerName, u16vec(0))), ErrMalformed, "truncated server_name entry"},
		{"alpn empty list", withExts(ext(extALPN, u16vec())), ErrMalformed, "empty alpn list"},
		{"alpn empty protocol", withExts(ext(extALPN, u16vec(0))), ErrMalformed, "empty alpn protocol"},
		{"alpn protocol overruns", withExts(ext(extALPN, u16vec(5, 'h', '2'))), ErrMalformed, "truncated alpn protocol"},
		{"alpn data after list", withExts(ext(extALPN, cat(u16vec(2, 'h', '2'), []byte{9}))), ErrMalformed, "alpn extension length"},
		{"versions odd", withExts(ext(extSupportedVersions, u8vec(3, 4, 3))), ErrMalformed, "supported_versions list length 3"},
		{"versions empty", withExts(ext(extSupportedVersions, u8vec())), ErrMalformed, "supported_versions list length 0"},
		{"versions overrun", withExts(ext(extSupportedVersions, []byte{4, 3, 4})), ErrMalformed, "supported_versions extension length"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseClientHello(tc.in)
			if !errors.Is(err, tc.wantIs) {
				t.Fatalf("err = %v, want %v", err, tc.wantIs)
			}
			if !strings.Contains(err.Error(), tc.wantMsg) {
				t.Errorf("err = %q, want it to mention %q", err, tc.wantMsg)
			}
			if d := cmp.Diff(ClientHello{}, got); d != "" {
				t.Errorf("partial result on error (-want +got):\n%s", d)
			}
		})
	}
}

func TestReplayConn(t *testing.T) {
	client, server := tcpPair(t)
	if _, err := io.WriteString(client, "GET / HTTP/1.0\r\n\r\nrest"); err != nil {
		t.Fatal(err)
	}
	check(t, client.CloseWrite())
	_, rc, err := PeekClientHello(server, time.Now().Add(waitFor))
	if !errors.Is(err, ErrNotTLS) {
		t.Fatal(err)
	}
	r := rc.(*ReplayConn)
	if r.NetConn() != server {
		t.Errorf("NetConn() = %v, want the peeked connection", r.NetConn())
	}
	// Small reads drain the prefix in order.
	b := make([]byte, 2)
	n, err := r.Read(b)
	if err != nil || string(b[:n]) != "GE" {
		t.Fatalf("Read = %q, %v", b[:n], err)
	}
	// WriteTo forwards the rest of the prefix and then the connection.
	var out bytes.Buffer
	if _, err := r.WriteTo(&out); err != nil {
		t.Fatal(err)
	}
	if want := "T / HTTP/1.0\r\n\r\nrest"; out.String() != want {
		t.Errorf("WriteTo wrote %q, want %q", out.String(), want)
	}
	if len(r.Buffered()) != 0 {
		t.Errorf("Buffered() = %q after WriteTo", r.Buffered())
	}
	// CloseWrite reaches the TCP connection: the client sees EOF.
	if err := r.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if rest, err := io.ReadAll(client); err != nil || len(rest) != 0 {
		t.Errorf("client read %q, %v after CloseWrite", rest, err)
	}

	p1, p2 := net.Pipe()
	defer func() { _ = p1.Close() }()
	defer func() { _ = p2.Close() }()
	if err := (&ReplayConn{Conn: p1}).CloseWrite(); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("CloseWrite on net.Pipe = %v, want ErrUnsupported", err)
	}
}
