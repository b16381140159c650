package slowpath

import (
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"testing"

	"github.com/quic-go/quic-go/http3"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/slowpath/internal/testcert"
	"github.com/novaedge/novaedge/slowpath/sockets"
)

// TestHTTP3 serves one gateway with an HTTPS listener (TCP) and an HTTP3
// listener (UDP) on the same port: HTTPS responses advertise h3 with
// Alt-Svc, and quic-go's client gets the backend's answer over HTTP/3.
func TestHTTP3(t *testing.T) {
	e := newEnv(t)
	pc, err := net.ListenPacket("udp", "127.0.0.1:"+strconv.Itoa(int(e.port)))
	if err != nil {
		t.Fatalf("UDP port %d (same as the TCP one): %v", e.port, err)
	}
	key := sockets.Key{Network: "udp", Addr: netip.MustParseAddrPort(pc.LocalAddr().String())}
	if err := e.p.socks.Adopt(&sockets.Socket{Key: key, PacketConn: pc}); err != nil {
		t.Fatal(err)
	}
	ca, _ := testcert.NewCA("test")
	cp, kp, _ := ca.Leaf("h3.test")
	be := echoServer(t, "a")
	tlsCfg := &pb.ListenerTLS{Certificates: []string{"ns/c"}}
	s := e.snap(pb.Protocol_PROTOCOL_HTTPS, tlsCfg, []*pb.Route{route("ns/r", rule(prefix("/"), "ns/a"))},
		[]*pb.Backend{backendOf("ns/a", hostport(be))}, &pb.Certificate{Name: "ns/c", CertPem: cp, KeyPem: kp})
	h3l := &pb.Listener{Name: "ns/gw/h3", Gateway: "ns/gw", Addresses: []string{"127.0.0.1"}, Port: e.port, Protocol: pb.Protocol_PROTOCOL_HTTP3, Tls: tlsCfg, Routes: []string{"ns/r"}}
	s.Cluster.Listeners = append(s.Cluster.Listeners, h3l)
	s.Cluster.Routes[0].Listeners = append(s.Cluster.Routes[0].Listeners, h3l.Name)
	e.mustApply(s)

	clientTLS := &tls.Config{ServerName: "h3.test", RootCAs: ca.Pool()}
	resp, _, _ := get(t, &http.Client{Transport: &http.Transport{TLSClientConfig: clientTLS}}, "https://"+e.addr+"/")
	want := `h3=":` + strconv.Itoa(int(e.port)) + `"; ma=86400`
	if resp.Header.Get("Alt-Svc") != want {
		t.Fatalf("Alt-Svc = %q, want %q", resp.Header.Get("Alt-Svc"), want)
	}

	tr := &http3.Transport{TLSClientConfig: clientTLS}
	defer func() { _ = tr.Close() }()
	r3, err := (&http.Client{Transport: tr}).Get("https://" + e.addr + "/over-quic")
	if err != nil {
		t.Fatalf("HTTP/3 GET: %v", err)
	}
	defer func() { _ = r3.Body.Close() }()
	raw, _ := io.ReadAll(r3.Body)
	var got echo
	_ = json.Unmarshal(raw, &got)
	if r3.StatusCode != 200 || r3.Proto != "HTTP/3.0" || got.Backend != "a" || got.Path != "/over-quic" {
		t.Fatalf("HTTP/3: %d %s %s", r3.StatusCode, r3.Proto, raw)
	}
	if http.Header(got.Header).Get("X-Forwarded-Proto") != "https" {
		t.Errorf("X-Forwarded-Proto over HTTP/3 = %q", http.Header(got.Header).Get("X-Forwarded-Proto"))
	}
}
