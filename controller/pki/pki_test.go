package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/novaedge/novaedge/test/kubeenv"
)

func TestMain(m *testing.M) { os.Exit(kubeenv.Run(m)) }

type material struct {
	caCert, caKey []byte
	cert, key     []byte
}

func newCA(t *testing.T) material {
	t.Helper()
	c, k, err := NewCA("test-ca", time.Hour)
	if err != nil {
		t.Fatalf("NewCA: %v", err)
	}
	return material{caCert: c, caKey: k}
}

func (m material) server(t *testing.T, names ...string) material {
	t.Helper()
	c, k, err := IssueServer(m.caCert, m.caKey, names, time.Hour)
	if err != nil {
		t.Fatalf("IssueServer: %v", err)
	}
	return material{caCert: m.caCert, caKey: m.caKey, cert: c, key: k}
}

func (m material) client(t *testing.T, cn string) material {
	t.Helper()
	c, k, err := IssueClient(m.caCert, m.caKey, cn, time.Hour)
	if err != nil {
		t.Fatalf("IssueClient: %v", err)
	}
	return material{caCert: m.caCert, caKey: m.caKey, cert: c, key: k}
}

func parseOne(t *testing.T, pemData []byte) *x509.Certificate {
	t.Helper()
	certs, err := parseCertificates(pemData)
	if err != nil {
		t.Fatal(err)
	}
	return certs[0]
}

func TestIssueAndVerify(t *testing.T) {
	before := time.Now()
	ca := newCA(t)
	srv := ca.server(t, "novaedge-controller", "novaedge-controller.novaedge-system.svc", "127.0.0.1")
	cli := ca.client(t, AgentCommonName)
	after := time.Now()

	caCert := parseOne(t, ca.caCert)
	if !caCert.IsCA || caCert.Subject.CommonName != "test-ca" || !caCert.MaxPathLenZero {
		t.Errorf("CA certificate: IsCA %v CN %q MaxPathLenZero %v", caCert.IsCA, caCert.Subject.CommonName, caCert.MaxPathLenZero)
	}
	if caCert.NotAfter.Before(before.Add(time.Hour).Truncate(time.Second)) || caCert.NotAfter.After(after.Add(time.Hour)) {
		t.Errorf("CA NotAfter %v, want now+1h", caCert.NotAfter)
	}
	roots := x509.NewCertPool()
	roots.AddCert(caCert)

	tests := []struct {
		name    string
		cert    []byte
		key     []byte
		usage   x509.ExtKeyUsage
		host    string
		wantErr bool
	}{
		{"server for server auth", srv.cert, srv.key, x509.ExtKeyUsageServerAuth, "novaedge-controller.novaedge-system.svc", false},
		{"server for its IP", srv.cert, srv.key, x509.ExtKeyUsageServerAuth, "127.0.0.1", false},
		{"server for another name", srv.cert, srv.key, x509.ExtKeyUsageServerAuth, "other.example", true},
		{"server used as client", srv.cert, srv.key, x509.ExtKeyUsageClientAuth, "", true},
		{"client for client auth", cli.cert, cli.key, x509.ExtKeyUsageClientAuth, "", false},
		{"client used as server", cli.cert, cli.key, x509.ExtKeyUsageServerAuth, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cert := parseOne(t, tt.cert)
			key, err := parsePrivateKey(tt.key)
			if err != nil {
				t.Fatal(err)
			}
			if err := matchKey(cert, key); err != nil {
				t.Fatal(err)
			}
			pub, ok := cert.PublicKey.(*ecdsa.PublicKey)
			if !ok || pub.Curve != elliptic.P256() {
				t.Errorf("public key %T, want ECDSA P-256", cert.PublicKey)
			}
			_, err = cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{tt.usage}, DNSName: tt.host})
			if (err != nil) != tt.wantErr {
				t.Errorf("Verify: %v, want error %v", err, tt.wantErr)
			}
		})
	}

	if got := parseOne(t, cli.cert).Subject.CommonName; got != AgentCommonName {
		t.Errorf("client CN %q, want %q", got, AgentCommonName)
	}
	// A leaf never outlives its CA.
	long, _, err := IssueClient(ca.caCert, ca.caKey, "x", 100*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if got := parseOne(t, long).NotAfter; !got.Equal(caCert.NotAfter) {
		t.Errorf("leaf NotAfter %v, want the CA's %v", got, caCert.NotAfter)
	}
	// Another CA's chain does not verify.
	other := newCA(t)
	otherRoots := x509.NewCertPool()
	otherRoots.AddCert(parseOne(t, other.caCert))
	if _, err := parseOne(t, cli.cert).Verify(x509.VerifyOptions{Roots: otherRoots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
		t.Error("client certificate verified against another CA")
	}
}

func TestIssueErrors(t *testing.T) {
	ca := newCA(t)
	other := newCA(t)
	leaf := ca.client(t, "leaf")
	tests := []struct {
		name    string
		issue   func() error
		wantErr string
	}{
		{"CA without common name", func() error { _, _, err := NewCA("", time.Hour); return err }, "common name is empty"},
		{"CA without validity", func() error { _, _, err := NewCA("x", 0); return err }, "validity 0s"},
		{"server without names", func() error { _, _, err := IssueServer(ca.caCert, ca.caKey, nil, time.Hour); return err }, "no DNS names"},
		{"server with a bad name", func() error {
			_, _, err := IssueServer(ca.caCert, ca.caKey, []string{"ok", "bad name"}, time.Hour)
			return err
		}, `dns name 1 "bad name"`},
		{"client without common name", func() error { _, _, err := IssueClient(ca.caCert, ca.caKey, "", time.Hour); return err }, "common name is empty"},
		{"negative validity", func() error { _, _, err := IssueClient(ca.caCert, ca.caKey, "x", -time.Second); return err }, "validity -1s"},
		{"garbage CA certificate", func() error { _, _, err := IssueClient([]byte("junk"), ca.caKey, "x", time.Hour); return err }, "ca certificate: no PEM-encoded certificate"},
		{"garbage CA key", func() error { _, _, err := IssueClient(ca.caCert, []byte("junk"), "x", time.Hour); return err }, "ca key: no PEM-encoded private key"},
		{"CA key of another CA", func() error { _, _, err := IssueClient(ca.caCert, other.caKey, "x", time.Hour); return err }, "ca key: does not match"},
		{"leaf as CA", func() error { _, _, err := IssueClient(leaf.cert, leaf.key, "x", time.Hour); return err }, "is not a CA"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.issue()
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

// writeDir writes ca.crt, tls.crt and tls.key as a mounted Secret would.
func writeDir(t *testing.T, caCert, cert, key []byte) string {
	t.Helper()
	dir := t.TempDir()
	for name, data := range map[string][]byte{CACertKey: caCert, CertKey: cert, KeyKey: key} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// handshake serves cfg on 127.0.0.1 and connects with clientCfg. It returns
// the server's handshake error and the client's error from the handshake
// or from reading the server's one-byte greeting (with TLS 1.3 a rejected
// client certificate shows on the client only at its first read).
func handshake(t *testing.T, serverCfg, clientCfg *tls.Config) (serverErr, clientErr error) {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", serverCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	done := make(chan error, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer func() { _ = conn.Close() }()
		if err := conn.(*tls.Conn).Handshake(); err != nil {
			done <- err
			return
		}
		_, err = conn.Write([]byte{'!'})
		done <- err
	}()
	conn, err := tls.Dial("tcp", ln.Addr().String(), clientCfg)
	if err == nil {
		defer func() { _ = conn.Close() }()
		var b [1]byte
		if _, err = io.ReadFull(conn, b[:]); err == nil && b[0] != '!' {
			err = errors.New("wrong greeting")
		}
		if err == nil && conn.ConnectionState().Version != tls.VersionTLS13 {
			err = errors.New("not TLS 1.3")
		}
	}
	return <-done, err
}

func TestHandshake(t *testing.T) {
	ca := newCA(t)
	srv := ca.server(t, "novaedge-controller", "novaedge-controller.ns.svc")
	bundle, err := LoadBundle(srv.caCert, srv.cert, srv.key)
	if err != nil {
		t.Fatalf("LoadBundle: %v", err)
	}
	agent := ca.client(t, AgentCommonName)
	stranger := newCA(t).client(t, AgentCommonName)
	serverAsClient := ca.server(t, "novaedge-agent")

	tests := []struct {
		name        string
		dir         string
		serverName  string
		wantSuccess bool
	}{
		{"agent of the same CA", writeDir(t, ca.caCert, agent.cert, agent.key), "novaedge-controller.ns.svc", true},
		{"agent of another CA", writeDir(t, ca.caCert, stranger.cert, stranger.key), "novaedge-controller", false},
		{"server certificate as client certificate", writeDir(t, ca.caCert, serverAsClient.cert, serverAsClient.key), "novaedge-controller", false},
		{"wrong server name", writeDir(t, ca.caCert, agent.cert, agent.key), "elsewhere.example", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := clientConfigUnchecked(tt.dir, tt.serverName)
			if err != nil {
				t.Fatal(err)
			}
			serverErr, clientErr := handshake(t, ServerTLSConfig(bundle), cfg)
			if tt.wantSuccess && (serverErr != nil || clientErr != nil) {
				t.Fatalf("handshake failed: server %v, client %v", serverErr, clientErr)
			}
			if !tt.wantSuccess && (serverErr == nil || clientErr == nil) {
				t.Fatalf("handshake succeeded on one side: server %v, client %v", serverErr, clientErr)
			}
		})
	}

	t.Run("client without certificate", func(t *testing.T) {
		cfg := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: bundle.CAs, ServerName: "novaedge-controller"}
		serverErr, clientErr := handshake(t, ServerTLSConfig(bundle), cfg)
		if serverErr == nil || clientErr == nil {
			t.Fatalf("handshake without client certificate: server %v, client %v", serverErr, clientErr)
		}
	})
	t.Run("TLS 1.2 client", func(t *testing.T) {
		cfg, err := ClientTLSConfig(writeDir(t, ca.caCert, agent.cert, agent.key), "novaedge-controller")
		if err != nil {
			t.Fatal(err)
		}
		cfg.MinVersion, cfg.MaxVersion = tls.VersionTLS12, tls.VersionTLS12
		serverErr, clientErr := handshake(t, ServerTLSConfig(bundle), cfg)
		if serverErr == nil || clientErr == nil {
			t.Fatalf("TLS 1.2 handshake: server %v, client %v", serverErr, clientErr)
		}
	})
}

// clientConfigUnchecked is ClientTLSConfig without its check that tls.crt
// chains to ca.crt, so a test can present a certificate of another CA.
func clientConfigUnchecked(dir, serverName string) (*tls.Config, error) {
	cfg, err := ClientTLSConfig(dir, serverName)
	if err == nil {
		return cfg, nil
	}
	read := func(n string) []byte { b, _ := os.ReadFile(filepath.Join(dir, n)); return b }
	b, err := loadBundle(read(CACertKey), read(CertKey), read(KeyKey))
	if err != nil {
		return nil, err
	}
	return &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{b.Certificate}, RootCAs: b.CAs, ServerName: serverName}, nil
}

func TestClientTLSConfigErrors(t *testing.T) {
	ca := newCA(t)
	agent := ca.client(t, AgentCommonName)
	other := ca.client(t, "other")
	stranger := newCA(t).client(t, AgentCommonName)
	tests := []struct {
		name       string
		dir        func(t *testing.T) string
		serverName string
		wantErr    []string
	}{
		{"missing directory", func(t *testing.T) string { return filepath.Join(t.TempDir(), "absent") }, "s", []string{"absent/ca.crt"}},
		{"missing tls.key", func(t *testing.T) string {
			dir := writeDir(t, ca.caCert, agent.cert, agent.key)
			if err := os.Remove(filepath.Join(dir, KeyKey)); err != nil {
				t.Fatal(err)
			}
			return dir
		}, "s", []string{"tls.key"}},
		{"garbage ca.crt", func(t *testing.T) string { return writeDir(t, []byte("junk"), agent.cert, agent.key) }, "s", []string{"ca.crt:", "no PEM"}},
		{"garbage tls.crt", func(t *testing.T) string { return writeDir(t, ca.caCert, []byte("junk"), agent.key) }, "s", []string{"tls.crt:", "no PEM"}},
		{"key of another certificate", func(t *testing.T) string { return writeDir(t, ca.caCert, agent.cert, other.key) }, "s", []string{"tls.key:", "does not match"}},
		{"certificate of another CA", func(t *testing.T) string { return writeDir(t, ca.caCert, stranger.cert, stranger.key) }, "s", []string{"tls.crt:", "does not chain to ca.crt"}},
		{"no server name", func(t *testing.T) string { return writeDir(t, ca.caCert, agent.cert, agent.key) }, "", []string{"server name is empty"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ClientTLSConfig(tt.dir(t), tt.serverName)
			if err == nil {
				t.Fatal("ClientTLSConfig succeeded, want an error")
			}
			for _, want := range tt.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
		})
	}
}
