package pki

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// File names of the TLS material in a mounted Secret, as in the Secrets
// Ensure makes.
const (
	CACertKey = "ca.crt"
	CAKeyKey  = "ca.key"
	CertKey   = "tls.crt"
	KeyKey    = "tls.key"
)

// Bundle is one side's TLS material: its certificate and key, and the CA it
// trusts for the other side.
type Bundle struct {
	// CACertPEM, CertPEM and KeyPEM are the material as stored.
	CACertPEM []byte
	CertPEM   []byte
	KeyPEM    []byte
	// Certificate is CertPEM and KeyPEM parsed, with Leaf set.
	Certificate tls.Certificate
	// CAs holds the certificates of CACertPEM.
	CAs *x509.CertPool
}

// LoadBundle parses PEM material into a Bundle, checking that the key
// belongs to the certificate and that the certificate chains to the CA.
func LoadBundle(caCertPEM, certPEM, keyPEM []byte) (Bundle, error) {
	b, err := loadBundle(caCertPEM, certPEM, keyPEM)
	if err != nil {
		return Bundle{}, err
	}
	if _, err := b.Certificate.Leaf.Verify(x509.VerifyOptions{
		Roots:     b.CAs,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny},
	}); err != nil {
		return Bundle{}, &fieldError{CertKey, CertKey, fmt.Errorf("does not chain to %s: %w", CACertKey, err)}
	}
	return b, nil
}

// loadBundle parses without verifying the chain; errors name the key whose
// value is wrong.
func loadBundle(caCertPEM, certPEM, keyPEM []byte) (Bundle, error) {
	cas, err := parseCertificates(caCertPEM)
	if err != nil {
		return Bundle{}, &fieldError{CACertKey, CACertKey, err}
	}
	pool := x509.NewCertPool()
	for _, c := range cas {
		pool.AddCert(c)
	}
	certs, err := parseCertificates(certPEM)
	if err != nil {
		return Bundle{}, &fieldError{CertKey, CertKey, err}
	}
	key, err := parsePrivateKey(keyPEM)
	if err != nil {
		return Bundle{}, &fieldError{KeyKey, KeyKey, err}
	}
	if err := matchKey(certs[0], key); err != nil {
		return Bundle{}, &fieldError{KeyKey, KeyKey, fmt.Errorf("%w in %s", err, CertKey)}
	}
	cert := tls.Certificate{PrivateKey: key, Leaf: certs[0]}
	for _, c := range certs {
		cert.Certificate = append(cert.Certificate, c.Raw)
	}
	return Bundle{CACertPEM: caCertPEM, CertPEM: certPEM, KeyPEM: keyPEM, Certificate: cert, CAs: pool}, nil
}

// ServerTLSConfig returns the controller's TLS configuration: TLS 1.3 only,
// serving b's certificate and requiring a client certificate that chains to
// b's CA.
func ServerTLSConfig(b Bundle) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{b.Certificate},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    b.CAs,
	}
}

// ClientTLSConfig returns the agent's TLS configuration from a directory
// holding ca.crt, tls.crt and tls.key (the mounted novaedge-agent-tls
// Secret): TLS 1.3 only, presenting that certificate and accepting a server
// certificate for serverName that chains to ca.crt.
func ClientTLSConfig(dir, serverName string) (*tls.Config, error) {
	if serverName == "" {
		return nil, errors.New("client tls config: server name is empty")
	}
	read := func(name string) ([]byte, error) {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("client tls config: %w", err)
		}
		return data, nil
	}
	caPEM, err := read(CACertKey)
	if err != nil {
		return nil, err
	}
	certPEM, err := read(CertKey)
	if err != nil {
		return nil, err
	}
	keyPEM, err := read(KeyKey)
	if err != nil {
		return nil, err
	}
	b, err := LoadBundle(caPEM, certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("client tls config from %s: %w", dir, err)
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{b.Certificate},
		RootCAs:      b.CAs,
		ServerName:   serverName,
	}, nil
}
