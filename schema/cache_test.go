package schema

import (
	"crypto/sha256"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/novaedge/novaedge/deploy/crds"
	"github.com/novaedge/novaedge/diag"
)

// TestValidCache: a valid object is validated once and then served from
// the cache as an independent copy; an invalid one is never cached.
func TestValidCache(t *testing.T) {
	v, err := NewFromFS(crds.FS, nil)
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

// TestValidCacheKeepsChangesOnly: an object that validation leaves as it is
// costs the cache its key only, and a cached object comes back as
// validation returned it, whether or not validation changed it.
func TestValidCacheKeepsChangesOnly(t *testing.T) {
	v, err := NewFromFS(crds.FS, nil)
	if err != nil {
		t.Fatal(err)
	}
	backend := func(md map[string]any) map[string]any {
		return map[string]any{
			"apiVersion": "novaedge.io/v1alpha1", "kind": "ProxyBackend", "metadata": md,
			"spec": map[string]any{"endpoints": []any{map[string]any{"address": "10.0.0.1", "port": int64(80)}}},
		}
	}
	tests := []struct {
		name      string
		obj       func() map[string]any
		stored    bool   // the cache holds the validated JSON
		namespace string // of the validated object
	}{
		{"unchanged", func() map[string]any { return backend(map[string]any{"name": "b", "namespace": "ns"}) }, false, "ns"},
		{"namespace defaulted", func() map[string]any { return backend(map[string]any{"name": "b"}) }, true, DefaultNamespace},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			first, diags := v.Validate(tc.obj())
			if len(diags) != 0 {
				t.Fatalf("valid object: %v", diags)
			}
			raw, err := json.Marshal(tc.obj())
			if err != nil {
				t.Fatal(err)
			}
			v.mu.Lock()
			enc, cached := v.valid[sha256.Sum256(raw)]
			v.mu.Unlock()
			if !cached || (enc != nil) != tc.stored {
				t.Fatalf("cached %v, JSON stored %v; want cached, JSON stored %v", cached, enc != nil, tc.stored)
			}
			second, diags := v.Validate(tc.obj())
			if len(diags) != 0 {
				t.Fatalf("cached object: %v", diags)
			}
			if diff := cmp.Diff(first, second); diff != "" {
				t.Errorf("cached result differs from the validated one (-first +second):\n%s", diff)
			}
			if ns := second["metadata"].(map[string]any)["namespace"]; ns != tc.namespace {
				t.Errorf("namespace %v, want %q", ns, tc.namespace)
			}
		})
	}
}

// TestCELCompiledOnUse: a kind's CEL rules are compiled when its first
// object is validated, and then checked as before.
func TestCELCompiledOnUse(t *testing.T) {
	v, err := NewFromFS(crds.FS, nil)
	if err != nil {
		t.Fatal(err)
	}
	for key, k := range v.kinds {
		if k.cel != nil {
			t.Errorf("%s: CEL rules compiled before any object was validated", key.kind)
		}
	}
	vip := map[string]any{
		"apiVersion": "novaedge.io/v1alpha1", "kind": "ProxyVIP", "metadata": map[string]any{"name": "v"},
		"spec": map[string]any{"address": "10.0.0.1/32", "mode": "BGP"},
	}
	_, diags := v.Validate(vip)
	if !slices.ContainsFunc(diags, func(d diag.Diagnostic) bool { return strings.Contains(d.Message, "bgpConfig is required") }) {
		t.Errorf("the CEL rule requiring bgpConfig was not applied: %v", diags)
	}
	for key, k := range v.kinds {
		if compiled := k.cel != nil; compiled != (key.kind == "ProxyVIP") {
			t.Errorf("%s: CEL rules compiled %v after validating a ProxyVIP", key.kind, compiled)
		}
	}
}

// TestFresh: a fresh Validator has none of what the first compiled or
// remembered, shares its schemas, and checks objects as it does (its CEL
// rules compiled again on use).
func TestFresh(t *testing.T) {
	v, err := NewFromFS(crds.FS, nil)
	if err != nil {
		t.Fatal(err)
	}
	vip := func() map[string]any {
		return map[string]any{
			"apiVersion": "novaedge.io/v1alpha1", "kind": "ProxyVIP", "metadata": map[string]any{"name": "v"},
			"spec": map[string]any{"address": "10.0.0.1/32", "mode": "BGP"},
		}
	}
	good := map[string]any{
		"apiVersion": "novaedge.io/v1alpha1", "kind": "ProxyBackend", "metadata": map[string]any{"name": "b", "namespace": "ns"},
		"spec": map[string]any{"endpoints": []any{map[string]any{"address": "10.0.0.1", "port": int64(80)}}},
	}
	_, wantBad := v.Validate(vip())
	wantGood, diags := v.Validate(good)
	if len(wantBad) == 0 || len(diags) > 0 || len(v.valid) != 1 {
		t.Fatalf("the first Validator: %d diagnostics for the bad VIP, %v for the good backend, %d remembered", len(wantBad), diags, len(v.valid))
	}

	f := v.Fresh()
	if len(f.kinds) != len(v.kinds) || len(f.valid) != 0 {
		t.Fatalf("fresh: %d kinds (want %d), %d objects remembered", len(f.kinds), len(v.kinds), len(f.valid))
	}
	for key, k := range f.kinds {
		if k.cel != nil || k.structural != v.kinds[key].structural {
			t.Errorf("%s: fresh kind has CEL compiled (%v) or a schema of its own", key.kind, k.cel != nil)
		}
	}
	if _, got := f.Validate(vip()); !cmp.Equal(got, wantBad) {
		t.Errorf("fresh Validator on the bad VIP: %v, want %v", got, wantBad)
	}
	if got, diags := f.Validate(good); len(diags) > 0 || !cmp.Equal(got, wantGood) {
		t.Errorf("fresh Validator on the good backend: %v, %v", got, diags)
	}
	if v.kinds[gvk{"novaedge.io/v1alpha1", "ProxyVIP"}].cel == nil || f.kinds[gvk{"novaedge.io/v1alpha1", "ProxyVIP"}].cel == nil {
		t.Error("the ProxyVIP rules should be compiled in both now")
	}
}
