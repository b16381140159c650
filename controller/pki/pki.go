package pki

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"strings"
	"time"
)

const (
	// CAValidity is how long a CA made by Ensure lasts.
	CAValidity = 10 * 365 * 24 * time.Hour
	// LeafValidity is how long the server and client certificates made by
	// Ensure last.
	LeafValidity = 5 * 365 * 24 * time.Hour
	// AgentCommonName is the subject common name of the agents' client
	// certificate.
	AgentCommonName = "novaedge-agent"

	// backdate moves NotBefore into the past so that a node whose clock is a
	// little behind the controller's accepts a certificate made just now.
	backdate = 5 * time.Minute
)

// NewCA makes a self-signed CA certificate and its key, PEM-encoded.
func NewCA(commonName string, validity time.Duration) (certPEM, keyPEM []byte, err error) {
	if commonName == "" {
		return nil, nil, errors.New("new ca: common name is empty")
	}
	if validity <= 0 {
		return nil, nil, fmt.Errorf("new ca: validity %v: must be positive", validity)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("new ca: generate key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		// The CA signs leaves only, never another CA.
		MaxPathLenZero: true,
	}
	return sign(tmpl, key, nil, nil)
}

// IssueServer makes a server certificate for dnsNames, signed by the CA.
// Entries that parse as IP addresses go into the certificate's IP addresses;
// the first DNS name is also the subject common name. The certificate ends no
// later than the CA.
func IssueServer(caCertPEM, caKeyPEM []byte, dnsNames []string, validity time.Duration) (certPEM, keyPEM []byte, err error) {
	if len(dnsNames) == 0 {
		return nil, nil, errors.New("issue server certificate: no DNS names")
	}
	tmpl := &x509.Certificate{ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	for i, name := range dnsNames {
		if ip := net.ParseIP(name); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			continue
		}
		if name == "" || strings.ContainsAny(name, " \t\r\n/:") {
			return nil, nil, fmt.Errorf("issue server certificate: dns name %d %q: not a host name", i, name)
		}
		tmpl.DNSNames = append(tmpl.DNSNames, name)
	}
	if len(tmpl.DNSNames) > 0 {
		tmpl.Subject.CommonName = tmpl.DNSNames[0]
	}
	certPEM, keyPEM, err = issue(caCertPEM, caKeyPEM, tmpl, validity)
	if err != nil {
		return nil, nil, fmt.Errorf("issue server certificate: %w", err)
	}
	return certPEM, keyPEM, nil
}

// IssueClient makes a client certificate with the given common name, signed
// by the CA. The certificate ends no later than the CA.
func IssueClient(caCertPEM, caKeyPEM []byte, commonName string, validity time.Duration) (certPEM, keyPEM []byte, err error) {
	if commonName == "" {
		return nil, nil, errors.New("issue client certificate: common name is empty")
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: commonName},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	certPEM, keyPEM, err = issue(caCertPEM, caKeyPEM, tmpl, validity)
	if err != nil {
		return nil, nil, fmt.Errorf("issue client certificate: %w", err)
	}
	return certPEM, keyPEM, nil
}

// issue completes a leaf template and signs it with the CA.
func issue(caCertPEM, caKeyPEM []byte, tmpl *x509.Certificate, validity time.Duration) (certPEM, keyPEM []byte, err error) {
	if validity <= 0 {
		return nil, nil, fmt.Errorf("validity %v: must be positive", validity)
	}
	caCert, caKey, err := parseCA(caCertPEM, caKeyPEM)
	if err != nil {
		return nil, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate key: %w", err)
	}
	now := time.Now()
	tmpl.NotBefore = now.Add(-backdate)
	tmpl.NotAfter = now.Add(validity)
	if tmpl.NotAfter.After(caCert.NotAfter) {
		tmpl.NotAfter = caCert.NotAfter
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.BasicConstraintsValid = true
	return sign(tmpl, key, caCert, caKey)
}

// sign fills in the serial number and signs tmpl for key's public half with
// parentKey, or self-signs when parent is nil.
func sign(tmpl *x509.Certificate, key *ecdsa.PrivateKey, parent *x509.Certificate, parentKey crypto.Signer) (certPEM, keyPEM []byte, err error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, fmt.Errorf("generate serial number: %w", err)
	}
	tmpl.SerialNumber = serial
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), parentKey)
	if err != nil {
		return nil, nil, fmt.Errorf("sign certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("encode key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
}

// parseCA parses a CA certificate and its key and checks that they belong
// together and that the certificate may sign others.
func parseCA(certPEM, keyPEM []byte) (*x509.Certificate, crypto.Signer, error) {
	certs, err := parseCertificates(certPEM)
	if err != nil {
		return nil, nil, &fieldError{"ca certificate", CACertKey, err}
	}
	cert := certs[0]
	if !cert.IsCA || cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, nil, &fieldError{"ca certificate", CACertKey,
			fmt.Errorf("%q is not a CA (basic constraints or cert-sign key usage missing)", cert.Subject.CommonName)}
	}
	key, err := parsePrivateKey(keyPEM)
	if err != nil {
		return nil, nil, &fieldError{"ca key", CAKeyKey, err}
	}
	if err := matchKey(cert, key); err != nil {
		return nil, nil, &fieldError{"ca key", CAKeyKey, err}
	}
	return cert, key, nil
}

// fieldError is bad input in one piece of TLS material; key is the file or
// Secret key that holds it.
type fieldError struct {
	what string
	key  string
	err  error
}

func (e *fieldError) Error() string { return e.what + ": " + e.err.Error() }
func (e *fieldError) Unwrap() error { return e.err }

// keyOf returns the Secret key an error from this package is about, or def.
func keyOf(err error, def string) string {
	var fe *fieldError
	if errors.As(err, &fe) {
		return fe.key
	}
	return def
}

// parseCertificates parses every CERTIFICATE block of a PEM bundle, in
// order, and fails when there is none or anything else is in it.
func parseCertificates(data []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	rest := data
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("PEM block %d is %q, want CERTIFICATE", len(certs)+1, block.Type)
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("PEM block %d: %w", len(certs)+1, err)
		}
		certs = append(certs, cert)
	}
	if len(certs) == 0 {
		return nil, errors.New("no PEM-encoded certificate")
	}
	if len(bytes.TrimSpace(rest)) > 0 {
		return nil, errors.New("trailing data after the PEM certificates")
	}
	return certs, nil
}

// parsePrivateKey parses a PKCS#8, SEC 1 (EC) or PKCS#1 (RSA) private key,
// so that keys made by cert-manager or openssl load too.
func parsePrivateKey(data []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("no PEM-encoded private key")
	}
	var key any
	var err error
	switch block.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("PEM block is %q, want PRIVATE KEY, EC PRIVATE KEY or RSA PRIVATE KEY", block.Type)
	}
	if err != nil {
		return nil, err
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("key type %T cannot sign", key)
	}
	return signer, nil
}

// matchKey checks that key is the private half of cert's public key.
func matchKey(cert *x509.Certificate, key crypto.Signer) error {
	pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(cert.PublicKey) {
		return fmt.Errorf("does not match the public key of certificate %q", cert.Subject.CommonName)
	}
	return nil
}
