package schema

import (
	"cmp"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"
	"sync"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	kjson "sigs.k8s.io/json"

	"github.com/novaedge/novaedge/manifest"
)

// Validator checks resources of the kinds its CRDs define. It is safe for
// concurrent use.
type Validator struct {
	kinds map[gvk]*kind

	// valid remembers objects that validated without any diagnostic, by
	// the hash of their JSON: a standalone agent re-reads all its files on
	// every change, and most documents did not change. Objects with
	// diagnostics are always validated again (their positions may move).
	// The value is the validated object as JSON, or nil when it is the
	// object as given (no default, namespace or pruning changed it): the
	// common case then costs the cache a key, not a copy of the object,
	// which matters with thousands of resources kept for the agent's life.
	mu    sync.Mutex
	valid map[[sha256.Size]byte][]byte
}

// maxValidCache bounds the cache of valid objects; it is emptied when full.
const maxValidCache = 50_000

// gvk identifies a kind: apiVersion is "group/version".
type gvk struct{ apiVersion, kind string }

// kind is what validating one kind of one version needs.
type kind struct {
	info       KindInfo
	structural *structuralschema.Structural
	openAPI    apiservervalidation.SchemaValidator
	hasStatus  bool // status is a subresource, dropped on create

	// celOnce compiles the CEL rules when the first object of the kind is
	// validated: compiled programs take about 50 kB per rule and most
	// configurations use a few of the kinds. The rules were already checked
	// to compile (crdvalidation), so compiling later fails no differently.
	celOnce sync.Once
	cel     *cel.Validator // nil without x-kubernetes-validations rules
}

// celValidator returns the kind's compiled CEL rules, nil when it has none.
func (k *kind) celValidator() *cel.Validator {
	k.celOnce.Do(func() {
		k.cel = cel.NewValidator(k.structural, true, celconfig.PerCallLimit)
	})
	return k.cel
}

// KindInfo describes a kind a Validator knows.
type KindInfo struct {
	APIVersion string // "group/version"
	Kind       string
	Plural     string // the resource name, as in "proxyvips"
	Namespaced bool
}

// CRDCheck checks a CRD's definition before a Validator serves it, as the
// apiserver does on its creation (crdcheck.Check). nil trusts the
// definition: for CRDs compiled into the binary, which a test checks
// (schema.TestProjectCRDs). The check is a parameter, not a call made
// here, because the apiserver's CRD validation links some 80 packages
// (its webhook, audit and egress-selector code among them): 3 MB of
// binary and 30 ms of start-up the agent spent re-checking constants.
type CRDCheck func(*apiextensions.CustomResourceDefinition) error

// NewFromFS reads the CRDs of every *.yaml and *.yml file at the top of
// fsys, checking each with check unless it is nil.
func NewFromFS(fsys fs.FS, check CRDCheck) (*Validator, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("read crd directory: %w", err)
	}
	var crds []namedCRD
	for _, e := range entries {
		if ext := path.Ext(e.Name()); e.IsDir() || (ext != ".yaml" && ext != ".yml") {
			continue
		}
		data, err := fs.ReadFile(fsys, e.Name())
		if err != nil {
			return nil, fmt.Errorf("read crd file: %w", err)
		}
		crds = append(crds, namedCRD{e.Name(), data})
	}
	return newValidator(crds, check)
}

// New reads CRDs from YAML, checking each with check unless it is nil;
// each element may hold several documents.
func New(check CRDCheck, crds ...[]byte) (*Validator, error) {
	named := make([]namedCRD, len(crds))
	for i, data := range crds {
		named[i] = namedCRD{fmt.Sprintf("crds[%d]", i), data}
	}
	return newValidator(named, check)
}

type namedCRD struct {
	name string
	data []byte
}

func newValidator(files []namedCRD, check CRDCheck) (*Validator, error) {
	v := &Validator{kinds: map[gvk]*kind{}}
	var errs []error
	for _, f := range files {
		docs, diags := manifest.Parse(f.name, f.data)
		if err := diags.Err(); err != nil {
			errs = append(errs, err)
		}
		for _, doc := range docs {
			if err := v.add(doc, check); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", doc.Pos, err))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return v, nil
}

// Fresh returns a Validator of v's kinds without what v compiled or
// remembered since it was made: no CEL programs (a kind compiles its rules
// again when an object of it is next validated) and no memory of valid
// objects. It shares v's schemas. A process that validates in bursts can
// keep it between them: 0.7 MB of heap for NovaEdge's CRDs, against 4.3 MB
// with every kind's rules compiled and 20 ms to read the CRDs again.
func (v *Validator) Fresh() *Validator {
	out := &Validator{kinds: make(map[gvk]*kind, len(v.kinds))}
	for key, k := range v.kinds {
		out.kinds[key] = &kind{info: k.info, structural: k.structural, openAPI: k.openAPI, hasStatus: k.hasStatus}
	}
	return out
}

// add registers the served versions of the CRD in doc, after check.
func (v *Validator) add(doc manifest.Document, check CRDCheck) error {
	if doc.APIVersion != "apiextensions.k8s.io/v1" || doc.Kind != "CustomResourceDefinition" {
		return fmt.Errorf("%s %s %q is not an apiextensions.k8s.io/v1 CustomResourceDefinition", doc.APIVersion, doc.Kind, doc.Name)
	}
	raw, err := json.Marshal(doc.Object)
	if err != nil {
		return fmt.Errorf("crd %s: %w", doc.Name, err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	strict, err := kjson.UnmarshalStrict(raw, &crd)
	if err := errors.Join(append(strict, err)...); err != nil {
		return fmt.Errorf("crd %s: %w", doc.Name, err)
	}
	apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(&crd)
	var internal apiextensions.CustomResourceDefinition
	if err := apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(&crd, &internal, nil); err != nil {
		return fmt.Errorf("crd %s: %w", doc.Name, err)
	}
	if check != nil {
		if err := check(&internal); err != nil {
			return fmt.Errorf("crd %s is invalid: %w", doc.Name, err)
		}
	}

	// The internal form moves schemas shared by all versions to the top, so
	// take each version's schema from the v1 form, as the apiserver does.
	for _, ver := range crd.Spec.Versions {
		if !ver.Served {
			continue
		}
		info := KindInfo{
			APIVersion: crd.Spec.Group + "/" + ver.Name,
			Kind:       crd.Spec.Names.Kind,
			Plural:     crd.Spec.Names.Plural,
			Namespaced: crd.Spec.Scope == apiextensionsv1.NamespaceScoped,
		}
		key := gvk{info.APIVersion, info.Kind}
		if v.kinds[key] != nil {
			return fmt.Errorf("crd %s: kind %s %s is defined twice", doc.Name, info.APIVersion, info.Kind)
		}
		k, err := newKind(info, ver.Schema)
		if err != nil {
			return fmt.Errorf("crd %s version %s: %w", doc.Name, ver.Name, err)
		}
		k.hasStatus = ver.Subresources != nil && ver.Subresources.Status != nil
		v.kinds[key] = k
	}
	return nil
}

// newKind prepares the validators for one version, as the apiserver's CRD
// handler does when it starts serving a CRD.
func newKind(info KindInfo, v1val *apiextensionsv1.CustomResourceValidation) (*kind, error) {
	if v1val == nil || v1val.OpenAPIV3Schema == nil {
		return nil, errors.New("no openAPIV3Schema")
	}
	var val apiextensions.CustomResourceValidation
	if err := apiextensionsv1.Convert_v1_CustomResourceValidation_To_apiextensions_CustomResourceValidation(v1val, &val, nil); err != nil {
		return nil, fmt.Errorf("convert schema: %w", err)
	}
	props := val.OpenAPIV3Schema
	s, err := structuralschema.NewStructural(props)
	if err != nil {
		return nil, fmt.Errorf("structural schema: %w", err)
	}
	s = s.DeepCopy() // PruneDefaults edits defaults NewStructural shares with props
	if err := structuraldefaulting.PruneDefaults(s); err != nil {
		return nil, fmt.Errorf("prune defaults: %w", err)
	}
	openAPI, _, err := apiservervalidation.NewSchemaValidator(props)
	if err != nil {
		return nil, fmt.Errorf("openapi validator: %w", err)
	}
	return &kind{
		info:       info,
		structural: s,
		openAPI:    openAPI,
	}, nil
}

// Scope reports whether a kind is namespaced, and whether it is known.
func (v *Validator) Scope(apiVersion, kind string) (namespaced bool, ok bool) {
	k := v.kinds[gvk{apiVersion, kind}]
	if k == nil {
		return false, false
	}
	return k.info.Namespaced, true
}

// Kinds lists the known kinds ordered by apiVersion and kind.
func (v *Validator) Kinds() []KindInfo {
	out := make([]KindInfo, 0, len(v.kinds))
	for _, k := range v.kinds {
		out = append(out, k.info)
	}
	slices.SortFunc(out, func(a, b KindInfo) int {
		return cmp.Or(cmp.Compare(a.APIVersion, b.APIVersion), cmp.Compare(a.Kind, b.Kind))
	})
	return out
}

// kindsInGroup names the known kinds of apiVersion's group, for messages.
func (v *Validator) kindsInGroup(apiVersion string) []string {
	group, _, _ := strings.Cut(apiVersion, "/")
	var names []string
	for _, k := range v.Kinds() {
		if g, _, _ := strings.Cut(k.APIVersion, "/"); g == group {
			names = append(names, k.Kind+" ("+k.APIVersion+")")
		}
	}
	return names
}
