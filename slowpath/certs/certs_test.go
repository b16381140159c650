package certs

import (
	"crypto/tls"
	"crypto/x509"
	"strings"
	"testing"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/slowpath/internal/testcert"
)

func leafName(t *testing.T, c *tls.Certificate) string {
	t.Helper()
	x, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return x.Subject.CommonName
}

func TestSelector(t *testing.T) {
	ca, err := testcert.NewCA("test")
	if err != nil {
		t.Fatal(err)
	}
	var certs []*pb.Certificate
	for _, c := range []struct{ name, dns string }{
		{"ns/default", "default.test"},
		{"ns/wild", "*.example.com"},
		{"ns/exact", "api.example.com"},
		{"ns/other-wild", "*.example.com"},
	} {
		cp, kp, err := ca.Leaf(c.dns)
		if err != nil {
			t.Fatal(err)
		}
		certs = append(certs, &pb.Certificate{Name: c.name, CertPem: cp, KeyPem: kp})
	}
	certs = append(certs, &pb.Certificate{Name: "ns/ca", CertPem: ca.CertPEM})
	s, err := NewStore(certs)
	if err != nil {
		t.Fatal(err)
	}
	sel, err := NewSelector(s, []string{"ns/default", "ns/wild", "ns/exact", "ns/other-wild"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ sni, want string }{
		{"api.example.com", "api.example.com"},  // exact beats wildcard
		{"API.Example.com.", "api.example.com"}, // case and trailing dot
		{"www.example.com", "*.example.com"},    // wildcard
		{"a.b.example.com", "default.test"},     // a wildcard covers one label only
		{"example.com", "default.test"},         // nor the bare domain
		{"", "default.test"},                    // no SNI
		{"unknown.test", "default.test"},
	}
	for _, tc := range tests {
		if got := leafName(t, sel.Certificate(tc.sni)); got != tc.want {
			t.Errorf("SNI %q: got %s, want %s", tc.sni, got, tc.want)
		}
	}
	// The first certificate naming a host wins.
	if c := sel.Certificate("x.example.com"); c != s.pairs["ns/wild"] {
		t.Error("a later certificate with the same wildcard replaced the first")
	}
}

func TestStoreAndServerConfigErrors(t *testing.T) {
	ca, _ := testcert.NewCA("test")
	cp, kp, _ := ca.Leaf("a.test")
	good := &pb.Certificate{Name: "ns/good", CertPem: cp, KeyPem: kp}
	if _, err := NewStore([]*pb.Certificate{{Name: "ns/bad", CertPem: []byte("x"), KeyPem: []byte("y")}, good}); err == nil || !strings.Contains(err.Error(), "certificate ns/bad") {
		t.Fatalf("bad pair: %v", err)
	}
	if _, err := NewStore([]*pb.Certificate{{Name: "ns/badca", CertPem: []byte("x")}}); err == nil || !strings.Contains(err.Error(), "ns/badca") {
		t.Fatalf("bad CA: %v", err)
	}
	s, err := NewStore([]*pb.Certificate{good, {Name: "ns/ca", CertPem: ca.CertPEM}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		tls  *pb.ListenerTLS
		want string
	}{
		{"missing cert", &pb.ListenerTLS{Certificates: []string{"ns/nope"}}, "tls.certificates: certificate ns/nope"},
		{"no cert", &pb.ListenerTLS{}, "tls.certificates: no certificate"},
		{"bad version", &pb.ListenerTLS{Certificates: []string{"ns/good"}, MinVersion: "SSL3"}, `tls.minVersion: unknown TLS version "SSL3"`},
		{"max below min", &pb.ListenerTLS{Certificates: []string{"ns/good"}, MinVersion: "TLS1.3", MaxVersion: "TLS1.2"}, "tls.maxVersion TLS1.2 is below minVersion TLS1.3"},
		{"bad cipher", &pb.ListenerTLS{Certificates: []string{"ns/good"}, CipherSuites: []string{"RC4"}}, `tls.cipherSuites: unknown cipher suite "RC4"`},
		{"bad auth", &pb.ListenerTLS{Certificates: []string{"ns/good"}, ClientAuth: "MAYBE"}, `tls.clientAuth: unknown mode "MAYBE"`},
		{"missing client CA", &pb.ListenerTLS{Certificates: []string{"ns/good"}, ClientAuth: "REQUIRE", ClientCa: "ns/none"}, `tls.clientCA: CA bundle "ns/none"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ServerConfig(s, tc.tls, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
	cfg, err := ServerConfig(s, &pb.ListenerTLS{Certificates: []string{"ns/good"}, MinVersion: "TLS1.3", ClientAuth: "REQUIRE", ClientCa: "ns/ca",
		CipherSuites: []string{"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"}}, []string{"h2", "http/1.1"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MinVersion != tls.VersionTLS13 || cfg.ClientAuth != tls.RequireAndVerifyClientCert || cfg.ClientCAs == nil || len(cfg.CipherSuites) != 1 || cfg.NextProtos[0] != "h2" {
		t.Fatalf("config = %+v", cfg)
	}
}

// TestHandshake runs real TLS handshakes: the client verifies the chosen
// certificate against the CA for the SNI it sent, and a listener requiring
// client certificates refuses a client without one.
func TestHandshake(t *testing.T) {
	ca, _ := testcert.NewCA("test")
	cp, kp, _ := ca.Leaf("*.example.com")
	ccp, ckp, _ := ca.Leaf("client")
	s, err := NewStore([]*pb.Certificate{{Name: "ns/w", CertPem: cp, KeyPem: kp}, {Name: "ns/ca", CertPem: ca.CertPEM}})
	if err != nil {
		t.Fatal(err)
	}
	srvCfg, err := ServerConfig(s, &pb.ListenerTLS{Certificates: []string{"ns/w"}, ClientAuth: "REQUIRE", ClientCa: "ns/ca"}, []string{"h2"})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", srvCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				_ = c.(*tls.Conn).Handshake()
				_ = c.Close()
			}()
		}
	}()
	clientPair, _ := tls.X509KeyPair(ccp, ckp)
	conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{ServerName: "www.example.com", RootCAs: ca.Pool(), Certificates: []tls.Certificate{clientPair}, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatalf("handshake with a client certificate: %v", err)
	}
	if conn.ConnectionState().NegotiatedProtocol != "h2" {
		t.Errorf("ALPN = %q, want h2", conn.ConnectionState().NegotiatedProtocol)
	}
	_ = conn.Close()
	conn, err = tls.Dial("tcp", ln.Addr().String(), &tls.Config{ServerName: "www.example.com", RootCAs: ca.Pool()})
	if err == nil {
		// TLS 1.3 reports the server's refusal on the first read.
		_, err = conn.Read(make([]byte, 1))
		_ = conn.Close()
	}
	if err == nil {
		t.Fatal("a client without a certificate was accepted by a REQUIRE listener")
	}
}
