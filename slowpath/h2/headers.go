package h2

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Why a header block is malformed (RFC 9113 §8.2.1, §8.3): the request is
// reset with PROTOCOL_ERROR. The errors wrap these with the field's name
// (never its value, which may be a secret).
var (
	errFieldName          = errors.New("invalid header field name")
	errFieldValue         = errors.New("invalid header field value")
	errPseudoAfterRegular = errors.New("pseudo-header field after a regular one")
	errUnknownPseudo      = errors.New("unknown pseudo-header field")
	errDuplicatePseudo    = errors.New("duplicate pseudo-header field")
)

// frameHeaderLen is the size of a frame header on the wire (§4.1): what a
// CONTINUATION frame costs the client's header block budget even when it
// carries nothing.
const frameHeaderLen = 9

// headerBlock is a decoded request header block (HEADERS and its
// CONTINUATIONs): what onHeaders acts on.
type headerBlock struct {
	streamID    uint32
	endStream   bool
	hasPriority bool
	streamDep   uint32
	// fields are the block's fields, pseudo-header fields first, checked
	// as the decoder went. The slice is reused for the next block; the
	// strings are the decoder's (indexed ones shared with its dynamic
	// table) and may be kept.
	fields []hpack.HeaderField
	// truncated says the header list passed the server's limit: fields
	// is incomplete, and the request is answered with 431.
	truncated bool
	// invalid says why the block is malformed (a stream error), or nil.
	invalid error
}

// headerDecoder decodes a connection's header blocks. The reader goroutine
// alone uses it. Its HPACK decoder calls emit, bound once per connection,
// so a block costs no closure, and fields go to the block's reusable
// slice: a request's headers allocate only the strings of literal fields.
type headerDecoder struct {
	dec *hpack.Decoder
	max uint32 // the header list limit (SETTINGS_MAX_HEADER_LIST_SIZE)
	blk headerBlock

	remain     uint32 // header list bytes the block may still add
	wire       int64  // block bytes on the wire so far, frame headers included
	sawRegular bool
	pseudo     uint8 // pseudoBit of each pseudo-header field seen
}

// maxKeptFields bounds the field slice kept between blocks, so that one
// huge block does not pin its array for the connection's life.
const maxKeptFields = 256

func (d *headerDecoder) init(maxList uint32) {
	d.max = maxList
	d.dec = hpack.NewDecoder(4096, d.emit)
	// No string longer than the whole list can fit; an int overflow
	// (32-bit platforms) means no limit, as for x/net.
	if n := int(maxList); n > 0 {
		d.dec.SetMaxStringLength(n)
	}
}

// begin starts the block of a HEADERS frame on stream id.
func (d *headerDecoder) begin(id uint32, endStream bool) {
	fields := d.blk.fields
	if cap(fields) > maxKeptFields {
		fields = nil
	}
	clear(fields) // let go of the last block's strings
	d.blk = headerBlock{streamID: id, endStream: endStream, fields: fields[:0]}
	d.remain, d.wire = d.max, 0
	d.sawRegular, d.pseudo = false, 0
	d.dec.SetEmitEnabled(true)
}

// emit receives each decoded field. After a malformed field or once the
// list is too large it is disabled: the decoder still runs through the
// rest of the block, keeping its dynamic table in step with the client's.
func (d *headerDecoder) emit(hf hpack.HeaderField) {
	if err := d.check(hf); err != nil {
		d.blk.invalid = err
		d.dec.SetEmitEnabled(false)
		return
	}
	size := hf.Size()
	if hf.Name == "trailer" {
		// Each name it lists becomes a Trailer map key: charge each
		// the per-field overhead, as if it were a field.
		size += uint32(strings.Count(hf.Value, ",")) * (hpack.HeaderField{}).Size()
	}
	if size > d.remain {
		d.blk.truncated = true
		d.remain = 0
		d.dec.SetEmitEnabled(false)
		return
	}
	d.remain -= size
	d.blk.fields = append(d.blk.fields, hf)
}

// pseudoBit numbers the request pseudo-header fields (§8.3.1) for the
// duplicate check; 0 is an unknown one. :status is a response's and so
// unknown in a request.
func pseudoBit(name string) uint8 {
	switch name {
	case ":method":
		return 1 << 0
	case ":scheme":
		return 1 << 1
	case ":authority":
		return 1 << 2
	case ":path":
		return 1 << 3
	case ":protocol":
		return 1 << 4
	}
	return 0
}

// check applies §8.2.1 and §8.3 to one field in its place in the block.
func (d *headerDecoder) check(hf hpack.HeaderField) error {
	if !httpguts.ValidHeaderFieldValue(hf.Value) {
		return fmt.Errorf("%w in %q", errFieldValue, hf.Name)
	}
	if strings.HasPrefix(hf.Name, ":") {
		if d.sawRegular {
			return fmt.Errorf("%w: %q", errPseudoAfterRegular, hf.Name)
		}
		bit := pseudoBit(hf.Name)
		if bit == 0 {
			return fmt.Errorf("%w: %q", errUnknownPseudo, hf.Name)
		}
		if d.pseudo&bit != 0 {
			return fmt.Errorf("%w: %q", errDuplicatePseudo, hf.Name)
		}
		d.pseudo |= bit
		return nil
	}
	d.sawRegular = true
	if !validWireName(hf.Name) {
		return fmt.Errorf("%w: %q", errFieldName, hf.Name)
	}
	return nil
}

// validWireName reports whether name is a token without upper-case
// letters: HTTP/2 field names are lower case on the wire (§8.2.1).
func validWireName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		b := name[i]
		if b >= 'A' && b <= 'Z' || !httpguts.IsTokenRune(rune(b)) {
			return false
		}
	}
	return true
}

// fragment decodes n bytes of block fragment read from the connection.
// The client's block is bounded before it is read: a fragment more than
// twice the list bytes still allowed (any non-empty one once the limit is
// passed), any fragment after a malformed field, or a block whose frames
// pass twice the limit on the wire (empty CONTINUATIONs included) ends the
// connection, so that a CONTINUATION flood is neither buffered nor decoded
// for long.
func (c *conn) fragment(n int, first bool) error {
	d := &c.hd
	d.wire += int64(n) + frameHeaderLen
	if int64(n) > 2*int64(d.remain) || d.wire > 2*int64(d.max)+frameHeaderLen {
		return connError{http2.ErrCodeProtocol, "header block too large"}
	}
	if !first && d.blk.invalid != nil {
		return connError{http2.ErrCodeProtocol, "CONTINUATION after a malformed header field"}
	}
	// The fragment is decoded from the read buffer in place: the
	// decoder copies what it keeps.
	for n > 0 {
		k := min(n, c.br.Size())
		p, err := c.br.Peek(k)
		if err != nil {
			return fmt.Errorf("read header block of stream %d: %w", d.blk.streamID, err)
		}
		if _, err := d.dec.Write(p); err != nil {
			return connError{http2.ErrCodeCompression, fmt.Sprintf("HPACK on stream %d: %v", d.blk.streamID, err)}
		}
		_, _ = c.br.Discard(k)
		n -= k
	}
	return nil
}

// discard skips n bytes of the connection (padding).
func (c *conn) discard(n int) error {
	if _, err := c.br.Discard(n); err != nil {
		return fmt.Errorf("read padding: %w", err)
	}
	return nil
}

// readHeaderBlock reads the payload of the HEADERS frame whose header is
// fh, and the CONTINUATION frames that end its block, into c.hd.blk. The
// payloads are read straight from the connection's buffer, not through
// the Framer (which allocates a frame per HEADERS and CONTINUATION); the
// Framer still reads the frame headers, and its order check ends the
// connection (PROTOCOL_ERROR) when anything but a CONTINUATION of the
// same stream follows a block without END_HEADERS. A malformed block is
// reported in c.hd.blk.invalid (a stream error); errors returned end the
// connection.
func (c *conn) readHeaderBlock(fh http2.FrameHeader) error {
	d := &c.hd
	d.begin(fh.StreamID, fh.Flags.Has(http2.FlagHeadersEndStream))
	if fh.StreamID == 0 {
		return connError{http2.ErrCodeProtocol, "HEADERS frame with stream ID 0"}
	}
	n := int(fh.Length)
	padded, prio := fh.Flags.Has(http2.FlagHeadersPadded), fh.Flags.Has(http2.FlagHeadersPriority)
	prefix := 0
	if padded {
		prefix++
	}
	if prio {
		prefix += 5
	}
	if n < prefix {
		return connError{http2.ErrCodeFrameSize, "HEADERS frame shorter than its pad length and priority"}
	}
	pad := 0
	if prefix > 0 {
		p, err := c.br.Peek(prefix)
		if err != nil {
			return fmt.Errorf("read HEADERS of stream %d: %w", fh.StreamID, err)
		}
		if padded {
			pad, p = int(p[0]), p[1:]
		}
		if prio {
			d.blk.hasPriority = true
			d.blk.streamDep = binary.BigEndian.Uint32(p) & (1<<31 - 1)
		}
		_, _ = c.br.Discard(prefix)
		n -= prefix
	}
	if pad > n {
		// §6.2: padding as long as the payload or longer.
		return connError{http2.ErrCodeProtocol, "HEADERS padding longer than the payload"}
	}
	if err := c.fragment(n-pad, true); err != nil {
		return err
	}
	if err := c.discard(pad); err != nil {
		return err
	}
	for ended := fh.Flags.Has(http2.FlagHeadersEndHeaders); !ended; {
		fh, err := c.fr.ReadFrameHeader()
		if err != nil {
			return c.frameHeaderError(fh, err)
		}
		// The Framer's order check let only a CONTINUATION of this
		// stream through.
		if err := c.fragment(int(fh.Length), false); err != nil {
			return err
		}
		ended = fh.Flags.Has(http2.FlagContinuationEndHeaders)
	}
	if err := d.dec.Close(); err != nil {
		return connError{http2.ErrCodeCompression, fmt.Sprintf("HPACK on stream %d: %v", d.blk.streamID, err)}
	}
	return nil
}

// frameHeaderError turns an error of Framer.ReadFrameHeader into the
// connection error to end with.
func (c *conn) frameHeaderError(fh http2.FrameHeader, err error) error {
	if errors.Is(err, http2.ErrFrameTooLarge) {
		return connError{http2.ErrCodeFrameSize, fmt.Sprintf("%v frame of %d bytes", fh.Type, fh.Length)}
	}
	var ce http2.ConnectionError
	if errors.As(err, &ce) {
		reason := "malformed frame"
		if d := c.fr.ErrorDetail(); d != nil {
			reason = d.Error()
		}
		return connError{http2.ErrCode(ce), reason}
	}
	return err
}
