package h2

import (
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// FuzzConn feeds arbitrary frames after a valid preface to ServeConn: the
// server must neither panic nor hang, and ServeConn must return once the
// client side closes.
func FuzzConn(f *testing.F) {
	seed := func(build func(fr *http2.Framer, enc *hpack.Encoder, hb *writeRecorder)) []byte {
		var out writeRecorder
		fr := http2.NewFramer(&out, nil)
		var hb writeRecorder
		enc := hpack.NewEncoder(&hb)
		_ = fr.WriteSettings()
		build(fr, enc, &hb)
		return out.b
	}
	f.Add(seed(func(fr *http2.Framer, enc *hpack.Encoder, hb *writeRecorder) {
		for _, kv := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", "f"}, {":path", "/"}, {"content-length", "3"}} {
			_ = enc.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]})
		}
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.b, EndHeaders: true})
		_ = fr.WriteData(1, false, []byte("ab"))
		_ = fr.WriteWindowUpdate(1, 100)
		_ = fr.WriteData(1, true, []byte("c"))
		_ = fr.WritePing(false, [8]byte{1})
	}))
	f.Add(seed(func(fr *http2.Framer, enc *hpack.Encoder, hb *writeRecorder) {
		_ = enc.WriteField(hpack.HeaderField{Name: ":method", Value: "GET"})
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: hb.b, EndHeaders: false})
		_ = fr.WriteContinuation(3, true, []byte{0x82})
		_ = fr.WriteRSTStream(3, http2.ErrCodeCancel)
		_ = fr.WriteGoAway(0, http2.ErrCodeNo, nil)
	}))
	f.Add(seed(func(fr *http2.Framer, enc *hpack.Encoder, hb *writeRecorder) {
		// A padded HEADERS with a priority, its block split over
		// CONTINUATIONs (one empty), then trailers.
		for _, kv := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", "f"}, {":path", "/c"}, {"x-a", "b"}} {
			_ = enc.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]})
		}
		b := hb.b
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: b[:3], PadLength: 2, Priority: http2.PriorityParam{Weight: 7}})
		_ = fr.WriteContinuation(1, false, b[3:5])
		_ = fr.WriteContinuation(1, false, nil)
		_ = fr.WriteContinuation(1, true, b[5:])
		hb.b = nil
		_ = enc.WriteField(hpack.HeaderField{Name: "x-t", Value: "1"})
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.b, EndStream: true, EndHeaders: true})
	}))
	srv := &Server{Handler: http.HandlerFunc(echoHandler), IdleTimeout: time.Second}
	f.Fuzz(func(t *testing.T, frames []byte) {
		client, server := net.Pipe()
		done := make(chan struct{})
		go func() {
			defer close(done)
			srv.ServeConn(server, ConnOptions{})
		}()
		go func() { _, _ = io.Copy(io.Discard, client) }()
		_ = client.SetWriteDeadline(time.Now().Add(2 * time.Second))
		_, _ = io.WriteString(client, clientPreface)
		_, _ = client.Write(frames)
		_ = client.Close()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("ServeConn did not return after the client closed")
		}
	})
}

type writeRecorder struct{ b []byte }

func (w *writeRecorder) Write(p []byte) (int, error) { w.b = append(w.b, p...); return len(p), nil }
