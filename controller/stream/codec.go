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
	enc, err := protov2.Marshal(cluster)
	if err != nil {
		return nil, fmt.Errorf("marshal cluster config: %w", err)
	}
	record := protowire.AppendTag(make([]byte, 0, len(enc)+16), clusterField.Number(), protowire.BytesType)
	record = protowire.AppendVarint(record, uint64(len(enc)))
	record = append(record, enc...)
	copy(c.recent[1:], c.recent[:len(c.recent)-1])
	c.recent[0] = clusterRecord{cluster: cluster, record: record}
	c.encoded++
	return record, nil
}

// withoutCluster is a shallow copy of s without its cluster part.
func withoutCluster(s *pb.ConfigSnapshot) *pb.ConfigSnapshot {
	out := &pb.ConfigSnapshot{}
	dst := out.ProtoReflect()
	s.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd != clusterField {
			dst.Set(fd, v)
		}
		return true
	})
	dst.SetUnknown(s.ProtoReflect().GetUnknown())
	return out
}
