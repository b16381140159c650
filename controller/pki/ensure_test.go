package pki

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/novaedge/novaedge/test/kubeenv"
)

func dnsNames(ns string) []string {
	return []string{
		"novaedge-controller",
		"novaedge-controller." + ns,
		"novaedge-controller." + ns + ".svc",
		"novaedge-controller." + ns + ".svc.cluster.local",
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func secret(t *testing.T, c client.Client, ns, name string) *corev1.Secret {
	t.Helper()
	var s corev1.Secret
	if err := c.Get(testCtx(t), client.ObjectKey{Namespace: ns, Name: name}, &s); err != nil {
		t.Fatalf("get secret %s: %v", name, err)
	}
	return &s
}

func TestEnsureCreatesOnceAndReuses(t *testing.T) {
	env := kubeenv.Get(t)
	ns := env.Namespace(t, "pki")

	first, err := Ensure(testCtx(t), crSecrets{env.Client}, ns, dnsNames(ns))
	if err != nil {
		t.Fatalf("first Ensure: %v", err)
	}
	ca := secret(t, env.Client, ns, CASecretName)
	server := secret(t, env.Client, ns, ServerSecretName)
	agent := secret(t, env.Client, ns, AgentSecretName)
	for _, s := range []struct {
		secret *corev1.Secret
		typ    corev1.SecretType
		keys   []string
	}{
		{ca, corev1.SecretTypeOpaque, []string{CACertKey, CAKeyKey}},
		{server, corev1.SecretTypeTLS, []string{CACertKey, CertKey, KeyKey}},
		{agent, corev1.SecretTypeTLS, []string{CACertKey, CertKey, KeyKey}},
	} {
		if s.secret.Type != s.typ || len(s.secret.Data) != len(s.keys) {
			t.Errorf("secret %s: type %s with %d keys, want %s with %v", s.secret.Name, s.secret.Type, len(s.secret.Data), s.typ, s.keys)
		}
		for _, k := range s.keys {
			if len(s.secret.Data[k]) == 0 {
				t.Errorf("secret %s: key %s missing", s.secret.Name, k)
			}
		}
	}
	if !bytes.Equal(first.CertPEM, server.Data[CertKey]) || !bytes.Equal(first.CACertPEM, ca.Data[CACertKey]) {
		t.Error("returned bundle is not the stored server material")
	}
	if cn := first.Certificate.Leaf.Subject.CommonName; cn != "novaedge-controller" {
		t.Errorf("server certificate CN %q", cn)
	}
	if got := parseOne(t, agent.Data[CertKey]).Subject.CommonName; got != AgentCommonName {
		t.Errorf("agent certificate CN %q, want %q", got, AgentCommonName)
	}

	second, err := Ensure(testCtx(t), crSecrets{env.Client}, ns, dnsNames(ns))
	if err != nil {
		t.Fatalf("second Ensure: %v", err)
	}
	if !bytes.Equal(first.CertPEM, second.CertPEM) || !bytes.Equal(first.KeyPEM, second.KeyPEM) || !bytes.Equal(first.CACertPEM, second.CACertPEM) {
		t.Error("second Ensure returned other material than the first")
	}
	if again := secret(t, env.Client, ns, AgentSecretName); again.ResourceVersion != agent.ResourceVersion {
		t.Error("second Ensure rewrote the agent Secret")
	}

	// The stored material works end to end: the agent's mounted Secret
	// against the controller's bundle.
	cfg, err := ClientTLSConfig(writeDir(t, agent.Data[CACertKey], agent.Data[CertKey], agent.Data[KeyKey]), "novaedge-controller."+ns+".svc")
	if err != nil {
		t.Fatalf("ClientTLSConfig from the agent Secret: %v", err)
	}
	if serverErr, clientErr := handshake(t, ServerTLSConfig(second), cfg); serverErr != nil || clientErr != nil {
		t.Fatalf("handshake with Ensure's material: server %v, client %v", serverErr, clientErr)
	}
}

// TestEnsureLosesCreateRace makes another replica create every Secret just
// before this one's first create, so each create meets AlreadyExists.
func TestEnsureLosesCreateRace(t *testing.T) {
	env := kubeenv.Get(t)
	ns := env.Namespace(t, "pki")
	raw, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	var winner Bundle
	var winnerErr error
	var once sync.Once
	creates := 0
	c := interceptor.NewClient(raw, interceptor.Funcs{
		Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			creates++
			once.Do(func() { winner, winnerErr = Ensure(ctx, crSecrets{raw}, ns, dnsNames(ns)) })
			return cl.Create(ctx, obj, opts...)
		},
	})
	got, err := Ensure(testCtx(t), crSecrets{c}, ns, dnsNames(ns))
	if winnerErr != nil {
		t.Fatalf("the other replica's Ensure: %v", winnerErr)
	}
	if err != nil {
		t.Fatalf("Ensure after losing the race: %v", err)
	}
	if creates != 3 {
		t.Errorf("%d creates attempted, want 3 (CA, server, agent)", creates)
	}
	if !bytes.Equal(got.CertPEM, winner.CertPEM) || !bytes.Equal(got.CACertPEM, winner.CACertPEM) {
		t.Error("the loser returned its own material instead of the winner's")
	}
}

func TestEnsureConcurrent(t *testing.T) {
	env := kubeenv.Get(t)
	ns := env.Namespace(t, "pki")
	var wg sync.WaitGroup
	results := make([]Bundle, 4)
	errs := make([]error, len(results))
	for i := range results {
		wg.Go(func() { results[i], errs[i] = Ensure(testCtx(t), crSecrets{env.Client}, ns, dnsNames(ns)) })
	}
	wg.Wait()
	for i := range results {
		if errs[i] != nil {
			t.Fatalf("Ensure %d: %v", i, errs[i])
		}
		if !bytes.Equal(results[i].CertPEM, results[0].CertPEM) {
			t.Errorf("Ensure %d returned other material than Ensure 0", i)
		}
	}
}

func TestEnsureRejectsBadSecrets(t *testing.T) {
	env := kubeenv.Get(t)
	stranger := newCA(t)
	strangerAgent := stranger.client(t, AgentCommonName)
	otherKey := stranger.client(t, "x").key
	tests := []struct {
		name string
		// prepare breaks the Secrets of a namespace; valid ones exist
		// already when makeValid is set.
		makeValid bool
		prepare   func(t *testing.T, ns string)
		wantErr   []string
	}{
		{"garbage server certificate", true, func(t *testing.T, ns string) {
			patch(t, env.Client, ns, ServerSecretName, CertKey, []byte("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n"))
		}, []string{ServerSecretName, `"tls.crt"`}},
		{"server key of another certificate", true, func(t *testing.T, ns string) {
			patch(t, env.Client, ns, ServerSecretName, KeyKey, otherKey)
		}, []string{ServerSecretName, `"tls.key"`, "does not match"}},
		{"agent certificate of another CA", true, func(t *testing.T, ns string) {
			patch(t, env.Client, ns, AgentSecretName, CertKey, strangerAgent.cert)
			patch(t, env.Client, ns, AgentSecretName, KeyKey, strangerAgent.key)
		}, []string{AgentSecretName, `"tls.crt"`}},
		{"empty agent ca.crt", true, func(t *testing.T, ns string) {
			patch(t, env.Client, ns, AgentSecretName, CACertKey, []byte{})
		}, []string{AgentSecretName, `"ca.crt"`, "missing"}},
		{"corrupt CA key with leaves to make", false, func(t *testing.T, ns string) {
			ca := newCA(t)
			create(t, env.Client, ns, CASecretName, corev1.SecretTypeOpaque, map[string][]byte{CACertKey: ca.caCert, CAKeyKey: []byte("junk")})
		}, []string{CASecretName, `"ca.key"`}},
		{"server certificate without the service name", false, func(t *testing.T, ns string) {
			ca := newCA(t)
			srv := ca.server(t, "novaedge-controller")
			agent := ca.client(t, AgentCommonName)
			create(t, env.Client, ns, ServerSecretName, corev1.SecretTypeTLS, tlsData(ca.caCert, srv.cert, srv.key))
			create(t, env.Client, ns, AgentSecretName, corev1.SecretTypeTLS, tlsData(ca.caCert, agent.cert, agent.key))
		}, []string{ServerSecretName, `"tls.crt"`, `does not cover "novaedge-controller.`}},
		{"leaves not issued by novaedge-ca", true, func(t *testing.T, ns string) {
			ca := newCA(t)
			patch(t, env.Client, ns, CASecretName, CACertKey, ca.caCert)
			patch(t, env.Client, ns, CASecretName, CAKeyKey, ca.caKey)
		}, []string{ServerSecretName, "does not chain to " + CASecretName}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ns := env.Namespace(t, "pki-bad")
			if tt.makeValid {
				if _, err := Ensure(testCtx(t), crSecrets{env.Client}, ns, dnsNames(ns)); err != nil {
					t.Fatalf("Ensure on a fresh namespace: %v", err)
				}
			}
			tt.prepare(t, ns)
			_, err := Ensure(testCtx(t), crSecrets{env.Client}, ns, dnsNames(ns))
			if err == nil {
				t.Fatal("Ensure accepted the broken Secrets")
			}
			t.Logf("Ensure: %v", err)
			for _, want := range tt.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
		})
	}
}

// TestEnsureAcceptsLeavesWithoutCA covers Secrets provided by cert-manager or
// the user: without novaedge-ca, valid leaves are used and no CA is made.
func TestEnsureAcceptsLeavesWithoutCA(t *testing.T) {
	env := kubeenv.Get(t)
	ns := env.Namespace(t, "pki")
	ca := newCA(t)
	srv := ca.server(t, dnsNames(ns)...)
	agent := ca.client(t, AgentCommonName)
	create(t, env.Client, ns, ServerSecretName, corev1.SecretTypeTLS, tlsData(ca.caCert, srv.cert, srv.key))
	create(t, env.Client, ns, AgentSecretName, corev1.SecretTypeTLS, tlsData(ca.caCert, agent.cert, agent.key))

	b, err := Ensure(testCtx(t), crSecrets{env.Client}, ns, dnsNames(ns))
	if err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	if !bytes.Equal(b.CertPEM, srv.cert) {
		t.Error("Ensure did not return the provided server certificate")
	}
	var s corev1.Secret
	if err := env.Client.Get(testCtx(t), client.ObjectKey{Namespace: ns, Name: CASecretName}, &s); err == nil {
		t.Error("Ensure created novaedge-ca although both leaves were provided")
	}
}

func patch(t *testing.T, c client.Client, ns, name, key string, value []byte) {
	t.Helper()
	s := secret(t, c, ns, name)
	s.Data[key] = value
	if err := c.Update(testCtx(t), s); err != nil {
		t.Fatalf("update secret %s: %v", name, err)
	}
}

func create(t *testing.T, c client.Client, ns, name string, typ corev1.SecretType, data map[string][]byte) {
	t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Type: typ, Data: data}
	if err := c.Create(testCtx(t), s); err != nil {
		t.Fatalf("create secret %s: %v", name, err)
	}
}

// crSecrets gives Ensure the Secrets of a controller-runtime client, as the
// controller does.
type crSecrets struct{ c client.Client }

func (s crSecrets) Get(ctx context.Context, namespace, name string) (*corev1.Secret, error) {
	var out corev1.Secret
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

func (s crSecrets) Create(ctx context.Context, secret *corev1.Secret) error {
	return s.c.Create(ctx, secret)
}
