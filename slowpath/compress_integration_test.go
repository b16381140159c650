package slowpath

import (
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

// TestGatewayCompression: a gateway with compression gzips a compressible
// response for a client that accepts it, and leaves it alone for one that
// does not.
func TestGatewayCompression(t *testing.T) {
	e := newEnv(t)
	body := strings.Repeat(`{"item":"value"},`, 200)
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, body)
	}))
	defer be.Close()
	s := e.snap(pb.Protocol_PROTOCOL_HTTP, nil, []*pb.Route{route("ns/r", rule(prefix("/"), "ns/a"))}, []*pb.Backend{backendOf("ns/a", hostport(be))})
	s.Cluster.Listeners[0].Compression = &pb.Compression{Algorithms: []string{"gzip"}, MinSize: 100}
	e.mustApply(s)

	c := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	req, _ := http.NewRequest(http.MethodGet, "http://"+e.addr+"/", nil)
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("Content-Encoding = %q, want gzip", resp.Header.Get("Content-Encoding"))
	}
	zr, err := gzip.NewReader(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(zr)
	if err != nil || string(got) != body {
		t.Fatalf("decompressed body differs (%d bytes, %v)", len(got), err)
	}

	resp2, _, raw := get(t, c, "http://"+e.addr+"/")
	if resp2.Header.Get("Content-Encoding") != "" || raw != body {
		t.Fatalf("without Accept-Encoding: encoding %q, %d bytes", resp2.Header.Get("Content-Encoding"), len(raw))
	}
}
