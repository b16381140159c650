package controller

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/novaedge/novaedge/api/v1alpha1"
)

// TestSpecCache: a route listed again at the generation it had gets the
// rules first listed for it (the same array, which snapshot.Memo needs);
// a new generation, a route without UID or generation, and a route listed
// again after it was gone from a list get their own.
func TestSpecCache(t *testing.T) {
	route := func(uid string, gen int64, host string) v1alpha1.ProxyRoute {
		r := v1alpha1.ProxyRoute{ObjectMeta: metav1.ObjectMeta{Name: uid, UID: types.UID(uid), Generation: gen}}
		r.Spec.Hostnames = []string{host}
		r.Spec.Rules = []v1alpha1.RouteRule{{Name: host}}
		return r
	}
	var c specCache
	first := []v1alpha1.ProxyRoute{route("a", 1, "a1"), route("b", 1, "b1"), route("", 0, "x")}
	c.stabilize(first)

	second := []v1alpha1.ProxyRoute{route("a", 1, "a1"), route("b", 2, "b2"), route("", 0, "x")}
	c.stabilize(second)
	for _, tc := range []struct {
		name string
		got  *v1alpha1.RouteRule
		want *v1alpha1.RouteRule
		same bool
	}{
		{"same generation", &second[0].Spec.Rules[0], &first[0].Spec.Rules[0], true},
		{"new generation", &second[1].Spec.Rules[0], &first[1].Spec.Rules[0], false},
		{"no UID", &second[2].Spec.Rules[0], &first[2].Spec.Rules[0], false},
	} {
		if (tc.got == tc.want) != tc.same {
			t.Errorf("%s: the rules are the first list's: %v, want %v", tc.name, tc.got == tc.want, tc.same)
		}
	}
	if second[1].Spec.Hostnames[0] != "b2" {
		t.Errorf("the new generation's spec was replaced: hostnames %v", second[1].Spec.Hostnames)
	}

	c.stabilize([]v1alpha1.ProxyRoute{route("b", 2, "b2")}) // a is gone
	third := []v1alpha1.ProxyRoute{route("a", 1, "a1"), route("b", 2, "b2")}
	c.stabilize(third)
	if &third[0].Spec.Rules[0] == &first[0].Spec.Rules[0] {
		t.Error("a route gone from a list and back was given the spec kept before")
	}
	if &third[1].Spec.Rules[0] != &second[1].Spec.Rules[0] {
		t.Error("route b at generation 2 was not given the spec kept for it")
	}
}
