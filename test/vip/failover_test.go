package vip

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/encoding/protojson"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/test/frr"
	"github.com/novaedge/novaedge/vip/manager"
)

// The failover topology: one Ethernet segment (a bridge in its own
// namespace) with node-a 10.83.0.1, node-b 10.83.0.2 and the client
// 10.83.0.3, each on its eth0; the VIP 10.83.0.50 is active on node-a with
// node-b as its standby (static, from the novaedge.io/l2-nodes annotation
// with the nodes' heartbeat addresses: standalone files have no Node
// objects).
const (
	foNodeA    = "10.83.0.1"
	foNodeB    = "10.83.0.2"
	foClient   = "10.83.0.3"
	foVIP      = "10.83.0.50"
	foTable    = "novaedge_failover_test"
	foNFTables = "/usr/sbin/nft"
)

const failoverConfig = `apiVersion: novaedge.io/v1alpha1
kind: ProxyVIP
metadata:
  name: l2-vip
  annotations:
    novaedge.io/l2-nodes: node-a=` + foNodeA + `,node-b=` + foNodeB + `
spec:
  address: ` + foVIP + `/32
  mode: L2ARP
`

// startNodeAgent runs the agent as node in ns, with its own admin socket
// and state under dir, reading dir/config.yaml. It returns the process
// (stopped in t.Cleanup unless it already ended) and its admin socket.
func startNodeAgent(t *testing.T, ns *frr.NetNS, bin, dir, node string) (*agentProc, string) {
	t.Helper()
	return runAgent(t, ns, bin, dir, node, node), filepath.Join(dir, "agent.sock")
}

// arpProber sends ARP requests for the VIP from the client's eth0 and
// collects the answers, through an AF_PACKET socket (arping is not
// installed on the test machines; the socket needs no tool).
type arpProber struct {
	fd      int
	ifindex int
	mac     net.HardwareAddr
	src     netip.Addr
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func newARPProber(t *testing.T, ns *frr.NetNS, ifname string, src netip.Addr) *arpProber {
	t.Helper()
	p := &arpProber{fd: -1, src: src}
	done := make(chan error, 1)
	go func() {
		// The thread is never unlocked: the runtime ends it with the
		// goroutine instead of reusing a thread in another namespace. The
		// socket stays in the namespace it was opened in.
		runtime.LockOSThread()
		h, err := netns.GetFromName(ns.Name)
		if err != nil {
			done <- err
			return
		}
		defer func() { _ = h.Close() }()
		if err := netns.Set(h); err != nil {
			done <- err
			return
		}
		ifi, err := net.InterfaceByName(ifname)
		if err != nil {
			done <- err
			return
		}
		p.ifindex, p.mac = ifi.Index, ifi.HardwareAddr
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ARP)))
		if err != nil {
			done <- fmt.Errorf("packet socket: %w", err)
			return
		}
		p.fd = fd
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ARP), Ifindex: ifi.Index}); err != nil {
			done <- fmt.Errorf("bind packet socket to %s: %w", ifname, err)
			return
		}
		tv := unix.NsecToTimeval((50 * time.Millisecond).Nanoseconds())
		done <- unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	}()
	err := <-done
	if p.fd >= 0 {
		t.Cleanup(func() { _ = unix.Close(p.fd) })
	}
	if err != nil {
		t.Fatalf("arp prober in %s: %v", ns.Name, err)
	}
	return p
}

// request sends one ARP request for target.
func (p *arpProber) request(target netip.Addr) error {
	pkt := make([]byte, 28)
	binary.BigEndian.PutUint16(pkt[0:], 1)      // Ethernet
	binary.BigEndian.PutUint16(pkt[2:], 0x0800) // IPv4
	pkt[4], pkt[5] = 6, 4
	binary.BigEndian.PutUint16(pkt[6:], 1) // request
	copy(pkt[8:14], p.mac)
	src, dst := p.src.As4(), target.As4()
	copy(pkt[14:18], src[:])
	copy(pkt[24:28], dst[:])
	to := &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ARP), Ifindex: p.ifindex, Halen: 6}
	copy(to.Addr[:], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	return unix.Sendto(p.fd, pkt, 0, to)
}

// probe asks for target every 100 ms for d and counts the answers (ARP
// replies from target to this client) by the MAC they give.
func (p *arpProber) probe(t *testing.T, target netip.Addr, d time.Duration) map[string]int {
	t.Helper()
	answers := map[string]int{}
	buf := make([]byte, 256)
	src, tgt := p.src.As4(), target.As4()
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if err := p.request(target); err != nil {
			t.Fatalf("send ARP request: %v", err)
		}
		next := time.Now().Add(100 * time.Millisecond)
		for time.Now().Before(next) {
			n, _, err := unix.Recvfrom(p.fd, buf, 0)
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil {
				t.Fatalf("read ARP: %v", err)
			}
			f := buf[:n]
			if n < 28 || binary.BigEndian.Uint16(f[6:]) != 2 || !bytes.Equal(f[14:18], tgt[:]) || !bytes.Equal(f[24:28], src[:]) {
				continue
			}
			answers[net.HardwareAddr(f[8:14]).String()]++
		}
	}
	return answers
}

// l2VIPState is the VIP's line in an agent's vip status.
func l2VIPState(t *testing.T, sock string) (*pb.VIPAnnouncementStatus, string) {
	st, err := vipStatus(t, sock)
	if err != nil {
		return nil, err.Error()
	}
	for _, v := range st.GetVips() {
		if v.GetVip() == "l2-vip" {
			return v, protojson.Format(v)
		}
	}
	return nil, protojson.Format(st)
}

// want is what one agent's status must say of the VIP.
type want struct {
	sock      string
	announced bool
	reason    string
}

// settle waits until every agent's status says what ws want.
func settle(t *testing.T, what string, ws ...want) {
	t.Helper()
	frr.Eventually(t, what, func() (bool, string) {
		var why []string
		ok := true
		for _, w := range ws {
			v, s := l2VIPState(t, w.sock)
			if v == nil || v.GetAnnounced() != w.announced || !strings.Contains(v.GetReason(), w.reason) {
				ok = false
			}
			why = append(why, s)
		}
		return ok, strings.Join(why, "\n")
	})
}

// onlyFrom probes the VIP for a few seconds and checks that every answer
// came from mac (and that there were answers).
func onlyFrom(t *testing.T, p *arpProber, mac, who string) {
	t.Helper()
	onlyFromFor(t, p, mac, who, 3*time.Second)
}

// onlyFromFor is onlyFrom over d: after a failover the issue asks for 30 s
// of answers from one MAC, long enough to cover the standby's grace and
// any re-decision.
func onlyFromFor(t *testing.T, p *arpProber, mac, who string, d time.Duration) {
	t.Helper()
	answers := p.probe(t, netip.MustParseAddr(foVIP), d)
	if answers[mac] == 0 || len(answers) != 1 {
		t.Errorf("ARP answers for %s by MAC: %v; want all from %s (%s)", foVIP, answers, mac, who)
	}
}

// dropBFD drops the L2 heartbeats ns sends (BFD control packets to UDP
// manager.DefaultHeartbeatPort) with nftables, until the returned function
// removes the table.
func dropBFD(t *testing.T, ns *frr.NetNS) func() {
	t.Helper()
	ns.Exec(t, "table inet "+foTable+" {\n chain out {\n  type filter hook output priority 0; policy accept;\n  udp dport "+strconv.Itoa(manager.DefaultHeartbeatPort)+" drop\n }\n}\n", foNFTables, "-f", "-")
	removed := false
	remove := func() {
		if !removed {
			removed = true
			ns.Exec(t, "", foNFTables, "delete", "table", "inet", foTable)
		}
	}
	t.Cleanup(remove)
	return remove
}

// TestL2Failover: two agents share an L2 VIP, active and standby, with BFD
// heartbeats between them. Exactly one MAC answers the client's ARP
// requests: the active's while all is well; the standby's when the
// active's heartbeats stop reaching it (the active yields); still the
// active's when only the standby's heartbeats are lost (the standby learns
// it from the active and does not take over); and the standby's after the
// active agent is killed.
func TestL2Failover(t *testing.T) {
	frr.RequireRoot(t)
	frr.RequireTool(t, foNFTables, "nftables")
	bin := buildAgent(t)

	_, members := segment(t, "nefo", member{"a", foNodeA}, member{"b", foNodeB}, member{"c", foClient})
	nsA, nsB, nsC := members[0], members[1], members[2]
	macA, macB := linkMAC(t, nsA, "eth0"), linkMAC(t, nsB, "eth0")

	dirA, dirB := t.TempDir(), t.TempDir()
	for _, d := range []string{dirA, dirB} {
		if err := os.WriteFile(filepath.Join(d, "config.yaml"), []byte(failoverConfig), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	agentA, sockA := startNodeAgent(t, nsA, bin, dirA, "node-a")
	_, sockB := startNodeAgent(t, nsB, bin, dirB, "node-b")
	prober := newARPProber(t, nsC, "eth0", netip.MustParseAddr(foClient))

	healthy := func(t *testing.T) {
		settle(t, "node-a active and answering, node-b standing by with heartbeats up",
			want{sockA, true, "active"}, want{sockB, false, "active node-a is up"})
	}

	t.Run("the active answers", func(t *testing.T) {
		healthy(t)
		onlyFrom(t, prober, macA, "node-a, the active")
	})

	t.Run("the active's heartbeats lost: the standby takes over, the active yields", func(t *testing.T) {
		undo := dropBFD(t, nsA)
		settle(t, "node-b took over, node-a yielded",
			want{sockA, false, "standby node-b lost our heartbeats"}, want{sockB, true, "standby took over"})
		onlyFromFor(t, prober, macB, "node-b, the standby that took over", 30*time.Second)
		undo()
		healthy(t)
		onlyFrom(t, prober, macA, "node-a, back after the hold-down")
	})

	t.Run("the standby's heartbeats lost: the active keeps the VIP", func(t *testing.T) {
		undo := dropBFD(t, nsB)
		settle(t, "node-b knows node-a lost it and stands by",
			want{sockA, true, "active"}, want{sockB, false, "active node-a is says it lost us"})
		onlyFrom(t, prober, macA, "node-a, the active")
		undo()
		healthy(t)
	})

	t.Run("SIGKILL of the active agent: the standby takes over", func(t *testing.T) {
		if err := agentA.cmd.Process.Kill(); err != nil {
			t.Fatalf("SIGKILL node-a's agent: %v", err)
		}
		<-agentA.exited
		settle(t, "node-b took over", want{sockB, true, "standby took over"})
		onlyFromFor(t, prober, macB, "node-b, the standby that took over", 30*time.Second)
		st, err := vipStatus(t, sockB)
		if err != nil {
			t.Fatal(err)
		}
		if st.GetL2().GetGarps() == 0 {
			t.Errorf("node-b's L2 counters %v: want gratuitous ARPs sent at takeover", st.GetL2())
		}
		if errs := st.GetErrors(); len(errs) > 0 {
			t.Errorf("node-b's problems: %v", errs)
		}
	})
}
