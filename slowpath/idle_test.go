package slowpath

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
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

// TestH2StreamIdleTimeout: over HTTP/2 the idle timeout cancels the
// stream's own context (ctxhook.CancelFunc, no context per request): a
// response that stalls is cut and its upstream request canceled, while
// the connection and its other streams carry on, and streams reused
// after it (the server pools them) are not canceled by it.
func TestH2StreamIdleTimeout(t *testing.T) {
	e := newEnv(t)
	canceled := make(chan struct{}, 1)
	back := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/stall" {
			_, _ = io.WriteString(w, "ok")
			return
		}
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "first")
		_ = http.NewResponseController(w).Flush()
		select {
		case <-r.Context().Done():
			canceled <- struct{}{}
		case <-time.After(30 * time.Second):
		}
	}))
	defer back.Close()
	r := rule(prefix("/"), "ns/b")
	r.Timeouts = &pb.RouteTimeouts{IdleMs: 300}
	e.mustApply(e.snap(pb.Protocol_PROTOCOL_HTTP, nil, []*pb.Route{route("ns/r", r)}, []*pb.Backend{backendOf("ns/b", hostport(back))}))

	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 20 * time.Second}
	getOK := func() {
		t.Helper()
		resp, err := c.Get("http://" + e.addr + "/ok")
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil || resp.ProtoMajor != 2 || string(body) != "ok" {
			t.Fatalf("GET /ok: HTTP/%d %q %v, want HTTP/2 \"ok\"", resp.ProtoMajor, body, err)
		}
	}
	getOK()

	resp, err := c.Get("http://" + e.addr + "/stall")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err == nil {
		t.Fatalf("a stalled response ended cleanly (%q): want it cut by the idle timeout", body)
	}
	select {
	case <-canceled:
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream request of the idle stream was not canceled")
	}
	// Same connection, streams reused from the pool: none is canceled by
	// the watch that ended the stalled one. Each takes longer than the
	// idle timeout in total, so a stale cancel would have hit one.
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		getOK()
	}
}

// TestIdleWatchStop: a stopped watch never cancels, and stop waits for a
// cancel under way, so that a context its server reuses after the request
// is not canceled late.
func TestIdleWatchStop(t *testing.T) {
	for _, d := range []time.Duration{20 * time.Millisecond, idleSweepFrom} {
		// A cancel that began before stop (the test descheduled for d
		// between the two) is the watch's right; one after it is not.
		var stopped atomic.Bool
		w := newIdleWatch(d, func(error) {
			if stopped.Load() {
				t.Errorf("a watch stopped at once (timeout %v) canceled", d)
			}
		})
		w.stop()
		stopped.Store(true)
	}
	entered, release, stopped := make(chan struct{}), make(chan struct{}), make(chan struct{})
	w := newIdleWatch(time.Millisecond, func(error) {
		close(entered)
		<-release
	})
	<-entered
	go func() {
		w.stop()
		close(stopped)
	}()
	select {
	case <-stopped:
		t.Fatal("stop returned while the cancel was running")
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	<-stopped
}

// TestSweptIdleWatchNeverEarly: a swept watch learns of activity only at
// the next sweep, so it may end late, but never before d has passed since
// the last activity, however the touches fall between sweeps.
func TestSweptIdleWatchNeverEarly(t *testing.T) {
	from, every := idleSweepFrom, idleSweepEvery
	idleSweepFrom, idleSweepEvery = 0, 7*time.Millisecond
	t.Cleanup(func() { idleSweepFrom, idleSweepEvery = from, every })

	const d = 60 * time.Millisecond
	for _, touches := range []int{0, 1, 5} {
		fired := make(chan time.Time, 1)
		start := time.Now()
		w := newIdleWatch(d, func(error) { fired <- time.Now() })
		last := start
		// paused: d passed between an activity and the end of the next
		// touch (a descheduled test), so the watch could rightly fire
		// before the last touch, and its time says nothing.
		paused := false
		for i := range touches {
			time.Sleep(time.Duration(3+i*11) * time.Millisecond % d)
			prev := last
			last = time.Now()
			w.touch()
			paused = paused || time.Since(prev) >= d
		}
		var at time.Time
		select {
		case at = <-fired:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d touches: the watch never fired", touches)
		}
		if paused {
			t.Logf("%d touches: the test paused for the timeout between two activities; not checked", touches)
		} else if idle := at.Sub(last); idle < d {
			t.Errorf("%d touches: fired %v after the last activity, before its timeout %v", touches, idle, d)
		}
		w.stop()
	}
}
