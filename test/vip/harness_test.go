package vip

import (
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/novaedge/novaedge/agent/lease"
	"github.com/novaedge/novaedge/test/frr"
	"github.com/novaedge/novaedge/test/kubeenv"
)

// member is one namespace on a segment: prefix-name, its eth0 at addr/24,
// the switch port "p"+name.
type member struct{ name, addr string }

// segment builds one Ethernet segment: a bridge br0 in the namespace
// prefix-sw and a namespace per member on it. It returns the switch and
// the members' namespaces, in order.
func segment(t *testing.T, prefix string, members ...member) (*frr.NetNS, []*frr.NetNS) {
	t.Helper()
	sw := frr.NewNetNS(t, prefix+"-sw")
	sw.IP(t, "link", "add", "br0", "type", "bridge")
	sw.IP(t, "link", "set", "br0", "up")
	var out []*frr.NetNS
	for _, m := range members {
		ns := frr.NewNetNS(t, prefix+"-"+m.name)
		frr.Link(t, ns, "eth0", []string{m.addr + "/24"}, sw, "p"+m.name, nil)
		sw.IP(t, "link", "set", "p"+m.name, "master", "br0")
		out = append(out, ns)
	}
	return sw, out
}

// controlPlane is a test's envtest API server and in-process controller,
// reachable from the agents' namespaces through the host address on sw.
type controlPlane struct {
	env        *kubeenv.Env
	ns         string
	ctl        *cfController
	tlsDir     string
	kubeconfig string
}

// startControlPlane starts envtest (stopped in t.Cleanup), connects the
// root namespace to sw's bridge at host (link named prefix-<random>), and
// runs the controller for a namespace named after prefix.
func startControlPlane(t *testing.T, sw *frr.NetNS, prefix, host string) *controlPlane {
	t.Helper()
	env, stopEnv, err := kubeenv.Start()
	if err != nil {
		t.Fatalf("start the Kubernetes API (envtest): %v", err)
	}
	t.Cleanup(func() {
		if err := stopEnv(); err != nil {
			t.Errorf("stop the Kubernetes API: %v", err)
		}
	})
	cp := &controlPlane{env: env, ns: env.Namespace(t, prefix)}
	hostLink(t, sw, prefix, host)
	apiURL, err := url.Parse(env.Config.Host)
	if err != nil || apiURL.Host == "" {
		t.Fatalf("envtest API server address %q: %v", env.Config.Host, err)
	}
	cp.kubeconfig = agentKubeconfig(t, env, forwardTCP(t, host, apiURL.Host))
	cp.ctl = startCFController(t, env, cp.ns, host)
	cp.tlsDir = agentTLSDir(t, env, cp.ns)
	return cp
}

// agent describes an agent of node in controller mode, with its sockets
// and state under a new directory, the fast path off, plus extra flags.
func (cp *controlPlane) agent(t *testing.T, ns *frr.NetNS, node string, extra ...string) *cfAgent {
	dir := t.TempDir()
	return &cfAgent{ns: ns, node: node, dir: dir, args: append([]string{
		"--controller", cp.ctl.addr, "--controller-server-name", "novaedge-controller." + cp.ns + ".svc",
		"--controller-tls-dir", cp.tlsDir, "--node-name", node,
		"--kubeconfig", cp.kubeconfig, "--lease-namespace", cp.ns,
		"--admin-socket", filepath.Join(dir, "agent.sock"), "--metrics-addr", "", "--handoff-socket", "",
		"--state-dir", filepath.Join(dir, "state"), "--fastpath", "off", "--log-level", "debug",
	}, extra...)}
}

// waitHealthy waits for the nodes' agent Leases to be fresh and healthy
// (each agent applied a snapshot).
func (cp *controlPlane) waitHealthy(t *testing.T, nodes ...string) {
	t.Helper()
	frr.Eventually(t, "the agents' Leases fresh and healthy", func() (bool, string) {
		var why []string
		ok := true
		for _, node := range nodes {
			l := agentLease(cp.env, cp.ns, node)
			if l == nil || !lease.Fresh(l, time.Now()) || !lease.Healthy(l) {
				ok = false
			}
			if l != nil {
				why = append(why, fmt.Sprintf("%s: %v", node, l.Annotations))
			} else {
				why = append(why, node+": no Lease")
			}
		}
		return ok, strings.Join(why, "; ")
	})
}
