package slowpath

import (
	"crypto/tls"
	"io"
	"net/http"
	"strings"
	"testing"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/slowpath/endpoint"
	"github.com/novaedge/novaedge/slowpath/router"
)

// TestPooledExchangesDoNotLeak: requests alternate between a route whose
// backend sets an affinity cookie and one whose backend does not, on one
// keep-alive connection, so pooled exchanges serve both in turn. No answer
// may carry what belonged to the other (the cookie, the backend, the
// request ID).
func TestPooledExchangesDoNotLeak(t *testing.T) {
	e := newEnv(t)
	a, b := echoServer(t, "a"), echoServer(t, "b")
	ba := backendOf("ns/a", hostport(a))
	ba.LbPolicy = pb.LBPolicy_LB_POLICY_RING_HASH
	ba.HashPolicy = &pb.HashPolicy{Cookie: "aff"}
	e.mustApply(e.snap(pb.Protocol_PROTOCOL_HTTP, nil,
		[]*pb.Route{route("ns/r", rule(prefix("/a"), "ns/a"), rule(prefix("/b"), "ns/b"))},
		[]*pb.Backend{ba, backendOf("ns/b", hostport(b))}))
	c := &http.Client{}
	ids := map[string]bool{}
	for i := range 20 {
		path, want := "/a", "a"
		if i%2 == 1 {
			path, want = "/b", "b"
		}
		resp, got, body := get(t, c, "http://"+e.addr+path)
		if resp.StatusCode != http.StatusOK || got.Backend != want {
			t.Fatalf("request %d to %s: %d from %q, want 200 from %q: %s", i, path, resp.StatusCode, got.Backend, want, body)
		}
		cookie := resp.Header.Get("Set-Cookie")
		if want == "a" && !strings.HasPrefix(cookie, "aff=") {
			t.Errorf("request %d to %s: Set-Cookie %q, want the affinity cookie", i, path, cookie)
		}
		if want == "b" && cookie != "" {
			t.Errorf("request %d to %s: Set-Cookie %q, want none (left over from another request)", i, path, cookie)
		}
		id := http.Header(got.Header).Get("X-Request-Id")
		if len(id) != 32 || ids[id] {
			t.Errorf("request %d: X-Request-Id %q, want a new one", i, id)
		}
		ids[id] = true
	}
}

// TestPutExchange: an exchange is cleared and pooled only when nothing
// refers to it any more; otherwise it is left alone, never to be reused.
func TestPutExchange(t *testing.T) {
	for _, tc := range []struct {
		name                       string
		upgraded, bodyOpen, closed bool
		wantCleared                bool
	}{
		{name: "no body (upstream error)", wantCleared: true},
		{name: "body closed", bodyOpen: true, closed: true, wantCleared: true},
		{name: "body still open", bodyOpen: true},
		{name: "upgraded stream", upgraded: true, bodyOpen: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := New(Options{})
			x := p.getExchange()
			ep := &endpoint.Endpoint{Addr: "192.0.2.1:80"}
			x.reqID, x.tries, x.retryHeld = "id", 2, true
			x.cookie = &http.Cookie{Name: "aff"}
			x.m = router.Match{Rule: &router.Rule{Route: "ns/r"}}
			x.ep.Store(ep)
			x.tried[0], x.ntried = ep, 1
			x.sw.code = 200
			x.upgraded, x.bodyOpen = tc.upgraded, tc.bodyOpen
			x.body.ReadCloser = io.NopCloser(strings.NewReader(""))
			x.body.closed.Store(tc.closed)
			p.putExchange(x)
			cleared := x.reqID == "" && x.tries == 0 && !x.retryHeld && x.cookie == nil && x.m.Rule == nil &&
				x.ep.Load() == nil && x.ntried == 0 && x.tried[0] == nil && x.sw.code == 0 && x.body.ReadCloser == nil && !x.body.closed.Load()
			if cleared != tc.wantCleared {
				t.Fatalf("exchange cleared for reuse: %v, want %v", cleared, tc.wantCleared)
			}
			if x.rp.Transport != x || x.wasTried == nil || x.body.x != x {
				t.Fatal("the exchange's bound callbacks were lost")
			}
		})
	}
}

// TestForwardedElem: this hop's Forwarded element (RFC 7239) for IPv4,
// IPv6 (quoted, bracketed) and unparsable client addresses, with quotes
// taken out of the host, after the client's own elements.
func TestForwardedElem(t *testing.T) {
	for _, tc := range []struct {
		name, remote, host string
		tls                bool
		prior              []string
		want               string
	}{
		{name: "ipv4", remote: "192.0.2.7:5000", host: "shop.test", want: `for=192.0.2.7;host="shop.test";proto=http`},
		{name: "ipv6 over tls", remote: "[2001:db8::7]:5000", host: "shop.test:8443", tls: true, want: `for="[2001:db8::7]";host="shop.test:8443";proto=https`},
		{name: "v4-mapped ipv6", remote: "[::ffff:192.0.2.7]:5000", host: "h", want: `for=192.0.2.7;host="h";proto=http`},
		{name: "unknown client", remote: "@", host: "h", want: `for=unknown;host="h";proto=http`},
		{name: "quotes in host", remote: "192.0.2.7:1", host: `a"b"`, want: `for=192.0.2.7;host="ab";proto=http`},
		{name: "after the client's", remote: "192.0.2.7:1", host: "h", prior: []string{"for=198.51.100.1", "for=198.51.100.2"},
			want: `for=198.51.100.1, for=198.51.100.2, for=192.0.2.7;host="h";proto=http`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &http.Request{RemoteAddr: tc.remote, Host: tc.host, Header: http.Header{}}
			for _, v := range tc.prior {
				r.Header.Add("Forwarded", v)
			}
			proto := "http"
			if tc.tls {
				r.TLS, proto = &tls.ConnectionState{}, "https"
			}
			if got := forwardedElem(r, proto); got != tc.want {
				t.Errorf("forwardedElem = %s, want %s", got, tc.want)
			}
		})
	}
}

// TestBytePool: buffers come out at the pool's size, whether new or given
// back.
func TestBytePool(t *testing.T) {
	p := &bytePool{size: 1024}
	for i := range 100 {
		b := p.Get()
		if len(b) != 1024 {
			t.Fatalf("get %d: buffer of %d bytes, want 1024", i, len(b))
		}
		p.Put(b)
	}
}
