package snapshot

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/novaedge/novaedge/api/v1alpha1"
)

// TestOverlappingPoolsSameSecond: creation times have one-second
// resolution; of two overlapping pools made in the same second, the one
// already accepted keeps its addresses even when its name sorts later (a
// CI run caught the new pool taking over by name and the old one's
// addresses being released).
func TestOverlappingPoolsSameSecond(t *testing.T) {
	at := metav1.NewTime(time.Unix(1_800_000_000, 0))
	pool := func(name, cidr string, accepted bool) v1alpha1.ProxyIPPool {
		p := v1alpha1.ProxyIPPool{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: at}, Spec: v1alpha1.ProxyIPPoolSpec{CIDRs: []string{cidr}}}
		if accepted {
			p.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionAccepted, Status: metav1.ConditionTrue, Reason: "Accepted"}}
		}
		return p
	}
	for _, tc := range []struct {
		name  string
		pools []v1alpha1.ProxyIPPool
		want  string
	}{
		{"the accepted one sorts later by name", []v1alpha1.ProxyIPPool{pool("z-old", "10.0.0.0/29", true), pool("a-new", "10.0.0.4/30", false)}, "z-old"},
		{"neither accepted yet: by name", []v1alpha1.ProxyIPPool{pool("z-old", "10.0.0.0/29", false), pool("a-new", "10.0.0.4/30", false)}, "a-new"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := AcceptedPools(&Input{Pools: tc.pools})
			if len(got) != 1 || got[0].Name != tc.want {
				var names []string
				for _, p := range got {
					names = append(names, p.Name)
				}
				t.Fatalf("accepted %v, want only %s", names, tc.want)
			}
		})
	}
}

// TestVIPClaimSameSecond: of two ProxyVIPs made in the same second that
// claim one address, the one already accepted keeps it whatever the
// names; with neither accepted yet, the name decides.
func TestVIPClaimSameSecond(t *testing.T) {
	at := metav1.NewTime(time.Unix(1_800_000_000, 0))
	vip := func(name string, accepted bool) v1alpha1.ProxyVIP {
		v := v1alpha1.ProxyVIP{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: at},
			Spec: v1alpha1.ProxyVIPSpec{Address: "192.0.2.10", Mode: v1alpha1.VIPModeL2ARP}}
		if accepted {
			v.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionAccepted, Status: metav1.ConditionTrue, Reason: "Accepted"}}
		}
		return v
	}
	for _, tc := range []struct {
		name        string
		vips        []v1alpha1.ProxyVIP
		keeps, lose string
	}{
		{"the accepted one sorts later by name", []v1alpha1.ProxyVIP{vip("z-held", true), vip("a-new", false)}, "z-held", "a-new"},
		{"neither accepted yet: by name", []v1alpha1.ProxyVIP{vip("z-held", false), vip("a-new", false)}, "a-new", "z-held"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, diags := Build(&Input{VIPs: tc.vips}, Options{Node: Node{Name: "n"}})
			want := "ProxyVIP " + tc.lose + ": spec.address: address 192.0.2.10 is already claimed by ProxyVIP " + tc.keeps
			for _, d := range diags.Errors() {
				if strings.Contains(d.String(), want) {
					return
				}
			}
			t.Fatalf("want error %q, got %v", want, diags)
		})
	}
}
