// Package kubeenv gives tests a real Kubernetes API: one kube-apiserver and
// etcd per test binary, started through controller-runtime's envtest with the
// NovaEdge CRDs (deploy/crds) and the Gateway API standard CRDs installed.
//
// A package opts in from TestMain and its tests fetch the environment:
//
//	func TestMain(m *testing.M) { os.Exit(kubeenv.Run(m)) }
//
//	func TestSomething(t *testing.T) {
//		env := kubeenv.Get(t)
//		ns := env.Namespace(t, "something")
//		...
//	}
//
// The binaries come from KUBEBUILDER_ASSETS (make test sets it) or, when that
// is unset, from hack/envtest-assets.sh, which builds them from the Go module
// proxy once and caches them. Missing binaries fail the test binary; they
// never skip tests.
//
// envtest runs no controllers: namespaces are never finalised and nothing
// garbage-collects, so tests isolate themselves with Env.Namespace (a fresh,
// never reused name) and unique names for cluster-scoped objects.
//
// The control plane dies with the test binary even when the binary cannot
// clean up (SIGKILL, a panic in a test goroutine, go test's timeout): both
// processes are started through setpriv(1) with a parent-death signal, from an
// OS thread that lives as long as the control plane. SIGINT, SIGTERM and
// SIGHUP stop it gracefully before the binary exits.
package kubeenv
