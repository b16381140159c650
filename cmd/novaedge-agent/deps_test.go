package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLinksFewAPIGroups keeps the packages that register every built-in
// Kubernetes API group out of the agent. client-go's typed clientset and
// controller-runtime's client both do; once linked, the generated code of
// some fifty groups the agent never uses grew its binary from 77 to 112 MB
// and its resident memory by about 20 MB (perf/routescale).
func TestLinksFewAPIGroups(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	forbidden := []string{
		"k8s.io/client-go/kubernetes/scheme",
		"sigs.k8s.io/controller-runtime/pkg/client",
		// The apiserver's check of a CRD's definition (schema/crdcheck):
		// the agent's CRDs are its own, checked by schema's tests.
		"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation",
	}
	groups := 0
	for _, d := range deps {
		for _, f := range forbidden {
			if d == f {
				t.Errorf("the agent links %s (see this test's comment); find the import with go list -f '{{.ImportPath}} {{.Imports}}' -deps .", f)
			}
		}
		if strings.HasPrefix(d, "k8s.io/api/") {
			groups++
		}
	}
	// core, discovery, networking (snapshot's inputs), coordination (the
	// Lease) and authentication, which the apiserver packages behind
	// standalone CRD validation refer to.
	if groups > 8 {
		t.Errorf("the agent links %d packages of k8s.io/api, want at most 8", groups)
	}
	if len(deps) < 100 {
		t.Fatalf("go list -deps printed %d packages; not the agent's dependency list", len(deps))
	}
}
