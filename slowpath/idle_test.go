package slowpath

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

// TestStreamIdleTimeout: a WebSocket that keeps talking outlives the
// route's idle timeout; one that goes silent is closed by the proxy. Both
// ways of watching: a timer per exchange (short timeouts) and the shared
// sweeper (long ones; here made to sweep a 2 s timeout every 50 ms).
func TestStreamIdleTimeout(t *testing.T) {
	for _, tc := range []struct {
		name        string
		from, every time.Duration
	}{
		{"timer", idleSweepFrom, idleSweepEvery},
		{"swept", 0, 50 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			from, every := idleSweepFrom, idleSweepEvery
			idleSweepFrom, idleSweepEvery = tc.from, tc.every
			t.Cleanup(func() { idleSweepFrom, idleSweepEvery = from, every })
			testStreamIdleTimeout(t)
		})
	}
}

func testStreamIdleTimeout(t *testing.T) {
	e := newEnv(t)
	ws := wsEchoServer(t)
	r := rule(prefix("/"), "ns/ws")
	r.Timeouts = &pb.RouteTimeouts{IdleMs: 2000}
	e.mustApply(e.snap(pb.Protocol_PROTOCOL_HTTP, nil, []*pb.Route{route("ns/r", r)}, []*pb.Backend{backendOf("ns/ws", ws)}))

	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", e.addr)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = fmt.Fprintf(c, "GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 101 {
			t.Fatalf("upgrade: %v %v", resp, err)
		}
		return c, br
	}

	// Talking every 100 ms for 3 s (longer than the 2 s idle timeout).
	busy, br := dial()
	defer func() { _ = busy.Close() }()
	for i := range 30 {
		msg := fmt.Sprintf("m%d\n", i)
		_ = busy.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(busy, msg); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if got, err := br.ReadString('\n'); err != nil || got != strings.ToUpper(msg) {
			t.Fatalf("message %d: %q %v (a busy stream was cut)", i, got, err)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Silent: the proxy closes it.
	quiet, qr := dial()
	defer func() { _ = quiet.Close() }()
	_ = quiet.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := qr.ReadString('\n'); err == nil {
		t.Fatal("a silent stream got data")
	} else if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		t.Fatal("the silent stream was not closed within 20 s (idle timeout 2 s)")
	}
}
