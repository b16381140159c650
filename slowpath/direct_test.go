package slowpath

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"reflect"
	"testing"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

// TestDirectForwarding checks what serveDirect does in ReverseProxy's
// place, through the proxy over real sockets: hop-by-hop fields and those
// a Connection header names are not passed on in either direction, an
// informational 103 reaches the client before the final answer with its
// fields, and trailers announced by the backend arrive as trailers.
func TestDirectForwarding(t *testing.T) {
	e := newEnv(t)
	var seen http.Header
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = r.Header.Clone()
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		w.Header().Set("Connection", "X-Backend-Private")
		w.Header().Set("X-Backend-Private", "secret")
		w.Header().Set("Keep-Alive", "timeout=5")
		w.Header().Set("Trailer", "X-Checksum")
		w.Header().Set("X-Visible", "yes")
		_, _ = io.WriteString(w, "body")
		w.Header().Set("X-Checksum", "abc")
	}))
	t.Cleanup(be.Close)
	e.mustApply(e.snap(pb.Protocol_PROTOCOL_HTTP, nil, []*pb.Route{route("ns/r", rule(prefix("/"), "ns/a"))}, []*pb.Backend{backendOf("ns/a", hostport(be))}))

	var early []string
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
			early = append(early, http.StatusText(code)+": "+h.Get("Link"))
			return nil
		},
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+e.addr+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Connection", "X-Client-Private")
	req.Header.Set("X-Client-Private", "secret")
	req.Header.Set("Proxy-Authorization", "Basic eDp5")
	req.Header.Set("X-Passed", "yes")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()

	if resp.StatusCode != 200 || string(body) != "body" {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
	for _, k := range []string{"X-Client-Private", "Proxy-Authorization"} {
		if v := seen.Get(k); v != "" {
			t.Errorf("backend saw %s: %q", k, v)
		}
	}
	if seen.Get("X-Passed") != "yes" {
		t.Errorf("backend did not see X-Passed: %v", seen)
	}
	for _, k := range []string{"X-Backend-Private", "Keep-Alive"} {
		if v := resp.Header.Get(k); v != "" {
			t.Errorf("client saw %s: %q", k, v)
		}
	}
	if resp.Header.Get("X-Visible") != "yes" {
		t.Errorf("client did not see X-Visible: %v", resp.Header)
	}
	if len(early) != 1 || early[0] != "Early Hints: </style.css>; rel=preload" {
		t.Errorf("informational responses %q, want one 103 with its Link", early)
	}
	if got := resp.Trailer.Get("X-Checksum"); got != "abc" {
		t.Errorf("trailer X-Checksum %q, want abc (trailers %v)", got, resp.Trailer)
	}
}

// TestAddEndToEnd: hop-by-hop fields and the fields the Connection header
// names (in any case) stay behind; the usual options cost no allocation.
func TestAddEndToEnd(t *testing.T) {
	src := http.Header{
		"Connection":   {"keep-alive, X-Private", "CLOSE"},
		"Keep-Alive":   {"timeout=5"},
		"X-Private":    {"secret"},
		"Close":        {"odd but named"},
		"Content-Type": {"text/plain"},
		"Upgrade":      {"h2c"},
	}
	dst := http.Header{"X-Private": {"set before"}, "Server": {"novaedge"}}
	addEndToEnd(dst, src)
	want := http.Header{"Content-Type": {"text/plain"}, "Server": {"novaedge"}}
	if !reflect.DeepEqual(dst, want) {
		t.Fatalf("got %v, want %v", dst, want)
	}
	common := http.Header{"Connection": {"keep-alive"}, "Content-Length": {"5"}}
	out := make(http.Header, 4)
	if n := testing.AllocsPerRun(100, func() { clear(out); addEndToEnd(out, common) }); n != 0 {
		t.Errorf("addEndToEnd with Connection: keep-alive made %v allocations, want 0", n)
	}
}
