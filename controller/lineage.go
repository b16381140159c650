package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"sync"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/novaedge/novaedge/fastpath/lineage"
	"github.com/novaedge/novaedge/fastpath/maglev"
	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/snapshot"
)

// The leader persists the Maglev lineage of every cluster-wide FAST plan
// entry large enough to want one (fastpath/lineage: lineage.Wanted, from
// lineage.MinBackends live endpoints) in one ConfigMap of the controller's
// namespace, so that every replica puts the same lineage into its
// snapshots and every node builds the same table, whatever snapshots it saw
// before, and a new leader carries on from the old one's tables instead of
// starting over.
const (
	// LabelMaglevLineage marks the lineage ConfigMaps (value "true"); the
	// controller's cache watches only ConfigMaps of its namespace with it.
	LabelMaglevLineage = "novaedge.io/maglev-lineage"
	// MaglevLineagePrefix begins every lineage ConfigMap's name; the rest
	// is MaglevLineageConfigMap's hash of the entry.
	MaglevLineagePrefix = "novaedge-maglev-"
	// MaglevLineageEntryKey is the data key holding the plan entry's
	// snapshot.PlanKey, e.g. "192.0.2.10:443/tcp".
	MaglevLineageEntryKey = "entry"
	// MaglevLineageDataKey is the binaryData key holding the lineage, a
	// deterministically marshalled pb.MaglevLineage.
	MaglevLineageDataKey = "lineage"
)

// MaglevLineageConfigMap is the name of the ConfigMap holding the lineage
// of the plan entry key (snapshot.PlanKey): a hash, because a key holds
// characters a name cannot ("[", ":", "/").
func MaglevLineageConfigMap(key string) string {
	sum := sha256.Sum256([]byte(key))
	return MaglevLineagePrefix + hex.EncodeToString(sum[:])[:16]
}

// persistedLineage is one lineage ConfigMap as read from the cache.
type persistedLineage struct {
	cm *corev1.ConfigMap
	// key is the plan entry it names; empty if it names none.
	key string
	// lineage is nil when err is set.
	lineage *pb.MaglevLineage
	// err says why the ConfigMap cannot be used: it is then treated as
	// absent (and the leader rewrites or deletes it).
	err error
}

// readLineages lists the lineage ConfigMaps of namespace from r and
// decodes each, through dec when given. The ConfigMaps are the cache's own
// objects, not copies (up to 80 KB each, read on every run of both
// controllers): they must not be modified.
func readLineages(ctx context.Context, r client.Reader, namespace string, dec *lineageDecoder) ([]persistedLineage, error) {
	var list corev1.ConfigMapList
	err := r.List(ctx, &list, client.InNamespace(namespace), client.MatchingLabels{LabelMaglevLineage: "true"}, client.UnsafeDisableDeepCopy)
	if err != nil {
		return nil, fmt.Errorf("list maglev lineage ConfigMaps: %w", err)
	}
	out := make([]persistedLineage, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, dec.decode(&list.Items[i]))
	}
	dec.retain(out)
	return out, nil
}

// lineageDecoder remembers the decoding of each ConfigMap version, since
// decoding reads every slot and the ConfigMaps rarely change. A nil one
// decodes every time. It is safe for concurrent use.
type lineageDecoder struct {
	mu sync.Mutex
	// seen by ConfigMap name (one namespace).
	seen map[string]persistedLineage
}

func (d *lineageDecoder) decode(cm *corev1.ConfigMap) persistedLineage {
	if d != nil {
		d.mu.Lock()
		p, ok := d.seen[cm.Name]
		d.mu.Unlock()
		if ok && p.cm.UID == cm.UID && p.cm.ResourceVersion == cm.ResourceVersion {
			p.cm = cm
			return p
		}
	}
	key, l, err := decodeLineage(cm)
	p := persistedLineage{cm: cm, key: key, lineage: l, err: err}
	if d != nil {
		d.mu.Lock()
		if d.seen == nil {
			d.seen = map[string]persistedLineage{}
		}
		d.seen[cm.Name] = p
		d.mu.Unlock()
	}
	return p
}

// retain forgets the ConfigMaps that are not in ps, a complete list.
func (d *lineageDecoder) retain(ps []persistedLineage) {
	if d == nil {
		return
	}
	live := make(map[string]bool, len(ps))
	for _, p := range ps {
		live[p.cm.Name] = true
	}
	d.mu.Lock()
	maps.DeleteFunc(d.seen, func(name string, _ persistedLineage) bool { return !live[name] })
	d.mu.Unlock()
}

// decodeLineage returns the plan entry cm names and its lineage, or why it
// cannot be used. A ConfigMap whose name is not the entry's own is refused
// too, so that one entry never has two lineages to choose from.
func decodeLineage(cm *corev1.ConfigMap) (string, *pb.MaglevLineage, error) {
	key := cm.Data[MaglevLineageEntryKey]
	if key == "" {
		return "", nil, fmt.Errorf("data.%s: empty, it must name the plan entry", MaglevLineageEntryKey)
	}
	if want := MaglevLineageConfigMap(key); cm.Name != want {
		return key, nil, fmt.Errorf("data.%s %q: the ConfigMap of that entry is named %s", MaglevLineageEntryKey, key, want)
	}
	raw, ok := cm.BinaryData[MaglevLineageDataKey]
	if !ok {
		return key, nil, fmt.Errorf("binaryData.%s: missing", MaglevLineageDataKey)
	}
	l := &pb.MaglevLineage{}
	if err := proto.Unmarshal(raw, l); err != nil {
		return key, nil, fmt.Errorf("binaryData.%s: %w", MaglevLineageDataKey, err)
	}
	if err := lineage.Validate(l); err != nil {
		return key, nil, fmt.Errorf("binaryData.%s: %w", MaglevLineageDataKey, err)
	}
	return key, l, nil
}

// encodeLineage is the ConfigMap content of key's lineage l.
func encodeLineage(key string, l *pb.MaglevLineage) (map[string]string, map[string][]byte, error) {
	raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(l)
	if err != nil {
		return nil, nil, fmt.Errorf("marshal maglev lineage of %s: %w", key, err)
	}
	return map[string]string{MaglevLineageEntryKey: key}, map[string][]byte{MaglevLineageDataKey: raw}, nil
}

// readPersistedLineages fills w's Decisions with the lineages persisted in
// the cache, unless the controller runs without them. Unusable ConfigMaps
// are skipped with a warning: the leader rewrites or deletes them.
func (c *Controller) readPersistedLineages(ctx context.Context, w *world) error {
	if c.opts.DisableMaglevLineage {
		return nil
	}
	ps, err := readLineages(ctx, c.mgr.GetCache(), c.opts.Namespace, &c.lineageDecoder)
	if err != nil {
		return err
	}
	w.lineages = ps
	w.in.Decisions.MaglevLineage = map[string]*pb.MaglevLineage{}
	for _, p := range ps {
		if p.err != nil {
			c.log.Warn("maglev lineage ConfigMap skipped: the tables of its entry start over from the endpoints", "configmap", p.cm.Namespace+"/"+p.cm.Name, "problem", p.err)
			continue
		}
		w.in.Decisions.MaglevLineage[p.key] = p.lineage
	}
	return nil
}

// lineages is the leader's Maglev state: a table builder, and the last
// table computed per entry, since the decider runs every Resync and a
// rebuild of an unchanged entry gives the same table.
type lineages struct {
	builder *maglev.Builder
	memo    map[string]lineageMemo
}

type lineageMemo struct {
	prev    *pb.MaglevLineage
	members []maglev.Backend
	next    *pb.MaglevLineage
}

func newLineages() (*lineages, error) {
	b, err := maglev.NewBuilder(maglev.DefaultSize)
	if err != nil {
		return nil, fmt.Errorf("maglev builder: %w", err)
	}
	return &lineages{builder: b, memo: map[string]lineageMemo{}}, nil
}

// next is lineage.Next for key, from the memo when prev and members are
// those of the last call.
func (ls *lineages) next(key string, prev *pb.MaglevLineage, members []maglev.Backend) (*pb.MaglevLineage, error) {
	if m, ok := ls.memo[key]; ok && slices.Equal(m.members, members) && proto.Equal(m.prev, prev) {
		return m.next, nil
	}
	next, err := lineage.Next(ls.builder, prev, members)
	if err != nil {
		return nil, err
	}
	ls.memo[key] = lineageMemo{prev: prev, members: members, next: next}
	return next, nil
}

// desired returns, for the plan of a build, the lineage to persist for
// each cluster-wide FAST entry that should have one (want), and the
// entries whose persisted lineage, if any, stays as it is because their
// endpoints cannot be table members (hold, with an error each). Any other
// entry has no lineage: lineage.Wanted finds too few live endpoints (fewer
// than lineage.MinBackends, or half that once it has one), which also
// covers an entry none of whose endpoints takes new flows.
func (ls *lineages) desired(plan []*pb.PlanEntry) (want map[string]*pb.MaglevLineage, hold map[string]bool, errs []error) {
	want, hold = map[string]*pb.MaglevLineage{}, map[string]bool{}
	seen := map[string]bool{}
	for _, e := range plan {
		if e.GetPath() != pb.DataPath_DATA_PATH_FAST || e.GetNodeLocal() {
			continue
		}
		key := snapshot.PlanKey(e)
		if seen[key] {
			// One address:port/protocol matched twice: the build
			// reports the conflict; the first entry keeps the table.
			continue
		}
		seen[key] = true
		members, err := lineage.Members(e)
		if err != nil {
			hold[key] = true
			errs = append(errs, fmt.Errorf("maglev lineage of %s: %w", key, err))
			continue
		}
		if !lineage.Wanted(e.GetLineage() != nil, members) {
			continue
		}
		next, err := ls.next(key, e.GetLineage(), members)
		if err != nil {
			hold[key] = true
			errs = append(errs, fmt.Errorf("maglev lineage of %s: %w", key, err))
			continue
		}
		if next != nil {
			want[key] = next
		}
	}
	maps.DeleteFunc(ls.memo, func(k string, _ lineageMemo) bool { return want[k] == nil })
	return want, hold, errs
}

// lineageWrite is one change persistLineages made, for the log.
type lineageWrite struct {
	op, key, name string
	backends      int
}

// persistLineages makes the lineage ConfigMaps of namespace match want and
// hold (see desired): it creates or updates those whose lineage differs
// from want, keeps the usable ones of entries in hold, and deletes the
// rest: those of entries that are gone, are no longer cluster-wide FAST
// ones or should not have a lineage, those that cannot be used and have
// nothing to replace them, and strays (a name that is not their entry's).
func persistLineages(ctx context.Context, cl client.Client, namespace string, have []persistedLineage,
	want map[string]*pb.MaglevLineage, hold map[string]bool) ([]lineageWrite, []error) {
	var done []lineageWrite
	var errs []error
	byName := map[string]persistedLineage{}
	keep := map[string]bool{}
	for _, p := range have {
		byName[p.cm.Name] = p
		if p.err == nil && hold[p.key] {
			keep[p.cm.Name] = true
		}
	}
	for _, key := range slices.Sorted(maps.Keys(want)) {
		next := want[key]
		name := MaglevLineageConfigMap(key)
		keep[name] = true
		p, exists := byName[name]
		if exists && p.err == nil && p.key == key && proto.Equal(p.lineage, next) {
			continue
		}
		data, bin, err := encodeLineage(key, next)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		w := lineageWrite{op: "create", key: key, name: name, backends: len(next.GetBackends())}
		if exists {
			cm := p.cm.DeepCopy()
			if cm.Labels == nil {
				cm.Labels = map[string]string{}
			}
			cm.Labels[LabelMaglevLineage] = "true"
			cm.Data, cm.BinaryData = data, bin
			w.op = "update"
			err = cl.Update(ctx, cm)
		} else {
			err = cl.Create(ctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{LabelMaglevLineage: "true"}},
				Data:       data, BinaryData: bin,
			})
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s maglev lineage ConfigMap %s/%s of %s: %w", w.op, namespace, name, key, err))
			continue
		}
		done = append(done, w)
	}
	for _, p := range have {
		if keep[p.cm.Name] {
			continue
		}
		cm := p.cm.DeepCopy() // the cache's object: never handed on
		err := cl.Delete(ctx, cm, client.Preconditions{UID: &cm.UID, ResourceVersion: &cm.ResourceVersion})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete maglev lineage ConfigMap %s/%s: %w", p.cm.Namespace, p.cm.Name, err))
			continue
		}
		done = append(done, lineageWrite{op: "delete", key: p.key, name: p.cm.Name})
	}
	return done, errs
}

// writeLineages persists the lineage of every cluster-wide FAST entry of
// snap that wants one, and deletes the others' ConfigMaps; snap is the
// leader's build from the persisted decisions (which carries the persisted
// lineages).
func (d *decider) writeLineages(ctx context.Context, w *world, snap *pb.ConfigSnapshot) []error {
	if d.c.opts.DisableMaglevLineage {
		return nil
	}
	if d.lineages == nil {
		ls, err := newLineages()
		if err != nil {
			return []error{err}
		}
		d.lineages = ls
	}
	want, hold, errs := d.lineages.desired(snap.GetCluster().GetPlan())
	done, werrs := persistLineages(ctx, d.c.mgr.GetClient(), d.c.opts.Namespace, w.lineages, want, hold)
	for _, x := range done {
		d.c.log.Info("maglev lineage "+x.op+"d", "entry", x.key, "configmap", x.name, "backends", x.backends)
		d.c.metrics.lineageWrites.WithLabelValues(x.op).Inc()
	}
	return append(errs, werrs...)
}
