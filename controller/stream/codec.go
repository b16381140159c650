package stream

import (
	"fmt"
	"sync"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	protov2 "google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

// sharedCodec is the server's gRPC codec: gRPC's own proto codec, except
// that the cluster part of a snapshot is encoded once for every stream it
// goes to. The publisher builds one cluster part for all nodes that share
// it (snapshot.BuildShared), but gRPC encodes each stream's message on its
// own: with 10 000 routes a cluster part takes about 12 ms to encode, so
// 100 agents cost 1.2 s of CPU per change for 100 copies of the same
// bytes. The message is sent as three buffers (its header, the snapshot's
// other fields, the shared cluster record); protobuf readers accept a
// message's fields in any order, and the agent decodes it with the stock
// codec (TestSharedCodec).
type sharedCodec struct {
	base encoding.CodecV2

	mu sync.Mutex
	// recent are the records of the last cluster parts encoded, newest
	// first; an entry holds its cluster part, so the pointer it is found
	// by cannot be reused for another while it is here.
	recent [4]clusterRecord
	// encoded counts cluster parts encoded, for tests.
	encoded int
}

type clusterRecord struct {
	cluster *pb.ClusterConfig
	record  []byte // tag, length and encoding of ConfigSnapshot.cluster
	// routes maps each route of cluster to its encoding within record.
	routes map[*pb.Route][]byte
}

func newSharedCodec() *sharedCodec {
	return &sharedCodec{base: encoding.GetCodecV2(proto.Name)}
}

// Name is the proto codec's: the content type on the wire is unchanged.
func (c *sharedCodec) Name() string { return proto.Name }

func (c *sharedCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return c.base.Unmarshal(data, v)
}

func (c *sharedCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(*pb.ControllerMessage)
	snap := m.GetSnapshot()
	if !ok || snap.GetCluster() == nil || len(m.ProtoReflect().GetUnknown()) > 0 {
		return c.base.Marshal(v)
	}
	record, err := c.clusterRecord(snap.GetCluster())
	if err != nil {
		return nil, err
	}
	rest, err := protov2.Marshal(withoutCluster(snap))
	if err != nil {
		return nil, fmt.Errorf("marshal snapshot: %w", err)
	}
	header := protowire.AppendTag(nil, snapshotField.Number(), protowire.BytesType)
	header = protowire.AppendVarint(header, uint64(len(rest)+len(record)))
	return mem.BufferSlice{mem.SliceBuffer(header), mem.SliceBuffer(rest), mem.SliceBuffer(record)}, nil
}

var (
	snapshotField = (&pb.ControllerMessage{}).ProtoReflect().Descriptor().Fields().ByName("snapshot")
	clusterField  = (&pb.ConfigSnapshot{}).ProtoReflect().Descriptor().Fields().ByName("cluster")
)

// clusterRecord returns the record of cluster as the cluster field of a
// snapshot, encoding it unless it is one of the recent ones.
func (c *sharedCodec) clusterRecord(cluster *pb.ClusterConfig) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, r := range c.recent {
		if r.cluster == cluster {
			copy(c.recent[1:i+1], c.recent[:i])
			c.recent[0] = r
			return r.record, nil
		}
	}
	r, err := encodeCluster(cluster, c.recent[0].routes)
	if err != nil {
		return nil, err
	}
	// Only the newest record's routes are looked up again: the older
	// records drop their maps, not their bytes.
	c.recent[0].routes = nil
	copy(c.recent[1:], c.recent[:len(c.recent)-1])
	c.recent[0] = r
	c.encoded++
	return r.record, nil
}

// encodeCluster encodes cluster as the cluster record of a snapshot, with
// the encoding of each route that prev holds copied from there instead of
// encoded again. The publisher's builds give a route that did not change
// as the same *pb.Route (snapshot.Memo), and nothing changes a route once
// built, so with 3000 routes a change encodes one route and copies the
// others' bytes. Fields are written in field-number order, as
// proto.Marshal writes them, so the record is the one a whole encoding
// gives (TestEncodeCluster).
func encodeCluster(cluster *pb.ClusterConfig, prev map[*pb.Route][]byte) (clusterRecord, error) {
	if len(cluster.ProtoReflect().GetUnknown()) > 0 {
		// Unknown fields go after every known one: encode the whole.
		enc, err := protov2.Marshal(cluster)
		if err != nil {
			return clusterRecord{}, fmt.Errorf("marshal cluster config: %w", err)
		}
		record := protowire.AppendTag(make([]byte, 0, len(enc)+16), clusterField.Number(), protowire.BytesType)
		record = protowire.AppendVarint(record, uint64(len(enc)))
		return clusterRecord{cluster: cluster, record: append(record, enc...)}, nil
	}
	restEnc, err := protov2.Marshal(withoutRoutes(cluster))
	if err != nil {
		return clusterRecord{}, fmt.Errorf("marshal cluster config: %w", err)
	}
	// Where the routes go: before the first field numbered after them.
	split := len(restEnc)
	for b, off := restEnc, 0; len(b) > 0; {
		num, _, n := protowire.ConsumeField(b)
		if n < 0 {
			return clusterRecord{}, fmt.Errorf("marshal cluster config: %w", protowire.ParseError(n))
		}
		if num > routesField.Number() {
			split = off
			break
		}
		off += n
		b = b[n:]
	}
	encs := make([][]byte, len(cluster.GetRoutes()))
	size := len(restEnc)
	for i, rt := range cluster.GetRoutes() {
		enc, ok := prev[rt]
		if !ok {
			if enc, err = protov2.Marshal(rt); err != nil {
				return clusterRecord{}, fmt.Errorf("marshal route %s: %w", rt.GetName(), err)
			}
		}
		encs[i] = enc
		size += protowire.SizeTag(routesField.Number()) + protowire.SizeBytes(len(enc))
	}
	record := protowire.AppendTag(make([]byte, 0, size+16), clusterField.Number(), protowire.BytesType)
	record = protowire.AppendVarint(record, uint64(size))
	record = append(record, restEnc[:split]...)
	routes := make(map[*pb.Route][]byte, len(encs))
	for i, enc := range encs {
		record = protowire.AppendTag(record, routesField.Number(), protowire.BytesType)
		record = protowire.AppendVarint(record, uint64(len(enc)))
		start := len(record)
		record = append(record, enc...)
		routes[cluster.Routes[i]] = record[start:len(record):len(record)]
	}
	record = append(record, restEnc[split:]...)
	return clusterRecord{cluster: cluster, record: record, routes: routes}, nil
}

// withoutRoutes is a shallow copy of c without its routes.
func withoutRoutes(c *pb.ClusterConfig) *pb.ClusterConfig { return without(c, routesField) }

// withoutCluster is a shallow copy of s without its cluster part.
func withoutCluster(s *pb.ConfigSnapshot) *pb.ConfigSnapshot { return without(s, clusterField) }

// without is a shallow copy of m without the field fd.
func without[M protov2.Message](m M, fd protoreflect.FieldDescriptor) M {
	src := m.ProtoReflect()
	dst := src.New()
	src.Range(func(f protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if f != fd {
			dst.Set(f, v)
		}
		return true
	})
	dst.SetUnknown(src.GetUnknown())
	return dst.Interface().(M)
}

// reuseCodec is the agent's gRPC codec: gRPC's own proto codec, except
// that a snapshot's routes whose encoding is byte for byte one of the last
// snapshot's are not decoded again: the route decoded then is used. Equal
// bytes decode to equal routes, so the snapshot is what the stock codec
// gives (TestReuseCodec); and a route that did not change stays the same
// *pb.Route, which lets the proxy keep what it compiled of it
// (router.CompileFrom) instead of compiling every route of every snapshot.
// With 3000 routes, decoding them and compiling their rules were most of
// an agent's work on a change.
type reuseCodec struct {
	base encoding.CodecV2

	mu sync.Mutex
	// last maps the encoding of each route of the last snapshot decoded
	// to the route.
	last map[string]keptRoute
	// reused counts routes taken from last, for tests.
	reused int
}

func newReuseCodec() *reuseCodec {
	return &reuseCodec{base: encoding.GetCodecV2(proto.Name)}
}

// Name is the proto codec's: the content type on the wire is unchanged.
func (c *reuseCodec) Name() string { return proto.Name }

func (c *reuseCodec) Marshal(v any) (mem.BufferSlice, error) { return c.base.Marshal(v) }

func (c *reuseCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(*pb.ControllerMessage)
	if !ok {
		return c.base.Unmarshal(data, v)
	}
	raw := data.Materialize()
	snap, ok := c.decodeSnapshot(raw)
	if !ok {
		// Not a snapshot, or not in the shape this decoder takes apart:
		// the stock decoder decides (and names what is wrong).
		return c.base.Unmarshal(mem.BufferSlice{mem.SliceBuffer(raw)}, v)
	}
	protov2.Reset(m)
	m.Message = &pb.ControllerMessage_Snapshot{Snapshot: snap}
	return nil
}

// decodeSnapshot decodes a ControllerMessage that holds only a snapshot,
// taking its routes from the last snapshot where their bytes are equal;
// false when raw is anything else, or malformed.
func (c *reuseCodec) decodeSnapshot(raw []byte) (*pb.ConfigSnapshot, bool) {
	snapBytes, ok := onlyField(raw, snapshotField.Number())
	if !ok {
		return nil, false
	}
	// The snapshot without its cluster record, the cluster without its
	// route records, and the route records, in order.
	var snapRest, clusterRest []byte
	var routes [][]byte
	var clusterBytes []byte
	hasCluster := false
	for b := snapBytes; len(b) > 0; {
		num, typ, n := protowire.ConsumeField(b)
		if n < 0 {
			return nil, false
		}
		if num == clusterField.Number() && typ == protowire.BytesType {
			if hasCluster {
				return nil, false // parts to merge: the stock decoder does that
			}
			v, _ := protowire.ConsumeBytes(b[protowire.SizeTag(num):n])
			clusterBytes, hasCluster = v, true
		} else {
			snapRest = append(snapRest, b[:n]...)
		}
		b = b[n:]
	}
	if !hasCluster {
		return nil, false
	}
	for b := clusterBytes; len(b) > 0; {
		num, typ, n := protowire.ConsumeField(b)
		if n < 0 {
			return nil, false
		}
		if num == routesField.Number() && typ == protowire.BytesType {
			v, _ := protowire.ConsumeBytes(b[protowire.SizeTag(num):n])
			routes = append(routes, v)
		} else {
			clusterRest = append(clusterRest, b[:n]...)
		}
		b = b[n:]
	}
	opts := protov2.UnmarshalOptions{DiscardUnknown: false}
	snap := &pb.ConfigSnapshot{}
	if err := opts.Unmarshal(snapRest, snap); err != nil {
		return nil, false
	}
	cluster := &pb.ClusterConfig{}
	if err := opts.Unmarshal(clusterRest, cluster); err != nil {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	next := make(map[string]keptRoute, len(routes))
	cluster.Routes = make([]*pb.Route, 0, len(routes))
	for _, rb := range routes {
		k, ok := c.last[string(rb)]
		if ok {
			c.reused++
		} else {
			k = keptRoute{key: string(rb), route: &pb.Route{}}
			if err := opts.Unmarshal(rb, k.route); err != nil {
				return nil, false
			}
		}
		next[k.key] = k
		cluster.Routes = append(cluster.Routes, k.route)
	}
	snap.Cluster = cluster
	c.last = next
	return snap, true
}

// onlyField returns the bytes of field num when msg holds that field alone,
// once, as bytes.
func onlyField(msg []byte, num protowire.Number) ([]byte, bool) {
	got, typ, n := protowire.ConsumeField(msg)
	if n < 0 || n != len(msg) || got != num || typ != protowire.BytesType {
		return nil, false
	}
	v, m := protowire.ConsumeBytes(msg[protowire.SizeTag(num):])
	return v, m >= 0
}

var routesField = (&pb.ClusterConfig{}).ProtoReflect().Descriptor().Fields().ByName("routes")

// keptRoute is a route decoded, with its encoding (the map's key, kept so
// that a route found again needs no new key).
type keptRoute struct {
	key   string
	route *pb.Route
}
