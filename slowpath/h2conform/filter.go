package h2conform

import (
	"bytes"
	"encoding/binary"
	"io"
	"math"
	"sync"
	"sync/atomic"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// clientPreface opens every HTTP/2 connection (RFC 9113 §3.4).
const clientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

const (
	frameHeaderLen = 9
	settingLen     = 6
	// maxSettingsPerFrame is the x/net server's own bound: it rejects a
	// SETTINGS frame with more entries as a connection error, duplicates
	// or not (a guard against floods), and the filter leaves that alone.
	maxSettingsPerFrame = 100
	// sniffMax bounds how much of a plaintext connection's first line is
	// held back before it is classified; a longer line is handed to the
	// HTTP/1 server, whose own limits answer it.
	sniffMax = 8 << 10
	// bufSize holds a whole frame of the size the server advertises.
	bufSize = frameHeaderLen + defaultMaxFrameSize
)

// malformedFields are appended to a header block the server must reset
// with PROTOCOL_ERROR: two Host fields (HPACK literal never indexed, name
// from static table entry 38, empty value). x/net opens the stream, finds
// several Host fields and resets it with PROTOCOL_ERROR; neither field
// changes the HPACK dynamic table, so encoder and decoder stay in step.
var malformedFields = [...]byte{0x1f, 0x17, 0x00, 0x1f, 0x17, 0x00}

// bufPool recycles the buffers of plaintext connections, which need one
// only until their first line is classified.
var bufPool = sync.Pool{New: func() any { return new([bufSize]byte) }}

type mode uint8

const (
	// modeSniff: a plaintext connection, not yet known to start with an
	// HTTP/1.x request line or the HTTP/2 preface.
	modeSniff mode = iota
	// modePreface: HTTP/2 negotiated by ALPN; the client preface comes
	// first.
	modePreface
	// modeFrames: HTTP/2 frames, inspected.
	modeFrames
	// modeTransparent: everything passes unexamined from here on.
	modeTransparent
	// modeRejected: neither HTTP/1.x nor HTTP/2; reads report EOF.
	modeRejected
)

// params are the server settings the filter must agree with.
type params struct {
	// maxFrame is the SETTINGS_MAX_FRAME_SIZE the server advertises and
	// enforces.
	maxFrame int
	// tableSize is the server's HPACK decoder table size.
	tableSize uint32
	// maxString is the server's HPACK string length limit.
	maxString int
	// strictPreface closes plaintext connections whose first line is no
	// HTTP/1.x request line (Options.StrictPreface).
	strictPreface bool
}

// filter is the read side of a connection: it hands on what src delivers,
// rewritten where the server would otherwise answer against RFC 9113.
// Reads must not be concurrent (net/http and x/net never do that).
type filter struct {
	src  io.Reader
	mode mode
	p    params

	buf    []byte
	pooled *[bufSize]byte // buf's array when it came from bufPool
	r, w   int            // buf[r:w] read from src, not yet handed on
	ready  int            // buf[r:r+ready] inspected and ready to hand on
	pass   int            // bytes after those that pass unexamined
	inj    []byte         // a frame to hand on after the ready bytes
	injBuf [frameHeaderLen + len(malformedFields)]byte

	// h2 is set once the connection is known to speak HTTP/2 (the
	// preface sniffed); the write side reads it.
	h2 atomic.Bool

	hdec        *hpack.Decoder // mirror of the server's decoder
	blockOpen   bool           // a header block awaits CONTINUATION
	blockStream uint32
	malformed   bool // the current header block is malformed (§8.2.2)
}

// init readies f, in place: the mirror decoder keeps a pointer to f.
func (f *filter) init(src io.Reader, m mode, p params) {
	*f = filter{src: src, mode: m, p: p}
	if m == modeFrames {
		f.startFrames()
	}
}

// Read implements io.Reader. Errors of src are passed on as they come and
// leave the filter's state alone, so a read that timed out can be retried
// (net/http aborts background reads with a past deadline and carries on).
func (f *filter) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		switch {
		case f.ready > 0:
			n := copy(p, f.buf[f.r:f.r+f.ready])
			f.r += n
			f.ready -= n
			return n, nil
		case len(f.inj) > 0:
			n := copy(p, f.inj)
			f.inj = f.inj[n:]
			return n, nil
		case f.pass > 0:
			if buffered := f.w - f.r; buffered > 0 {
				f.ready = min(buffered, f.pass)
				f.pass -= f.ready
				continue
			}
			if f.mode == modeTransparent {
				f.release()
			}
			// Nothing buffered: read straight into the caller's buffer.
			n, err := f.src.Read(p[:min(len(p), f.pass)])
			f.pass -= n
			return n, err
		}
		if err := f.next(); err != nil {
			return 0, err
		}
	}
}

// next inspects what comes next, making bytes ready or passable.
func (f *filter) next() error {
	switch f.mode {
	case modeSniff:
		return f.sniff()
	case modePreface:
		return f.preface()
	case modeFrames:
		return f.frame()
	case modeRejected:
		return io.EOF
	default:
		f.pass = math.MaxInt
		return nil
	}
}

// verdict is what a connection's first bytes say it speaks.
type verdict uint8

const (
	needMore verdict = iota
	speaksHTTP1
	speaksHTTP2
	// badPreface: the preface's first line, then something else.
	badPreface
	// notHTTP: a first line without an HTTP-version.
	notHTTP
)

// classify judges the first bytes of a plaintext connection. An HTTP/1.x
// request line ends in an HTTP-version; the HTTP/2 preface is exact.
func classify(b []byte) verdict {
	n := min(len(b), len(clientPreface))
	if string(b[:n]) == clientPreface[:n] {
		if n == len(clientPreface) {
			return speaksHTTP2
		}
		return needMore
	}
	// The preface's first line followed by anything but the rest of it.
	if bytes.HasPrefix(b, []byte(clientPreface[:16])) {
		return badPreface
	}
	i := bytes.IndexByte(b[:min(len(b), sniffMax)], '\n')
	if i < 0 {
		if len(b) >= sniffMax {
			return speaksHTTP1
		}
		return needMore
	}
	line := bytes.TrimSuffix(b[:i], []byte("\r"))
	if len(line) == 0 {
		// An empty line before the request; net/http answers it as it
		// always has.
		return speaksHTTP1
	}
	if sp := bytes.LastIndexByte(line, ' '); sp >= 0 && bytes.HasPrefix(line[sp+1:], []byte("HTTP/")) {
		return speaksHTTP1
	}
	return notHTTP
}

// sniff classifies a plaintext connection. A client that started the
// HTTP/2 preface and got it wrong is closed (an invalid preface is a
// connection error, RFC 9113 §3.4, and nothing has been negotiated to
// send a GOAWAY in); so, with strictPreface, is one whose first line is no
// HTTP/1.x request line either: on a port that speaks both, that is all
// an invalid preface can look like, and RFC 9112 §3's 400 answer is only
// a SHOULD.
func (f *filter) sniff() error {
	for {
		v := classify(f.buf[f.r:f.w])
		if v == notHTTP && !f.p.strictPreface {
			v = speaksHTTP1 // net/http answers 400
		}
		switch v {
		case speaksHTTP1:
			f.mode = modeTransparent
			return nil
		case speaksHTTP2:
			f.ready = len(clientPreface)
			f.startFrames()
			f.h2.Store(true)
			return nil
		case badPreface, notHTTP:
			f.mode = modeRejected
			f.r = f.w
			f.release()
			return io.EOF
		}
		if err := f.fill(f.w - f.r + 1); err != nil {
			return err
		}
	}
}

func (f *filter) preface() error {
	if err := f.fill(len(clientPreface)); err != nil {
		return err
	}
	if string(f.buf[f.r:f.r+len(clientPreface)]) != clientPreface {
		// The server rejects it itself.
		f.mode = modeTransparent
		return nil
	}
	f.ready = len(clientPreface)
	f.startFrames()
	return nil
}

func (f *filter) startFrames() {
	f.mode = modeFrames
	f.hdec = hpack.NewDecoder(f.p.tableSize, f.field)
	f.hdec.SetMaxStringLength(f.p.maxString)
}

// frame inspects the next frame. HEADERS, CONTINUATION and SETTINGS are
// held until complete and may be rewritten; every other frame passes with
// only its header looked at.
func (f *filter) frame() error {
	if err := f.fill(frameHeaderLen); err != nil {
		return err
	}
	h := f.buf[f.r : f.r+frameHeaderLen]
	length := int(h[0])<<16 | int(h[1])<<8 | int(h[2])
	typ := http2.FrameType(h[3])
	flags := http2.Flags(h[4])
	stream := binary.BigEndian.Uint32(h[5:]) & (1<<31 - 1)

	if length > f.p.maxFrame ||
		(f.blockOpen && (typ != http2.FrameContinuation || stream != f.blockStream)) ||
		(!f.blockOpen && typ == http2.FrameContinuation) ||
		(typ == http2.FrameHeaders && stream == 0) {
		// A connection error for the server (§4.2, §6.10, §6.2), after
		// which it decodes no further header block: step aside.
		f.mode = modeTransparent
		return nil
	}
	inspect := typ == http2.FrameHeaders || typ == http2.FrameContinuation ||
		(typ == http2.FrameSettings && stream == 0 && !flags.Has(http2.FlagSettingsAck) &&
			length%settingLen == 0 && length/settingLen <= maxSettingsPerFrame)
	if !inspect {
		f.ready = frameHeaderLen
		f.pass = length
		return nil
	}
	if err := f.fill(frameHeaderLen + length); err != nil {
		return err
	}
	f.ready = frameHeaderLen + length
	switch typ {
	case http2.FrameSettings:
		f.settings(length)
	case http2.FrameHeaders:
		f.headers(length, flags, stream)
	default:
		f.fragment(f.buf[f.r+frameHeaderLen:f.r+frameHeaderLen+length], length, 0, flags.Has(http2.FlagContinuationEndHeaders))
	}
	return nil
}

// settings rewrites a SETTINGS frame that repeats a parameter. Applying
// values in order (§6.5.3) leaves each parameter at its last value, so
// only that is kept; if a value is invalid, only the first invalid one is
// kept and the server answers with the connection error §6.5.2 names for
// it. The x/net server would reject any repetition with PROTOCOL_ERROR.
func (f *filter) settings(length int) {
	frame := f.buf[f.r : f.r+frameHeaderLen+length]
	p := frame[frameHeaderLen:]
	n := length / settingLen
	id := func(i int) uint16 { return binary.BigEndian.Uint16(p[i*settingLen:]) }
	repeatedLater := func(i int) bool {
		for j := i + 1; j < n; j++ {
			if id(j) == id(i) {
				return true
			}
		}
		return false
	}
	dup := false
	for i := 0; i < n && !dup; i++ {
		dup = repeatedLater(i)
	}
	if !dup {
		return
	}
	kept := 0
	for i := range n {
		s := http2.Setting{ID: http2.SettingID(id(i)), Val: binary.BigEndian.Uint32(p[i*settingLen+2:])}
		if s.Valid() != nil {
			copy(p, p[i*settingLen:(i+1)*settingLen])
			kept = settingLen
			break
		}
	}
	if kept == 0 {
		for i := range n {
			if !repeatedLater(i) {
				copy(p[kept:], p[i*settingLen:(i+1)*settingLen])
				kept += settingLen
			}
		}
	}
	// Shorten the frame and slide it up against what follows it.
	putLength(frame, kept)
	shift := length - kept
	copy(f.buf[f.r+shift:], frame[:frameHeaderLen+kept])
	f.r += shift
	f.ready = frameHeaderLen + kept
}

// headers starts a header block the way x/net's framer parses a HEADERS
// frame, so that the mirror decodes exactly the blocks the server decodes.
func (f *filter) headers(length int, flags http2.Flags, stream uint32) {
	p := f.buf[f.r+frameHeaderLen : f.r+frameHeaderLen+length]
	pad := 0
	if flags.Has(http2.FlagHeadersPadded) {
		if len(p) < 1 {
			f.mode = modeTransparent
			return
		}
		pad = int(p[0])
		p = p[1:]
	}
	if flags.Has(http2.FlagHeadersPriority) {
		if len(p) < 5 {
			f.mode = modeTransparent
			return
		}
		p = p[5:]
	}
	if pad > len(p) {
		// The server resets the stream without decoding the block; so
		// does the mirror.
		return
	}
	f.blockOpen = true
	f.blockStream = stream
	f.malformed = false
	f.fragment(p[:len(p)-pad], length, pad, flags.Has(http2.FlagHeadersEndHeaders))
}

// fragment feeds one header block fragment to the mirror decoder; the
// frame it came in is held at buf[r:] with the given payload length and
// padding.
func (f *filter) fragment(frag []byte, length, pad int, end bool) {
	if _, err := f.hdec.Write(frag); err != nil {
		// The server fails the connection with COMPRESSION_ERROR.
		f.mode = modeTransparent
		return
	}
	if !end {
		return
	}
	f.blockOpen = false
	if err := f.hdec.Close(); err != nil {
		f.mode = modeTransparent
		return
	}
	if !f.malformed {
		return
	}
	n := len(malformedFields)
	if length+n <= f.p.maxFrame {
		// Append the fields to the fragment, ahead of any padding.
		at := frameHeaderLen + length - pad // from r
		f.makeRoom(f.w - f.r + n)
		copy(f.buf[f.r+at+n:f.w+n], f.buf[f.r+at:f.w])
		copy(f.buf[f.r+at:], malformedFields[:])
		f.w += n
		putLength(f.buf[f.r:], length+n)
		f.ready = frameHeaderLen + length + n
		return
	}
	// The frame is full: end the block with a CONTINUATION of our own.
	f.buf[f.r+4] &^= byte(http2.FlagHeadersEndHeaders) // same bit in CONTINUATION
	c := f.injBuf[:]
	putLength(c, n)
	c[3] = byte(http2.FrameContinuation)
	c[4] = byte(http2.FlagContinuationEndHeaders)
	binary.BigEndian.PutUint32(c[5:], f.blockStream)
	copy(c[frameHeaderLen:], malformedFields[:])
	f.inj = c
}

// field checks one request field of the current header block against
// RFC 9113 §8.2.2, as the server's checkValidHTTP2RequestHeaders does
// (which answers 400 rather than resetting the stream).
func (f *filter) field(hf hpack.HeaderField) {
	switch hf.Name {
	case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade":
		f.malformed = true
	case "te":
		if hf.Value != "trailers" && hf.Value != "" {
			f.malformed = true
		}
	}
}

// fill reads from src until buf[r:w] holds at least n bytes.
func (f *filter) fill(n int) error {
	if f.r == f.w && f.ready == 0 {
		f.r, f.w = 0, 0
	}
	f.makeRoom(n)
	for f.w-f.r < n {
		m, err := f.src.Read(f.buf[f.w:])
		f.w += m
		if err != nil && f.w-f.r < n {
			return err
		}
	}
	return nil
}

// makeRoom makes buf[r:] at least n bytes long, moving or growing buf.
func (f *filter) makeRoom(n int) {
	if f.buf == nil {
		f.pooled = bufPool.Get().(*[bufSize]byte)
		f.buf = f.pooled[:]
	}
	if len(f.buf)-f.r >= n {
		return
	}
	if len(f.buf) >= n {
		copy(f.buf, f.buf[f.r:f.w])
		f.w -= f.r
		f.r = 0
		return
	}
	nb := make([]byte, max(n, 2*len(f.buf)))
	copy(nb, f.buf[f.r:f.w])
	f.w -= f.r
	f.r = 0
	if f.pooled != nil {
		bufPool.Put(f.pooled)
		f.pooled = nil
	}
	f.buf = nb
}

// release gives up buf once everything in it has been handed on.
func (f *filter) release() {
	if f.buf == nil || f.r != f.w || f.ready != 0 {
		return
	}
	if f.pooled != nil {
		bufPool.Put(f.pooled)
		f.pooled = nil
	}
	f.buf = nil
	f.r, f.w = 0, 0
}

// transparentAndEmpty reports whether everything from here on is src's
// bytes unchanged.
func (f *filter) transparentAndEmpty() bool {
	return f.mode == modeTransparent && f.r == f.w && f.ready == 0 && len(f.inj) == 0
}

func putLength(frame []byte, n int) {
	frame[0], frame[1], frame[2] = byte(n>>16), byte(n>>8), byte(n)
}
