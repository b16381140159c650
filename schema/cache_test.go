package schema

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/novaedge/novaedge/deploy/crds"
)

// TestValidCache: a valid object is validated once and then served from
// the cache as an independent copy; an invalid one is never cached.
func TestValidCache(t *testing.T) {
	v, err := NewFromFS(crds.FS)
	if err != nil {
		t.Fatal(err)
	}
	good := func() map[string]any {
		return map[string]any{
			"apiVersion": "novaedge.io/v1alpha1", "kind": "ProxyBackend",
			"metadata": map[string]any{"name": "b", "namespace": "ns"},
			"spec":     map[string]any{"endpoints": []any{map[string]any{"address": "10.0.0.1", "port": int64(80)}}},
		}
	}
	first, diags := v.Validate(good())
	if len(diags) != 0 {
		t.Fatalf("valid object: %v", diags)
	}
	if len(v.valid) != 1 {
		t.Fatalf("cache holds %d objects, want 1", len(v.valid))
	}
	// Changing what the caller got does not change the cache, and numbers
	// keep the types documents use.
	if _, ok := first["spec"].(map[string]any)["endpoints"].([]any)[0].(map[string]any)["port"].(int64); !ok {
		t.Fatalf("port decoded as %T", first["spec"].(map[string]any)["endpoints"].([]any)[0].(map[string]any)["port"])
	}
	first["spec"].(map[string]any)["lbPolicy"] = "Random"
	second, diags := v.Validate(good())
	if len(diags) != 0 {
		t.Fatalf("second validation: %v", diags)
	}
	if _, changed := second["spec"].(map[string]any)["lbPolicy"]; changed && second["spec"].(map[string]any)["lbPolicy"] == "Random" {
		t.Fatal("the cached object was changed through a returned copy")
	}
	if _, ok := second["spec"].(map[string]any)["endpoints"].([]any)[0].(map[string]any)["port"].(int64); !ok {
		t.Fatal("a cached object's integer is not an int64")
	}
	third, _ := v.Validate(good())
	if diff := cmp.Diff(second, third); diff != "" {
		t.Fatalf("cached results differ:\n%s", diff)
	}

	bad := good()
	bad["spec"].(map[string]any)["endpoints"].([]any)[0].(map[string]any)["port"] = int64(70000)
	for range 2 {
		if _, diags := v.Validate(bad); len(diags) == 0 {
			t.Fatal("an invalid object passed (from the cache?)")
		}
	}
	if len(v.valid) != 1 {
		t.Fatalf("cache holds %d objects after invalid ones, want 1", len(v.valid))
	}
}
