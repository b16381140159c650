package helm_test

import (
	"context"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/novaedge/novaedge/test/kubeenv"
)

// dryRunApply applies u in a server-side dry run: the apiserver decodes,
// defaults, validates and admits it (strict field validation: unknown
// fields are errors), and stores nothing.
func dryRunApply(ctx context.Context, c client.Client, u *unstructured.Unstructured) error {
	return c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u.DeepCopy()),
		client.DryRunAll, client.FieldOwner("helm-test"), client.ForceOwnership)
}

// TestServerSideDryRun sends every rendered object to a real kube-apiserver
// (with NovaEdge's and the Gateway API's CRDs installed) in a server-side
// dry run. helm install --dry-run=server is not used: it only lets
// templates look objects up and never sends the rendered objects for
// validation. ServiceMonitor is left out: its CRD belongs to the
// Prometheus Operator, which the test apiserver does not have.
func TestServerSideDryRun(t *testing.T) {
	env := kubeenv.Get(t)
	for _, tc := range []struct {
		name string
		sets []string
	}{
		{name: "defaults"},
		{name: "every option", sets: []string{
			"agent.fastpath=on", "agent.interfaces={eth0,bond0.100}", "agent.xdpMode=generic", "agent.natPortRange=20000-30000",
			"agent.metricsPort=9190", "agent.mountBPFFS=true", "controller.replicas=1", "controller.leaderElect=false",
			"controller.defaultLoadBalancerClass=false", "tls.create=false", "tls.agentSecretName=agent-cert",
			"image.repository=registry.example/novaedge", "image.tag=v1.2.3", "imagePullSecrets[0].name=regcred",
		}},
		{name: "no init containers", sets: []string{"agent.fastpath=off"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := env.Namespace(t, "helm")
			r, err := renderChart(t, ns, tc.sets...)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			for _, o := range r.objects {
				if err := dryRunApply(ctx, env.Client, o.u); err != nil {
					t.Errorf("%s %s: the apiserver rejects it: %v", o.u.GetKind(), o.u.GetName(), err)
				}
			}
			// A dry run stores nothing.
			ds := &unstructured.Unstructured{}
			ds.SetAPIVersion("apps/v1")
			ds.SetKind("DaemonSet")
			err = env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "novaedge-agent"}, ds)
			if !apierrors.IsNotFound(err) {
				t.Errorf("after the dry run, getting the DaemonSet gives %v, want not found", err)
			}
		})
	}
}

// TestServerSideDryRunRejects checks that the dry run above can fail: the
// rendered DaemonSet with one broken field is rejected.
func TestServerSideDryRunRejects(t *testing.T) {
	env := kubeenv.Get(t)
	ns := env.Namespace(t, "helm-bad")
	r, err := renderChart(t, ns)
	if err != nil {
		t.Fatal(err)
	}
	ds, ok := r.find("DaemonSet")["novaedge-agent"]
	if !ok {
		t.Fatal("no DaemonSet rendered")
	}
	for _, tc := range []struct {
		name   string
		mutate func(t *testing.T, u *unstructured.Unstructured)
		check  func(error) bool
	}{
		{
			name: "invalid hostPath type",
			mutate: func(t *testing.T, u *unstructured.Unstructured) {
				vols, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "volumes")
				if len(vols) == 0 {
					t.Fatal("the DaemonSet has no volumes")
				}
				if err := unstructured.SetNestedField(vols[0].(map[string]any), "NotAType", "hostPath", "type"); err != nil {
					t.Fatal(err)
				}
				if err := unstructured.SetNestedSlice(u.Object, vols, "spec", "template", "spec", "volumes"); err != nil {
					t.Fatal(err)
				}
			},
			check: apierrors.IsInvalid,
		},
		{
			name: "misspelt field",
			mutate: func(t *testing.T, u *unstructured.Unstructured) {
				if err := unstructured.SetNestedField(u.Object, true, "spec", "template", "spec", "hostNetworking"); err != nil {
					t.Fatal(err)
				}
			},
			check: func(err error) bool { return err != nil },
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := ds.u.DeepCopy()
			tc.mutate(t, u)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			err := dryRunApply(ctx, env.Client, u)
			if !tc.check(err) {
				t.Fatalf("the broken DaemonSet gave %v, want it rejected", err)
			}
			t.Logf("rejected as expected: %v", err)
		})
	}
}

// TestInstallNotes runs helm install --dry-run=server against the test
// apiserver: helm checks the rendered objects against the server's schema
// and prints NOTES.txt, which must tell how to check the installation.
func TestInstallNotes(t *testing.T) {
	env := kubeenv.Get(t)
	for _, tc := range []struct {
		name string
		sets []string
		want []string
		not  []string
	}{
		{
			name: "defaults",
			want: []string{
				"rollout status daemonset/novaedge-agent",
				"kubectl get nepool,nevip",
				"exec daemonset/novaedge-agent -c agent -- novaedgectl status",
				"novaedgectl fastpath status",
				"the leading controller creates it",
			},
			not: []string{"agent.sysctls=false"},
		},
		{
			name: "no fast path, own certificates",
			sets: []string{"agent.fastpath=off", "tls.create=false"},
			want: []string{"novaedgectl status", "you provide it"},
			not:  []string{"fastpath status", "the leading controller creates it"},
		},
		{
			name: "sysctls left to the administrator",
			sets: []string{"agent.sysctls=false"},
			want: []string{"agent.sysctls=false: set net.ipv4.conf.<interface>.accept_local=1"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := env.Namespace(t, "helm-notes")
			args := []string{"install", "novaedge", chartDir(t), "--namespace", ns, "--dry-run=server", "--kubeconfig", env.Kubeconfig}
			for _, s := range tc.sets {
				args = append(args, "--set", s)
			}
			out, err := runHelm(t, args...)
			if err != nil {
				t.Fatal(err)
			}
			_, notes, ok := strings.Cut(out, "NOTES:\n")
			if !ok {
				t.Fatalf("helm install --dry-run=server printed no NOTES:\n%s", out)
			}
			for _, w := range append(tc.want, "NovaEdge ", "namespace "+ns) {
				if !strings.Contains(notes, w) {
					t.Errorf("NOTES do not say %q:\n%s", w, notes)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(notes, n) {
					t.Errorf("NOTES say %q:\n%s", n, notes)
				}
			}
		})
	}
}
