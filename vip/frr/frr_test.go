package frr

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/novaedge/novaedge/test/frr"
)

// The test topology: a router namespace running FRR's zebra and ospfd,
// configured by the test (the top-of-rack router, 10.82.0.1), and a node
// namespace running zebra and ospfd with an empty configuration, driven by
// a Driver, joined by a veth pair. The VIP is bound on the node's lo, as
// the announcement manager binds it. Hello 1s / dead 4s keep adjacencies
// quick to form; nothing asserts how quick.
var (
	routerAddr = netip.MustParseAddr("10.82.0.1")
	nodeAddr   = netip.MustParseAddr("10.82.0.2")
	vipAddr    = netip.MustParseAddr("10.200.0.30")
)

const (
	uplink = "n-r"
	// routerCost is the cost of the router's interface towards the node:
	// the router's route to the VIP costs this plus the VIP's cost.
	routerCost = 10
)

type bed struct {
	router, node *frr.Router
	nodeNS       *frr.NetNS
	drv          *Driver
}

func newBed(t *testing.T, routerKey string) *bed {
	t.Helper()
	rns := frr.NewNetNS(t, "neospf-r")
	nns := frr.NewNetNS(t, "neospf-n")
	frr.Link(t, rns, "r-n", []string{routerAddr.String() + "/24"}, nns, uplink, []string{nodeAddr.String() + "/24"})
	nns.IP(t, "addr", "add", vipAddr.String()+"/32", "dev", "lo")
	conf := fmt.Sprintf("frr defaults traditional\nhostname tor\n!\nrouter ospf\n ospf router-id %s\n!\ninterface r-n\n ip ospf area 0\n ip ospf cost %d\n ip ospf hello-interval 1\n ip ospf dead-interval 4\n", routerAddr, routerCost)
	if routerKey != "" {
		conf += " ip ospf authentication message-digest\n ip ospf message-digest-key 1 md5 " + routerKey + "\n"
	}
	b := &bed{nodeNS: nns}
	b.router = frr.Start(t, rns,
		frr.Daemon{Name: "zebra", Config: "hostname tor\n"},
		frr.Daemon{Name: "ospfd", Config: conf + "!\n"},
	)
	b.node = frr.Start(t, nns,
		frr.Daemon{Name: "zebra", Config: "hostname node\n"},
		frr.Daemon{Name: "ospfd", Config: "hostname node\n"},
	)
	drv, err := New(Options{
		SocketDir:   b.node.Dir,
		StateFile:   filepath.Join(t.TempDir(), "ospf-state.json"),
		CheckHellos: true,
		NetNS:       "/run/netns/" + nns.Name,
		Interval:    200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = drv.Close() })
	b.drv = drv
	return b
}

func desired(key string, cost uint32, vips bool) Desired {
	d := Desired{
		RouterID:        nodeAddr,
		GracefulRestart: true,
		Uplinks:         []Uplink{{Interface: uplink, Area: "0.0.0.0", HelloInterval: 1, DeadInterval: 4, Auth: Auth{Key: key, KeyID: 1}}},
	}
	if vips {
		d.VIPs = []VIP{{Name: "web", Address: vipAddr, Area: "0.0.0.0", Cost: cost}}
	}
	return d
}

func (b *bed) apply(t *testing.T, d Desired) {
	t.Helper()
	if err := b.drv.SetDesired(d); err != nil {
		t.Fatal(err)
	}
	if err := b.drv.Reconcile(context.Background()); err != nil {
		t.Fatalf("reconcile: %v", err)
	}
}

// routerNeighborState is the state of the node's adjacency seen by the
// router ("" when the router does not list it).
func (b *bed) routerNeighborState(t *testing.T) string {
	var nb frrNeighbors
	b.router.JSON(t, "show ip ospf neighbor json", &nb)
	for _, n := range nb.Neighbors[nodeAddr.String()] {
		return n.State
	}
	return ""
}

// routerVIPCost is the cost of the router's OSPF route to the VIP, -1
// when it has none.
func (b *bed) routerVIPCost(t *testing.T) (int, string) {
	var routes map[string]struct {
		RouteType string `json:"routeType"`
		Cost      int    `json:"cost"`
	}
	b.router.JSON(t, "show ip ospf route json", &routes)
	r, ok := routes[vipAddr.String()+"/32"]
	if !ok {
		return -1, fmt.Sprint(routes)
	}
	return r.Cost, fmt.Sprint(routes)
}

func (b *bed) nodeRunning(t *testing.T) string {
	return b.node.Vtysh(t, "show running-config")
}

func TestAnnounceVIP(t *testing.T) {
	b := newBed(t, "secret")
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan struct{})
	t.Cleanup(func() { cancel(); <-runDone })

	b.apply(t, desired("secret", 33, true))
	go func() { defer close(runDone); b.drv.Run(ctx) }()

	frr.Eventually(t, "adjacency Full at the router", func() (bool, string) {
		s := b.routerNeighborState(t)
		return strings.HasPrefix(s, "Full"), "router sees the node in state " + s
	})
	frr.Eventually(t, "VIP in the router's OSPF routes with the configured cost", func() (bool, string) {
		c, all := b.routerVIPCost(t)
		return c == routerCost+33, all
	})
	frr.Eventually(t, "driver state", func() (bool, string) {
		s, err := b.drv.State(ctx)
		if err != nil {
			return false, err.Error()
		}
		ok := s.Err() == nil && len(s.Neighbors) == 1 && s.Neighbors[0].Full() && s.Neighbors[0].RouterID == routerAddr &&
			s.Neighbors[0].Interface == uplink && len(s.Routes) == 1 && s.Routes[0].Cost == 33 && s.RouterID == nodeAddr.String()
		return ok, fmt.Sprintf("%+v (err %v)", s, s.Err())
	})

	t.Run("lines written by others survive, a cost change touches only the cost", func(t *testing.T) {
		b.node.Vtysh(t, "configure terminal", "interface "+uplink, "ip ospf priority 7", "exit", "router ospf", "timers throttle spf 10 100 5000")
		before := b.nodeRunning(t)
		b.apply(t, desired("secret", 50, true))
		frr.Eventually(t, "new cost at the router", func() (bool, string) {
			c, all := b.routerVIPCost(t)
			return c == routerCost+50, all
		})
		after := b.nodeRunning(t)
		for _, want := range []string{" ip ospf priority 7", " timers throttle spf 10 100 5000", " ip ospf cost 50 " + vipAddr.String()} {
			if !strings.Contains(after, want+"\n") {
				t.Errorf("running config lacks %q after the cost change:\n%s", want, after)
			}
		}
		if strings.Contains(after, "ip ospf cost 33") {
			t.Errorf("old cost still configured:\n%s", after)
		}
		// Nothing else changed: the diff is the cost line alone.
		if got, want := strings.Replace(before, "ip ospf cost 33 ", "ip ospf cost 50 ", 1), after; got != want {
			t.Errorf("running config changed beyond the cost:\nbefore:\n%s\nafter:\n%s", before, after)
		}
	})

	t.Run("a restarted ospfd gets the configuration again", func(t *testing.T) {
		b.node.Restart(t, "ospfd")
		frr.Eventually(t, "configuration re-applied by the periodic reconcile", func() (bool, string) {
			s, err := b.drv.State(ctx)
			if err != nil {
				return false, err.Error()
			}
			r := b.nodeRunning(t)
			return s.Reapplied > 0 && strings.Contains(r, " ip ospf cost 50 "+vipAddr.String()+"\n"), fmt.Sprintf("reapplied %d, running config:\n%s", s.Reapplied, r)
		})
		frr.Eventually(t, "adjacency Full again and the VIP at the router", func() (bool, string) {
			s, err := b.drv.State(ctx)
			if err != nil {
				return false, err.Error()
			}
			c, all := b.routerVIPCost(t)
			return c == routerCost+50 && len(s.Neighbors) == 1 && s.Neighbors[0].Full(), fmt.Sprintf("%+v; router: %s", s, all)
		})
	})

	t.Run("removing the VIP withdraws it", func(t *testing.T) {
		b.apply(t, desired("secret", 50, false))
		frr.Eventually(t, "VIP withdrawn at the router", func() (bool, string) {
			c, all := b.routerVIPCost(t)
			return c == -1, all
		})
		if r := b.nodeRunning(t); strings.Contains(r, vipAddr.String()) {
			t.Errorf("VIP lines left in the node's configuration:\n%s", r)
		}
		if s := b.routerNeighborState(t); !strings.HasPrefix(s, "Full") {
			t.Errorf("adjacency lost when only the VIP was withdrawn: %q", s)
		}
	})

	t.Run("release removes only what the driver wrote", func(t *testing.T) {
		b.node.Vtysh(t, "configure terminal", "interface "+uplink, "ip ospf priority 7")
		if err := b.drv.Release(ctx); err != nil {
			t.Fatal(err)
		}
		r := b.nodeRunning(t)
		for _, gone := range []string{"ip ospf area", "message-digest", "hello-interval", "dead-interval", "ospf router-id", "graceful-restart"} {
			if strings.Contains(r, gone) {
				t.Errorf("%q left after release:\n%s", gone, r)
			}
		}
		if !strings.Contains(r, " ip ospf priority 7\n") {
			t.Errorf("release removed a line it did not write:\n%s", r)
		}
	})
}

func TestAuthenticationMismatch(t *testing.T) {
	b := newBed(t, "secret")
	ctx := context.Background()
	b.apply(t, desired("wrong", 33, true))
	var st State
	frr.Eventually(t, "authentication mismatch reported", func() (bool, string) {
		var err error
		st, err = b.drv.State(ctx)
		if err != nil {
			return false, err.Error()
		}
		return len(st.Hellos) > 0, fmt.Sprintf("%+v", st)
	})
	want := fmt.Sprintf("OSPF authentication mismatch on %s with %s: the md5 keys differ (key id 1)", uplink, routerAddr)
	if got := st.Hellos[0].Err.Error(); got != want {
		t.Errorf("mismatch error = %q, want %q", got, want)
	}
	if st.Hellos[0].RouterID != routerAddr {
		t.Errorf("mismatch router id = %v, want %v", st.Hellos[0].RouterID, routerAddr)
	}
	if err := st.Err(); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("State.Err() = %v, want it to contain %q", err, want)
	}
	for _, n := range st.Neighbors {
		if n.Full() {
			t.Errorf("adjacency Full despite the key mismatch: %+v", n)
		}
	}
	if s := b.routerNeighborState(t); strings.HasPrefix(s, "Full") {
		t.Errorf("router reached Full despite the key mismatch: %q", s)
	}
	if c, all := b.routerVIPCost(t); c != -1 {
		t.Errorf("router learned the VIP despite the key mismatch: %s", all)
	}

	// The same bed with the right key forms the adjacency: the key was
	// the only obstacle.
	b.apply(t, desired("secret", 33, true))
	frr.Eventually(t, "adjacency Full with the right key", func() (bool, string) {
		s := b.routerNeighborState(t)
		return strings.HasPrefix(s, "Full"), s
	})
	frr.Eventually(t, "mismatch no longer reported", func() (bool, string) {
		s, err := b.drv.State(ctx)
		if err != nil {
			return false, err.Error()
		}
		return len(s.Hellos) == 0, fmt.Sprintf("%+v", s.Hellos)
	})
}
