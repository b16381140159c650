package vip

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/novaedge/novaedge/test/frr"
)

// The health topology: router r-n 10.91.1.1/24 ⟷ n-r 10.91.1.2/24 node
// n-b 10.91.3.1/24 ⟷ b-n 10.91.3.2/24 backend.
const (
	hcRouter  = "10.91.1.1"
	hcNode    = "10.91.1.2"
	hcBackend = "10.91.3.2"
	hcVIP     = "10.200.0.40"
)

// healthConfig is a BGP VIP with a TCP listener whose backend is probed
// every second (down after two failures, up after one success).
const healthConfig = `apiVersion: novaedge.io/v1alpha1
kind: ProxyVIP
metadata:
  name: web-vip
spec:
  address: ` + hcVIP + `/32
  mode: BGP
  ports: [80]
  bgpConfig:
    localAS: 65100
    peers:
      - address: ` + hcRouter + `
        as: 65000
---
apiVersion: novaedge.io/v1alpha1
kind: ProxyGateway
metadata:
  name: web
  namespace: demo
spec:
  vipRef: web-vip
  listeners:
    - name: tcp
      port: 80
      protocol: TCP
---
apiVersion: novaedge.io/v1alpha1
kind: ProxyRoute
metadata:
  name: web
  namespace: demo
spec:
  parentRefs:
    - name: web
      sectionName: tcp
  rules:
    - backendRefs:
        - name: web
---
apiVersion: novaedge.io/v1alpha1
kind: ProxyBackend
metadata:
  name: web
  namespace: demo
spec:
  endpoints:
    - address: ` + hcBackend + `
      port: 8080
  healthCheck:
    type: TCP
    interval: 1s
    timeout: 500ms
    healthyThreshold: 1
    unhealthyThreshold: 2
`

const healthRouterConfig = `frr defaults traditional
hostname tor
!
router bgp 65000
 bgp router-id ` + hcRouter + `
 no bgp ebgp-requires-policy
 no bgp default ipv4-unicast
 neighbor ` + hcNode + ` remote-as 65100
 neighbor ` + hcNode + ` timers connect 1
 address-family ipv4 unicast
  neighbor ` + hcNode + ` activate
 exit-address-family
!
`

// tcpBackend accepts and closes connections on addr inside ns while up.
type tcpBackend struct {
	ns   *frr.NetNS
	addr string
	mu   sync.Mutex
	lis  net.Listener
}

func (b *tcpBackend) up(t *testing.T) {
	t.Helper()
	b.ns.Do(t, func() error {
		lis, err := net.Listen("tcp", b.addr)
		if err != nil {
			return err
		}
		b.mu.Lock()
		b.lis = lis
		b.mu.Unlock()
		go func() {
			for {
				c, err := lis.Accept()
				if err != nil {
					return
				}
				_ = c.Close()
			}
		}()
		return nil
	})
}

func (b *tcpBackend) down() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.lis != nil {
		_ = b.lis.Close()
		b.lis = nil
	}
}

// TestAgentWithdrawsOnHealthFailure: a standalone agent announces a BGP VIP
// whose only backend it probes; when the backend stops answering, the
// agent's own health checks mark it UNHEALTHY in its snapshot and the VIP
// is withdrawn (FRR removes the route, novaedgectl says why); when the
// backend answers again the route comes back.
func TestAgentWithdrawsOnHealthFailure(t *testing.T) {
	frr.RequireRoot(t)
	frr.RequireTool(t, filepath.Join(frr.DaemonDir, "bgpd"), "frr")
	bin := buildAgent(t)

	rns := frr.NewNetNS(t, "nehc-r")
	nns := frr.NewNetNS(t, "nehc-n")
	bns := frr.NewNetNS(t, "nehc-b")
	frr.Link(t, rns, "r-n", []string{hcRouter + "/24"}, nns, "n-r", []string{hcNode + "/24"})
	frr.Link(t, nns, "n-b", []string{"10.91.3.1/24"}, bns, "b-n", []string{hcBackend + "/24"})
	router := frr.Start(t, rns,
		frr.Daemon{Name: "zebra", Config: "hostname tor\n"},
		frr.Daemon{Name: "bgpd", Config: healthRouterConfig, Args: []string{"-p", "179"}},
	)
	backend := &tcpBackend{ns: bns, addr: hcBackend + ":8080"}
	backend.up(t)
	t.Cleanup(backend.down)

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(healthConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "agent.sock")
	runAgent(t, nns, bin, dir, "node1", "agent")

	hops := func() []string { return vipHops(t, router, hcVIP) }
	vipReason := func() (bool, string, error) {
		st, err := vipStatus(t, sock)
		if err != nil {
			return false, "", err
		}
		for _, v := range st.GetVips() {
			if v.GetVip() == "web-vip" {
				return v.GetAnnounced(), v.GetReason(), nil
			}
		}
		return false, "", errors.New("web-vip not in the status")
	}
	announced := func(t *testing.T, what string) {
		t.Helper()
		frr.Eventually(t, what, func() (bool, string) {
			h := hops()
			ok, reason, err := vipReason()
			return err == nil && ok && slices.Equal(h, []string{hcNode}), fmt.Sprintf("FIB %v, announced %v (%s) %v", h, ok, reason, err)
		})
	}
	announced(t, "FRR installs the VIP while its backend is healthy")

	t.Run("a failing backend withdraws the VIP", func(t *testing.T) {
		backend.down()
		frr.Eventually(t, "FRR loses the route, the agent says why", func() (bool, string) {
			h := hops()
			ok, reason, err := vipReason()
			return err == nil && !ok && strings.HasPrefix(reason, "no healthy backend") && len(h) == 0,
				fmt.Sprintf("FIB %v, announced %v (%q) %v", h, ok, reason, err)
		})
	})

	t.Run("the backend back: the VIP is announced again", func(t *testing.T) {
		backend.up(t)
		announced(t, "FRR installs the VIP again")
	})
}
