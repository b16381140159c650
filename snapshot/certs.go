package snapshot

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"slices"

	"github.com/novaedge/novaedge/api/v1alpha1"
	"github.com/novaedge/novaedge/diag"
	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

// keyPair loads a kubernetes.io/tls Secret as a certificate named
// "ns/name". ok is false when the owner must not be served.
func (b *builder) keyPair(owner diag.Ref, field, ns string, sr *v1alpha1.SecretRef) (string, bool) {
	sns := orDefault(sr.Namespace, ns)
	if sns != ns {
		b.errorf(owner, field+".namespace", "cross-namespace Secret references are not allowed (%s in %s, Secret in %s)", owner.Kind, ns, sns)
		return "", false
	}
	name := key(sns, sr.Name)
	if _, done := b.certs[name]; done {
		return name, true
	}
	cert, ok1, _ := b.secretValue(owner, field, sns, sr.Name, "tls.crt")
	if !ok1 {
		return "", false
	}
	keyPEM, ok2, _ := b.secretValue(owner, field, sns, sr.Name, "tls.key")
	if !ok2 {
		return "", false
	}
	pair, err := tls.X509KeyPair(cert, keyPEM)
	if err != nil {
		b.errorf(owner, field, "Secret %s: tls.crt/tls.key are not a valid key pair: %v", name, err)
		return "", false
	}
	c := &pb.Certificate{Name: name, CertPem: cert, KeyPem: keyPEM}
	if leaf, err := x509.ParseCertificate(pair.Certificate[0]); err == nil {
		c.DnsNames = slices.Sorted(slices.Values(slices.Compact(slices.Sorted(slices.Values(leaf.DNSNames)))))
		c.NotAfter = leaf.NotAfter.Unix()
	}
	b.certs[name] = c
	return name, true
}

// caBundle loads the ca.crt of a Secret as a certificate named "ns/name#ca".
func (b *builder) caBundle(owner diag.Ref, field, ns string, sr *v1alpha1.SecretRef) (string, bool) {
	sns := orDefault(sr.Namespace, ns)
	if sns != ns {
		b.errorf(owner, field+".namespace", "cross-namespace Secret references are not allowed (%s in %s, Secret in %s)", owner.Kind, ns, sns)
		return "", false
	}
	name := key(sns, sr.Name) + "#ca"
	if _, done := b.certs[name]; done {
		return name, true
	}
	ca, ok, _ := b.secretValue(owner, field, sns, sr.Name, "ca.crt")
	if !ok {
		return "", false
	}
	if err := checkPEMCerts(ca); err != nil {
		b.errorf(owner, field, "Secret %s: ca.crt: %v", key(sns, sr.Name), err)
		return "", false
	}
	b.certs[name] = &pb.Certificate{Name: name, CertPem: ca}
	return name, true
}

func checkPEMCerts(data []byte) error {
	n := 0
	for {
		var blk *pem.Block
		blk, data = pem.Decode(data)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		if _, err := x509.ParseCertificate(blk.Bytes); err != nil {
			return fmt.Errorf("certificate %d: %w", n+1, err)
		}
		n++
	}
	if n == 0 {
		return fmt.Errorf("no PEM certificate found")
	}
	return nil
}
