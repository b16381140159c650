package lineage

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/novaedge/novaedge/fastpath/maglev"
	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

func backends(n, from int) []maglev.Backend {
	out := make([]maglev.Backend, n)
	for i := range out {
		j := from + i
		out[i] = maglev.Backend{Key: fmt.Sprintf("10.%d.%d.%d:8080", j>>16, (j>>8)&255, j&255), Weight: 1, ID: uint32(i + 1)}
	}
	return out
}

func renumber(bs []maglev.Backend) []maglev.Backend {
	out := slices.Clone(bs)
	for i := range out {
		out[i].ID = uint32(i + 1)
	}
	return out
}

// keyed is Owners, failing the test on an error.
func keyed(t testing.TB, l *pb.MaglevLineage) []string {
	t.Helper()
	out, err := Owners(l)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func moved(a, b []string) int {
	n := 0
	for i := range a {
		if a[i] != b[i] {
			n++
		}
	}
	return n
}

func TestEncodeRoundTrip(t *testing.T) {
	b, err := maglev.NewBuilder(maglev.DefaultSize)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1, 2, 3, 5, 8, 9, 255, 256, 257, 1000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			bs := backends(n, 0)
			tab, err := b.Build(bs)
			if err != nil {
				t.Fatal(err)
			}
			l, err := Encode(tab, bs)
			if err != nil {
				t.Fatal(err)
			}
			if err := Validate(l); err != nil {
				t.Fatal(err)
			}
			if want := (uint64(len(tab))*uint64(width(n)) + 7) / 8; uint64(len(l.GetSlots())) != want {
				t.Errorf("slots %d bytes, want %d", len(l.GetSlots()), want)
			}
			// Decode into other IDs: every slot must name the same key.
			ids := map[string]uint32{}
			for i, be := range bs {
				ids[be.Key] = uint32(1000 + 7*i)
			}
			back, err := Prev(l, uint32(len(tab)), func(k string) (uint32, bool) { v, ok := ids[k]; return v, ok })
			if err != nil {
				t.Fatal(err)
			}
			for s := range tab {
				if want := ids[bs[tab[s]-1].Key]; back[s] != want {
					t.Fatalf("slot %d: decoded ID %d, want %d", s, back[s], want)
				}
			}
		})
	}
}

func TestPrevUnknownAndOtherSize(t *testing.T) {
	b, _ := maglev.NewBuilder(maglev.DefaultSize)
	bs := backends(4, 0)
	l, err := Next(b, nil, bs)
	if err != nil {
		t.Fatal(err)
	}
	// Only the first backend is known: its slots keep its ID, the rest are free (0).
	pt, err := Prev(l, l.GetSize(), func(k string) (uint32, bool) { return 9, k == bs[0].Key })
	if err != nil {
		t.Fatal(err)
	}
	tab, _ := b.Build(bs)
	for s := range tab {
		want := uint32(0)
		if tab[s] == bs[0].ID {
			want = 9
		}
		if pt[s] != want {
			t.Fatalf("slot %d: %d, want %d", s, pt[s], want)
		}
	}
	if pt, err := Prev(l, 251, func(string) (uint32, bool) { return 1, true }); pt != nil || err != nil {
		t.Errorf("lineage of another size: got %d slots, %v; want none, no error", len(pt), err)
	}
	if pt, err := Prev(nil, l.GetSize(), nil); pt != nil || err != nil {
		t.Errorf("nil lineage: got %d slots, %v", len(pt), err)
	}
}

// TestNextIsIdempotent: once the leader persists a table, building from it
// with the same members gives it back, so a replica that read the new
// lineage and one that read the old agree.
func TestNextIsIdempotent(t *testing.T) {
	b, _ := maglev.NewBuilder(maglev.DefaultSize)
	rng := rand.New(rand.NewPCG(3, 4))
	bs := backends(300, 0)
	l, err := Next(b, nil, bs)
	if err != nil {
		t.Fatal(err)
	}
	for step := range 30 {
		i := rng.IntN(len(bs))
		bs = slices.Delete(bs, i, i+1)
		if step%3 == 0 {
			bs[rng.IntN(len(bs))].Weight = 1 + uint32(rng.IntN(4))
		}
		if step%4 == 0 {
			bs = append(bs, backends(2, 5000+step*2)...)
		}
		bs = renumber(bs)
		next, err := Next(b, l, bs)
		if err != nil {
			t.Fatal(err)
		}
		again, err := Next(b, next, bs)
		if err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(next, again) {
			t.Fatalf("step %d: building from the persisted table changed it (%d slots)", step, moved(keyed(t, next), keyed(t, again)))
		}
		l = next
	}
}

// TestChainRemapsMinimally: one backend of 1000 leaving moves its slots
// and nothing else, step after step, and the tables stay balanced.
func TestChainRemapsMinimally(t *testing.T) {
	b, _ := maglev.NewBuilder(maglev.DefaultSize)
	rng := rand.New(rand.NewPCG(5, 6))
	bs := backends(1000, 0)
	l, err := Next(b, nil, bs)
	if err != nil {
		t.Fatal(err)
	}
	prev := keyed(t, l)
	worst := 0.0
	for step := range 50 {
		var gone string
		if step%5 == 4 {
			bs = append(bs, backends(1, 10000+step)...)
		} else {
			i := rng.IntN(len(bs))
			gone = bs[i].Key
			bs = slices.Delete(bs, i, i+1)
		}
		bs = renumber(bs)
		next, err := Next(b, l, bs)
		if err != nil {
			t.Fatal(err)
		}
		cur := keyed(t, next)
		n, owned := moved(prev, cur), 0
		counts := map[string]int{}
		for s := range cur {
			counts[cur[s]]++
			if prev[s] == gone {
				owned++
			}
		}
		if gone != "" && n != owned {
			t.Errorf("step %d: removing %s moved %d slots, it owned %d", step, gone, n, owned)
		}
		ceil := (len(cur) + len(bs) - 1) / len(bs)
		for k, c := range counts {
			if c > ceil || c < len(cur)/len(bs) {
				t.Fatalf("step %d: %s owns %d slots, want %d or %d", step, k, c, len(cur)/len(bs), ceil)
			}
		}
		worst = max(worst, float64(n)/float64(len(cur)))
		prev, l = cur, next
	}
	if worst > 0.0015 {
		t.Errorf("worst step moved %.3f%% of the slots, want ≤ 0.15%%", 100*worst)
	}
	t.Logf("worst step moved %.3f%% of the slots", 100*worst)
}

// TestHistoryIndependent: a node that installed other tables before, and
// numbers its backends its own way, builds from the lineage the same
// table, slot for slot, as the leader's Next.
func TestHistoryIndependent(t *testing.T) {
	b, _ := maglev.NewBuilder(maglev.DefaultSize)
	bs := backends(50, 0)
	l, err := Next(b, nil, bs)
	if err != nil {
		t.Fatal(err)
	}
	bs = renumber(append(bs[3:], backends(2, 900)...))
	want, err := Next(b, l, bs)
	if err != nil {
		t.Fatal(err)
	}
	// The node: IDs from its own pool, and an installed table from a
	// history the leader never had.
	node := slices.Clone(bs)
	ids := map[string]uint32{}
	for i := range node {
		node[i].ID = uint32(40 + 3*i)
		ids[node[i].Key] = node[i].ID
	}
	pt, err := Prev(l, b.Size(), func(k string) (uint32, bool) { v, ok := ids[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	got, err := b.BuildFrom(pt, node)
	if err != nil {
		t.Fatal(err)
	}
	keyOf := map[uint32]string{}
	for _, m := range node {
		keyOf[m.ID] = m.Key
	}
	wk := keyed(t, want)
	for s := range got {
		if keyOf[got[s]] != wk[s] {
			t.Fatalf("slot %d: node has %s, leader %s", s, keyOf[got[s]], wk[s])
		}
	}
}

func TestNextWithoutLiveMembers(t *testing.T) {
	b, _ := maglev.NewBuilder(maglev.DefaultSize)
	bs := backends(3, 0)
	for i := range bs {
		bs[i].Weight = 0
	}
	if l, err := Next(b, nil, bs); l != nil || err != nil {
		t.Errorf("Next = %v, %v; want nil, nil", l, err)
	}
}

func TestValidate(t *testing.T) {
	b, _ := maglev.NewBuilder(251)
	good, err := Next(b, nil, backends(3, 0))
	if err != nil {
		t.Fatal(err)
	}
	mod := func(f func(l *pb.MaglevLineage)) *pb.MaglevLineage {
		l := proto.Clone(good).(*pb.MaglevLineage)
		f(l)
		return l
	}
	cases := []struct {
		name string
		l    *pb.MaglevLineage
		want string
	}{
		{"size 0", mod(func(l *pb.MaglevLineage) { l.Size = 0 }), "size 0"},
		{"no backends", mod(func(l *pb.MaglevLineage) { l.Backends = nil }), "0 backends"},
		{"not address:port", mod(func(l *pb.MaglevLineage) { l.Backends[1] = "10.0.0.1" }), "backends[1]"},
		{"unsorted", mod(func(l *pb.MaglevLineage) { l.Backends[0], l.Backends[1] = l.Backends[1], l.Backends[0] }), "backends[1]"},
		{"duplicate", mod(func(l *pb.MaglevLineage) { l.Backends[1] = l.Backends[0] }), "sorted, unique"},
		{"short slots", mod(func(l *pb.MaglevLineage) { l.Slots = l.Slots[1:] }), "slots has"},
		{"index out of range", mod(func(l *pb.MaglevLineage) { l.Slots[0] = 0xff }), "names backend 3 of 3"},
	}
	if err := Validate(good); err != nil {
		t.Fatalf("good lineage: %v", err)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := Validate(c.l)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Validate = %v; want ErrInvalid mentioning %q", err, c.want)
			}
			if _, err := Prev(c.l, c.l.GetSize(), func(string) (uint32, bool) { return 1, true }); c.l.GetSize() != 0 && err == nil {
				t.Errorf("Prev accepted it")
			}
		})
	}
}

func TestMembers(t *testing.T) {
	e := &pb.PlanEntry{Endpoints: []*pb.Endpoint{
		{Address: "10.0.0.1", Port: 80, Weight: 3, State: pb.EndpointState_ENDPOINT_STATE_HEALTHY},
		{Address: "10.0.0.2", Port: 80, State: pb.EndpointState_ENDPOINT_STATE_HEALTHY},
		{Address: "10.0.0.3", Port: 80, Weight: 5, State: pb.EndpointState_ENDPOINT_STATE_DRAINING},
		{Address: "10.0.0.4", Port: 80, State: pb.EndpointState_ENDPOINT_STATE_UNHEALTHY},
		{Address: "::ffff:10.0.0.5", Port: 81, Weight: 2},
		{Address: "fd00::6", Port: 80, Weight: 1},
	}}
	got, err := Members(e)
	if err != nil {
		t.Fatal(err)
	}
	want := []maglev.Backend{
		{Key: "10.0.0.1:80", Weight: 3, ID: 1},
		{Key: "10.0.0.2:80", Weight: 1, ID: 2},
		{Key: "10.0.0.3:80", Weight: 0, ID: 3},
		{Key: "10.0.0.5:81", Weight: 2, ID: 4},
		{Key: "[fd00::6]:80", Weight: 1, ID: 5},
	}
	if !slices.Equal(got, want) {
		t.Errorf("Members =\n%v\nwant\n%v", got, want)
	}
	_, err = Members(&pb.PlanEntry{Endpoints: []*pb.Endpoint{{Address: "10.0.0.1", Port: 80}, {Address: "nope", Port: 80}}})
	if err == nil || !strings.Contains(err.Error(), "endpoints[1]") {
		t.Errorf("bad address: %v, want an error naming endpoints[1]", err)
	}
	if m := Member(netip.MustParseAddr("::ffff:1.2.3.4"), 9, 0, false); m.Key != "1.2.3.4:9" || m.Weight != 1 {
		t.Errorf("Member = %+v", m)
	}
}

// BenchmarkNext is the leader's (and every node's) cost of one change with
// lineage: decode the previous table, build from it with one of N backends
// gone, encode the result. It reports the share of slots that moved and
// the encoded size the snapshot carries per FAST entry.
func BenchmarkNext(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			bld, err := maglev.NewBuilder(maglev.DefaultSize)
			if err != nil {
				b.Fatal(err)
			}
			bs := backends(n, 0)
			prev, err := Next(bld, nil, bs)
			if err != nil {
				b.Fatal(err)
			}
			less := renumber(slices.Delete(slices.Clone(bs), n/2, n/2+1))
			var next *pb.MaglevLineage
			for b.Loop() {
				if next, err = Next(bld, prev, less); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(100*float64(moved(keyed(b, prev), keyed(b, next)))/float64(maglev.DefaultSize), "%moved")
			b.ReportMetric(float64(proto.Size(next)), "bytes/entry")
		})
	}
}

func TestWanted(t *testing.T) {
	withLive := func(live, draining int) []maglev.Backend {
		bs := backends(live+draining, 0)
		for i := live; i < len(bs); i++ {
			bs[i].Weight = 0
		}
		return bs
	}
	for _, c := range []struct {
		has         bool
		live, drain int
		want        bool
	}{
		{false, MinBackends - 1, 5, false},
		{false, MinBackends, 0, true},
		{true, MinBackends - 1, 0, true},
		{true, MinBackends / 2, 0, true},
		{true, MinBackends/2 - 1, 40, false},
		{false, 0, 0, false},
	} {
		if got := Wanted(c.has, withLive(c.live, c.drain)); got != c.want {
			t.Errorf("Wanted(has %v, %d live, %d draining) = %v, want %v", c.has, c.live, c.drain, got, c.want)
		}
	}
}
