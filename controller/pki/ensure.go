package pki

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Names of the Secrets Ensure manages, in the controller's namespace.
const (
	// CASecretName holds ca.crt and ca.key (type Opaque).
	CASecretName = "novaedge-ca"
	// ServerSecretName holds the controller's ca.crt, tls.crt and tls.key
	// (type kubernetes.io/tls).
	ServerSecretName = "novaedge-controller-tls"
	// AgentSecretName holds the agents' ca.crt, tls.crt and tls.key (type
	// kubernetes.io/tls); every agent mounts it.
	AgentSecretName = "novaedge-agent-tls"

	caCommonName = "novaedge-ca"
)

// Secrets is what Ensure needs of the API server. It is an interface of its
// own, not controller-runtime's client, because the agent links this package
// for ClientTLSConfig and that client would bring every built-in API group's
// generated code into the agent's binary.
type Secrets interface {
	// Get returns the Secret, or an error for which apierrors.IsNotFound
	// holds when it does not exist.
	Get(ctx context.Context, namespace, name string) (*corev1.Secret, error)
	// Create creates s; an error for which apierrors.IsAlreadyExists holds
	// means another writer was first.
	Create(ctx context.Context, s *corev1.Secret) error
}

// Ensure makes sure the three Secrets exist in namespace and fit together,
// and returns the controller's server Bundle.
//
// Missing Secrets are created: the CA first (unless both leaf Secrets
// already exist, when it is not needed), then the leaves it signs. Existing
// Secrets are never overwritten; they are checked instead: keys present and
// parseable, each key matching its certificate, the server certificate
// covering every name of serverDNSNames and chaining to the agents' ca.crt,
// the client certificate chaining to the controller's ca.crt, and both
// chaining to novaedge-ca when that Secret exists. Errors name the Secret and
// key at fault. When another replica creates a Secret first, its Secret is
// read and used.
func Ensure(ctx context.Context, c Secrets, namespace string, serverDNSNames []string) (Bundle, error) {
	if namespace == "" {
		return Bundle{}, errors.New("ensure tls secrets: namespace is empty")
	}
	if len(serverDNSNames) == 0 {
		return Bundle{}, errors.New("ensure tls secrets: no server DNS names")
	}
	e := ensurer{ctx: ctx, c: c, ns: namespace}

	server, err := e.get(ServerSecretName)
	if err != nil {
		return Bundle{}, err
	}
	agent, err := e.get(AgentSecretName)
	if err != nil {
		return Bundle{}, err
	}
	ca, err := e.get(CASecretName)
	if err != nil {
		return Bundle{}, err
	}

	if server == nil || agent == nil {
		if ca == nil {
			certPEM, keyPEM, err := NewCA(caCommonName, CAValidity)
			if err != nil {
				return Bundle{}, err
			}
			ca, err = e.create(CASecretName, corev1.SecretTypeOpaque, map[string][]byte{CACertKey: certPEM, CAKeyKey: keyPEM})
			if err != nil {
				return Bundle{}, err
			}
		}
		caCert, caKey := ca.Data[CACertKey], ca.Data[CAKeyKey]
		if _, _, err := parseCA(caCert, caKey); err != nil {
			return Bundle{}, e.bad(CASecretName, keyOf(err, CACertKey), err)
		}
		if server == nil {
			certPEM, keyPEM, err := IssueServer(caCert, caKey, serverDNSNames, LeafValidity)
			if err != nil {
				return Bundle{}, err
			}
			if server, err = e.create(ServerSecretName, corev1.SecretTypeTLS, tlsData(caCert, certPEM, keyPEM)); err != nil {
				return Bundle{}, err
			}
		}
		if agent == nil {
			certPEM, keyPEM, err := IssueClient(caCert, caKey, AgentCommonName, LeafValidity)
			if err != nil {
				return Bundle{}, err
			}
			if agent, err = e.create(AgentSecretName, corev1.SecretTypeTLS, tlsData(caCert, certPEM, keyPEM)); err != nil {
				return Bundle{}, err
			}
		}
	}

	return e.check(ca, server, agent, serverDNSNames)
}

// check validates the Secrets as described on Ensure; ca may be nil.
func (e *ensurer) check(ca, server, agent *corev1.Secret, serverDNSNames []string) (Bundle, error) {
	var caPool *x509.CertPool
	if ca != nil {
		caCert, _, err := parseCA(ca.Data[CACertKey], ca.Data[CAKeyKey])
		if err != nil {
			return Bundle{}, e.bad(CASecretName, keyOf(err, CACertKey), err)
		}
		caPool = x509.NewCertPool()
		caPool.AddCert(caCert)
	}
	serverBundle, err := e.leaf(server)
	if err != nil {
		return Bundle{}, err
	}
	agentBundle, err := e.leaf(agent)
	if err != nil {
		return Bundle{}, err
	}

	// Each side must accept the other with the CA it was given.
	if err := verify(serverBundle, agentBundle.CAs, x509.ExtKeyUsageServerAuth); err != nil {
		return Bundle{}, e.bad(ServerSecretName, CertKey, fmt.Errorf("not trusted by the %s of %s as a server certificate: %w", CACertKey, AgentSecretName, err))
	}
	if err := verify(agentBundle, serverBundle.CAs, x509.ExtKeyUsageClientAuth); err != nil {
		return Bundle{}, e.bad(AgentSecretName, CertKey, fmt.Errorf("not trusted by the %s of %s as a client certificate: %w", CACertKey, ServerSecretName, err))
	}
	if caPool != nil {
		if err := verify(serverBundle, caPool, x509.ExtKeyUsageServerAuth); err != nil {
			return Bundle{}, e.bad(ServerSecretName, CertKey, fmt.Errorf("does not chain to %s: %w", CASecretName, err))
		}
		if err := verify(agentBundle, caPool, x509.ExtKeyUsageClientAuth); err != nil {
			return Bundle{}, e.bad(AgentSecretName, CertKey, fmt.Errorf("does not chain to %s: %w", CASecretName, err))
		}
	}
	for _, name := range serverDNSNames {
		if err := serverBundle.Certificate.Leaf.VerifyHostname(name); err != nil {
			return Bundle{}, e.bad(ServerSecretName, CertKey, fmt.Errorf("does not cover %q (delete the Secret to have it reissued): %w", name, err))
		}
	}
	return serverBundle, nil
}

// leaf parses a kubernetes.io/tls Secret with ca.crt.
func (e *ensurer) leaf(s *corev1.Secret) (Bundle, error) {
	for _, key := range []string{CACertKey, CertKey, KeyKey} {
		if len(s.Data[key]) == 0 {
			return Bundle{}, e.bad(s.Name, key, errors.New("missing or empty"))
		}
	}
	b, err := loadBundle(s.Data[CACertKey], s.Data[CertKey], s.Data[KeyKey])
	if err != nil {
		return Bundle{}, e.bad(s.Name, keyOf(err, CertKey), err)
	}
	return b, nil
}

func verify(b Bundle, roots *x509.CertPool, usage x509.ExtKeyUsage) error {
	inter := x509.NewCertPool()
	for _, raw := range b.Certificate.Certificate[1:] {
		if c, err := x509.ParseCertificate(raw); err == nil {
			inter.AddCert(c)
		}
	}
	_, err := b.Certificate.Leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}})
	return err
}

func tlsData(caCert, cert, key []byte) map[string][]byte {
	return map[string][]byte{CACertKey: caCert, CertKey: cert, KeyKey: key}
}

type ensurer struct {
	ctx context.Context
	c   Secrets
	ns  string
}

// get returns the Secret, or nil when it does not exist.
func (e *ensurer) get(name string) (*corev1.Secret, error) {
	s, err := e.c.Get(e.ctx, e.ns, name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get secret %s/%s: %w", e.ns, name, err)
	}
	return s, nil
}

// create creates the Secret or, when another replica was first, returns
// that replica's.
func (e *ensurer) create(name string, typ corev1.SecretType, data map[string][]byte) (*corev1.Secret, error) {
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: e.ns,
			Labels:    map[string]string{"app.kubernetes.io/part-of": "novaedge", "app.kubernetes.io/managed-by": "novaedge-controller"},
		},
		Type: typ,
		Data: data,
	}
	err := e.c.Create(e.ctx, s)
	if apierrors.IsAlreadyExists(err) {
		existing, err := e.get(name)
		if err != nil {
			return nil, err
		}
		if existing == nil {
			return nil, fmt.Errorf("create secret %s/%s: it already exists but cannot be read back", e.ns, name)
		}
		return existing, nil
	}
	if err != nil {
		return nil, fmt.Errorf("create secret %s/%s: %w", e.ns, name, err)
	}
	return s, nil
}

func (e *ensurer) bad(secret, key string, err error) error {
	// The key is named once, in front; drop a fieldError's own label.
	var fe *fieldError
	if errors.As(err, &fe) && fe.key == key {
		err = fe.err
	}
	return fmt.Errorf("secret %s/%s key %q: %w", e.ns, secret, key, err)
}
