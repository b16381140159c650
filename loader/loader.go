package loader

import (
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"strconv"
	"strings"

	metavalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	kjson "sigs.k8s.io/json"

	"github.com/novaedge/novaedge/diag"
	"github.com/novaedge/novaedge/manifest"
	"github.com/novaedge/novaedge/schema"
	"github.com/novaedge/novaedge/snapshot"
)

// Result is what Load read.
type Result struct {
	// Input holds every valid resource, in the order of the files. Its
	// objects are shared with other loads (Load reuses what unchanged
	// parts of the files gave): read them, never modify them.
	Input *snapshot.Input

	// docs maps each resource in Input (and the first of duplicates) to its
	// document, detached (manifest.Document.Detach), for positions.
	docs map[diag.Ref]manifest.Document
}

// Position returns the file and line of field in the document of the
// resource ref, or the zero Position when no document defines ref.
func (r *Result) Position(ref diag.Ref, fieldPath string) diag.Position {
	if r == nil {
		return diag.Position{}
	}
	doc, ok := r.docs[ref]
	if !ok {
		return diag.Position{}
	}
	return doc.Position(fieldPath)
}

// Locate fills in Pos of the diagnostics that have none, such as those of
// snapshot.Build, from the document of their resource and the line of their
// field. It edits diags in place; diagnostics about resources not read from
// files are left as they are.
func (r *Result) Locate(diags diag.List) {
	for i := range diags {
		d := &diags[i]
		if d.Pos.File != "" {
			continue
		}
		d.Pos = r.Position(d.Resource, d.Field)
	}
}

// Load reads the YAML files and directories at paths (a directory
// contributes its *.yaml and *.yml files, not its subdirectories') and
// returns every valid resource in an Input. Problems are returned as
// diagnostics with positions; a document with an error is left out, the
// others are kept. Load never returns a nil Result.
//
// Each document is checked as soon as it is parsed, and only its typed
// object and its detached document (manifest.Document.Detach) are kept, so
// loading thousands of resources never holds all their YAML trees and JSON
// objects at once (about 10 kB per resource: 5000 routes took a heap of 150
// MB to load, 60 MB this way). The result and the diagnostics are those of
// FromDocuments over manifest.Load.
//
// What a part of a file between "---" lines gave is remembered by its
// bytes while the Validator is held (validatorHold), and reused when the
// same bytes of the same file come again (wherever they moved to, when
// they gave no diagnostic): a standalone agent re-reads all its files on
// every change, and most documents did not change. Parsing, validating
// and decoding 3000 routes was about 0.2 s of CPU on every reload.
func Load(paths ...string) (*Result, diag.List) {
	v, cache, rest, err := validator()
	if err != nil {
		docs, diags := manifest.Load(paths...)
		res, more := FromDocuments(docs) // reports err
		return res, append(diags, more...)
	}
	// The last load's size is this one's best guess: growing maps of
	// thousands of documents rehashed them several times.
	res := newResult()
	reserved := reserve(res.Input, cache, rest)
	res.docs = make(map[diag.Ref]manifest.Document, len(cache))
	seen := make(map[identity]manifest.Document, len(cache))
	next := make(chunkCache, len(cache))
	revived := reviveAll(rest)
	var more diag.List
	diags := manifest.WalkChunks(paths, func(c manifest.Chunk) diag.List {
		key := chunkKey(c)
		cr := cache[key]
		if docs, ok := revived[key]; ok && cr == nil {
			cr = revive(docs, c)
		}
		if cr == nil || (cr.line != c.Line() && !cr.clean) {
			cr = loadChunk(v, c, len(cache) > 0 || len(rest) > 0)
		}
		next[key] = cr
		for i := range cr.docs {
			cd := &cr.docs[i]
			doc, ck := cd.doc, cd.checked
			if cr.line != c.Line() {
				doc = c.Moved(doc) // clean: no diagnostic to move
			}
			more = append(more, res.commit(seen, doc, &ck)...)
		}
		return cr.diags
	})
	keepChunks(next)
	for _, spec := range reserved {
		spec.codec.unreserve(res.Input)
	}
	return res, append(diags, more...)
}

// reserve makes room in in for as many objects of each kind as the last
// load kept (cache), or as rest holds when the chunks were put to rest,
// and returns the kinds it made room for.
func reserve(in *snapshot.Input, cache chunkCache, rest restCache) []*kindSpec {
	counts := map[*kindSpec]int{}
	for _, cr := range cache {
		for i := range cr.docs {
			if cr.docs[i].add != nil {
				counts[cr.docs[i].spec]++
			}
		}
	}
	if len(cache) == 0 {
		for _, docs := range rest {
			for i := range docs {
				counts[docs[i].spec]++
			}
		}
	}
	var specs []*kindSpec
	for spec, n := range counts {
		if spec != nil {
			spec.codec.reserve(in, n)
			specs = append(specs, spec)
		}
	}
	return specs
}

func newResult() *Result {
	return &Result{Input: &snapshot.Input{}, docs: map[diag.Ref]manifest.Document{}}
}

// FromDocuments is Load for documents already read, e.g. with
// manifest.Parse from embedded bytes.
func FromDocuments(docs []manifest.Document) (*Result, diag.List) {
	res := newResult()
	var diags diag.List
	v, _, _, err := validator()
	if err != nil {
		// The CRDs are embedded at build time and tested; this is a bug.
		diags.Errorf(diag.Ref{}, "", "load the embedded CRDs: %v", err)
		return res, diags
	}
	seen := map[identity]manifest.Document{}
	for _, doc := range docs {
		diags = append(diags, res.add(v, seen, doc)...)
	}
	return res, diags
}

// identity tells resources apart: two documents with the same identity
// define the same resource.
type identity struct {
	group, kind, namespace, name string
}

// add checks one document and, when it is valid, appends its object to the
// Input.
func (r *Result) add(v *schema.Validator, seen map[identity]manifest.Document, doc manifest.Document) diag.List {
	c := check(v, doc)
	return r.commit(seen, doc.Detach(), &c)
}

// checked is what checking one document found, apart from how it relates
// to the other documents (duplicates): it depends on the document's bytes
// alone, so a load may reuse it for the same bytes (chunkCache).
type checked struct {
	// tracked is false for a document the Result does not keep: no
	// apiVersion, kind or name (manifest reported it) or an unknown kind.
	tracked bool
	ref     diag.Ref
	id      identity
	// diags are the document's problems; dupWarnings those reported if it
	// turns out to be a duplicate (its warnings alone).
	diags, dupWarnings diag.List
	// add appends the object (shared by loads) to an Input; nil when the
	// object is not kept.
	add func(in *snapshot.Input)
	// raw and spec, with add, are the JSON the object was decoded from and
	// its kind: what a chunk keeps at rest (restChunk) to decode it again.
	raw  []byte
	spec *kindSpec
}

// check checks one document on its own.
func check(v *schema.Validator, doc manifest.Document) checked {
	if doc.APIVersion == "" || doc.Kind == "" || doc.Name == "" {
		return checked{} // manifest reported what is missing
	}
	var diags diag.List
	spec := findKind(doc.APIVersion, doc.Kind)
	if spec == nil {
		diags.Errorf(doc.Ref(), "kind", "%s", unknownKind(doc.APIVersion, doc.Kind))
		diags[0].Pos = doc.Position("kind")
		return checked{diags: diags}
	}

	var obj map[string]any
	ref := doc.Ref()
	if spec.crd {
		namespaced, _ := v.Scope(doc.APIVersion, doc.Kind)
		var ignored diag.List
		doc, ignored = clusterScoped(doc, namespaced)
		ref = doc.Ref()
		if namespaced && ref.Namespace == "" {
			ref.Namespace = schema.DefaultNamespace
		}
		obj, diags = v.ValidateDocument(doc)
		diags = append(ignored, diags...)
	} else {
		obj, ref, diags = checkBuiltin(spec, doc)
	}
	c := checked{
		tracked:     true,
		ref:         ref,
		id:          identity{group(doc.APIVersion), doc.Kind, ref.Namespace, ref.Name},
		dupWarnings: diags.Warnings(),
	}
	// The schema has reported every problem of a NovaEdge resource, types
	// included. Other kinds are decoded even with metadata errors, so every
	// problem is reported in one go; the object is kept only without errors.
	if obj == nil || (spec.crd && diags.HasErrors()) {
		c.diags = diags
		return c
	}
	raw, err := json.Marshal(obj)
	if err != nil {
		diags.Errorf(ref, "", "encode: %v", err)
		diags[len(diags)-1].Pos = doc.Pos
		c.diags = diags
		return c
	}
	dec := spec.codec.decode(raw)
	for _, e := range dec.strict {
		f, msg := unknownField(e)
		diags = append(diags, diag.Diagnostic{Severity: diag.Error, Resource: ref, Field: f, Message: msg, Pos: doc.Position(f)})
	}
	if dec.err != nil {
		diags = append(diags, fieldDiag(doc, ref, typeError(dec.err, obj)))
	}
	for _, e := range dec.errs {
		diags = append(diags, fieldDiag(doc, ref, e))
	}
	if !diags.HasErrors() {
		c.add, c.raw, c.spec = dec.add, raw, spec
	}
	c.diags = diags
	return c
}

// commit records a checked document, detached: the first document of a
// resource is kept (its object, if valid, appended to the Input), a later
// one is reported as a duplicate.
func (r *Result) commit(seen map[identity]manifest.Document, doc manifest.Document, c *checked) diag.List {
	if !c.tracked {
		return c.diags
	}
	if first, dup := seen[c.id]; dup {
		d := diag.Diagnostic{
			Severity: diag.Error,
			Resource: c.ref,
			Field:    "metadata.name",
			Message:  fmt.Sprintf("duplicate: %s is already defined at %s; this definition is ignored", c.ref, first.Position("metadata.name")),
			Pos:      doc.Position("metadata.name"),
		}
		return append(diag.List{d}, c.dupWarnings...)
	}
	// Only positions are needed later: the document is kept without its
	// tree and object.
	seen[c.id] = doc
	r.docs[c.ref] = doc
	if c.add != nil {
		c.add(r.Input)
	}
	return c.diags
}

// clusterScoped drops metadata.namespace from a document of a
// cluster-scoped kind, with a warning, as the apiserver ignores it.
func clusterScoped(doc manifest.Document, namespaced bool) (manifest.Document, diag.List) {
	if namespaced || doc.Namespace == "" {
		return doc, nil
	}
	var diags diag.List
	diags.Warnf(diag.Ref{Kind: doc.Kind, Name: doc.Name}, "metadata.namespace", "ignored: %s is cluster-scoped", doc.Kind)
	diags[0].Pos = doc.Position("metadata.namespace")
	obj := maps.Clone(doc.Object)
	if md, ok := obj["metadata"].(map[string]any); ok {
		md = maps.Clone(md)
		delete(md, "namespace")
		obj["metadata"] = md
	}
	doc.Object, doc.Namespace = obj, ""
	return doc, diags
}

// checkBuiltin does for a core or Gateway API object what the apiserver's
// decoding and metadata validation do: the namespace defaults to "default"
// for namespaced kinds, metadata is validated, stringData is merged. The
// schema of the rest is checked when the object is decoded.
func checkBuiltin(spec *kindSpec, doc manifest.Document) (map[string]any, diag.Ref, diag.List) {
	ref := doc.Ref()
	var diags diag.List
	obj, err := copyJSON(doc.Object)
	if err != nil {
		diags.Errorf(ref, "", "%v", err)
		diags[0].Pos = doc.Pos
		return nil, ref, diags
	}
	md, _ := obj["metadata"].(map[string]any)
	if md == nil {
		md = map[string]any{}
		obj["metadata"] = md
	}
	switch {
	case spec.namespaced && ref.Namespace == "":
		ref.Namespace = metav1.NamespaceDefault
		md["namespace"] = ref.Namespace
	case !spec.namespaced && ref.Namespace != "":
		// The apiserver ignores a namespace on a cluster-scoped object.
		delete(md, "namespace")
		ref.Namespace = ""
	}
	var errs field.ErrorList
	var meta metav1.ObjectMeta
	if raw, err := json.Marshal(md); err == nil && json.Unmarshal(raw, &meta) == nil {
		errs = append(errs, metavalidation.ValidateObjectMeta(&meta, spec.namespaced, spec.nameFn, field.NewPath("metadata"))...)
	}
	if spec.prepare != nil {
		errs = append(errs, spec.prepare(obj)...)
	}
	for _, e := range errs {
		diags = append(diags, fieldDiag(doc, ref, e))
	}
	return obj, ref, diags
}

// fieldDiag turns a field error into an error diagnostic at the line of its
// field.
func fieldDiag(doc manifest.Document, ref diag.Ref, e *field.Error) diag.Diagnostic {
	f := e.Field
	if f == "<nil>" {
		f = ""
	}
	return diag.Diagnostic{Severity: diag.Error, Resource: ref, Field: f, Message: e.ErrorBody(), Pos: doc.Position(f)}
}

// unknownFieldRE matches sigs.k8s.io/json's strict-decoding errors.
var unknownFieldRE = regexp.MustCompile(`^unknown field "(.*)"$`)

// unknownField returns the field and the message of a strict-decoding
// error, worded as package schema words unknown fields.
func unknownField(err error) (fieldPath, msg string) {
	msg = err.Error()
	if m := unknownFieldRE.FindStringSubmatch(msg); m != nil {
		return m[1], fmt.Sprintf("unknown field %q", m[1])
	}
	if _, rest, ok := strings.Cut(msg, `duplicate field "`); ok {
		f := strings.TrimSuffix(rest, `"`)
		return f, fmt.Sprintf("duplicate field %q", f)
	}
	return "", msg
}

// typeErrorRE matches encoding/json type errors as sigs.k8s.io/json words
// them: "json: cannot unmarshal string into Go struct field
// ServicePort.spec.ports.port of type int32".
var typeErrorRE = regexp.MustCompile(`^json: cannot unmarshal (\S+) into Go struct field [^.]+\.(\S+) of type (\S+)$`)

// typeError turns a decoding error into a field error. The decoder names
// the field without list indices ("spec.ports.port"), so the first element
// whose value has the offending JSON type is taken to be the one.
func typeError(err error, obj map[string]any) *field.Error {
	m := typeErrorRE.FindStringSubmatch(err.Error())
	if m == nil {
		return field.Invalid(nil, nil, strings.TrimPrefix(err.Error(), "json: "))
	}
	path, value := m[2], any(m[1])
	if p, v, ok := findTyped(obj, strings.Split(path, "."), "", m[1]); ok {
		path, value = p, v
	}
	// One segment holding the whole path: field.Error keeps it as it is.
	detail := "must not be " + article(m[1])
	if t := jsonTypeOf(m[3]); t != "" {
		detail = "must be of type " + t
	}
	return field.TypeInvalid(field.NewPath(path), value, detail)
}

// article prefixes a JSON type name with "a" or "an".
func article(jsonType string) string {
	if strings.ContainsAny(jsonType[:1], "aeiou") {
		return "an " + jsonType
	}
	return "a " + jsonType
}

// jsonTypeOf names a Go type as the JSON a user writes for it, or returns
// "" when it cannot tell.
func jsonTypeOf(goType string) string {
	switch t := strings.TrimPrefix(goType, "*"); {
	case t == "[]uint8":
		return "string (base64)"
	case strings.HasPrefix(t, "map["):
		return "object"
	case strings.HasPrefix(t, "[]"):
		return "array"
	case strings.HasPrefix(t, "int"), strings.HasPrefix(t, "uint"):
		return "integer"
	case strings.HasPrefix(t, "float"):
		return "number"
	case t == "string":
		return "string"
	case t == "bool":
		return "boolean"
	case t == "intstr.IntOrString":
		return "integer or string"
	default:
		return "" // a named type: its JSON form is not known here
	}
}

// findTyped walks segs through v, trying every element of lists, and
// returns the full path and the value of the first value of JSON type want.
func findTyped(v any, segs []string, prefix, want string) (string, any, bool) {
	if list, ok := v.([]any); ok && (len(segs) > 0 || want != "array") {
		for i, e := range list {
			if p, val, ok := findTyped(e, segs, prefix+"["+strconv.Itoa(i)+"]", want); ok {
				return p, val, true
			}
		}
		return "", nil, false
	}
	if len(segs) == 0 {
		return prefix, v, jsonType(v) == want
	}
	m, ok := v.(map[string]any)
	if !ok {
		return "", nil, false
	}
	next, ok := m[segs[0]]
	if !ok {
		return "", nil, false
	}
	p := segs[0]
	if prefix != "" {
		p = prefix + "." + segs[0]
	}
	return findTyped(next, segs[1:], p, want)
}

// jsonType names v's type as encoding/json does in its errors.
func jsonType(v any) string {
	switch v.(type) {
	case string:
		return "string"
	case bool:
		return "bool"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	case nil:
		return "null"
	default:
		return "number"
	}
}

// copyJSON deep-copies obj through JSON.
func copyJSON(obj map[string]any) (map[string]any, error) {
	raw, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("object cannot be represented in JSON: %w", err)
	}
	var out map[string]any
	if err := kjson.UnmarshalCaseSensitivePreserveInts(raw, &out); err != nil {
		return nil, fmt.Errorf("decode object: %w", err)
	}
	return out, nil
}
