package h2

import (
	"bytes"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// encodeBlock encodes kv (name, value, ...) with enc into a fresh slice.
func encodeBlock(enc *hpack.Encoder, buf *bytes.Buffer, kv ...string) []byte {
	buf.Reset()
	for i := 0; i+1 < len(kv); i += 2 {
		_ = enc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
	}
	return bytes.Clone(buf.Bytes())
}

// decodeBlock runs block through d as one whole header block.
func decodeBlock(d *headerDecoder, block []byte) error {
	d.begin(1, true)
	if _, err := d.dec.Write(block); err != nil {
		return err
	}
	return d.dec.Close()
}

// kvOf lists the names and values of fields, for comparisons.
func kvOf(fields []hpack.HeaderField) []string {
	kv := []string{}
	for _, hf := range fields {
		kv = append(kv, hf.Name, hf.Value)
	}
	return kv
}

// TestHeaderDecoderRules: each rule the decoder applies to a request
// header block (RFC 9113 §8.2.1, §8.3, the header list limit), the error
// it reports (a stream error: the request is reset), and the fields
// emitted up to it.
func TestHeaderDecoderRules(t *testing.T) {
	get := []string{":method", "GET", ":scheme", "https", ":authority", "a.test", ":path", "/"}
	with := func(extra ...string) []string { return append(append([]string{}, get...), extra...) }
	for _, tc := range []struct {
		name      string
		kv        []string
		max       uint32 // 0: 4096
		err       error  // the block's invalid, nil when valid
		errNames  string // what the error message must name
		truncated bool
		fields    []string // emitted; nil: all of kv
	}{
		{name: "valid request", kv: with("accept", "*/*", "x-a", "b\tc")},
		{name: "valid trailers", kv: []string{"grpc-status", "0", "grpc-message", ""}},
		{name: "extended CONNECT pseudo fields", kv: []string{":method", "CONNECT", ":protocol", "websocket", ":scheme", "https", ":path", "/", ":authority", "a"}},
		{name: "upper-case name", kv: with("X-Foo", "1"), err: errFieldName, errNames: "X-Foo", fields: get},
		{name: "space in name", kv: with("x foo", "1"), err: errFieldName, errNames: "x foo", fields: get},
		{name: "empty name", kv: with("", "1"), err: errFieldName, fields: get},
		{name: "non-ASCII name", kv: with("x-é", "1"), err: errFieldName, fields: get},
		{name: "colon inside name", kv: with("x:y", "1"), err: errFieldName, fields: get},
		{name: "NUL in value", kv: with("x-a", "a\x00b"), err: errFieldValue, errNames: "x-a", fields: get},
		{name: "CR LF in value", kv: with("x-a", "a\r\nx-b: c"), err: errFieldValue, errNames: "x-a", fields: get},
		{name: "DEL in value", kv: with("x-a", "\x7f"), err: errFieldValue, fields: get},
		{name: "invalid pseudo value", kv: []string{":method", "GET\n"}, err: errFieldValue, errNames: ":method", fields: []string{}},
		{name: "pseudo after regular", kv: []string{":method", "GET", "x-a", "1", ":path", "/"}, err: errPseudoAfterRegular, errNames: ":path",
			fields: []string{":method", "GET", "x-a", "1"}},
		{name: "unknown pseudo", kv: with(":foo", "1"), err: errUnknownPseudo, errNames: ":foo", fields: get},
		{name: ":status in a request", kv: []string{":status", "200"}, err: errUnknownPseudo, errNames: ":status", fields: []string{}},
		{name: "lone colon", kv: []string{":", "x"}, err: errUnknownPseudo, fields: []string{}},
		{name: "duplicate :path", kv: with(":path", "/2"), err: errDuplicatePseudo, errNames: ":path", fields: get},
		{name: "duplicate :method", kv: []string{":method", "GET", ":method", "GET"}, err: errDuplicatePseudo, fields: []string{":method", "GET"}},
		{name: "nothing after a malformed field", kv: with("X-A", "1", "x-b", "2"), err: errFieldName, fields: get},
		// :method GET is 7+3+32 = 42 bytes of the list; :path / is 38.
		{name: "list exactly at the limit", kv: []string{":method", "GET", ":path", "/"}, max: 80},
		{name: "list too large", kv: []string{":method", "GET", ":path", "/", "x", ""}, max: 80 + 32,
			truncated: true, fields: []string{":method", "GET", ":path", "/"}},
		{name: "no check after too large", kv: []string{":method", "GET", "x-a", strings.Repeat("a", 100), "X-B", "1"}, max: 100,
			truncated: true, fields: []string{":method", "GET"}},
		// trailer: each name listed costs 32 more: 7+5+32+2*32 = 108.
		{name: "trailer names charged", kv: []string{"trailer", "a,b,c"}, max: 107, truncated: true, fields: []string{}},
		{name: "trailer names within limit", kv: []string{"trailer", "a,b,c"}, max: 108},
	} {
		t.Run(tc.name, func(t *testing.T) {
			maxList := tc.max
			if maxList == 0 {
				maxList = 4096
			}
			var d headerDecoder
			d.init(maxList)
			var buf bytes.Buffer
			if err := decodeBlock(&d, encodeBlock(hpack.NewEncoder(&buf), &buf, tc.kv...)); err != nil {
				t.Fatalf("HPACK error %v, want none", err)
			}
			if !errors.Is(d.blk.invalid, tc.err) || (tc.err == nil) != (d.blk.invalid == nil) {
				t.Fatalf("invalid = %v, want %v", d.blk.invalid, tc.err)
			}
			if tc.errNames != "" && !strings.Contains(d.blk.invalid.Error(), tc.errNames) {
				t.Errorf("error %q does not name the field %q", d.blk.invalid, tc.errNames)
			}
			if d.blk.truncated != tc.truncated {
				t.Errorf("truncated = %v, want %v", d.blk.truncated, tc.truncated)
			}
			want := tc.fields
			if want == nil {
				want = tc.kv
			}
			if diff := cmp.Diff(want, kvOf(d.blk.fields)); diff != "" {
				t.Errorf("fields (-want +got):\n%s", diff)
			}
		})
	}
}

// TestHeaderDecoderKeepsTable: a block whose fields stop being emitted
// (malformed, or too large) is still decoded to its end, so that the
// dynamic table stays the client's and the next block, which refers to
// entries added after the bad field, decodes right; the next block starts
// with a clean state.
func TestHeaderDecoderKeepsTable(t *testing.T) {
	for _, tc := range []struct {
		name  string
		first []string
	}{
		{"after a malformed field", []string{":method", "GET", "Bad", "1", "x-later", "v1"}},
		{"after the list limit", []string{":method", "GET", "x-big", strings.Repeat("b", 200), "x-later", "v1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var d headerDecoder
			d.init(256)
			var buf bytes.Buffer
			enc := hpack.NewEncoder(&buf)
			if err := decodeBlock(&d, encodeBlock(enc, &buf, tc.first...)); err != nil {
				t.Fatal(err)
			}
			if d.blk.invalid == nil && !d.blk.truncated {
				t.Fatal("first block accepted whole")
			}
			second := encodeBlock(enc, &buf, ":method", "GET", "x-later", "v1")
			if err := decodeBlock(&d, second); err != nil {
				t.Fatal(err)
			}
			if d.blk.invalid != nil || d.blk.truncated {
				t.Fatalf("second block: invalid %v, truncated %v", d.blk.invalid, d.blk.truncated)
			}
			if diff := cmp.Diff([]string{":method", "GET", "x-later", "v1"}, kvOf(d.blk.fields)); diff != "" {
				t.Errorf("second block (-want +got):\n%s", diff)
			}
		})
	}
}

// TestHeaderDecoderAllocs: a block of fields the dynamic table already
// holds decodes without allocating: no closure per block, the fields
// slice is reused, the strings are the table's.
func TestHeaderDecoderAllocs(t *testing.T) {
	var d headerDecoder
	d.init(4096)
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	kv := []string{":method", "GET", ":scheme", "https", ":authority", "a.test", ":path", "/p", "user-agent", "test/1", "x-request-id", "abc"}
	if err := decodeBlock(&d, encodeBlock(enc, &buf, kv...)); err != nil {
		t.Fatal(err)
	}
	block := encodeBlock(enc, &buf, kv...) // all indexed now
	var failed error
	allocs := testing.AllocsPerRun(100, func() {
		if err := decodeBlock(&d, block); err != nil || d.blk.invalid != nil || len(d.blk.fields) != len(kv)/2 {
			failed = errors.Join(err, d.blk.invalid, errors.New("fields missing"))
		}
	})
	if failed != nil {
		t.Fatal(failed)
	}
	if allocs != 0 {
		t.Errorf("decoding an indexed block: %v allocations, want 0", allocs)
	}
}

// wireHandler answers every request with its path and some of its fields
// in X-Got, without a body.
func wireHandler(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Got", r.URL.Path+" "+r.Header.Get("X-Echo")+" "+strings.Join(r.Header.Values("X-Multi"), ","))
}

// answer reads frames until the server answers stream id (its response
// HEADERS, or RST_STREAM) or ends the connection (GOAWAY, or a close),
// and describes it: "200 <X-Got>", "RST <code>", "GOAWAY <code>: <reason>".
func (rc *rawConn) answer(t *testing.T, id uint32) string {
	t.Helper()
	for {
		f, err := rc.next(t)
		if err != nil {
			return "closed without GOAWAY: " + err.Error()
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			if f.StreamID != id {
				continue
			}
			s := f.PseudoValue("status")
			for _, hf := range f.RegularFields() {
				if hf.Name == "x-got" {
					s += " " + hf.Value
				}
			}
			return s
		case *http2.RSTStreamFrame:
			if f.StreamID == id {
				return "RST " + f.ErrCode.String()
			}
		case *http2.GoAwayFrame:
			return "GOAWAY " + f.ErrCode.String() + ": " + string(f.DebugData())
		}
	}
}

// settle returns once the server's SETTINGS is acknowledged (next does
// that when it reads it, before the answer to a PING sent now), so that
// the acknowledgement cannot fall inside a header block a test leaves
// open.
func (rc *rawConn) settle(t *testing.T) {
	t.Helper()
	if err := rc.write(func() error { return rc.fr.WritePing(false, [8]byte{'s'}) }); err != nil {
		t.Fatal(err)
	}
	for {
		f, err := rc.next(t)
		if err != nil {
			t.Fatalf("waiting for the PING answer: %v", err)
		}
		if p, ok := f.(*http2.PingFrame); ok && p.IsAck() {
			return
		}
	}
}

// block encodes a header block with the connection's encoder (so that
// its dynamic table stays the server's decoder's).
func (rc *rawConn) block(kv ...string) []byte {
	rc.wmu.Lock()
	defer rc.wmu.Unlock()
	return encodeBlock(rc.henc, &rc.hbuf, kv...)
}

// splitAt cuts b at the given offsets.
func splitAt(b []byte, at ...int) [][]byte {
	var parts [][]byte
	last := 0
	for _, i := range at {
		parts = append(parts, b[last:i])
		last = i
	}
	return append(parts, b[last:])
}

// sendBlock writes frags as a HEADERS frame (padded, with a priority, to
// exercise their parsing) and CONTINUATIONs on stream id, the last with
// END_HEADERS unless open.
func (rc *rawConn) sendBlock(id uint32, end, open bool, frags ...[]byte) error {
	return rc.write(func() error {
		p := http2.HeadersFrameParam{StreamID: id, BlockFragment: frags[0], EndStream: end, EndHeaders: len(frags) == 1 && !open,
			PadLength: 3, Priority: http2.PriorityParam{Weight: 15}}
		if err := rc.fr.WriteHeaders(p); err != nil {
			return err
		}
		for i, f := range frags[1:] {
			if err := rc.fr.WriteContinuation(id, i == len(frags)-2 && !open, f); err != nil {
				return err
			}
		}
		return nil
	})
}

var wireRequest = []string{":method", "GET", ":scheme", "http", ":authority", "raw.test", ":path", "/split",
	"x-echo", strings.Repeat("e", 40), "x-multi", "a", "x-multi", "b"}

const wireAnswer = "200 /split " + "eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee" + " a,b"

// TestHeaderBlockWire: header blocks as the server reads them off a
// connection, HEADERS and CONTINUATION frames, and how it answers: the
// request, a stream error (after which the connection serves the next
// request, its decoder in step), 431, or a connection error.
func TestHeaderBlockWire(t *testing.T) {
	for _, tc := range []struct {
		name string
		max  int // MaxHeaderBytes; 0: the default
		// send writes the case's frames on stream 1.
		send func(rc *rawConn) error
		want string
	}{
		{name: "one HEADERS frame", want: wireAnswer, send: func(rc *rawConn) error {
			return rc.sendBlock(1, true, false, rc.block(wireRequest...))
		}},
		{name: "split across CONTINUATIONs, one empty", want: wireAnswer, send: func(rc *rawConn) error {
			return rc.sendBlock(1, true, false, splitAt(rc.block(wireRequest...), 3, 7, 7, 20)...)
		}},
		{name: "a CONTINUATION per byte", want: wireAnswer, send: func(rc *rawConn) error {
			b := rc.block(wireRequest...)
			var at []int
			for i := 1; i < len(b); i++ {
				at = append(at, i)
			}
			return rc.sendBlock(1, true, false, splitAt(b, at...)...)
		}},
		{name: "malformed field", want: "RST PROTOCOL_ERROR", send: func(rc *rawConn) error {
			return rc.sendBlock(1, true, false, rc.block(append(append([]string{}, wireRequest...), "X-Upper", "1")...))
		}},
		{name: "malformed field in a CONTINUATION", want: "RST PROTOCOL_ERROR", send: func(rc *rawConn) error {
			b := rc.block(":method", "GET", ":scheme", "http", ":path", "/", "x-a", "1", ":authority", "late")
			return rc.sendBlock(1, true, false, splitAt(b, len(b)-6)...)
		}},
		{name: "duplicate pseudo field", want: "RST PROTOCOL_ERROR", send: func(rc *rawConn) error {
			return rc.sendBlock(1, true, false, rc.block(append(append([]string{}, wireRequest[:8]...), ":path", "/again")...))
		}},
		{name: "missing :path", want: "RST PROTOCOL_ERROR", send: func(rc *rawConn) error {
			return rc.sendBlock(1, true, false, rc.block(wireRequest[:6]...))
		}},
		{name: "too large in the last CONTINUATION", max: 2048, want: "431", send: func(rc *rawConn) error {
			// 20 more x-big fields: 1 byte each on the wire once
			// indexed, 4+100+32 bytes each of the list.
			big := []string{"x-big", strings.Repeat("v", 100)}
			head := rc.block(append(append([]string{}, wireRequest[:8]...), big...)...)
			return rc.sendBlock(1, true, false, head, rc.block(repeatKV(big, 5)...), rc.block(repeatKV(big, 20)...))
		}},
		{name: "CONTINUATION after the limit", max: 2048, want: "GOAWAY PROTOCOL_ERROR: header block too large", send: func(rc *rawConn) error {
			big := []string{"x-big", strings.Repeat("v", 100)}
			head := rc.block(append(append([]string{}, wireRequest[:8]...), big...)...)
			return rc.sendBlock(1, true, false, head, rc.block(repeatKV(big, 20)...), rc.block(big...))
		}},
		{name: "CONTINUATION after a malformed field", want: "GOAWAY PROTOCOL_ERROR: CONTINUATION after a malformed header field", send: func(rc *rawConn) error {
			return rc.sendBlock(1, true, false, rc.block(":method", "GET", "X-Bad", "1"), rc.block(":path", "/"))
		}},
		{name: "fragment far beyond the limit", max: 1024, want: "GOAWAY PROTOCOL_ERROR: header block too large", send: func(rc *rawConn) error {
			return rc.sendBlock(1, true, false, rc.block(append(append([]string{}, wireRequest[:8]...), "x-big", strings.Repeat("\x01", 3000))...))
		}},
		{name: "empty CONTINUATION flood", max: 1024, want: "GOAWAY PROTOCOL_ERROR: header block too large", send: func(rc *rawConn) error {
			if err := rc.sendBlock(1, true, true, rc.block(wireRequest[:8]...)); err != nil {
				return err
			}
			for range 1000 {
				if err := rc.write(func() error { return rc.fr.WriteContinuation(1, false, nil) }); err != nil {
					return nil // the server closed: its answer tells
				}
			}
			return nil
		}},
		{name: "DATA inside a block", want: "GOAWAY PROTOCOL_ERROR: got DATA for stream 1; expected CONTINUATION", send: func(rc *rawConn) error {
			if err := rc.sendBlock(1, false, true, rc.block(wireRequest[:4]...)); err != nil {
				return err
			}
			return rc.write(func() error { return rc.fr.WriteData(1, true, []byte("x")) })
		}},
		{name: "PING inside a block", want: "GOAWAY PROTOCOL_ERROR: got PING for stream 0; expected CONTINUATION", send: func(rc *rawConn) error {
			if err := rc.sendBlock(1, true, true, rc.block(wireRequest[:4]...)); err != nil {
				return err
			}
			return rc.write(func() error { return rc.fr.WritePing(false, [8]byte{}) })
		}},
		{name: "HEADERS of another stream inside a block", want: "GOAWAY PROTOCOL_ERROR: got HEADERS for stream 3; expected CONTINUATION", send: func(rc *rawConn) error {
			if err := rc.sendBlock(1, true, true, rc.block(wireRequest[:4]...)); err != nil {
				return err
			}
			return rc.sendBlock(3, true, false, rc.block(wireRequest...))
		}},
		{name: "CONTINUATION of another stream", want: "GOAWAY PROTOCOL_ERROR: got CONTINUATION for stream 3; expected stream 1", send: func(rc *rawConn) error {
			if err := rc.sendBlock(1, true, true, rc.block(wireRequest[:4]...)); err != nil {
				return err
			}
			b := rc.block(wireRequest[4:8]...)
			return rc.write(func() error { return rc.fr.WriteContinuation(3, true, b) })
		}},
		{name: "CONTINUATION without HEADERS", want: "GOAWAY PROTOCOL_ERROR: unexpected CONTINUATION for stream 1", send: func(rc *rawConn) error {
			return rc.write(func() error { return rc.fr.WriteContinuation(1, true, []byte{0x82}) })
		}},
		{name: "HPACK index beyond the tables", want: "GOAWAY COMPRESSION_ERROR: HPACK on stream 1", send: func(rc *rawConn) error {
			return rc.sendBlock(1, true, false, []byte{0x82, 0xff, 0x10})
		}},
		{name: "HPACK field cut at the block's end", want: "GOAWAY COMPRESSION_ERROR: HPACK on stream 1", send: func(rc *rawConn) error {
			b := rc.block(wireRequest...)
			return rc.sendBlock(1, true, false, b[:len(b)-2])
		}},
		{name: "HPACK table size update after a field", want: "GOAWAY COMPRESSION_ERROR: HPACK on stream 1", send: func(rc *rawConn) error {
			// The update counts as misplaced only with a non-empty
			// dynamic table, which the request's fields fill.
			return rc.sendBlock(1, true, false, append(rc.block(wireRequest...), 0x3f, 0xe1, 0x1f))
		}},
		{name: "padding longer than the payload", want: "GOAWAY PROTOCOL_ERROR: HEADERS padding longer than the payload", send: func(rc *rawConn) error {
			return rc.write(func() error {
				return rc.fr.WriteRawFrame(http2.FrameHeaders, http2.FlagHeadersPadded|http2.FlagHeadersEndHeaders, 1, []byte{2, 0x82})
			})
		}},
		{name: "HEADERS shorter than its priority", want: "GOAWAY FRAME_SIZE_ERROR: HEADERS frame shorter than its pad length and priority", send: func(rc *rawConn) error {
			return rc.write(func() error {
				return rc.fr.WriteRawFrame(http2.FrameHeaders, http2.FlagHeadersPriority|http2.FlagHeadersEndHeaders, 1, []byte{0, 0, 0})
			})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := startServer(t, false, http.HandlerFunc(wireHandler), func(s *Server) { s.MaxHeaderBytes = tc.max })
			rc := dialRaw(t, ts.addr)
			rc.settle(t)
			if err := tc.send(rc); err != nil {
				t.Fatalf("send: %v", err)
			}
			got := rc.answer(t, 1)
			if strings.HasPrefix(tc.want, "GOAWAY") {
				// The reason: its start, the rest names details.
				if !strings.HasPrefix(got, tc.want) {
					t.Fatalf("stream 1: %q, want %q…", got, tc.want)
				}
				return
			}
			if got != tc.want {
				t.Fatalf("stream 1: %q, want %q", got, tc.want)
			}
			// The connection serves on, its HPACK state in step.
			if err := rc.sendBlock(3, true, false, rc.block(wireRequest...)); err != nil {
				t.Fatal(err)
			}
			if got := rc.answer(t, 3); got != wireAnswer {
				t.Fatalf("next request: %q, want %q", got, wireAnswer)
			}
		})
	}
}

// repeatKV repeats the pairs of kv n times.
func repeatKV(kv []string, n int) []string {
	var out []string
	for range n {
		out = append(out, kv...)
	}
	return out
}

// TestTrailersWire: trailers are a header block too: valid ones reach the
// handler, pseudo-header fields or a malformed field in them reset the
// stream.
func TestTrailersWire(t *testing.T) {
	got := make(chan string, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b bytes.Buffer
		_, err := b.ReadFrom(r.Body)
		if err == nil {
			got <- r.Trailer.Get("X-T")
		}
	})
	for _, tc := range []struct {
		name     string
		trailers []string
		want     string // the handler's X-T; "": the stream is reset
	}{
		{"valid", []string{"x-t", "done"}, "done"},
		{"pseudo field", []string{":path", "/"}, ""},
		{"malformed name", []string{"X-T", "done"}, ""},
		{"CONTINUATION", []string{"x-t", "split", "x-u", "1"}, "split"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := startServer(t, false, h, nil)
			rc := dialRaw(t, ts.addr)
			rc.settle(t)
			req := []string{":method", "POST", ":scheme", "http", ":authority", "raw.test", ":path", "/t"}
			if err := rc.sendBlock(1, false, false, rc.block(req...)); err != nil {
				t.Fatal(err)
			}
			if err := rc.write(func() error { return rc.fr.WriteData(1, false, []byte("body")) }); err != nil {
				t.Fatal(err)
			}
			b := rc.block(tc.trailers...)
			if err := rc.sendBlock(1, true, false, splitAt(b, len(b)/2)...); err != nil {
				t.Fatal(err)
			}
			answer := rc.answer(t, 1)
			if tc.want == "" {
				if answer != "RST PROTOCOL_ERROR" {
					t.Fatalf("answer %q, want RST PROTOCOL_ERROR", answer)
				}
				return
			}
			if answer != "200" {
				t.Fatalf("answer %q, want 200", answer)
			}
			if v := <-got; v != tc.want {
				t.Fatalf("trailer X-T %q, want %q", v, tc.want)
			}
		})
	}
}
