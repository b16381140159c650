package controlplane_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"

	"github.com/novaedge/novaedge/controller"
	"github.com/novaedge/novaedge/fastpath/lineage"
)

// TestControllerWithChartRBAC runs the controller and the agents' Lease
// renewals with exactly the permissions the Helm chart grants their
// ServiceAccounts (impersonated), so a write the chart does not allow
// fails here rather than in a cluster.
func TestControllerWithChartRBAC(t *testing.T) {
	c := newCluster(t)
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	helm := filepath.Join(root, "bin", "tools", "helm")
	if _, err := os.Stat(helm); err != nil {
		t.Fatalf("%s is missing (%v): run hack/install-deps.sh, which builds it", helm, err)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(helm, "template", "novaedge", filepath.Join(root, "deploy", "helm", "novaedge"), "--namespace", c.ns,
		"--show-only", "templates/controller-rbac.yaml", "--show-only", "templates/agent-rbac.yaml")
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home, "HELM_CONFIG_HOME="+home, "HELM_DATA_HOME="+home, "KUBECONFIG="+filepath.Join(home, "none"))
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, stderr.String())
	}
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	kinds := map[string]int{}
	for {
		var u unstructured.Unstructured
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decode the rendered RBAC: %v", err)
		}
		if len(u.Object) == 0 {
			continue
		}
		kinds[u.GetKind()]++
		c.create(&u)
	}
	if kinds["ClusterRole"] != 1 || kinds["Role"] != 2 || kinds["ServiceAccount"] != 2 {
		t.Fatalf("rendered RBAC kinds %v, want a ClusterRole, two Roles and two ServiceAccounts", kinds)
	}
	as := func(sa string) *rest.Config {
		cfg := rest.CopyConfig(c.env.Config)
		cfg.Impersonate = rest.ImpersonationConfig{
			UserName: "system:serviceaccount:" + c.ns + ":" + sa,
			Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + c.ns, "system:authenticated"},
		}
		return cfg
	}
	c.controllerConfig = as("novaedge-controller")
	c.agentConfig = as("novaedge-agent")

	n1 := c.addNode(c.name("n1"), nil).Name
	pool := c.pool("pool", "10.77.7.0/29")
	r := c.startController("r1")
	a := c.startAgent(n1, r, "")
	v := c.vip("web", pool.Name)
	// Enough endpoints for a Maglev lineage.
	svc, es := c.service("shop", false, endpoints("10.7.0.", lineage.MinBackends, n1)...)
	c.eventually("the VIP and the Service served with the chart's permissions", func() (bool, string) {
		s := c.getVIP(v.Name).Status
		svc := c.getService("shop")
		return s.Address != "" && s.ActiveNode == n1 && len(svc.Status.LoadBalancer.Ingress) == 1 &&
				svc.Annotations[controller.AnnotationActiveNode] == n1 && a.state() != nil,
			fmt.Sprintf("vip %+v service %+v %v\ncontroller logs:\n%s", s, svc.Status, svc.Annotations, r.logs.tail(3000))
	})
	// The Maglev lineage ConfigMap of the Service: created, updated when
	// an endpoint arrives, deleted with the Service.
	key, _ := c.ingressKey(svc.Name)
	lineageBackends := func(n int) func() (bool, string) {
		return func() (bool, string) {
			_, l, why := c.lineageConfigMap(key)
			return len(l.GetBackends()) == n, fmt.Sprintf("%s %d backends", why, len(l.GetBackends()))
		}
	}
	c.eventually("the lineage ConfigMap", lineageBackends(lineage.MinBackends))
	c.update(es, func() { es.Endpoints = append(es.Endpoints, endpoint{addr: "10.7.0.250", node: n1}.slice()) }, false)
	c.eventually("the lineage ConfigMap to be updated", lineageBackends(lineage.MinBackends+1))
	if err := c.env.Client.Delete(c.ctx, svc); err != nil {
		t.Fatal(err)
	}
	c.eventually("the lineage ConfigMap to be deleted", func() (bool, string) {
		_, _, why := c.lineageConfigMap(key)
		return strings.Contains(why, "not found"), why
	})
	if strings.Contains(r.logs.tail(1<<20), "forbidden") {
		t.Errorf("the controller was refused something:\n%s", r.logs.tail(8000))
	}
}
