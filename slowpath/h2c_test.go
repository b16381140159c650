package slowpath

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

// TestH2CUpgrade speaks the RFC 7540 §3.2 upgrade by hand: an HTTP/1.1
// request with "Upgrade: h2c" gets 101, then its response arrives as
// HTTP/2 frames on stream 1.
func TestH2CUpgrade(t *testing.T) {
	e := newEnv(t)
	be := echoServer(t, "a")
	e.mustApply(e.snap(pb.Protocol_PROTOCOL_HTTP, nil, []*pb.Route{route("ns/r", rule(prefix("/"), "ns/a"))}, []*pb.Backend{backendOf("ns/a", hostport(be))}))

	c, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	settings := base64.RawURLEncoding.EncodeToString(nil)
	_, _ = c.Write([]byte("GET /up HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: " + settings + "\r\n\r\n"))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 || resp.Header.Get("Upgrade") != "h2c" {
		t.Fatalf("upgrade response: %v %v", resp, err)
	}
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, br)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	var (
		status string
		body   bytes.Buffer
	)
	dec := hpack.NewDecoder(4096, func(f hpack.HeaderField) {
		if f.Name == ":status" {
			status = f.Value
		}
	})
	for done := false; !done; {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading HTTP/2 frames: %v (status %q, body %q)", err, status, body.String())
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.HeadersFrame:
			if f.StreamID != 1 {
				t.Fatalf("response on stream %d, want 1", f.StreamID)
			}
			if _, err := dec.Write(f.HeaderBlockFragment()); err != nil {
				t.Fatal(err)
			}
			done = f.StreamEnded()
		case *http2.DataFrame:
			body.Write(f.Data())
			done = f.StreamEnded()
		}
	}
	if status != "200" || !strings.Contains(body.String(), `"path":"/up"`) {
		t.Fatalf("stream 1: status %q body %q", status, body.String())
	}
}
