package fastpath

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/novaedge/novaedge/fastpath/lineage"
	"github.com/novaedge/novaedge/fastpath/maglev"
	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

// lineageSnap is a snapshot with one FAST entry (192.0.2.10:80/TCP, NAT)
// over endpoints 10.1.0.<i>:8080 for every i in ids, with the states and
// weights set shows, and lin as its lineage.
func lineageSnap(ids []int, set func(i int, ep *pb.Endpoint), lin *pb.MaglevLineage) *pb.ConfigSnapshot {
	e := &pb.PlanEntry{
		Vip: "web", Listener: "web/tcp-80", Address: "192.0.2.10", Port: 80, Protocol: pb.L4Protocol_L4_PROTOCOL_TCP,
		Path: pb.DataPath_DATA_PATH_FAST, Forwarding: &pb.Forwarding{Mode: pb.ForwardingMode_FORWARDING_MODE_NAT},
		Lineage: lin,
	}
	for _, i := range ids {
		ep := &pb.Endpoint{Address: fmt.Sprintf("10.1.0.%d", i), Port: 8080, State: pb.EndpointState_ENDPOINT_STATE_HEALTHY}
		if set != nil {
			set(i, ep)
		}
		e.Endpoints = append(e.Endpoints, ep)
	}
	return &pb.ConfigSnapshot{Cluster: &pb.ClusterConfig{Plan: []*pb.PlanEntry{e}}}
}

// installedKeys is the VIP's installed table, slot by slot, as backend
// "address:port" ("" for an empty slot).
func installedKeys(t *testing.T, m *Manager, ids []int) []string {
	t.Helper()
	byID := map[uint32]string{}
	for _, i := range ids {
		ap := netip.MustParseAddrPort(fmt.Sprintf("10.1.0.%d:8080", i))
		if id, ok := m.BackendID(ap.Addr(), ap.Port()); ok {
			byID[id] = ap.String()
		}
	}
	tab := m.Table(netip.MustParseAddr("192.0.2.10"), 80, ProtoTCP)
	if tab == nil {
		t.Fatal("no table installed")
	}
	out := make([]string, len(tab))
	for s, id := range tab {
		out[s] = byID[id]
	}
	return out
}

// lineageKeys is lineage.Owners, failing the test on an error.
func lineageKeys(t *testing.T, l *pb.MaglevLineage) []string {
	t.Helper()
	out, err := lineage.Owners(l)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func span(from, to int) []int {
	var out []int
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

// TestManagerSnapshotLineage: two nodes with different histories (one saw
// every snapshot, with --maglev-lineage on, the other only the last)
// install the same table, slot for slot, when the snapshot carries the
// leader's lineage, and that table is the leader's Next: the manager and
// lineage.Members agree on which endpoints get slots and with what weight.
func TestManagerSnapshotLineage(t *testing.T) {
	node := Node{V4: netip.MustParseAddr("10.0.0.1")}
	b, err := maglev.NewBuilder(251)
	if err != nil {
		t.Fatal(err)
	}
	leader := func(prev *pb.MaglevLineage, s *pb.ConfigSnapshot) *pb.MaglevLineage {
		t.Helper()
		ms, err := lineage.Members(s.GetCluster().GetPlan()[0])
		if err != nil {
			t.Fatal(err)
		}
		l, err := lineage.Next(b, prev, ms)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	states := func(i int, ep *pb.Endpoint) {
		switch {
		case i == 4:
			ep.State = pb.EndpointState_ENDPOINT_STATE_UNHEALTHY
		case i == 5:
			ep.State = pb.EndpointState_ENDPOINT_STATE_DRAINING
		case i%3 == 0:
			ep.Weight = 3
		}
	}
	steps := []struct {
		ids []int
		set func(int, *pb.Endpoint)
	}{
		{span(1, 20), nil},
		{span(2, 20), nil},
		{append(span(2, 12), span(14, 24)...), states},
		{append(span(2, 12), span(15, 24)...), states},
	}
	nodeA, err := NewManager(loadSmall(t), ManagerOptions{Lineage: true})
	if err != nil {
		t.Fatal(err)
	}
	var persisted *pb.MaglevLineage
	for i, st := range steps {
		snap := lineageSnap(st.ids, st.set, persisted)
		want := leader(persisted, snap)
		c, err := FromSnapshot(snap, node)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := nodeA.Apply(c); err != nil {
			t.Fatal(err)
		}
		if got, want := installedKeys(t, nodeA, st.ids), lineageKeys(t, want); strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("step %d: node A's table is not the leader's", i)
		}
		persisted = want
		if i < len(steps)-1 {
			continue
		}
		// A node that joins now, with its own IDs, gets the same table.
		nodeB, err := NewManager(loadSmall(t), ManagerOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := nodeB.Apply(testConfig("10.9.0.1:80", "10.9.0.2:80")); err != nil {
			t.Fatal(err)
		}
		if _, err := nodeB.Apply(c); err != nil {
			t.Fatal(err)
		}
		if got, want := installedKeys(t, nodeB, st.ids), installedKeys(t, nodeA, st.ids); strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatal("a node with another history built another table from the same snapshot")
		}
		// The lineage persisted since gives the same table back.
		c, err = FromSnapshot(lineageSnap(st.ids, st.set, persisted), node)
		if err != nil {
			t.Fatal(err)
		}
		res, err := nodeB.Apply(c)
		if err != nil {
			t.Fatal(err)
		}
		if res.TablesSwapped != 0 {
			t.Errorf("the persisted lineage swapped the table again: %+v", res)
		}
	}
}

func TestManagerLineageOtherSizeIgnored(t *testing.T) {
	b, _ := maglev.NewBuilder(257)
	ids := span(1, 5)
	ms, _ := lineage.Members(lineageSnap(ids, nil, nil).GetCluster().GetPlan()[0])
	l, err := lineage.Next(b, nil, ms)
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewManager(loadSmall(t), ManagerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := FromSnapshot(lineageSnap(ids, nil, l), Node{V4: netip.MustParseAddr("10.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Apply(c); err != nil {
		t.Fatal(err)
	}
	b251, _ := maglev.NewBuilder(251)
	plain, _ := lineage.Next(b251, nil, ms)
	if got, want := installedKeys(t, m, ids), lineageKeys(t, plain); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Error("a lineage of another size was not ignored: the table is not the plain one")
	}
}

func TestFromSnapshotBadLineage(t *testing.T) {
	bad := &pb.MaglevLineage{Size: 251, Backends: []string{"10.1.0.2:8080", "10.1.0.1:8080"}, Slots: make([]byte, 32)}
	_, err := FromSnapshot(lineageSnap(span(1, 2), nil, bad), Node{V4: netip.MustParseAddr("10.0.0.1")})
	if err == nil || !strings.Contains(err.Error(), "vips[0] (web/web/tcp-80 192.0.2.10:80/tcp): lineage: invalid maglev lineage: backends[1]") {
		t.Errorf("FromSnapshot = %v; want an error naming the entry and the lineage field", err)
	}
}
