package schema

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/objectmeta"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/api/operation"
	metavalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/features"
	utilfeature "k8s.io/apiserver/pkg/util/feature"

	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"

	"github.com/novaedge/novaedge/diag"
	"github.com/novaedge/novaedge/manifest"
)

// DefaultNamespace is the namespace given to namespaced resources that name
// none, as kubectl does.
const DefaultNamespace = metav1.NamespaceDefault

// celSkipped is the apiserver's note when CEL rules were not evaluated.
const celSkipped = "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation"

// Validate checks obj as the kube-apiserver would check it on create and
// returns it with unknown fields removed, schema defaults applied and, for
// a namespaced kind, the namespace set (DefaultNamespace when empty). Like
// the apiserver on create, it drops status when status is a subresource
// (with a warning). obj is not modified. The returned object is nil only when obj's kind is unknown or
// obj cannot be represented in JSON.
//
// Every problem is a diag.Diagnostic with Field set to a field path such as
// "spec.ports[0].port" (empty for the whole resource) and Message in the
// apiserver's words, e.g. "Invalid value: 70000: spec.ports[0].port in body
// should be less than or equal to 65535"; Pos is left empty (see
// ValidateDocument).
func (v *Validator) Validate(obj map[string]any) (map[string]any, diag.List) {
	// encoding/json sorts map keys, so equal objects hash equally.
	raw, err := json.Marshal(obj)
	if err != nil {
		return v.validate(obj)
	}
	sum := sha256.Sum256(raw)
	v.mu.Lock()
	cached, ok := v.valid[sum]
	v.mu.Unlock()
	if ok {
		if cached == nil {
			cached = raw
		}
		if out, err := decodeObject(cached); err == nil {
			return out, nil
		}
	}
	out, diags := v.validate(obj)
	if len(diags) == 0 && out != nil {
		if enc, err := json.Marshal(out); err == nil {
			if bytes.Equal(enc, raw) {
				enc = nil
			}
			v.mu.Lock()
			if v.valid == nil || len(v.valid) >= maxValidCache {
				v.valid = map[[sha256.Size]byte][]byte{}
			}
			v.valid[sum] = enc
			v.mu.Unlock()
		}
	}
	return out, diags
}

// decodeObject decodes JSON into the shapes documents use: integers as
// int64, other numbers as float64.
func decodeObject(raw []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, err
	}
	return fixNumbers(m).(map[string]any), nil
}

func fixNumbers(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = fixNumbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = fixNumbers(e)
		}
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	}
	return v
}

func (v *Validator) validate(obj map[string]any) (map[string]any, diag.List) {
	ref := refOf(obj)
	var diags diag.List
	apiVersion, _ := obj["apiVersion"].(string)
	kindName, _ := obj["kind"].(string)
	k := v.kinds[gvk{apiVersion, kindName}]
	if k == nil {
		msg := fmt.Sprintf("no matches for kind %q in version %q", kindName, apiVersion)
		if known := v.kindsInGroup(apiVersion); len(known) > 0 {
			msg += "; known kinds: " + strings.Join(known, ", ")
		}
		diags.Errorf(ref, "kind", "%s", msg)
		return nil, diags
	}
	u, err := copyJSON(obj)
	if err != nil {
		diags.Errorf(ref, "", "%v", err)
		return nil, diags
	}
	s := k.structural

	// Decoding: what the apiserver's schemaCoercingDecoder and defaulter do.
	meta, unknown, errs := decodeMeta(u)
	unknown = append(unknown, pruning.PruneWithOptions(u, s, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true})...)
	defaulting.PruneNonNullableNullsWithoutDefaults(u, s)
	ferr, embedded := objectmeta.CoerceWithOptions(nil, u, s, false, objectmeta.CoerceOptions{ReturnUnknownFieldPaths: true})
	unknown = append(unknown, embedded...)
	if ferr != nil {
		errs = append(errs, ferr)
	}
	if k.info.Namespaced && meta.Namespace == "" {
		meta.Namespace = DefaultNamespace
		ref.Namespace = DefaultNamespace
	}
	if err := setMeta(u, meta); err != nil {
		errs = append(errs, field.Invalid(field.NewPath("metadata"), nil, err.Error()))
	}
	for _, p := range unknown {
		diags.Errorf(ref, p, "unknown field %q", p)
	}
	defaulting.Default(u, s)
	if _, ok := u["status"]; ok && k.hasStatus {
		delete(u, "status") // as the apiserver's PrepareForCreate
		diags.Warnf(ref, "status", "ignored: status is written by the system, not read from resources")
	}

	// Validation: what the customresource strategy's Validate does.
	ctx := context.Background()
	errs = append(errs, metavalidation.ValidateObjectMetaDeclaratively(ctx, operation.Create, meta, nil, k.info.Namespaced,
		metavalidation.NameIsDNSSubdomain, field.NewPath("metadata"), utilfeature.DefaultFeatureGate.Enabled(features.DeclarativeValidationBeta))...)
	errs = append(errs, apiservervalidation.ValidateCustomResource(nil, u, k.openAPI)...)
	errs = append(errs, objectmeta.Validate(ctx, nil, u, s, false)...)
	errs = append(errs, listtype.ValidateListSetsAndMaps(nil, s, u)...)
	cv := k.celValidator()
	celChecked := cv == nil || !blocking(errs)
	if cv != nil && celChecked {
		celErrs, _ := cv.Validate(ctx, nil, s, u, nil, celconfig.RuntimeCELCostBudget)
		errs = append(errs, celErrs...)
	}

	for _, e := range errs {
		diags.Errorf(ref, fieldString(e.Field), "%s", e.ErrorBody())
	}
	slices.SortStableFunc(diags, func(a, b diag.Diagnostic) int {
		return cmp.Or(cmp.Compare(a.Field, b.Field), cmp.Compare(a.Message, b.Message))
	})
	if !celChecked {
		diags.Warnf(ref, "", "%s", celSkipped)
	}
	return u, diags
}

// ValidateDocument validates doc.Object and places each problem at the line
// of its field in doc's file. manifest already reported a missing apiVersion,
// kind or name, so those are not reported again: a document without
// apiVersion or kind is not validated at all.
func (v *Validator) ValidateDocument(doc manifest.Document) (map[string]any, diag.List) {
	if doc.APIVersion == "" || doc.Kind == "" {
		return nil, nil
	}
	obj, diags := v.Validate(doc.Object)
	diags = slices.DeleteFunc(diags, func(d diag.Diagnostic) bool {
		return doc.Name == "" && d.Field == "metadata.name" && strings.HasPrefix(d.Message, "Required value")
	})
	for i := range diags {
		diags[i].Pos = doc.Position(diags[i].Field)
	}
	return obj, diags
}

// decodeMeta reads the object's metadata as the apiserver's decoder does,
// returning it with the paths of unknown metadata fields. Malformed fields
// are reported, each at its own path, and dropped so the rest can still be
// checked.
func decodeMeta(u map[string]any) (*metav1.ObjectMeta, []string, field.ErrorList) {
	opts := objectmeta.ObjectMetaOptions{ReturnUnknownFieldPaths: true}
	meta, _, unknown, err := objectmeta.GetObjectMetaWithOptions(u, opts)
	var errs field.ErrorList
	if err != nil {
		errs = metaErrors(u["metadata"])
		opts.DropMalformedFields = true
		meta, _, unknown, _ = objectmeta.GetObjectMetaWithOptions(u, opts)
	}
	if meta == nil {
		meta = &metav1.ObjectMeta{}
	}
	return meta, unknown, errs
}

// metaErrors finds the metadata fields that do not decode into ObjectMeta.
func metaErrors(md any) field.ErrorList {
	path := field.NewPath("metadata")
	m, ok := md.(map[string]any)
	if !ok {
		return field.ErrorList{field.Invalid(path, md, "must be an object")}
	}
	var errs field.ErrorList
	for _, k := range slices.Sorted(maps.Keys(m)) {
		raw, err := json.Marshal(map[string]any{k: m[k]})
		if err == nil {
			err = utiljson.Unmarshal(raw, &metav1.ObjectMeta{})
		}
		if err != nil {
			errs = append(errs, field.Invalid(path.Child(k), m[k], strings.TrimPrefix(err.Error(), "json: ")))
		}
	}
	return errs
}

// setMeta writes meta back into u without the zero creationTimestamp the
// conversion adds.
func setMeta(u map[string]any, meta *metav1.ObjectMeta) error {
	if err := objectmeta.SetObjectMeta(u, meta); err != nil {
		return err
	}
	if m, ok := u["metadata"].(map[string]any); ok && meta.CreationTimestamp.IsZero() {
		delete(m, "creationTimestamp")
	}
	return nil
}

// blocking reports whether errs hold an error after which the apiserver
// does not evaluate CEL rules.
func blocking(errs field.ErrorList) bool {
	return slices.ContainsFunc(errs, func(e *field.Error) bool {
		switch e.Type {
		case field.ErrorTypeNotSupported, field.ErrorTypeRequired, field.ErrorTypeTooLong, field.ErrorTypeTooMany, field.ErrorTypeTypeInvalid:
			return true
		}
		return false
	})
}

// fieldString normalises the path of an error about the whole object.
func fieldString(f string) string {
	if f == "<nil>" {
		return ""
	}
	return f
}

// copyJSON deep-copies obj through JSON, giving the types the apiserver
// decodes (int64, float64, string, bool, nil, []any, map[string]any).
func copyJSON(obj map[string]any) (map[string]any, error) {
	raw, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("object cannot be represented in JSON: %w", err)
	}
	var out map[string]any
	if err := utiljson.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("decode object: %w", err)
	}
	return out, nil
}

// refOf names obj for diagnostics.
func refOf(obj map[string]any) diag.Ref {
	md, _ := obj["metadata"].(map[string]any)
	kind, _ := obj["kind"].(string)
	name, _ := md["name"].(string)
	ns, _ := md["namespace"].(string)
	return diag.Ref{Kind: kind, Namespace: ns, Name: name}
}
