package snapshot

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"slices"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/novaedge/novaedge/api/v1alpha1"
	"github.com/novaedge/novaedge/diag"
	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
)

// DefaultSystemNamespace is where Secrets referenced without a namespace from
// cluster-scoped resources (ProxyVIP) are looked up.
const DefaultSystemNamespace = "novaedge-system"

// Build turns in into the snapshot for opts.Node. It never fails as a whole:
// resources with errors are left out and reported in the returned list (also
// copied into the snapshot's diagnostics). Build does not modify in.
func Build(in *Input, opts Options) (*pb.ConfigSnapshot, diag.List) {
	if m := opts.Memo; m != nil {
		m.begin()
		defer m.end()
	}
	b := newBuilder(in, opts)
	b.buildCluster()
	b.buildNode()
	return b.assemble()
}

// BuildShared builds the snapshots of several nodes whose cluster parts are
// equal to that of opts.Node, sharing one cluster part: each is what Build
// gives for its node, but the cluster-wide resources are built, encoded and
// hashed once, and each node adds only its own part (the VIPs it serves and
// how, and their diagnostics). That holds for every node that hosts no
// endpoint of a Service with externalTrafficPolicy Local, the one input
// that makes cluster parts differ (see the Service backends), when
// opts.Node hosts none either, and with in.Decisions set, as the
// controller builds: without them a Local Service's address is served only
// by nodes with its endpoints, which is cluster-wide. The snapshots share
// one cluster part, which must not be modified; the returned Shared serves
// more nodes that serve nothing (Shared.ForNode).
func BuildShared(in *Input, opts Options, nodes []Node) ([]*pb.ConfigSnapshot, *Shared) {
	if m := opts.Memo; m != nil {
		m.begin()
		defer m.end()
	}
	b := newBuilder(in, opts)
	b.buildCluster()
	cluster := b.assembleCluster()
	sh := &Shared{hash: b.hashCluster(cluster)}
	diags := b.diags
	var snaps []*pb.ConfigSnapshot
	for _, n := range nodes {
		// buildNode writes only the node part and diagnostics: a copy of
		// the builder with a node of its own and a copy of the shared
		// diagnostics leaves b as it was for the next node.
		nb := *b
		nb.opts.Node = n
		nb.diags = slices.Clone(diags)
		nb.buildNode()
		s, _ := nb.snapshotOf(cluster, sh.hash)
		snaps = append(snaps, s)
	}
	// The base for ForNode: opts.Node's own snapshot.
	nb := *b
	nb.diags = slices.Clone(diags)
	nb.buildNode()
	sh.base, _ = nb.snapshotOf(cluster, sh.hash)
	return snaps, sh
}

// Shared is a cluster part built once for many nodes (BuildShared).
type Shared struct {
	base *pb.ConfigSnapshot // the snapshot of BuildShared's opts.Node
	hash clusterHash        // of base's cluster part
}

// ForNode returns the snapshot of node when it is a node that serves no VIP
// and hosts no endpoint of a Service with externalTrafficPolicy Local,
// BuildShared's opts.Node being such a node too, a name no node has (not
// the empty name, which means every node's endpoints for Services with
// externalTrafficPolicy Local). Such nodes' snapshots differ only in the
// node's name, so a controller builds once for all of them; hashing one
// costs only its node part.
func (sh *Shared) ForNode(node string) *pb.ConfigSnapshot {
	s := &pb.ConfigSnapshot{
		Version: sh.base.GetVersion(), Cluster: sh.base.GetCluster(),
		Node: &pb.NodeConfig{NodeName: node}, Diagnostics: sh.base.GetDiagnostics(),
	}
	s.ContentHash = sh.hash.with(s.Node)
	return s
}

// buildCluster builds everything but the node part.
func (b *builder) buildCluster() {
	b.translate()
	b.indexCore()
	b.checkServiceAnnotations()
	b.buildPools()
	b.buildVIPs()
	b.buildPolicies()
	b.buildBackends()
	b.buildGateways()
	b.buildServices()
	b.buildRoutes()
	b.buildPlan()
	b.servicePlan()
	b.lineagePlan()
}

// builder carries one build. Its maps are only looked up by key, never
// iterated, so output order never depends on map order.
type builder struct {
	in    *Input
	opts  Options
	diags diag.List

	secrets  map[string]*secretEntry // "ns/name"
	services map[string]*serviceEntry

	pools       []*poolEntry
	poolsByName map[string]*poolEntry
	vips        []*vipEntry
	vipsByName  map[string]*vipEntry
	policies    map[string]*pb.Policy
	backends    map[string]*pb.Backend
	certs       map[string]*pb.Certificate
	gateways    []*gatewayEntry
	listeners   []*listenerEntry
	routes      []*pb.Route
	plan        []*pb.PlanEntry
	node        *pb.NodeConfig
}

func newBuilder(in *Input, opts Options) *builder {
	if in == nil {
		in = &Input{}
	}
	// Translators append to the input; work on a shallow copy whose
	// slices have no room left, so that an append copies them and the
	// caller's arrays are never written. Copying 3000 routes up front
	// cost 1.2 MB and 0.4 ms of each build.
	cp := *in
	cp.Gateways = slices.Clip(in.Gateways)
	cp.Routes = slices.Clip(in.Routes)
	cp.Backends = slices.Clip(in.Backends)
	return &builder{
		in:          &cp,
		opts:        opts,
		secrets:     map[string]*secretEntry{},
		services:    map[string]*serviceEntry{},
		poolsByName: map[string]*poolEntry{},
		vipsByName:  map[string]*vipEntry{},
		policies:    map[string]*pb.Policy{},
		backends:    map[string]*pb.Backend{},
		certs:       map[string]*pb.Certificate{},
	}
}

func (b *builder) errorf(r diag.Ref, field, format string, args ...any) {
	b.diags.Errorf(r, field, format, args...)
}

func (b *builder) warnf(r diag.Ref, field, format string, args ...any) {
	b.diags.Warnf(r, field, format, args...)
}

// missingf reports a reference to a Secret or Service that is not in the
// input: an error when the input is the whole cluster, a warning for files,
// which may be meant for a cluster that has it.
func (b *builder) missingf(r diag.Ref, field, format string, args ...any) {
	if b.opts.ClusterComplete {
		b.errorf(r, field, format, args...)
		return
	}
	b.warnf(r, field, format+" (not in the given files; it must exist in the cluster)", args...)
}

func ref(kind, ns, name string) diag.Ref { return diag.Ref{Kind: kind, Namespace: ns, Name: name} }

func key(ns, name string) string { return ns + "/" + name }

// orDefault returns ns, or def when ns is empty.
func orDefault(ns, def string) string { return cmp.Or(ns, def) }

func (b *builder) systemNamespace() string { return DefaultSystemNamespace }

// sortByName sorts objects by namespace then name, so every later step
// visits them in the same order whatever order they arrived in.
//
// The sort is not stable: namespace and name identify an object, so no two
// compare equal, and a stable sort of 3000 routes in the random order a
// controller's cache lists them took 6 ms of each build (pdqsort: under
// 1 ms, and linear when they come sorted, as from files).
func sortByName[T any](s []T, nsName func(*T) (string, string)) []*T {
	out := make([]*T, len(s))
	for i := range s {
		out[i] = &s[i]
	}
	slices.SortFunc(out, func(a, c *T) int {
		an, aa := nsName(a)
		cn, cc := nsName(c)
		return cmp.Or(cmp.Compare(an, cn), cmp.Compare(aa, cc))
	})
	return out
}

func (b *builder) assemble() (*pb.ConfigSnapshot, diag.List) {
	cluster := b.assembleCluster()
	return b.snapshotOf(cluster, b.hashCluster(cluster))
}

// assembleCluster collects the cluster part, in a stable order.
func (b *builder) assembleCluster() *pb.ClusterConfig {
	cluster := &pb.ClusterConfig{Routes: b.routes, Plan: b.plan}
	for _, v := range b.vips {
		if v.accepted {
			cluster.Vips = append(cluster.Vips, v.pb)
		}
	}
	for _, l := range b.listeners {
		slices.Sort(l.pb.Routes)
		cluster.Listeners = append(cluster.Listeners, l.pb)
	}
	cluster.Backends = sortedValues(b.backends, func(x *pb.Backend) string { return x.Name })
	cluster.Policies = sortedValues(b.policies, func(x *pb.Policy) string { return x.Name })
	cluster.Certificates = sortedValues(b.certs, func(x *pb.Certificate) string { return x.Name })
	slices.SortFunc(cluster.Listeners, func(a, c *pb.Listener) int { return cmp.Compare(a.Name, c.Name) })
	slices.SortFunc(cluster.Routes, func(a, c *pb.Route) int { return cmp.Compare(a.Name, c.Name) })
	return cluster
}

// snapshotOf is the snapshot of cluster (hashed as h) and the node part,
// with the diagnostics.
func (b *builder) snapshotOf(cluster *pb.ClusterConfig, h clusterHash) (*pb.ConfigSnapshot, diag.List) {
	b.diags = dedupe(b.diags)
	b.diags.Sort()
	s := &pb.ConfigSnapshot{
		Version: b.opts.Version,
		Cluster: cluster,
		Node:    b.node,
	}
	s.ContentHash = h.with(b.node)
	for _, d := range b.diags {
		s.Diagnostics = append(s.Diagnostics, DiagnosticToProto(d))
	}
	return s, b.diags
}

func sortedValues[T any](m map[string]T, name func(T) string) []T {
	out := make([]T, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, c T) int { return cmp.Compare(name(a), name(c)) })
	return out
}

func dedupe(l diag.List) diag.List {
	seen := map[string]bool{}
	out := l[:0]
	for _, d := range l {
		k := d.String()
		if !seen[k] {
			seen[k] = true
			out = append(out, d)
		}
	}
	return out
}

var deterministic = proto.MarshalOptions{Deterministic: true}

// ClusterBytes is the deterministic encoding of the cluster-wide part of s:
// equal on every node built from the same resources.
func ClusterBytes(s *pb.ConfigSnapshot) []byte {
	out, err := deterministic.Marshal(s.GetCluster())
	if err != nil {
		// Marshalling a well-formed message cannot fail; a failure is a bug.
		panic(fmt.Sprintf("marshal cluster config: %v", err))
	}
	return out
}

// ContentHash is the hex SHA-256 over the deterministic encodings of the
// cluster and node parts of s (version and diagnostics excluded).
func ContentHash(s *pb.ConfigSnapshot) string {
	return encodedClusterHash(ClusterBytes(s)).with(s.GetNode())
}

// hashCluster hashes c, with the records of routes the memo holds when
// there is one: without, encoding the whole part at once is faster than
// in pieces.
func (b *builder) hashCluster(c *pb.ClusterConfig) clusterHash {
	if b.opts.Memo == nil {
		return encodedClusterHash(ClusterBytes(&pb.ConfigSnapshot{Cluster: c}))
	}
	return hashCluster(c, b.routeRecord)
}

// encodedClusterHash is the hash of a cluster part's encoding.
func encodedClusterHash(clusterBytes []byte) clusterHash {
	h := sha256.New()
	h.Write(clusterBytes)
	return clusterHash{h.(hash.Cloner)}
}

// hashCluster hashes the deterministic encoding of c, written in pieces
// (writeCluster) so that the records of routes can come from a Memo.
func hashCluster(c *pb.ClusterConfig, record func(*pb.Route) []byte) clusterHash {
	h := sha256.New()
	writeCluster(h, c, record)
	return clusterHash{h.(hash.Cloner)}
}

// routesField is ClusterConfig's routes field; clusterFields are its
// fields in number order.
var (
	routesField   = (&pb.ClusterConfig{}).ProtoReflect().Descriptor().Fields().ByName("routes")
	clusterFields = func() []protoreflect.FieldDescriptor {
		fields := (&pb.ClusterConfig{}).ProtoReflect().Descriptor().Fields()
		out := make([]protoreflect.FieldDescriptor, fields.Len())
		for i := range out {
			out[i] = fields.Get(i)
		}
		slices.SortFunc(out, func(a, b protoreflect.FieldDescriptor) int { return cmp.Compare(a.Number(), b.Number()) })
		return out
	}()
)

// writeCluster writes what deterministic.Marshal(c) gives, byte for byte,
// in pieces: a message's encoding is the records of its fields in field
// number order (unknown fields last), and a repeated message field's
// records are one per element, so the routes' records, taken from record,
// sit between the encodings of the fields before and after them
// (TestWriteClusterIsMarshal).
func writeCluster(w io.Writer, c *pb.ClusterConfig, record func(*pb.Route) []byte) {
	src := c.ProtoReflect()
	for _, fd := range clusterFields {
		if !src.Has(fd) {
			continue
		}
		if fd == routesField {
			for _, rt := range c.GetRoutes() {
				_, _ = w.Write(record(rt))
			}
			continue
		}
		one := &pb.ClusterConfig{}
		one.ProtoReflect().Set(fd, src.Get(fd))
		enc, err := deterministic.Marshal(one)
		if err != nil {
			panic(fmt.Sprintf("marshal cluster config: %v", err))
		}
		_, _ = w.Write(enc)
	}
	_, _ = w.Write(src.GetUnknown())
}

// routeRecord is rt's record as an element of ClusterConfig.routes.
func routeRecord(rt *pb.Route) []byte {
	enc, err := deterministic.Marshal(rt)
	if err != nil {
		panic(fmt.Sprintf("marshal route: %v", err))
	}
	out := protowire.AppendTag(make([]byte, 0, len(enc)+8), routesField.Number(), protowire.BytesType)
	out = protowire.AppendVarint(out, uint64(len(enc)))
	return append(out, enc...)
}

// clusterHash is a SHA-256 that has consumed a cluster part's encoding:
// the content hashes of snapshots sharing that part each cost their node
// part only (1.8 MB of cluster part with 10 000 routes: about 1 ms a
// node).
type clusterHash struct{ h hash.Cloner }

// with is the content hash of the cluster part and n.
func (c clusterHash) with(n *pb.NodeConfig) string {
	h, err := c.h.Clone()
	if err != nil {
		// SHA-256 clones without fail; a failure is a bug.
		panic(fmt.Sprintf("clone the cluster hash: %v", err))
	}
	node, err := deterministic.Marshal(n)
	if err != nil {
		panic(fmt.Sprintf("marshal node config: %v", err))
	}
	h.Write(node)
	return hex.EncodeToString(h.Sum(nil))
}

// DiagnosticToProto converts a diagnostic for the wire.
func DiagnosticToProto(d diag.Diagnostic) *pb.Diagnostic {
	sev := pb.Severity_SEVERITY_ERROR
	if d.Severity == diag.Warning {
		sev = pb.Severity_SEVERITY_WARNING
	}
	return &pb.Diagnostic{
		Severity: sev, Kind: d.Resource.Kind, Namespace: d.Resource.Namespace, Name: d.Resource.Name,
		Field: d.Field, Message: d.Message, File: d.Pos.File, Line: uint32(max(d.Pos.Line, 0)),
	}
}

// DiagnosticFromProto converts a wire diagnostic back.
func DiagnosticFromProto(p *pb.Diagnostic) diag.Diagnostic {
	sev := diag.Error
	if p.GetSeverity() == pb.Severity_SEVERITY_WARNING {
		sev = diag.Warning
	}
	return diag.Diagnostic{
		Severity: sev, Resource: ref(p.GetKind(), p.GetNamespace(), p.GetName()),
		Field: p.GetField(), Message: p.GetMessage(), Pos: diag.Position{File: p.GetFile(), Line: int(p.GetLine())},
	}
}

// kinds, for diagnostics.
const (
	kVIP     = v1alpha1.KindProxyVIP
	kPool    = v1alpha1.KindProxyIPPool
	kGateway = v1alpha1.KindProxyGateway
	kRoute   = v1alpha1.KindProxyRoute
	kBackend = v1alpha1.KindProxyBackend
	kPolicy  = v1alpha1.KindProxyPolicy
)
