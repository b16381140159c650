package controller

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/novaedge/novaedge/api/v1alpha1"
)

// TestSpecCache: routes listed without a deep copy (shallow copies of the
// cache's objects, as here) get a spec that stays the same object while
// the cache holds the same object, and a new one when it holds a new one,
// even at the same generation (a relist after a CRD's defaults changed);
// their metadata and status are copies, so writing them leaves the cache's
// objects alone.
func TestSpecCache(t *testing.T) {
	cached := func(uid string, gen int64, host string) *v1alpha1.ProxyRoute {
		r := &v1alpha1.ProxyRoute{ObjectMeta: metav1.ObjectMeta{Name: uid, UID: types.UID(uid), Generation: gen, Labels: map[string]string{"app": "web"}}}
		r.Spec.Hostnames = []string{host}
		r.Spec.Rules = []v1alpha1.RouteRule{{Name: host}}
		r.Status.Conditions = []metav1.Condition{{Type: "Accepted", Status: metav1.ConditionTrue}}
		return r
	}
	list := func(objs ...*v1alpha1.ProxyRoute) []v1alpha1.ProxyRoute {
		out := make([]v1alpha1.ProxyRoute, len(objs))
		for i, o := range objs {
			out[i] = *o
		}
		return out
	}
	a, b, noUID := cached("a", 1, "a1"), cached("b", 1, "b1"), cached("", 0, "x")
	var c specCache
	first := list(a, b, noUID)
	c.own(first)

	b2 := cached("b", 1, "b1-defaulted") // the same generation, received again
	second := list(a, b2, noUID)
	c.own(second)
	for _, tc := range []struct {
		name      string
		got, want *v1alpha1.RouteRule
		same      bool
	}{
		{"the same cached object", &second[0].Spec.Rules[0], &first[0].Spec.Rules[0], true},
		{"a new cached object, same generation", &second[1].Spec.Rules[0], &first[1].Spec.Rules[0], false},
		{"no UID", &second[2].Spec.Rules[0], &first[2].Spec.Rules[0], false},
		{"the spec is not the cache's", &second[0].Spec.Rules[0], &a.Spec.Rules[0], false},
	} {
		if (tc.got == tc.want) != tc.same {
			t.Errorf("%s: the same rules: %v, want %v", tc.name, tc.got == tc.want, tc.same)
		}
	}
	if second[1].Spec.Hostnames[0] != "b1-defaulted" {
		t.Errorf("the object received again kept the spec before: hostnames %v", second[1].Spec.Hostnames)
	}

	second[0].Status.Conditions[0].Status = metav1.ConditionFalse
	second[0].Labels["app"] = "changed"
	if a.Status.Conditions[0].Status != metav1.ConditionTrue || a.Labels["app"] != "web" {
		t.Error("writing a listed route's status or labels wrote the cache's object")
	}

	c.own(list(b2)) // a is gone
	third := list(a, b2)
	c.own(third)
	if &third[0].Spec.Rules[0] == &second[0].Spec.Rules[0] {
		t.Error("a route gone from a list and back was given the spec kept before")
	}
	if &third[1].Spec.Rules[0] != &second[1].Spec.Rules[0] {
		t.Error("route b, the same cached object, was not given the spec kept for it")
	}
}
