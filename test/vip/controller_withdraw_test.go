package vip

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/novaedge/novaedge/agent/lease"
	"github.com/novaedge/novaedge/api/v1alpha1"
	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/test/frr"
)

// The health-withdraw topology: one Ethernet segment (a bridge in its own
// namespace) with the router 10.88.0.1 (FRR: zebra and bgpd, AS 65000,
// maximum-paths 2), node-a 10.88.0.2 and node-b 10.88.0.3 (agents in
// controller mode, AS 65100), the backend 10.88.0.10 (an HTTP server the
// test runs in its own namespace) and the test process, 10.88.0.254 on a
// veth pair into the root namespace, where the controller and the API
// server forwarder listen. The BGP VIP 10.88.1.50 is a fixed address.
const (
	hwRouter  = "10.88.0.1"
	hwNodeA   = "10.88.0.2"
	hwNodeB   = "10.88.0.3"
	hwBackend = "10.88.0.10"
	hwHost    = "10.88.0.254"
	hwVIP     = "10.88.1.50"
	// hwPort is the backend's port and the VIP listener's.
	hwPort = "8080"
	// hwTable is the nftables table that makes the backend fail.
	hwTable = "novaedge_health_withdraw"
	// hwVIPName is the ProxyVIP's name, as vip status shows it.
	hwVIPName = "hw-vip"
)

// hwRouterConfig is bgpd's configuration: both nodes as eBGP neighbors and
// two paths per prefix, so the VIP is installed with ECMP.
func hwRouterConfig() string {
	var b strings.Builder
	b.WriteString("frr defaults traditional\nhostname tor\n!\nrouter bgp 65000\n bgp router-id " + hwRouter +
		"\n no bgp ebgp-requires-policy\n no bgp default ipv4-unicast\n")
	for _, n := range []string{hwNodeA, hwNodeB} {
		fmt.Fprintf(&b, " neighbor %[1]s remote-as 65100\n neighbor %[1]s timers connect 1\n", n)
	}
	b.WriteString(" address-family ipv4 unicast\n  maximum-paths 2\n")
	for _, n := range []string{hwNodeA, hwNodeB} {
		fmt.Fprintf(&b, "  neighbor %s activate\n", n)
	}
	b.WriteString(" exit-address-family\n!\n")
	return b.String()
}

// serveBackend runs an HTTP server on addr inside ns (the socket is opened
// there; the test process serves it) answering 200 "backend" to every
// request, until t's cleanup closes it.
func serveBackend(t *testing.T, ns *frr.NetNS, addr string) {
	t.Helper()
	var lis net.Listener
	ns.Do(t, func() error {
		var err error
		lis, err = net.Listen("tcp", addr)
		return err
	})
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write([]byte("backend\n"))
		}),
		ReadHeaderTimeout: 5 * time.Second,
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	t.Cleanup(func() {
		_ = srv.Close()
		if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("backend server: %v", err)
		}
	})
}

// failBackend drops every TCP segment to the backend's port in ns with
// nftables (the server keeps running: only the probes tell), until the
// returned function removes the table.
func failBackend(t *testing.T, ns *frr.NetNS) func() {
	t.Helper()
	ns.Exec(t, "table inet "+hwTable+" {\n chain in {\n  type filter hook input priority 0; policy accept;\n  tcp dport "+hwPort+" drop\n }\n}\n", foNFTables, "-f", "-")
	removed := false
	remove := func() {
		if !removed {
			removed = true
			ns.Exec(t, "", foNFTables, "delete", "table", "inet", hwTable)
		}
	}
	t.Cleanup(remove)
	return remove
}

// getVIP sends one HTTP request to the VIP's listener from the namespace
// called from (over FRR's route, to whichever node its ECMP picks) and
// returns the response's first line and body.
func getVIP(from string) (string, error) {
	var resp string
	err := inNS(from, func() error {
		c, err := net.DialTimeout("tcp", net.JoinHostPort(hwVIP, hwPort), 2*time.Second)
		if err != nil {
			return err
		}
		defer func() { _ = c.Close() }()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: hw.test\r\nConnection: close\r\n\r\n")); err != nil {
			return err
		}
		b, err := io.ReadAll(c)
		resp = string(b)
		return err
	})
	return resp, err
}

// hwSession is FRR's view of one BGP session, the fields the test reads.
type hwSession struct {
	State     string `json:"bgpState"`
	Dropped   int    `json:"connectionsDropped"`
	LastReset string `json:"lastResetDueTo"`
}

// hwSessionOf returns FRR's session with the neighbour at addr.
func hwSessionOf(t *testing.T, r *frr.Router, addr string) hwSession {
	t.Helper()
	var out map[string]hwSession
	r.JSON(t, "show bgp neighbors "+addr+" json", &out)
	return out[addr]
}

// endpointState is the state of backend's endpoint ("address:port") in the
// snapshot the agent at sock serves, from novaedgectl snapshot.
func endpointState(t *testing.T, sock, backend, endpoint string) string {
	out, err := ctl(t, sock, "snapshot", "-o", "json")
	if err != nil {
		return err.Error()
	}
	var snap pb.ConfigSnapshot
	if err := protojson.Unmarshal([]byte(out), &snap); err != nil {
		return fmt.Sprintf("snapshot -o json: %v", err)
	}
	for _, b := range snap.GetCluster().GetBackends() {
		if b.GetName() != backend {
			continue
		}
		for _, e := range b.GetEndpoints() {
			if net.JoinHostPort(e.GetAddress(), fmt.Sprint(e.GetPort())) == endpoint {
				return e.GetState().String()
			}
		}
		return fmt.Sprintf("backend %s has no endpoint %s: %v", backend, endpoint, b.GetEndpoints())
	}
	return fmt.Sprintf("no backend %s in snapshot version %d", backend, snap.GetVersion())
}

// hwVIPState is the VIP's line in an agent's vip status, and a description.
func hwVIPState(t *testing.T, sock string) (announced bool, reason, why string) {
	st, err := vipStatus(t, sock)
	if err != nil {
		return false, "", err.Error()
	}
	for _, v := range st.GetVips() {
		if v.GetVip() == hwVIPName {
			return v.GetAnnounced(), v.GetReason(), fmt.Sprintf("announced %v, reason %q, role %s", v.GetAnnounced(), v.GetReason(), v.GetRole())
		}
	}
	return false, "", fmt.Sprintf("%s not in vip status: %v", hwVIPName, st)
}

// TestControllerHealthWithdraw: issue 6's "a health failure withdraws the
// route", end to end in controller mode. Two agent binaries (node-a,
// node-b) follow an in-process controller on a real kube-apiserver and
// announce a BGP VIP to FRR, whose HTTP listener routes to one backend
// endpoint with an active health check: FRR installs the /32 with both
// nodes as next hops. When the backend stops answering (nftables drops its
// port), both agents' probes fail and they report it in their Leases; the
// controller marks the endpoint UNHEALTHY (ProxyBackend status) and ships
// it; the agents withdraw the VIP ("no healthy backend") and FRR's route
// goes, by a BGP withdraw: the sessions stay Established. When the backend
// answers again, the route comes back with both next hops, and requests
// to the VIP from the router reach the backend through the nodes' slow
// path.
func TestControllerHealthWithdraw(t *testing.T) {
	frr.RequireRoot(t)
	frr.RequireTool(t, foNFTables, "nftables")
	frr.RequireTool(t, filepath.Join(frr.DaemonDir, "bgpd"), "frr")
	bin := buildAgent(t)
	sw, members := segment(t, "nehw", member{"r", hwRouter}, member{"a", hwNodeA}, member{"b", hwNodeB}, member{"be", hwBackend})
	rns, nsA, nsB, nsBE := members[0], members[1], members[2], members[3]
	router := frr.Start(t, rns,
		frr.Daemon{Name: "zebra", Config: "hostname tor\n"},
		frr.Daemon{Name: "bgpd", Config: hwRouterConfig(), Args: []string{"-p", "179"}},
	)
	serveBackend(t, nsBE, net.JoinHostPort(hwBackend, hwPort))
	cp := startControlPlane(t, sw, "nehw", hwHost)
	env, ns := cp.env, cp.ns
	ctx := context.Background()

	agents := map[string]*cfAgent{}
	for _, n := range []struct {
		ns         *frr.NetNS
		node, addr string
	}{{nsA, "node-a", hwNodeA}, {nsB, "node-b", hwNodeB}} {
		addReadyNode(t, env, n.node, n.addr)
		// The agent binds the BGP VIP on lo (--bind-local-vips, on by
		// default), so the slow path receives what the router sends.
		agents[n.node] = cp.agent(t, n.ns, n.node)
		agents[n.node].start(t, bin, n.node)
	}
	cp.waitHealthy(t, "node-a", "node-b")

	// The resources: the VIP, a gateway with one HTTP listener on it, a
	// route to the backend, and the backend with an active HTTP check of
	// short interval and thresholds.
	port := v1alpha1.PortNumber(8080)
	objs := []client.Object{
		&v1alpha1.ProxyVIP{ObjectMeta: metav1.ObjectMeta{Name: hwVIPName}, Spec: v1alpha1.ProxyVIPSpec{
			Address: hwVIP + "/32", Mode: v1alpha1.VIPModeBGP,
			BGPConfig: &v1alpha1.BGPConfig{LocalAS: 65100, Peers: []v1alpha1.BGPPeer{{Address: hwRouter, AS: 65000, HoldTime: "9s"}}},
		}},
		&v1alpha1.ProxyGateway{ObjectMeta: metav1.ObjectMeta{Name: "hw-gw", Namespace: ns}, Spec: v1alpha1.ProxyGatewaySpec{
			VIPRef: hwVIPName, Listeners: []v1alpha1.Listener{{Name: "http", Port: port, Protocol: v1alpha1.ProtocolHTTP}},
		}},
		&v1alpha1.ProxyRoute{ObjectMeta: metav1.ObjectMeta{Name: "hw-route", Namespace: ns}, Spec: v1alpha1.ProxyRouteSpec{
			Rules: []v1alpha1.RouteRule{{BackendRefs: []v1alpha1.BackendRef{{Name: "hw-backend"}}}},
		}},
		&v1alpha1.ProxyBackend{ObjectMeta: metav1.ObjectMeta{Name: "hw-backend", Namespace: ns}, Spec: v1alpha1.ProxyBackendSpec{
			Endpoints: []v1alpha1.Endpoint{{Address: hwBackend, Port: port}},
			HealthCheck: &v1alpha1.HealthCheck{Type: v1alpha1.HealthCheckType("HTTP"), HTTPPath: "/healthz",
				Interval: "500ms", Timeout: "400ms", HealthyThreshold: 2, UnhealthyThreshold: 2},
		}},
	}
	for _, o := range objs {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatalf("create %T %s: %v", o, o.GetName(), err)
		}
	}
	endpoint := net.JoinHostPort(hwBackend, hwPort)

	// backendStatus is the ProxyBackend's status, described.
	backendStatus := func() (v1alpha1.ProxyBackendStatus, string) {
		var b v1alpha1.ProxyBackend
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "hw-backend"}, &b); err != nil {
			return b.Status, err.Error()
		}
		s := b.Status
		return s, fmt.Sprintf("ProxyBackend status: endpoints %d healthy %d unhealthy %v", s.Endpoints, s.HealthyEndpoints, s.UnhealthyEndpoints)
	}
	// reports are the agents' probe failures, from their Leases.
	reports := func() string {
		var out []string
		for _, node := range []string{"node-a", "node-b"} {
			out = append(out, fmt.Sprintf("%s reports %v", node, lease.ProbeFailures(agentLease(env, ns, node))))
		}
		return strings.Join(out, "; ")
	}
	// announcing is every agent's vip status line, and whether each says
	// announced (true) or, when want is false, withdrawn for want of a
	// healthy backend.
	announcing := func(want bool) (bool, string) {
		ok := true
		var why []string
		for _, node := range []string{"node-a", "node-b"} {
			announced, reason, w := hwVIPState(t, agents[node].sock())
			if announced != want || (!want && !strings.HasPrefix(reason, "no healthy backend")) {
				ok = false
			}
			why = append(why, node+": "+w)
		}
		return ok, strings.Join(why, "; ")
	}
	// shipped is every agent's snapshot state of the endpoint, and whether
	// all are want.
	shipped := func(want pb.EndpointState) (bool, string) {
		ok := true
		var why []string
		for _, node := range []string{"node-a", "node-b"} {
			st := endpointState(t, agents[node].sock(), ns+"/hw-backend", endpoint)
			if st != want.String() {
				ok = false
			}
			why = append(why, node+"'s snapshot: "+st)
		}
		return ok, strings.Join(why, "; ")
	}
	bothHops := func(t *testing.T, what string) {
		t.Helper()
		frr.Eventually(t, what, func() (bool, string) {
			hops := vipHops(t, router, hwVIP)
			ok, why := announcing(true)
			s, swhy := backendStatus()
			sok, snapWhy := shipped(pb.EndpointState_ENDPOINT_STATE_HEALTHY)
			ok = ok && sok && slices.Equal(hops, []string{hwNodeA, hwNodeB}) && len(s.UnhealthyEndpoints) == 0 && s.HealthyEndpoints == 1
			return ok, fmt.Sprintf("FRR next hops for %s/32: %v; %s; %s; %s; %s", hwVIP, hops, why, swhy, snapWhy, reports())
		})
	}

	// served checks that the router reaches the backend through the VIP:
	// the route leads to a node whose slow path proxies to the endpoint.
	served := func(t *testing.T) {
		t.Helper()
		frr.Eventually(t, "an HTTP request from the router to the VIP answered by the backend", func() (bool, string) {
			resp, err := getVIP(rns.Name)
			return err == nil && strings.HasPrefix(resp, "HTTP/1.1 200") && strings.HasSuffix(resp, "backend\n"), fmt.Sprintf("%q, %v", resp, err)
		})
	}

	t.Run("healthy backend: FRR installs the VIP with both nodes as next hops", func(t *testing.T) {
		bothHops(t, "ECMP route via node-a and node-b, both agents announcing, the endpoint healthy")
		served(t)
	})
	// FRR's count of dropped sessions per node, before the failure: a
	// withdrawal is an UPDATE, which leaves the sessions alone.
	dropsBefore := map[string]hwSession{hwNodeA: hwSessionOf(t, router, hwNodeA), hwNodeB: hwSessionOf(t, router, hwNodeB)}

	// The backend's port goes silent (the server keeps running): only the
	// probes can tell. The table is removed by the heal below or, should
	// the test end first, in t's cleanup.
	heal := failBackend(t, nsBE)
	failed := time.Now()
	t.Run("the backend fails its checks: the controller marks it UNHEALTHY, the route is withdrawn", func(t *testing.T) {
		frr.Eventually(t, "both agents report "+endpoint+" failing in their Leases", func() (bool, string) {
			ok := true
			for _, node := range []string{"node-a", "node-b"} {
				if !slices.Contains(lease.ProbeFailures(agentLease(env, ns, node)), endpoint) {
					ok = false
				}
			}
			return ok, reports()
		})
		reported := time.Since(failed)
		frr.Eventually(t, "the ProxyBackend status names "+endpoint+" unhealthy", func() (bool, string) {
			s, why := backendStatus()
			return slices.Equal(s.UnhealthyEndpoints, []string{endpoint}) && s.HealthyEndpoints == 0, why + "; " + reports()
		})
		marked := time.Since(failed)
		frr.Eventually(t, "both agents' snapshots carry "+endpoint+" UNHEALTHY", func() (bool, string) {
			return shipped(pb.EndpointState_ENDPOINT_STATE_UNHEALTHY)
		})
		frr.Eventually(t, "both agents withdraw the VIP for want of a healthy backend", func() (bool, string) {
			ok, why := announcing(false)
			return ok, why + "; " + reports()
		})
		frr.Eventually(t, "FRR's route for the VIP gone", func() (bool, string) {
			var out map[string][]frrRoute
			router.JSON(t, "show ip route "+hwVIP+"/32 json", &out)
			return len(out[hwVIP+"/32"]) == 0, fmt.Sprintf("show ip route %s/32: %v", hwVIP, out)
		})
		withdrawn := time.Since(failed)
		// The human-readable status says the same.
		for _, node := range []string{"node-a", "node-b"} {
			out, err := ctl(t, agents[node].sock(), "vip", "status")
			if err != nil {
				t.Fatalf("%s: %v", node, err)
			}
			if !strings.Contains(out, hwVIPName) || !strings.Contains(out, "no healthy backend") {
				t.Errorf("%s: novaedgectl vip status does not say %s has no healthy backend:\n%s", node, hwVIPName, out)
			}
		}
		t.Logf("after the backend failed: both agents reported it after %v, the ProxyBackend status named it after %v, FRR's route was gone after %v",
			reported.Round(time.Millisecond), marked.Round(time.Millisecond), withdrawn.Round(time.Millisecond))
	})

	// Checked once the route is gone (the subtest above waited for it),
	// before the heal: the VIP's routes are withdrawn, the sessions stay
	// (vip/bgp: "its routes are withdrawn from every peer"), so that the
	// router keeps the node as a peer (other VIPs, BFD, graceful restart)
	// and the route returns with an UPDATE, not a new session.
	t.Run("the withdrawal is a BGP withdraw: both sessions stay Established", func(t *testing.T) {
		for _, node := range []string{hwNodeA, hwNodeB} {
			now := hwSessionOf(t, router, node)
			if now.State != "Established" || now.Dropped != dropsBefore[node].Dropped {
				t.Errorf("FRR's session with %s: %s, %d connections dropped (%d before the backend failed), last reset %q; "+
					"want Established with no drop", node, now.State, now.Dropped, dropsBefore[node].Dropped, now.LastReset)
			}
		}
	})

	heal()
	healed := time.Now()
	t.Run("the backend heals: the route comes back with both next hops", func(t *testing.T) {
		bothHops(t, "the ECMP route via both nodes back after the backend healed")
		served(t)
		t.Logf("after the backend healed: the route with both next hops was back after %v", time.Since(healed).Round(time.Millisecond))
	})
}
