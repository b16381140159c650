package e2e

import (
	"bufio"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/novaedge/novaedge/fastpath"
	"github.com/novaedge/novaedge/fastpath/lineage"
	"github.com/novaedge/novaedge/fastpath/maglev"
	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

// TestECMPMovesFlow puts an ECMP router between the client and two nodes
// that run the fast path with the same tables (DSR IPIP; two Load calls, one
// program per namespace), opens a TCP connection and streams data through
// it, then points the router's route at the other node only. The other node
// has never seen the connection: it must pick the same backend from its own
// Maglev table (the mid-flow, no-conntrack path), so the stream goes on byte
// for byte, without a reset.
//
//	client ─ router ─┬─ node1 ─┬─ b1, b2, b3 (each linked to both nodes;
//	                 └─ node2 ─┘  replies via node1's kernel and the router)
func TestECMPMovesFlow(t *testing.T) {
	testECMPMovesFlow(t, false)
}

// TestECMPMovesFlowLineage is TestECMPMovesFlow with nodes that do not
// share a history: they numbered their backends differently and the
// snapshot carries a Maglev lineage (the leader's table from before two
// backends left), so each builds its table from that lineage instead of
// from the backend set alone. The tables must still agree backend for
// backend, and the moved flow keep its backend.
func TestECMPMovesFlowLineage(t *testing.T) {
	testECMPMovesFlow(t, true)
}

func testECMPMovesFlow(t *testing.T, withLineage bool) {
	l := newLab(t)
	client := l.netns("client", false)
	router := l.netns("router", true)
	backendAddr := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 98, byte(50 + i), 1}) }
	// link returns the address of host h on the link between node k (1, 2)
	// and backend i, or (i = 0) the router.
	link := func(k, i, h int) netip.Addr {
		if i == 0 {
			return netip.AddrFrom4([4]byte{10, 98, byte(20 + k), byte(h)})
		}
		return netip.AddrFrom4([4]byte{10, 98, byte(20 + 10*k + i), byte(h)})
	}

	l.veth(end{client, l.id + "c", []netip.Prefix{pfx(client4, 24)}}, end{router, l.id + "rc", []netip.Prefix{pfx(gw4, 24)}}, 1500)
	client.ip("route", "add", "default", "via", gw4.String())

	var backends []*netNS
	for i := 1; i <= 3; i++ {
		b := l.netns(fmt.Sprintf("b%d", i), false)
		b.addAddr("lo", pfx(backendAddr(i), 32), pfx(vip4, 32))
		backends = append(backends, b)
	}
	var (
		nodes []*fpNode
		gws   []netip.Addr
	)
	for k := 1; k <= 2; k++ {
		n := l.netns(fmt.Sprintf("node%d", k), true)
		toRouter := fmt.Sprintf("%sn%dr", l.id, k)
		l.veth(end{router, fmt.Sprintf("%sr%d", l.id, k), []netip.Prefix{pfx(link(k, 0, 1), 24)}},
			end{n, toRouter, []netip.Prefix{pfx(link(k, 0, 2), 24)}}, 1500)
		n.ip("route", "add", "default", "via", link(k, 0, 1).String())
		nodeAddr := netip.AddrFrom4([4]byte{10, 98, 0, byte(k)})
		n.addAddr("lo", pfx(nodeAddr, 32))
		devs := []string{toRouter}
		for i, b := range backends {
			nodeDev, beDev := fmt.Sprintf("%sn%db%d", l.id, k, i+1), fmt.Sprintf("%sb%dn%d", l.id, i+1, k)
			l.veth(end{n, nodeDev, []netip.Prefix{pfx(link(k, i+1, 1), 24)}}, end{b, beDev, []netip.Prefix{pfx(link(k, i+1, 2), 24)}}, 1600)
			n.ip("route", "add", pfx(backendAddr(i+1), 32).String(), "via", link(k, i+1, 2).String())
			if k == 1 {
				b.ip("route", "add", "default", "via", link(k, i+1, 1).String())
			}
			devs = append(devs, nodeDev)
		}
		var bes []fastpath.Backend
		for i := 1; i <= 3; i++ {
			bes = append(bes, fastpath.Backend{Addr: backendAddr(i), Port: backendPort, Weight: 1})
		}
		cfg := fastpath.Config{
			VIPs: []fastpath.VIP{{Name: "ecmp", Addr: vip4, Port: backendPort, Proto: fastpath.ProtoTCP, Forward: fastpath.ForwardDSRIPIP, Backends: bes}},
			Node: fastpath.Node{V4: nodeAddr},
		}
		if !withLineage {
			nodes = append(nodes, l.fastpath(n, fmt.Sprintf("node%d", k), devs, cfg))
			gws = append(gws, link(k, 0, 2))
			continue
		}
		// Node 2 first saw the backends in the other order: other IDs.
		first := cfg
		first.VIPs = slices.Clone(cfg.VIPs)
		if k == 2 {
			first.VIPs[0].Backends = slices.Clone(bes)
			slices.Reverse(first.VIPs[0].Backends)
		}
		node := l.fastpath(n, fmt.Sprintf("node%d", k), devs, first)
		cfg.VIPs[0].Lineage = ecmpLineage(t, backendAddr)
		if _, err := node.mgr.Apply(cfg); err != nil {
			t.Fatalf("apply the lineage on node%d: %v", k, err)
		}
		nodes = append(nodes, node)
		gws = append(gws, link(k, 0, 2))
	}
	for i, b := range backends {
		l.attachDecap(b, fmt.Sprintf("%sb%dn1", l.id, i+1), fmt.Sprintf("%sb%dn2", l.id, i+1))
		serve(t, b, fmt.Sprintf("b%d", i+1), []uint16{backendPort}, nil)
	}
	router.ip("route", "add", pfx(vip4, 32).String(), "nexthop", "via", gws[0].String(), "nexthop", "via", gws[1].String())

	// Same tables on both nodes, backend for backend: the premise of
	// moving flows.
	var keyOf [2]map[uint32]netip.Addr
	for k, n := range nodes {
		keyOf[k] = map[uint32]netip.Addr{}
		for i := 1; i <= 3; i++ {
			id, ok := n.mgr.BackendID(backendAddr(i), backendPort)
			if !ok {
				t.Fatalf("node%d has no ID for backend %s", k+1, backendAddr(i))
			}
			keyOf[k][id] = backendAddr(i)
		}
	}
	t1, t2 := nodes[0].mgr.Table(vip4, backendPort, fastpath.ProtoTCP), nodes[1].mgr.Table(vip4, backendPort, fastpath.ProtoTCP)
	if t1 == nil || len(t1) != len(t2) {
		t.Fatalf("tables of %d and %d slots", len(t1), len(t2))
	}
	for s := range t1 {
		if keyOf[0][t1[s]] != keyOf[1][t2[s]] {
			t.Fatalf("slot %d: node1 sends to %s, node2 to %s", s, keyOf[0][t1[s]], keyOf[1][t2[s]])
		}
	}
	if withLineage {
		if slices.Equal(t1, t2) {
			t.Fatal("the nodes numbered their backends alike: the lineage case tests nothing")
		}
		// And the table is the lineage's, not the one of the three alone.
		var ms []maglev.Backend
		for i := 1; i <= 3; i++ {
			id, _ := nodes[0].mgr.BackendID(backendAddr(i), backendPort)
			m := lineage.Member(backendAddr(i), backendPort, 1, false)
			m.ID = id
			ms = append(ms, m)
		}
		plain, err := maglev.Build(ms)
		if err != nil {
			t.Fatal(err)
		}
		if slices.Equal(plain, t1) {
			t.Fatal("node1 holds the table of the backend set alone: the lineage was not used")
		}
	}

	before := [2]map[string]uint64{nodes[0].counters(t), nodes[1].counters(t)}
	vip := netip.AddrPortFrom(vip4, backendPort)
	f := mustDialTCP(t, client, netip.AddrPort{}, vip)
	st := &stream{f: f, sent: sha256.New(), got: sha256.New()}
	st.exchange(t, 300)

	var carrier int
	switch a, b := len(nodes[0].conntrack(t, vip4, backendPort, fastpath.ProtoTCP)), len(nodes[1].conntrack(t, vip4, backendPort, fastpath.ProtoTCP)); {
	case a == 1 && b == 0:
		carrier = 0
	case a == 0 && b == 1:
		carrier = 1
	default:
		t.Fatalf("node1 tracks %d flows and node2 %d, want the connection on exactly one", a, b)
	}
	other := 1 - carrier
	t.Logf("the connection went through node%d to %s; moving it to node%d", carrier+1, st.backend, other+1)
	router.ip("route", "replace", pfx(vip4, 32).String(), "via", gws[other].String())

	st.exchange(t, 300)
	if st.sentSum() != st.gotSum() {
		t.Fatalf("echoed stream differs: sent sha256 %s, received %s", st.sentSum(), st.gotSum())
	}
	if err := f.conn.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	t.Logf("%d bytes echoed byte for byte (sha256 %s)", st.bytes, st.sentSum())

	moved := nodes[other].conntrack(t, vip4, backendPort, fastpath.ProtoTCP)
	if len(moved) != 1 {
		t.Fatalf("node%d tracks %d flows after the move, want 1", other+1, len(moved))
	}
	orig := nodes[carrier].conntrack(t, vip4, backendPort, fastpath.ProtoTCP)
	if len(orig) != 1 || keyOf[carrier][orig[0].ct.BackendId] != keyOf[other][moved[0].ct.BackendId] {
		t.Errorf("node%d tracks %+v, node%d tracks %+v: want the same backend", carrier+1, orig, other+1, moved)
	}
	if moved[0].ct.State == 1 /* CT_SYN */ {
		t.Errorf("node%d tracks the moved connection in SYN state; it only ever saw it mid-flow", other+1)
	}
	for k, n := range nodes {
		d := diff(before[k], n.counters(t))
		d.grew(t, "redirect", "ct_created", "ct_hit")
		// The backend's replies are routed by node1's kernel, untranslated.
		d.still(t, "nat_reply")
		d.clean(t)
	}
}

// ecmpLineage is what the leader would have persisted while the VIP had
// five backends: the first three of backendAddr and two that left since.
func ecmpLineage(t *testing.T, backendAddr func(int) netip.Addr) *pb.MaglevLineage {
	t.Helper()
	b, err := maglev.NewBuilder(maglev.DefaultSize)
	if err != nil {
		t.Fatal(err)
	}
	var ms []maglev.Backend
	for i := 1; i <= 5; i++ {
		m := lineage.Member(backendAddr(i), backendPort, 1, false)
		m.ID = uint32(i)
		ms = append(ms, m)
	}
	l, err := lineage.Next(b, nil, ms)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// stream pipelines lines of random text through an echoing connection and
// checks them: every echo names the same backend and carries the line
// unchanged, and SHA-256 sums of everything sent and received are kept.
type stream struct {
	f         *tcpFlow
	sent, got hash.Hash
	backend   string
	bytes     int
	seq       int
}

func (s *stream) sentSum() string { return hex.EncodeToString(s.sent.Sum(nil)) }
func (s *stream) gotSum() string  { return hex.EncodeToString(s.got.Sum(nil)) }

// exchange sends n lines of 1400 characters from one goroutine while
// reading their echoes: enough in flight to fill full-sized segments.
func (s *stream) exchange(t *testing.T, n int) {
	t.Helper()
	lines := make([]string, n)
	for i := range lines {
		b := make([]byte, 700)
		_, _ = rand.Read(b)
		lines[i] = fmt.Sprintf("%06d %s", s.seq, hex.EncodeToString(b))
		s.seq++
	}
	if err := s.f.conn.SetDeadline(time.Now().Add(patience)); err != nil {
		t.Fatal(err)
	}
	werr := make(chan error, 1)
	go func() {
		w := bufio.NewWriter(s.f.conn)
		for _, line := range lines {
			if _, err := w.WriteString(line + "\n"); err != nil {
				werr <- err
				return
			}
		}
		werr <- w.Flush()
	}()
	for i, line := range lines {
		answer, err := s.f.r.ReadString('\n')
		if err != nil {
			t.Fatalf("line %d: %v (a reset means the flow reached another backend)", i, err)
		}
		name, err := parseAnswer(strings.TrimSuffix(answer, "\n"), line)
		if err != nil {
			t.Fatalf("line %d: %v", i, err)
		}
		if s.backend == "" {
			s.backend = name
		} else if name != s.backend {
			t.Fatalf("line %d answered by %s, earlier ones by %s", i, name, s.backend)
		}
		_, _ = s.sent.Write([]byte(line))
		_, _ = s.got.Write([]byte(strings.TrimSuffix(strings.TrimPrefix(answer, name+" "), "\n")))
		s.bytes += len(line) + 1
	}
	if err := <-werr; err != nil {
		t.Fatalf("send: %v", err)
	}
}
