// Package helm holds the tests of NovaEdge's Helm chart in novaedge/. They
// lint and render the chart with the helm that hack/install-deps.sh builds
// into bin/tools/, check what matters in the rendered objects (privileges,
// host mounts, RBAC, the flags passed to the binaries), run the agent's init
// scripts against fake and real kernel state, and apply every rendered object
// in a server-side dry run to a real kube-apiserver (test/kubeenv).
package helm
