package stream

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/google/go-cmp/cmp"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

// TestSharedCodec: messages the codec encodes decode, with the stock
// decoder, to what was sent; snapshots that share a cluster part have it
// encoded once, another cluster part is encoded on its own, and other
// messages go through gRPC's proto codec.
func TestSharedCodec(t *testing.T) {
	cluster := &pb.ClusterConfig{
		Routes:    []*pb.Route{{Name: "default/web", Hostnames: []string{"www.example.com"}, Listeners: []string{"gw/http"}}},
		Listeners: []*pb.Listener{{Name: "gw/http", Port: 80, Routes: []string{"default/web"}}},
		Backends:  []*pb.Backend{{Name: "default/web"}},
	}
	other := proto.Clone(cluster).(*pb.ClusterConfig)
	other.Routes[0].Hostnames = []string{"api.example.com"}
	snap := func(node string, c *pb.ClusterConfig) *pb.ControllerMessage {
		return &pb.ControllerMessage{Message: &pb.ControllerMessage_Snapshot{Snapshot: &pb.ConfigSnapshot{
			Version: 7, ContentHash: "hash-" + node, Cluster: c, Node: &pb.NodeConfig{NodeName: node},
			Diagnostics: []*pb.Diagnostic{{Message: "a warning"}},
		}}}
	}
	c := newSharedCodec()
	for _, tc := range []struct {
		name    string
		msg     *pb.ControllerMessage
		encoded int // cluster parts encoded so far
	}{
		{"node a", snap("node-a", cluster), 1},
		{"node b, same cluster part", snap("node-b", cluster), 1},
		{"another cluster part", snap("node-a", other), 2},
		{"the first cluster part again", snap("node-c", cluster), 2},
		{"a snapshot without a cluster part", snap("node-d", nil), 2},
		{"a keepalive", &pb.ControllerMessage{Message: &pb.ControllerMessage_Keepalive{Keepalive: &pb.Keepalive{}}}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, err := c.Marshal(tc.msg)
			if err != nil {
				t.Fatal(err)
			}
			var got pb.ControllerMessage
			if err := proto.Unmarshal(data.Materialize(), &got); err != nil {
				t.Fatalf("decode: %v", err)
			}
			if diff := cmp.Diff(tc.msg, &got, protocmp.Transform()); diff != "" {
				t.Errorf("decoded message differs (-sent +decoded):\n%s", diff)
			}
			if c.encoded != tc.encoded {
				t.Errorf("%d cluster parts encoded, want %d", c.encoded, tc.encoded)
			}
		})
	}
}

// TestEncodeCluster: a cluster record made with the routes of the last
// record copied from it is byte for byte the record of a whole encoding,
// along random edits (routes changed, added, removed, moved; other
// fields changed); a route found in the last record is copied, not
// encoded again; a cluster with unknown fields is encoded whole.
func TestEncodeCluster(t *testing.T) {
	whole := func(c *pb.ClusterConfig) []byte {
		enc, err := proto.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		rec := protowire.AppendTag(nil, clusterField.Number(), protowire.BytesType)
		rec = protowire.AppendVarint(rec, uint64(len(enc)))
		return append(rec, enc...)
	}
	rnd := rand.New(rand.NewPCG(7, 11))
	cluster := benchCluster(40)
	cluster.Vips = []*pb.VIP{{Name: "edge", Addresses: []string{"192.0.2.10"}}}
	cluster.Backends = []*pb.Backend{{Name: "bench/be"}}
	cluster.Policies = []*pb.Policy{{Name: "bench/p"}}
	cluster.Certificates = []*pb.Certificate{{Name: "bench/cert"}}
	cluster.Plan = []*pb.PlanEntry{{Address: "192.0.2.10", Port: 8000}}
	var prev map[*pb.Route][]byte
	fresh := 0
	for step := range 300 {
		next := proto.Clone(withoutRoutes(cluster)).(*pb.ClusterConfig)
		next.Routes = slices.Clone(cluster.Routes)
		n := len(next.Routes)
		switch op := rnd.IntN(7); {
		case op == 0 && n > 0: // a route changes
			i := rnd.IntN(n)
			rt := proto.Clone(next.Routes[i]).(*pb.Route)
			rt.Hostnames = []string{fmt.Sprintf("changed-%d.bench.test", step)}
			next.Routes[i] = rt
		case op == 1: // a route is added
			fresh++
			rt := proto.Clone(benchCluster(1).Routes[0]).(*pb.Route)
			rt.Name = fmt.Sprintf("bench/new%05d", fresh)
			next.Routes = slices.Insert(next.Routes, rnd.IntN(n+1), rt)
		case op == 2 && n > 0: // a route goes
			i := rnd.IntN(n)
			next.Routes = slices.Delete(next.Routes, i, i+1)
		case op == 3 && n > 1: // two routes swap places
			i, j := rnd.IntN(n), rnd.IntN(n)
			next.Routes[i], next.Routes[j] = next.Routes[j], next.Routes[i]
		case op == 4: // another field changes
			next.Plan = append(next.Plan, &pb.PlanEntry{Address: "192.0.2.11", Port: uint32(step)})
		case op == 5 && rnd.IntN(10) == 0: // no routes at all
			next.Routes = nil
		}
		r, err := encodeCluster(next, prev)
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		if !bytes.Equal(r.record, whole(next)) {
			t.Fatalf("step %d: the record differs from the whole encoding", step)
		}
		if len(r.routes) != len(next.Routes) {
			t.Fatalf("step %d: %d routes mapped, want %d", step, len(r.routes), len(next.Routes))
		}
		prev, cluster = r.routes, next
	}

	// A route of the last record is copied: a stand-in encoding shows.
	c := benchCluster(3)
	stand := []byte{0x0a, 0x04, 'c', 'o', 'p', 'y'} // name "copy"
	r, err := encodeCluster(c, map[*pb.Route][]byte{c.Routes[1]: stand})
	if err != nil {
		t.Fatal(err)
	}
	value, ok := onlyField(r.record, clusterField.Number())
	var got pb.ClusterConfig
	if !ok || proto.Unmarshal(value, &got) != nil || len(got.Routes) != 3 {
		t.Fatalf("the record with a copied route does not decode to 3 routes (%v, %d routes)", ok, len(got.Routes))
	}
	if names := []string{got.Routes[0].GetName(), got.Routes[1].GetName(), got.Routes[2].GetName()}; names[1] != "copy" || names[0] != c.Routes[0].Name {
		t.Fatalf("routes decoded as %v; want the second copied from the last record", names)
	}

	// Unknown fields: the whole encoding, nothing mapped.
	u := benchCluster(2)
	u.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 1))
	r, err = encodeCluster(u, map[*pb.Route][]byte{u.Routes[0]: stand})
	if err != nil || !bytes.Equal(r.record, whole(u)) || r.routes != nil {
		t.Fatalf("with unknown fields: err %v, equal %v, %d routes mapped; want the whole encoding", err, bytes.Equal(r.record, whole(u)), len(r.routes))
	}
}

// BenchmarkSharedCodec encodes one snapshot of 3000 routes for each of 10
// nodes sharing its cluster part, as the publisher sends a change: with
// gRPC's proto codec ("stock"), with a new sharedCodec ("shared": the
// first change) and with the codec of the last change when one route
// changed ("shared-one-changed").
func BenchmarkSharedCodec(b *testing.B) {
	cluster := benchCluster(3000)
	msgs := make([]*pb.ControllerMessage, 10)
	for i := range msgs {
		msgs[i] = &pb.ControllerMessage{Message: &pb.ControllerMessage_Snapshot{Snapshot: &pb.ConfigSnapshot{
			Version: 1, ContentHash: "h", Cluster: cluster, Node: &pb.NodeConfig{NodeName: fmt.Sprintf("node-%d", i)},
		}}}
	}
	for _, tc := range []struct {
		name  string
		codec encoding.CodecV2
	}{{"stock", encoding.GetCodecV2(protocodec.Name)}, {"shared", nil}} {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				codec := tc.codec
				if codec == nil {
					codec = newSharedCodec() // a change: a new cluster part
				}
				for _, m := range msgs {
					data, err := codec.Marshal(m)
					if err != nil {
						b.Fatal(err)
					}
					data.Free()
				}
			}
		})
	}
	// The same with the codec of the last change at hand: a new cluster
	// part in which one route changed, the others the same *pb.Route.
	b.Run("shared-one-changed", func(b *testing.B) {
		codec := newSharedCodec()
		for _, m := range msgs {
			if _, err := codec.Marshal(m); err != nil {
				b.Fatal(err)
			}
		}
		i := 0
		for b.Loop() {
			i++
			next := proto.Clone(withoutRoutes(cluster)).(*pb.ClusterConfig)
			next.Routes = slices.Clone(cluster.Routes)
			rt := proto.Clone(next.Routes[i%len(next.Routes)]).(*pb.Route)
			rt.Hostnames = []string{fmt.Sprintf("changed-%d.bench.test", i)}
			next.Routes[i%len(next.Routes)] = rt
			for _, m := range msgs {
				snap := proto.Clone(withoutCluster(m.GetSnapshot())).(*pb.ConfigSnapshot)
				snap.Cluster = next
				data, err := codec.Marshal(&pb.ControllerMessage{Message: &pb.ControllerMessage_Snapshot{Snapshot: snap}})
				if err != nil {
					b.Fatal(err)
				}
				data.Free()
			}
		}
	})
}

// TestReuseCodec: the agent's codec decodes what the server's codec and
// the stock one encode to the message sent; a route whose encoding is one
// of the last snapshot's is the route decoded then, and the others are
// new; other and malformed messages are the stock decoder's.
func TestReuseCodec(t *testing.T) {
	mkRoute := func(name, host string) *pb.Route {
		return &pb.Route{Name: name, Kind: pb.RouteKind_ROUTE_KIND_HTTP, Hostnames: []string{host}, Listeners: []string{"gw/http"},
			Rules: []*pb.RouteRule{{Backends: []*pb.WeightedBackend{{Backend: "default/web", Weight: 1}}}}}
	}
	first := &pb.ClusterConfig{
		Routes:    []*pb.Route{mkRoute("default/a", "a.example.com"), mkRoute("default/b", "b.example.com"), mkRoute("default/c", "c.example.com")},
		Listeners: []*pb.Listener{{Name: "gw/http", Port: 80}},
	}
	second := proto.Clone(first).(*pb.ClusterConfig)
	second.Routes[1].Hostnames = []string{"b2.example.com"}                            // changed
	second.Routes = append(second.Routes[:2:2], mkRoute("default/d", "d.example.com")) // c removed, d added
	msg := func(c *pb.ClusterConfig) *pb.ControllerMessage {
		return &pb.ControllerMessage{Message: &pb.ControllerMessage_Snapshot{Snapshot: &pb.ConfigSnapshot{
			Version: 3, ContentHash: "h", Cluster: c, Node: &pb.NodeConfig{NodeName: "node-a"}}}}
	}
	stock := encoding.GetCodecV2(protocodec.Name)
	decode := func(t *testing.T, c *reuseCodec, data mem.BufferSlice) *pb.ControllerMessage {
		t.Helper()
		var got pb.ControllerMessage
		if err := c.Unmarshal(data, &got); err != nil {
			t.Fatalf("decode: %v", err)
		}
		return &got
	}
	for _, enc := range []struct {
		name  string
		codec encoding.CodecV2
	}{{"server codec", newSharedCodec()}, {"stock codec", stock}} {
		t.Run(enc.name, func(t *testing.T) {
			c := newReuseCodec()
			var before *pb.ControllerMessage
			for i, cl := range []*pb.ClusterConfig{first, second} {
				data, err := enc.codec.Marshal(msg(cl))
				if err != nil {
					t.Fatal(err)
				}
				got := decode(t, c, data)
				if diff := cmp.Diff(msg(cl), got, protocmp.Transform()); diff != "" {
					t.Fatalf("snapshot %d decoded differs (-sent +decoded):\n%s", i, diff)
				}
				if before != nil {
					prev, now := before.GetSnapshot().GetCluster().GetRoutes(), got.GetSnapshot().GetCluster().GetRoutes()
					if now[0] != prev[0] {
						t.Error("the unchanged route a was decoded again")
					}
					if now[1] == prev[1] || now[2] == prev[2] {
						t.Error("a changed or new route is the last snapshot's")
					}
					if c.reused != 1 {
						t.Errorf("%d routes reused, want 1", c.reused)
					}
				}
				before = got
			}
		})
	}

	c := newReuseCodec()
	keepalive := &pb.ControllerMessage{Message: &pb.ControllerMessage_Keepalive{Keepalive: &pb.Keepalive{}}}
	data, err := stock.Marshal(keepalive)
	if err != nil {
		t.Fatal(err)
	}
	if got := decode(t, c, data); !proto.Equal(got, keepalive) {
		t.Errorf("a keepalive decoded as %v", got)
	}

	// A snapshot with its cluster part in two records, which protobuf
	// merges: the stock decoder's result.
	one, _ := proto.Marshal(&pb.ConfigSnapshot{Version: 4, Cluster: &pb.ClusterConfig{Routes: first.Routes[:1]}})
	two, _ := proto.Marshal(&pb.ConfigSnapshot{Cluster: &pb.ClusterConfig{Routes: first.Routes[1:]}})
	split := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), append(one, two...))
	var want pb.ControllerMessage
	if err := proto.Unmarshal(split, &want); err != nil {
		t.Fatal(err)
	}
	if got := decode(t, c, mem.BufferSlice{mem.SliceBuffer(split)}); !proto.Equal(got, &want) || len(got.GetSnapshot().GetCluster().GetRoutes()) != 3 {
		t.Errorf("a cluster part in two records decoded as %v", got)
	}

	full, err := stock.Marshal(msg(first))
	if err != nil {
		t.Fatal(err)
	}
	raw := full.Materialize()
	var got pb.ControllerMessage
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(raw[:len(raw)-5])}, &got); err == nil {
		t.Error("a truncated snapshot decoded without an error")
	}
}

// BenchmarkReuseCodec decodes a snapshot of 3000 routes of which one
// changed since the last, as an agent does on a change: with gRPC's proto
// codec ("stock") and with reuseCodec.
func BenchmarkReuseCodec(b *testing.B) {
	msgs := make([]mem.BufferSlice, 2)
	for i := range msgs {
		cluster := benchCluster(3000)
		cluster.Routes[7].Hostnames = []string{fmt.Sprintf("changed-%d.bench.test", i)}
		data, err := newSharedCodec().Marshal(&pb.ControllerMessage{Message: &pb.ControllerMessage_Snapshot{Snapshot: &pb.ConfigSnapshot{
			Version: uint64(i), Cluster: cluster, Node: &pb.NodeConfig{NodeName: "node-a"}}}})
		if err != nil {
			b.Fatal(err)
		}
		msgs[i] = mem.BufferSlice{mem.SliceBuffer(data.Materialize())}
	}
	for _, tc := range []struct {
		name  string
		codec encoding.CodecV2
	}{{"stock", encoding.GetCodecV2(protocodec.Name)}, {"reuse", newReuseCodec()}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				var m pb.ControllerMessage
				if err := tc.codec.Unmarshal(msgs[i%2], &m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// benchCluster is a cluster part of n routes of the shape perf/routescale
// serves.
func benchCluster(n int) *pb.ClusterConfig {
	cluster := &pb.ClusterConfig{Listeners: []*pb.Listener{{Name: "bench/gw00/http", Port: 8000}}}
	for i := range n {
		name := fmt.Sprintf("bench/r%05d", i)
		cluster.Routes = append(cluster.Routes, &pb.Route{
			Name: name, Kind: pb.RouteKind_ROUTE_KIND_HTTP, Source: "ProxyRoute/" + name,
			Hostnames: []string{fmt.Sprintf("r%d.bench.test", i)}, Listeners: []string{"bench/gw00/http"},
			Rules: []*pb.RouteRule{{
				Matches: []*pb.RouteMatch{
					{Path: &pb.StringMatch{Type: pb.MatchType_MATCH_TYPE_PREFIX, Value: "/api"}},
					{Path: &pb.StringMatch{Type: pb.MatchType_MATCH_TYPE_EXACT, Value: "/"}},
				},
				Backends: []*pb.WeightedBackend{{Backend: "bench/be", Weight: 1}},
				Timeouts: &pb.RouteTimeouts{IdleMs: 3600000},
			}},
		})
		cluster.Listeners[0].Routes = append(cluster.Listeners[0].Routes, name)
	}
	return cluster
}
