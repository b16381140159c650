// Package streamtest provides what tests of the controller → agent stream
// need on both sides: a throwaway CA with a controller (server) and an agent
// (client) certificate, and a stream.Server served by gRPC on loopback.
package streamtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/novaedge/novaedge/controller/stream"
)

// TLS is a CA and the two certificates it signed, as PEM and as ready
// configurations.
type TLS struct {
	// Server requires and verifies client certificates signed by the CA;
	// its certificate is valid for 127.0.0.1, ::1, localhost and
	// novaedge-controller.
	Server *tls.Config
	// Client trusts the CA and presents the agent certificate (CN
	// novaedge-agent).
	Client *tls.Config

	CAPEM         []byte
	ClientCertPEM []byte
	ClientKeyPEM  []byte
}

// NewTLS makes a CA and a server and a client certificate, valid for an
// hour.
func NewTLS(t testing.TB) *TLS {
	t.Helper()
	caKey := newKey(t)
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "novaedge test CA"},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatalf("create test CA: %v", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatalf("parse test CA: %v", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)

	serverCert, _, _ := leaf(t, ca, caKey, 2, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "novaedge-controller"},
		DNSNames:    []string{"novaedge-controller", "localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	clientCert, certPEM, keyPEM := leaf(t, ca, caKey, 3, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "novaedge-agent"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	return &TLS{
		Server: &tls.Config{
			Certificates: []tls.Certificate{serverCert},
			ClientCAs:    pool,
			ClientAuth:   tls.RequireAndVerifyClientCert,
			MinVersion:   tls.VersionTLS13,
		},
		Client: &tls.Config{
			Certificates: []tls.Certificate{clientCert},
			RootCAs:      pool,
			MinVersion:   tls.VersionTLS13,
		},
		CAPEM:         pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		ClientCertPEM: certPEM,
		ClientKeyPEM:  keyPEM,
	}
}

// WriteClientDir writes ca.crt, tls.crt and tls.key into dir, as the
// agent's --controller-tls-dir holds them.
func (c *TLS) WriteClientDir(t testing.TB, dir string) {
	t.Helper()
	for name, data := range map[string][]byte{"ca.crt": c.CAPEM, "tls.crt": c.ClientCertPEM, "tls.key": c.ClientKeyPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("generate key: %v", err)
	}
	return k
}

// leaf signs tmpl with the CA and returns it as a tls.Certificate and PEM.
func leaf(t testing.TB, ca *x509.Certificate, caKey *ecdsa.PrivateKey, serial int64, tmpl *x509.Certificate) (tls.Certificate, []byte, []byte) {
	t.Helper()
	key := newKey(t)
	tmpl.SerialNumber = big.NewInt(serial)
	tmpl.NotBefore = ca.NotBefore
	tmpl.NotAfter = ca.NotAfter
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatalf("sign %s: %v", tmpl.Subject.CommonName, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return cert, certPEM, keyPEM
}

// Running is a stream.Server served by gRPC.
type Running struct {
	// Addr is the host:port it listens on.
	Addr string

	g    *grpc.Server
	done chan error
	once sync.Once
}

// Serve serves srv with stream.GRPCServerOptions(serverTLS) on addr (empty:
// a free port of 127.0.0.1) until Stop or the end of the test.
func Serve(t testing.TB, srv *stream.Server, serverTLS *tls.Config, addr string) *Running {
	t.Helper()
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on %s: %v", addr, err)
	}
	g := grpc.NewServer(stream.GRPCServerOptions(serverTLS)...)
	srv.Register(g)
	r := &Running{Addr: lis.Addr().String(), g: g, done: make(chan error, 1)}
	go func() { r.done <- g.Serve(lis) }()
	t.Cleanup(func() {
		if err := r.Stop(); err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return r
}

// Stop closes the listener and every connection at once, as a controller
// that dies does, and returns what Serve returned.
func (r *Running) Stop() error {
	var err error
	r.once.Do(func() {
		r.g.Stop()
		err = <-r.done
		if errors.Is(err, grpc.ErrServerStopped) {
			err = nil
		}
	})
	return err
}
