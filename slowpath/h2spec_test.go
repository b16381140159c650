package slowpath

import (
	"testing"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/slowpath/internal/h2spec"
	"github.com/novaedge/novaedge/slowpath/internal/testcert"
)

// TestH2specConformance runs h2spec in strict mode (every case, including
// those for SHOULD requirements) against the slow path's HTTPS listener
// (h2 negotiated with ALPN) and its plaintext listener (h2c with prior
// knowledge); every case must pass.
func TestH2specConformance(t *testing.T) {
	bin, err := h2spec.Bin()
	if err != nil {
		t.Fatal(err)
	}
	be := echoServer(t, "echo")
	for _, tc := range []struct {
		name string
		tls  bool
	}{
		{"h2-tls-alpn", true},
		{"h2c-prior-knowledge", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			routes := []*pb.Route{route("ns/r", rule(prefix("/"), "ns/echo"))}
			backends := []*pb.Backend{backendOf("ns/echo", hostport(be))}
			if tc.tls {
				ca, err := testcert.NewCA("test")
				if err != nil {
					t.Fatal(err)
				}
				// h2spec connects to 127.0.0.1 without SNI; the listener's
				// only certificate answers.
				cert, key, err := ca.Leaf("h2spec.test")
				if err != nil {
					t.Fatal(err)
				}
				e.mustApply(e.snap(pb.Protocol_PROTOCOL_HTTPS, &pb.ListenerTLS{Certificates: []string{"ns/c"}}, routes, backends,
					&pb.Certificate{Name: "ns/c", CertPem: cert, KeyPem: key}))
			} else {
				e.mustApply(e.snap(pb.Protocol_PROTOCOL_HTTP, nil, routes, backends))
			}
			res, out, err := h2spec.Run(t.Context(), bin, int(e.port), tc.tls, t.TempDir())
			if err != nil {
				t.Fatalf("%v\nh2spec output:\n%s", err, out)
			}
			t.Logf("h2spec: %d cases, %d passed, %d failed, %d skipped", res.Total, res.Passed(), len(res.Failed), len(res.Skipped))
			if p := res.Problems(); p != "" {
				t.Errorf("h2spec --strict: %s", p)
			}
		})
	}
}
