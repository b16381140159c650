package slowpath

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

// TestRouteFiltersThroughTheProxy: request and response header modifiers,
// a prefix rewrite with a host rewrite, a route redirect and a mirror, as
// a client and the backends see them.
func TestRouteFiltersThroughTheProxy(t *testing.T) {
	e := newEnv(t)
	be := echoServer(t, "main")
	mirrored := make(chan *http.Request, 4)
	mirror := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mirrored <- r
	}))
	defer mirror.Close()

	api := rule(prefix("/api"), "ns/main")
	api.Filters = []*pb.RouteFilter{
		{Filter: &pb.RouteFilter_RequestHeaderModifier{RequestHeaderModifier: &pb.HeaderModifier{
			Set: []*pb.HeaderValue{{Name: "X-Env", Value: "prod"}}, Add: []*pb.HeaderValue{{Name: "X-Tag", Value: "b"}}, Remove: []string{"X-Drop"}}}},
		{Filter: &pb.RouteFilter_ResponseHeaderModifier{ResponseHeaderModifier: &pb.HeaderModifier{Set: []*pb.HeaderValue{{Name: "X-Served-By", Value: "novaedge"}}}}},
		{Filter: &pb.RouteFilter_UrlRewrite{UrlRewrite: &pb.URLRewrite{Hostname: "internal.svc", Path: &pb.PathModifier{Type: "ReplacePrefixMatch", Value: "/v2"}}}},
		{Filter: &pb.RouteFilter_RequestMirror{RequestMirror: &pb.RequestMirror{Backend: "ns/mirror", Percent: 100}}},
	}
	old := rule(prefix("/old"))
	old.Filters = []*pb.RouteFilter{{Filter: &pb.RouteFilter_RequestRedirect{RequestRedirect: &pb.RequestRedirect{
		Scheme: "https", Hostname: "new.example.com", Path: &pb.PathModifier{Type: "ReplacePrefixMatch", Value: "/new"}, StatusCode: 301}}}}
	e.mustApply(e.snap(pb.Protocol_PROTOCOL_HTTP, nil, []*pb.Route{route("ns/r", api, old)},
		[]*pb.Backend{backendOf("ns/main", hostport(be)), backendOf("ns/mirror", hostport(mirror))}))

	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, got, _ := get(t, c, "http://"+e.addr+"/api/users?id=7", "Host", "shop.test", "X-Drop", "x", "X-Tag", "a")
	if resp.StatusCode != 200 || resp.Header.Get("X-Served-By") != "novaedge" {
		t.Fatalf("response: %d, X-Served-By %q", resp.StatusCode, resp.Header.Get("X-Served-By"))
	}
	h := http.Header(got.Header)
	if got.Path != "/v2/users?id=7" || got.Host != "internal.svc" {
		t.Errorf("backend saw %s on host %s, want /v2/users?id=7 on internal.svc", got.Path, got.Host)
	}
	if h.Get("X-Env") != "prod" || len(h.Values("X-Tag")) != 2 || h.Get("X-Drop") != "" {
		t.Errorf("request headers: X-Env %q, X-Tag %q, X-Drop %q", h.Get("X-Env"), h.Values("X-Tag"), h.Get("X-Drop"))
	}
	select {
	case m := <-mirrored:
		if m.Host != "internal.svc-shadow" || m.URL.Path != "/v2/users" || m.Header.Get("X-Env") != "prod" {
			t.Errorf("mirror saw %s%s (X-Env %q), want the rewritten request on internal.svc-shadow/v2/users", m.Host, m.URL.Path, m.Header.Get("X-Env"))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the mirror got no copy")
	}

	resp, _, _ = get(t, c, "http://"+e.addr+"/old/page?x=1", "Host", "shop.test")
	if resp.StatusCode != 301 || resp.Header.Get("Location") != "https://new.example.com/new/page?x=1" {
		t.Fatalf("redirect: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
}
