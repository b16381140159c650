// Package certs turns the snapshot's certificates into what TLS listeners
// need: a certificate chosen by SNI (exact names before wildcards, the
// listener's first certificate as the default), the minimum version, cipher
// suites, ALPN and client-certificate verification.
package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

// Store holds parsed certificates by name ("<namespace>/<secret>"). It is
// immutable once built.
type Store struct {
	pairs map[string]*tls.Certificate
	pools map[string]*x509.CertPool
}

// NewStore parses every certificate of the snapshot. A certificate that does
// not parse is an error naming it: a listener that names it could not
// serve, and the snapshot must be rejected rather than serve the wrong one.
// Entries without a key are CA bundles (for client verification and upstream
// TLS).
func NewStore(certs []*pb.Certificate) (*Store, error) {
	s := &Store{pairs: map[string]*tls.Certificate{}, pools: map[string]*x509.CertPool{}}
	var errs []error
	for _, c := range certs {
		if len(c.GetKeyPem()) == 0 {
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(c.GetCertPem()) {
				errs = append(errs, fmt.Errorf("certificate %s: no PEM certificate in the CA bundle", c.GetName()))
				continue
			}
			s.pools[c.GetName()] = pool
			continue
		}
		pair, err := tls.X509KeyPair(c.GetCertPem(), c.GetKeyPem())
		if err != nil {
			errs = append(errs, fmt.Errorf("certificate %s: %w", c.GetName(), err))
			continue
		}
		s.pairs[c.GetName()] = &pair
		// A certificate's own chain also serves as a CA bundle when a
		// listener names it as client_ca.
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(c.GetCertPem())
		s.pools[c.GetName()] = pool
	}
	return s, errors.Join(errs...)
}

// Pair returns the key pair named name.
func (s *Store) Pair(name string) (*tls.Certificate, bool) {
	p, ok := s.pairs[name]
	return p, ok
}

// Pool returns the CA pool named name.
func (s *Store) Pool(name string) (*x509.CertPool, bool) {
	p, ok := s.pools[name]
	return p, ok
}

// Selector picks a listener's certificate by SNI.
type Selector struct {
	exact    map[string]*tls.Certificate
	wildcard map[string]*tls.Certificate // "example.com" for *.example.com
	def      *tls.Certificate
}

// NewSelector indexes the named certificates by their DNS names; the first
// is the default for clients without SNI or with an unknown name. The
// first certificate naming a host wins, so the listener's order decides.
func NewSelector(s *Store, names []string) (*Selector, error) {
	sel := &Selector{exact: map[string]*tls.Certificate{}, wildcard: map[string]*tls.Certificate{}}
	for _, n := range names {
		pair, ok := s.pairs[n]
		if !ok {
			return nil, fmt.Errorf("certificate %s: not in the snapshot or has no key", n)
		}
		if sel.def == nil {
			sel.def = pair
		}
		leaf := pair.Leaf
		if leaf == nil {
			var err error
			if leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
				return nil, fmt.Errorf("certificate %s: %w", n, err)
			}
		}
		for _, dns := range leaf.DNSNames {
			dns = strings.ToLower(strings.TrimSuffix(dns, "."))
			if rest, ok := strings.CutPrefix(dns, "*."); ok {
				if _, dup := sel.wildcard[rest]; !dup {
					sel.wildcard[rest] = pair
				}
				continue
			}
			if _, dup := sel.exact[dns]; !dup {
				sel.exact[dns] = pair
			}
		}
	}
	if sel.def == nil {
		return nil, errors.New("no certificate")
	}
	return sel, nil
}

// Certificate returns the certificate for a server name: an exact match, a
// wildcard covering exactly one more label (as TLS clients verify), or the
// default.
func (sel *Selector) Certificate(serverName string) *tls.Certificate {
	name := strings.ToLower(strings.TrimSuffix(serverName, "."))
	if c, ok := sel.exact[name]; ok {
		return c
	}
	if _, rest, ok := strings.Cut(name, "."); ok {
		if c, ok := sel.wildcard[rest]; ok {
			return c
		}
	}
	return sel.def
}

// versions maps the CRD's TLS version names.
var versions = map[string]uint16{
	"TLS1.0": tls.VersionTLS10, "TLS1.1": tls.VersionTLS11, "TLS1.2": tls.VersionTLS12, "TLS1.3": tls.VersionTLS13,
	"TLSv1.0": tls.VersionTLS10, "TLSv1.1": tls.VersionTLS11, "TLSv1.2": tls.VersionTLS12, "TLSv1.3": tls.VersionTLS13,
}

// Version parses "TLS1.2" etc.; empty means def.
func Version(s string, def uint16) (uint16, error) {
	if s == "" {
		return def, nil
	}
	v, ok := versions[s]
	if !ok {
		return 0, fmt.Errorf("unknown TLS version %q (want TLS1.0, TLS1.1, TLS1.2 or TLS1.3)", s)
	}
	return v, nil
}

// cipherSuite finds a suite by its IANA name (as Go and OpenSSL's IANA
// names spell it).
func cipherSuite(name string) (uint16, bool) {
	for _, c := range tls.CipherSuites() {
		if c.Name == name {
			return c.ID, true
		}
	}
	return 0, false
}

// ServerConfig builds the tls.Config of a terminating listener: certificate
// by SNI, minVersion (default TLS 1.2), maxVersion, cipher suites (TLS 1.2
// only; Go does not make TLS 1.3 suites configurable), client auth, and
// ALPN alpn (e.g. h2, http/1.1).
func ServerConfig(s *Store, t *pb.ListenerTLS, alpn []string) (*tls.Config, error) {
	sel, err := NewSelector(s, t.GetCertificates())
	if err != nil {
		return nil, fmt.Errorf("tls.certificates: %w", err)
	}
	minV, err := Version(t.GetMinVersion(), tls.VersionTLS12)
	if err != nil {
		return nil, fmt.Errorf("tls.minVersion: %w", err)
	}
	maxV, err := Version(t.GetMaxVersion(), 0)
	if err != nil {
		return nil, fmt.Errorf("tls.maxVersion: %w", err)
	}
	if maxV != 0 && maxV < minV {
		return nil, fmt.Errorf("tls.maxVersion %s is below minVersion %s", t.GetMaxVersion(), t.GetMinVersion())
	}
	cfg := &tls.Config{
		MinVersion: minV,
		MaxVersion: maxV,
		NextProtos: alpn,
		GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
			return sel.Certificate(h.ServerName), nil
		},
	}
	for _, name := range t.GetCipherSuites() {
		id, ok := cipherSuite(name)
		if !ok {
			return nil, fmt.Errorf("tls.cipherSuites: unknown cipher suite %q", name)
		}
		cfg.CipherSuites = append(cfg.CipherSuites, id)
	}
	switch strings.ToUpper(t.GetClientAuth()) {
	case "", "NONE":
	case "REQUEST":
		cfg.ClientAuth = tls.VerifyClientCertIfGiven
	case "REQUIRE":
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	default:
		return nil, fmt.Errorf("tls.clientAuth: unknown mode %q (want NONE, REQUEST or REQUIRE)", t.GetClientAuth())
	}
	if cfg.ClientAuth != tls.NoClientCert {
		pool, ok := s.Pool(t.GetClientCa())
		if !ok {
			return nil, fmt.Errorf("tls.clientCA: CA bundle %q not in the snapshot", t.GetClientCa())
		}
		cfg.ClientCAs = pool
	}
	return cfg, nil
}
