package stream

import (
	"fmt"
	"testing"

	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"

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

// BenchmarkSharedCodec encodes one snapshot of 3000 routes for each of 10
// nodes sharing its cluster part, as the publisher sends a change: with
// gRPC's proto codec ("stock") and with sharedCodec.
func BenchmarkSharedCodec(b *testing.B) {
	cluster := &pb.ClusterConfig{Listeners: []*pb.Listener{{Name: "bench/gw00/http", Port: 8000}}}
	for i := range 3000 {
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
}
