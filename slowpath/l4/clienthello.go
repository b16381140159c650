package l4

import (
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// ClientHello is what a TLS ClientHello reveals before any handshake.
type ClientHello struct {
	// ServerName is the server_name extension's host_name, lowercased; empty
	// when the client sent none.
	ServerName string
	// ALPN lists the application protocols the client offers, in its order
	// of preference; nil when the client sent no ALPN extension.
	ALPN []string
	// Versions lists the TLS versions the client offers: the
	// supported_versions extension without GREASE values, or, when the
	// extension is absent (TLS 1.2 and older clients), the legacy version
	// field alone.
	Versions []uint16
}

// ErrNotTLS reports that a connection does not start with a TLS handshake
// record (for example plain HTTP).
var ErrNotTLS = errors.New("not a tls handshake")

// ErrMalformed reports a TLS record or ClientHello that breaks the protocol's
// encoding rules; the wrapping error says what is wrong.
var ErrMalformed = errors.New("malformed client hello")

// MaxClientHelloSize bounds the ClientHello handshake message (its body,
// without the 4-byte handshake header) that PeekClientHello accepts. Real
// clients send well under 2 KiB, post-quantum key shares included.
const MaxClientHelloSize = 16 << 10

const (
	recordTypeHandshake     = 22
	handshakeTypeClientHelo = 1
	recordHeaderLen         = 5
	maxRecordLen            = 1 << 14 // RFC 8446, section 5.1
	// maxHelloRecords bounds how many records a ClientHello may be split
	// into, so that tiny records cannot stretch the peeked prefix far
	// beyond MaxClientHelloSize. Real clients use one record.
	maxHelloRecords = 16

	extServerName        = 0
	extALPN              = 16
	extSupportedVersions = 43
	maxServerNameLen     = 253
	maxLabelLen          = 63
)

// PeekClientHello reads the TLS records that carry conn's ClientHello (it
// may span several records and TCP segments) and parses it without
// terminating TLS. It reads no further than the record that completes the
// ClientHello, except for what the same read returned.
//
// The returned net.Conn is always non-nil, also with an error: a *ReplayConn
// whose reads return the bytes consumed here before continuing with conn, so
// the caller can hand it to a TLS server, to Pipe, or close it.
//
// deadline bounds the whole peek (zero: no deadline); conn's read deadline
// is cleared before returning. Errors: ErrNotTLS when the first bytes are not
// a TLS handshake record; ErrMalformed (wrapped with what is wrong) for a
// broken record or ClientHello or one larger than MaxClientHelloSize;
// io.ErrUnexpectedEOF (wrapped) when conn ends mid-ClientHello; otherwise
// the read error, e.g. os.ErrDeadlineExceeded.
func PeekClientHello(conn net.Conn, deadline time.Time) (ClientHello, net.Conn, error) {
	rc := &ReplayConn{Conn: conn}
	if err := conn.SetReadDeadline(deadline); err != nil {
		return ClientHello{}, rc, fmt.Errorf("set read deadline: %w", err)
	}
	// The caller decides later deadlines; a stale one would cut off the
	// proxied stream.
	defer func() { _ = conn.SetReadDeadline(time.Time{}) }()

	buf := make([]byte, 0, 1024)
	for {
		ch, need, err := scan(buf)
		if err != nil || need == 0 {
			rc.buf = buf
			return ch, rc, err
		}
		if need > cap(buf) {
			nb := make([]byte, len(buf), max(need, 2*cap(buf)))
			copy(nb, buf)
			buf = nb
		}
		n, err := io.ReadAtLeast(conn, buf[len(buf):cap(buf)], need-len(buf))
		buf = buf[:len(buf)+n]
		if err != nil {
			rc.buf = buf
			// What did arrive may already show the stream is not TLS or
			// is malformed; that is the more useful answer.
			if _, _, serr := scan(buf); serr != nil {
				return ClientHello{}, rc, serr
			}
			if errors.Is(err, io.EOF) && len(buf) > 0 {
				err = io.ErrUnexpectedEOF
			}
			return ClientHello{}, rc, fmt.Errorf("read client hello after %d bytes: %w", len(buf), err)
		}
	}
}

// ParseClientHello parses the ClientHello at the start of b, the first bytes
// a client sent on a connection (TLS records, not a bare handshake message).
// Bytes after the record that completes the ClientHello are ignored. Errors
// are those of PeekClientHello; a b that ends too early gives an error
// wrapping io.ErrUnexpectedEOF.
func ParseClientHello(b []byte) (ClientHello, error) {
	ch, need, err := scan(b)
	if err != nil {
		return ClientHello{}, err
	}
	if need > 0 {
		return ClientHello{}, fmt.Errorf("client hello truncated at %d bytes, need at least %d: %w", len(b), need, io.ErrUnexpectedEOF)
	}
	return ch, nil
}

// scan walks the records in buf. It returns need > 0, the total length buf
// must reach before scanning can progress, when the ClientHello is not yet
// complete; it only ever looks at whole records so that a ClientHello
// trickling in byte by byte is scanned once per record, not once per byte.
func scan(buf []byte) (ClientHello, int, error) {
	if len(buf) < 1 {
		return ClientHello{}, 1, nil
	}
	if buf[0] != recordTypeHandshake {
		return ClientHello{}, 0, ErrNotTLS
	}
	if len(buf) >= 2 && buf[1] != 3 {
		return ClientHello{}, 0, ErrNotTLS
	}
	var hs []byte // the handshake stream, reassembled from record fragments
	off := 0
	for rec := 0; ; rec++ {
		if rec == maxHelloRecords {
			return ClientHello{}, 0, fmt.Errorf("%w: split into more than %d records", ErrMalformed, maxHelloRecords)
		}
		if len(buf) < off+recordHeaderLen {
			return ClientHello{}, off + recordHeaderLen, nil
		}
		h := buf[off : off+recordHeaderLen]
		if h[0] != recordTypeHandshake {
			return ClientHello{}, 0, fmt.Errorf("%w: record %d has content type %d, want handshake (22)", ErrMalformed, rec, h[0])
		}
		if h[1] != 3 {
			return ClientHello{}, 0, fmt.Errorf("%w: record %d has version 0x%02x%02x", ErrMalformed, rec, h[1], h[2])
		}
		n := int(h[3])<<8 | int(h[4])
		if n == 0 {
			// RFC 8446, section 5.1: handshake fragments are never empty.
			return ClientHello{}, 0, fmt.Errorf("%w: record %d is empty", ErrMalformed, rec)
		}
		if n > maxRecordLen {
			return ClientHello{}, 0, fmt.Errorf("%w: record %d has length %d, more than %d", ErrMalformed, rec, n, maxRecordLen)
		}
		end := off + recordHeaderLen + n
		if len(buf) < end {
			return ClientHello{}, end, nil
		}
		hs = append(hs, buf[off+recordHeaderLen:end]...)
		off = end
		if len(hs) < 4 {
			continue
		}
		if hs[0] != handshakeTypeClientHelo {
			return ClientHello{}, 0, fmt.Errorf("%w: handshake type %d, want client hello (1)", ErrMalformed, hs[0])
		}
		l := int(hs[1])<<16 | int(hs[2])<<8 | int(hs[3])
		if l > MaxClientHelloSize {
			return ClientHello{}, 0, fmt.Errorf("%w: length %d exceeds %d", ErrMalformed, l, MaxClientHelloSize)
		}
		if len(hs) >= 4+l {
			ch, err := parseHelloBody(hs[4 : 4+l])
			if err != nil {
				return ClientHello{}, 0, err
			}
			return ch, 0, nil
		}
	}
}

// parseHelloBody parses a ClientHello handshake message body (RFC 8446,
// section 4.1.2; RFC 5246, section 7.4.1.2).
func parseHelloBody(b []byte) (ClientHello, error) {
	r := reader(b)
	var ch ClientHello
	legacy, ok := r.u16()
	if !ok {
		return ch, malformed("truncated version")
	}
	if legacy>>8 != 3 {
		return ch, malformed("legacy version 0x%04x", legacy)
	}
	if _, ok := r.bytes(32); !ok {
		return ch, malformed("truncated random")
	}
	sid, ok := r.vec8()
	if !ok {
		return ch, malformed("truncated session id")
	}
	if len(sid) > 32 {
		return ch, malformed("session id length %d exceeds 32", len(sid))
	}
	suites, ok := r.vec16()
	if !ok {
		return ch, malformed("truncated cipher suites")
	}
	if len(suites) == 0 || len(suites)%2 != 0 {
		return ch, malformed("cipher suites length %d", len(suites))
	}
	comp, ok := r.vec8()
	if !ok {
		return ch, malformed("truncated compression methods")
	}
	if len(comp) == 0 {
		return ch, malformed("no compression methods")
	}
	ch.Versions = []uint16{legacy}
	if len(r) == 0 {
		return ch, nil // TLS 1.2 allows a ClientHello without extensions
	}
	exts, ok := r.vec16()
	if !ok {
		return ch, malformed("truncated extensions")
	}
	if len(r) != 0 {
		return ch, malformed("%d trailing bytes after extensions", len(r))
	}
	seen := make(map[uint16]bool)
	for len(exts) > 0 {
		typ, ok := exts.u16()
		if !ok {
			return ch, malformed("truncated extension type")
		}
		data, ok := exts.vec16()
		if !ok {
			return ch, malformed("truncated extension %d", typ)
		}
		if seen[typ] {
			// RFC 8446, section 4.2: at most one extension of each type.
			return ch, malformed("duplicate extension %d", typ)
		}
		seen[typ] = true
		var err error
		switch typ {
		case extServerName:
			ch.ServerName, err = parseServerName(data)
		case extALPN:
			ch.ALPN, err = parseALPN(data)
		case extSupportedVersions:
			ch.Versions, err = parseSupportedVersions(data)
		}
		if err != nil {
			return ch, err
		}
	}
	return ch, nil
}

// parseServerName parses the server_name extension (RFC 6066, section 3).
func parseServerName(data reader) (string, error) {
	list, ok := data.vec16()
	if !ok || len(data) != 0 {
		return "", malformed("server_name extension length")
	}
	if len(list) == 0 {
		return "", malformed("empty server_name list")
	}
	var host string
	seenHost := false
	for len(list) > 0 {
		typ, ok := list.u8()
		if !ok {
			return "", malformed("truncated server_name entry")
		}
		name, ok := list.vec16()
		if !ok {
			return "", malformed("truncated server_name entry")
		}
		// Other name types are undefined; like crypto/tls, skip them,
		// assuming the same opaque<1..2^16-1> encoding.
		if typ != 0 {
			continue
		}
		if seenHost {
			return "", malformed("more than one host_name")
		}
		seenHost = true
		var err error
		if host, err = normalizeServerName(name); err != nil {
			return "", err
		}
	}
	return host, nil
}

// normalizeServerName validates a host_name as an ASCII DNS name (letters,
// digits, hyphens, dot-separated labels of 1..63 bytes, at most 253 bytes,
// no trailing dot as RFC 6066 requires) and lowercases it. Hyphen placement
// inside a label is not checked: such names merely match no route.
func normalizeServerName(name []byte) (string, error) {
	if len(name) == 0 {
		return "", malformed("empty host_name")
	}
	if len(name) > maxServerNameLen {
		return "", malformed("host_name length %d exceeds %d", len(name), maxServerNameLen)
	}
	out := make([]byte, len(name))
	label := 0
	for i, c := range name {
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-':
		case c >= 'A' && c <= 'Z':
			c += 'a' - 'A'
		case c == '.':
			if label == 0 {
				return "", malformed("host_name %q has an empty label", name)
			}
			label = 0
			out[i] = c
			continue
		default:
			return "", malformed("host_name %q has invalid character %q", name, c)
		}
		label++
		if label > maxLabelLen {
			return "", malformed("host_name %q has a label longer than %d", name, maxLabelLen)
		}
		out[i] = c
	}
	if label == 0 {
		return "", malformed("host_name %q ends with a dot", name)
	}
	return string(out), nil
}

// parseALPN parses the application_layer_protocol_negotiation extension
// (RFC 7301, section 3.1).
func parseALPN(data reader) ([]string, error) {
	list, ok := data.vec16()
	if !ok || len(data) != 0 {
		return nil, malformed("alpn extension length")
	}
	if len(list) == 0 {
		return nil, malformed("empty alpn list")
	}
	var protos []string
	for len(list) > 0 {
		p, ok := list.vec8()
		if !ok {
			return nil, malformed("truncated alpn protocol")
		}
		if len(p) == 0 {
			return nil, malformed("empty alpn protocol")
		}
		protos = append(protos, string(p))
	}
	return protos, nil
}

// parseSupportedVersions parses the ClientHello form of the
// supported_versions extension (RFC 8446, section 4.2.1).
func parseSupportedVersions(data reader) ([]uint16, error) {
	list, ok := data.vec8()
	if !ok || len(data) != 0 {
		return nil, malformed("supported_versions extension length")
	}
	if len(list) < 2 || len(list)%2 != 0 {
		return nil, malformed("supported_versions list length %d", len(list))
	}
	vs := make([]uint16, 0, len(list)/2)
	for len(list) > 0 {
		v, _ := list.u16()
		if isGREASE(v) {
			continue
		}
		vs = append(vs, v)
	}
	return vs, nil
}

// isGREASE reports whether v is one of the reserved values clients send to
// keep servers tolerant of unknown ones (RFC 8701): 0x0a0a, 0x1a1a, ….
func isGREASE(v uint16) bool {
	return v&0x0f0f == 0x0a0a && v>>8 == v&0xff
}

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
}

// reader consumes big-endian fields from the front of a byte slice; every
// method reports false, consuming nothing, when too few bytes remain.
type reader []byte

func (r *reader) u8() (uint8, bool) {
	if len(*r) < 1 {
		return 0, false
	}
	v := (*r)[0]
	*r = (*r)[1:]
	return v, true
}

func (r *reader) u16() (uint16, bool) {
	if len(*r) < 2 {
		return 0, false
	}
	v := uint16((*r)[0])<<8 | uint16((*r)[1])
	*r = (*r)[2:]
	return v, true
}

func (r *reader) bytes(n int) (reader, bool) {
	if len(*r) < n {
		return nil, false
	}
	v := (*r)[:n:n]
	*r = (*r)[n:]
	return v, true
}

// vec8 reads a vector with a one-byte length prefix.
func (r *reader) vec8() (reader, bool) {
	if len(*r) < 1 {
		return nil, false
	}
	n := int((*r)[0])
	if len(*r) < 1+n {
		return nil, false
	}
	v := (*r)[1 : 1+n : 1+n]
	*r = (*r)[1+n:]
	return v, true
}

// vec16 reads a vector with a two-byte length prefix.
func (r *reader) vec16() (reader, bool) {
	if len(*r) < 2 {
		return nil, false
	}
	n := int((*r)[0])<<8 | int((*r)[1])
	if len(*r) < 2+n {
		return nil, false
	}
	v := (*r)[2 : 2+n : 2+n]
	*r = (*r)[2+n:]
	return v, true
}
