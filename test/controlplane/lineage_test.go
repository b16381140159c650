package controlplane_test

import (
	"fmt"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/novaedge/novaedge/controller"
	"github.com/novaedge/novaedge/fastpath/lineage"
	"github.com/novaedge/novaedge/fastpath/maglev"
	pb "github.com/novaedge/novaedge/gen/novaedge/v1"
	"github.com/novaedge/novaedge/snapshot"
)

// ingressKey is the plan entry key of the Service's port 80 once it has an
// address.
func (c *cluster) ingressKey(svc string) (string, bool) {
	in := c.getService(svc).Status.LoadBalancer.Ingress
	if len(in) != 1 || in[0].IP == "" {
		return "", false
	}
	return in[0].IP + ":80/tcp", true
}

// lineageConfigMap reads and decodes the lineage ConfigMap of the plan
// entry key; nil and why when there is none or it does not decode.
func (c *cluster) lineageConfigMap(key string) (*corev1.ConfigMap, *pb.MaglevLineage, string) {
	var cm corev1.ConfigMap
	err := c.env.Client.Get(c.ctx, types.NamespacedName{Namespace: c.ns, Name: controller.MaglevLineageConfigMap(key)}, &cm)
	if err != nil {
		return nil, nil, err.Error()
	}
	if cm.Labels[controller.LabelMaglevLineage] != "true" || cm.Data[controller.MaglevLineageEntryKey] != key {
		return nil, nil, fmt.Sprintf("ConfigMap %s: labels %v, data %v", cm.Name, cm.Labels, cm.Data)
	}
	l := &pb.MaglevLineage{}
	if err := proto.Unmarshal(cm.BinaryData[controller.MaglevLineageDataKey], l); err != nil {
		return nil, nil, fmt.Sprintf("ConfigMap %s: %v", cm.Name, err)
	}
	if err := lineage.Validate(l); err != nil {
		return nil, nil, fmt.Sprintf("ConfigMap %s: %v", cm.Name, err)
	}
	return &cm, l, ""
}

// lineageConfigMaps names the lineage ConfigMaps of the test's namespace.
func (c *cluster) lineageConfigMaps() []string {
	var list corev1.ConfigMapList
	if err := c.env.Client.List(c.ctx, &list, client.InNamespace(c.ns), client.MatchingLabels{controller.LabelMaglevLineage: "true"}); err != nil {
		c.t.Fatalf("list lineage ConfigMaps: %v", err)
	}
	var out []string
	for _, cm := range list.Items {
		out = append(out, cm.Name)
	}
	return out
}

// endpoints are n endpoints prefix1, prefix2, … spread over nodes.
func endpoints(prefix string, n int, nodes ...string) []endpoint {
	var out []endpoint
	for i := range n {
		out = append(out, endpoint{addr: fmt.Sprintf("%s%d", prefix, i+1), node: nodes[i%len(nodes)]})
	}
	return out
}

// planEntryOf finds the plan entry key in snap.
func planEntryOf(snap *pb.ConfigSnapshot, key string) *pb.PlanEntry {
	for _, e := range snap.GetCluster().GetPlan() {
		if snapshot.PlanKey(e) == key {
			return e
		}
	}
	return nil
}

// carries reports whether a's snapshot gives entry key lineage l.
func carries(a *node, key string, l *pb.MaglevLineage) (bool, string) {
	e := planEntryOf(a.state(), key)
	if e == nil {
		return false, fmt.Sprintf("%s: no plan entry %s (version %d)", a.name, key, a.state().GetVersion())
	}
	if !proto.Equal(e.GetLineage(), l) {
		return false, fmt.Sprintf("%s: entry %s has another lineage (%d backends, want %d; version %d)", a.name, key,
			len(e.GetLineage().GetBackends()), len(l.GetBackends()), a.state().GetVersion())
	}
	return true, ""
}

// slotOwners is lineage.Owners, failing the test on an error.
func slotOwners(t *testing.T, l *pb.MaglevLineage) []string {
	t.Helper()
	out, err := lineage.Owners(l)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestMaglevLineage: with two replicas and an agent on each, the leader
// persists the Maglev table of a cluster-wide Service in a ConfigMap, both
// agents receive it in their snapshots, an endpoint leaving moves only its
// own slots, a new leader carries on with the persisted table instead of
// starting over, a Local Service gets none, and a deleted Service's
// ConfigMap goes with it.
func TestMaglevLineage(t *testing.T) {
	c := newCluster(t)
	n1, n2 := c.addNode(c.name("n1"), nil).Name, c.addNode(c.name("n2"), nil).Name
	c.pool("pool", "10.77.8.0/29")
	r1 := c.startController("r1")
	c.eventually("r1 to lead", func() (bool, string) { return c.leader(r1), c.leaderIdentity() })
	r2 := c.startController("r2")
	a1 := c.startAgent(n1, r1, "")
	a2 := c.startAgent(n2, r2, "")

	// Enough endpoints for a lineage (lineage.Wanted).
	eps := endpoints("10.8.0.", lineage.MinBackends+16, n1, n2)
	svc, es := c.service("web", false, eps...)
	var key string
	c.eventually("the Service's address", func() (bool, string) {
		k, ok := c.ingressKey(svc.Name)
		key = k
		return ok, fmt.Sprintf("%+v", c.getService(svc.Name).Status)
	})

	var first *pb.MaglevLineage
	var cm *corev1.ConfigMap
	t.Run("the leader persists the Service's table", func(t *testing.T) {
		c.eventually("the lineage ConfigMap of "+key, func() (bool, string) {
			var why string
			cm, first, why = c.lineageConfigMap(key)
			return first != nil && len(first.GetBackends()) == len(eps) && first.GetSize() == maglev.DefaultSize,
				fmt.Sprintf("%s %d backends", why, len(first.GetBackends()))
		})
		if n, want := len(cm.BinaryData[controller.MaglevLineageDataKey]), 65537*7/8; n < want || n > want+4096 {
			t.Errorf("%d backends take %d bytes, want 7 bits per slot (%d bytes) and a little", len(eps), n, want)
		}
	})

	t.Run("both agents receive it, through either replica", func(t *testing.T) {
		for _, a := range []*node{a1, a2} {
			c.eventually(a.name+"'s snapshot to carry the lineage", func() (bool, string) { return carries(a, key, first) })
		}
	})

	var second *pb.MaglevLineage
	t.Run("an endpoint leaving moves only its own slots", func(t *testing.T) {
		gone := "10.8.0.7"
		c.update(es, func() {
			es.Endpoints = slices.DeleteFunc(es.Endpoints, func(e discoveryv1.Endpoint) bool { return e.Addresses[0] == gone })
		}, false)
		c.eventually("the ConfigMap to be updated", func() (bool, string) {
			_, l, why := c.lineageConfigMap(key)
			second = l
			return l != nil && len(l.GetBackends()) == len(eps)-1, fmt.Sprintf("%s %d backends", why, len(l.GetBackends()))
		})
		before, after := slotOwners(t, first), slotOwners(t, second)
		moved, owned := 0, 0
		for s := range before {
			if before[s] == gone+":8080" {
				owned++
			}
			if before[s] != after[s] {
				moved++
				if before[s] != gone+":8080" {
					t.Fatalf("slot %d moved from %s, which stayed, to %s", s, before[s], after[s])
				}
			}
		}
		if owned == 0 || moved != owned {
			t.Errorf("%d slots moved; the endpoint that left owned %d", moved, owned)
		}
		t.Logf("removing 1 of %d endpoints moved %d of %d slots", len(eps), moved, len(before))
		// A plain table of the others would have moved their slots too:
		// what follows tells a kept lineage from a rebuilt one.
		var members []maglev.Backend
		for i, k := range second.GetBackends() {
			members = append(members, maglev.Backend{Key: k, Weight: 1, ID: uint32(i + 1)})
		}
		b, err := maglev.NewBuilder(maglev.DefaultSize)
		if err != nil {
			t.Fatal(err)
		}
		plain, err := lineage.Next(b, nil, members)
		if err != nil {
			t.Fatal(err)
		}
		if proto.Equal(plain, second) {
			t.Fatal("the plain table of the endpoints left is the persisted one: the failover check below would prove nothing")
		}
		for _, a := range []*node{a1, a2} {
			c.eventually(a.name+"'s snapshot to carry the new lineage", func() (bool, string) { return carries(a, key, second) })
		}
	})

	t.Run("a new leader keeps the persisted table", func(t *testing.T) {
		cm, _, why := c.lineageConfigMap(key)
		if cm == nil {
			t.Fatal(why)
		}
		rv := cm.ResourceVersion
		r1.stop(t)
		c.eventually("r2 to lead", func() (bool, string) { return c.leader(r2), c.leaderIdentity() })
		// Two decisions of r2 in a row: the first has finished (its
		// lineage writes included) when the second starts.
		for _, name := range []string{"after-1", "after-2"} {
			v := c.vip(name, c.name("pool"))
			c.eventually("r2 to allocate "+v.Name, func() (bool, string) {
				a := c.getVIP(v.Name).Status.Address
				return a != "", a
			})
		}
		now, l, why := c.lineageConfigMap(key)
		if now == nil {
			t.Fatal(why)
		}
		if now.ResourceVersion != rv || !proto.Equal(l, second) {
			t.Errorf("the new leader rewrote the lineage: resourceVersion %s → %s, same table %v", rv, now.ResourceVersion, proto.Equal(l, second))
		}
		if ok, why := carries(a2, key, second); !ok {
			t.Error(why)
		}
	})

	t.Run("externalTrafficPolicy Local: no ConfigMap, no lineage", func(t *testing.T) {
		// As many endpoints as would get a lineage were they cluster-wide.
		leps := endpoints("10.8.1.", lineage.MinBackends+6, n2)
		local, _ := c.service("local", true, leps...)
		var localKey string
		c.eventually("the Local Service's address", func() (bool, string) {
			k, ok := c.ingressKey(local.Name)
			localKey = k
			return ok, fmt.Sprintf("%+v", c.getService(local.Name).Status)
		})
		c.eventually("n2's snapshot to have the node-local entry", func() (bool, string) {
			e := planEntryOf(a2.state(), localKey)
			return e != nil && e.GetNodeLocal() && len(e.GetEndpoints()) == len(leps), fmt.Sprint(e)
		})
		// A decision that starts after the one that saw the Service.
		v := c.vip("after-local", c.name("pool"))
		c.eventually("r2 to allocate "+v.Name, func() (bool, string) {
			a := c.getVIP(v.Name).Status.Address
			return a != "", a
		})
		if e := planEntryOf(a2.state(), localKey); e.GetLineage() != nil {
			t.Errorf("the Local entry carries a lineage of %d backends", len(e.GetLineage().GetBackends()))
		}
		if got, want := c.lineageConfigMaps(), []string{controller.MaglevLineageConfigMap(key)}; !slices.Equal(got, want) {
			t.Errorf("lineage ConfigMaps %v, want only the cluster-wide Service's %v", got, want)
		}
	})

	t.Run("a deleted Service's ConfigMap is deleted", func(t *testing.T) {
		if err := c.env.Client.Delete(c.ctx, svc); err != nil {
			t.Fatal(err)
		}
		c.eventually("the ConfigMap to go", func() (bool, string) {
			var cm corev1.ConfigMap
			err := c.env.Client.Get(c.ctx, types.NamespacedName{Namespace: c.ns, Name: controller.MaglevLineageConfigMap(key)}, &cm)
			return apierrors.IsNotFound(err), fmt.Sprint(err)
		})
		c.eventually("the entry to leave n2's snapshot", func() (bool, string) {
			return planEntryOf(a2.state(), key) == nil, fmt.Sprint(a2.state().GetVersion())
		})
	})

	t.Run("the writes are counted", func(t *testing.T) {
		for _, op := range []string{"create", "update", "delete"} {
			if n := lineageWrites(t, op); n < 1 {
				t.Errorf("novaedge_controller_maglev_lineage_writes_total{op=%q} = %v, want ≥ 1", op, n)
			}
		}
	})
}

// lineageWrites reads the controllers' counter of lineage ConfigMap writes
// of one operation (the controllers run in this process and register in
// controller-runtime's registry).
func lineageWrites(t *testing.T, op string) float64 {
	t.Helper()
	mfs, err := crmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "novaedge_controller_maglev_lineage_writes_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "op" && l.GetValue() == op {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// TestMaglevLineageOff: a controller run with the lineages off
// (--maglev-lineage=false) neither writes lineage ConfigMaps nor puts
// those it finds into snapshots, and leaves them alone.
func TestMaglevLineageOff(t *testing.T) {
	c := newCluster(t)
	c.controllerOptions = func(o *controller.Options) { o.DisableMaglevLineage = true }
	n1 := c.addNode(c.name("n1"), nil).Name
	c.pool("pool", "10.77.8.8/29")
	r := c.startController("r1")
	a := c.startAgent(n1, r, "")
	// Enough endpoints for a lineage, were they on.
	eps := endpoints("10.8.2.", lineage.MinBackends, n1)
	svc, es := c.service("web", false, eps...)
	var key string
	c.eventually("the Service's entry on the agent", func() (bool, string) {
		k, ok := c.ingressKey(svc.Name)
		key = k
		e := planEntryOf(a.state(), key)
		return ok && e != nil && len(e.GetEndpoints()) == len(eps), fmt.Sprint(k, e)
	})
	if e := planEntryOf(a.state(), key); e.GetLineage() != nil {
		t.Errorf("the entry carries a lineage")
	}

	// A lineage persisted earlier (by a controller with lineages on) for
	// the same entry: valid, but not to be used.
	b, err := maglev.NewBuilder(maglev.DefaultSize)
	if err != nil {
		t.Fatal(err)
	}
	members, err := lineage.Members(planEntryOf(a.state(), key))
	if err != nil {
		t.Fatal(err)
	}
	l, err := lineage.Next(b, nil, members)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	planted := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.ns, Name: controller.MaglevLineageConfigMap(key), Labels: map[string]string{controller.LabelMaglevLineage: "true"}},
		Data:       map[string]string{controller.MaglevLineageEntryKey: key},
		BinaryData: map[string][]byte{controller.MaglevLineageDataKey: raw},
	}
	c.create(planted)
	if _, got, why := c.lineageConfigMap(key); got == nil {
		t.Fatalf("the planted ConfigMap does not decode: %s", why)
	}

	c.update(es, func() { es.Endpoints = append(es.Endpoints, endpoint{addr: "10.8.2.250", node: n1}.slice()) }, false)
	c.eventually("the new endpoint on the agent", func() (bool, string) {
		e := planEntryOf(a.state(), key)
		return e != nil && len(e.GetEndpoints()) == len(eps)+1, fmt.Sprint(e)
	})
	// A decision that starts after the one that saw the new endpoint.
	v := c.vip("later", c.name("pool"))
	c.eventually("the VIP's address", func() (bool, string) {
		a := c.getVIP(v.Name).Status.Address
		return a != "", a
	})
	if e := planEntryOf(a.state(), key); e.GetLineage() != nil {
		t.Errorf("the entry carries the planted lineage")
	}
	cm, _, why := c.lineageConfigMap(key)
	if cm == nil {
		t.Fatalf("the planted ConfigMap: %s", why)
	}
	if cm.ResourceVersion != planted.ResourceVersion {
		t.Errorf("the planted ConfigMap was rewritten (resourceVersion %s → %s)", planted.ResourceVersion, cm.ResourceVersion)
	}
	if got := c.lineageConfigMaps(); !slices.Equal(got, []string{planted.Name}) {
		t.Errorf("lineage ConfigMaps %v, want only the planted %s", got, planted.Name)
	}
}
