// Package diag describes problems found in configuration: which resource, which
// field, how severe, and where in a source file. Every layer that checks
// configuration (YAML loading, schema validation, the snapshot builder, the
// agent's compiler) reports with these types, so a user sees one format
// whether the config came from a file or from the Kubernetes API.
package diag

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Severity says whether a problem rejects configuration.
type Severity int

const (
	// Error rejects the resource it names (and resources that depend on it).
	Error Severity = iota
	// Warning is reported but changes nothing that is served.
	Warning
)

// String returns "error" or "warning".
func (s Severity) String() string {
	if s == Warning {
		return "warning"
	}
	return "error"
}

// Ref names a resource. Namespace is empty for cluster-scoped kinds.
type Ref struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
}

// String returns "Kind namespace/name" or "Kind name" for cluster-scoped kinds.
func (r Ref) String() string {
	if r.Kind == "" && r.Name == "" {
		return ""
	}
	if r.Namespace == "" {
		return r.Kind + " " + r.Name
	}
	return r.Kind + " " + r.Namespace + "/" + r.Name
}

// Compare orders refs by kind, namespace, then name.
func (r Ref) Compare(o Ref) int {
	return cmp.Or(cmp.Compare(r.Kind, o.Kind), cmp.Compare(r.Namespace, o.Namespace), cmp.Compare(r.Name, o.Name))
}

// Position is a place in a source file. The zero value means unknown.
type Position struct {
	File string `json:"file,omitempty"`
	Line int    `json:"line,omitempty"`
}

// String returns "file:line", "file", or "".
func (p Position) String() string {
	switch {
	case p.File == "":
		return ""
	case p.Line == 0:
		return p.File
	default:
		return fmt.Sprintf("%s:%d", p.File, p.Line)
	}
}

// Diagnostic is one problem. Field is a path in the resource such as
// "spec.rules[0].backendRefs[1].name"; empty means the resource as a whole.
type Diagnostic struct {
	Severity Severity `json:"severity"`
	Resource Ref      `json:"resource"`
	Field    string   `json:"field,omitempty"`
	Message  string   `json:"message"`
	Pos      Position `json:"position"`
}

// String formats the diagnostic on one line:
// "file:line: error: ProxyRoute default/web: spec.rules[0]: message".
func (d Diagnostic) String() string {
	var b strings.Builder
	if p := d.Pos.String(); p != "" {
		b.WriteString(p)
		b.WriteString(": ")
	}
	b.WriteString(d.Severity.String())
	b.WriteString(": ")
	if r := d.Resource.String(); r != "" {
		b.WriteString(r)
		b.WriteString(": ")
	}
	if d.Field != "" {
		b.WriteString(d.Field)
		b.WriteString(": ")
	}
	b.WriteString(d.Message)
	return b.String()
}

// List is a set of diagnostics.
type List []Diagnostic

// Errorf appends an error about field of res.
func (l *List) Errorf(res Ref, field, format string, args ...any) {
	*l = append(*l, Diagnostic{Severity: Error, Resource: res, Field: field, Message: fmt.Sprintf(format, args...)})
}

// Warnf appends a warning about field of res.
func (l *List) Warnf(res Ref, field, format string, args ...any) {
	*l = append(*l, Diagnostic{Severity: Warning, Resource: res, Field: field, Message: fmt.Sprintf(format, args...)})
}

// HasErrors reports whether any diagnostic is an error.
func (l List) HasErrors() bool {
	return slices.ContainsFunc(l, func(d Diagnostic) bool { return d.Severity == Error })
}

// Errors returns only the errors.
func (l List) Errors() List {
	return slices.DeleteFunc(slices.Clone(l), func(d Diagnostic) bool { return d.Severity != Error })
}

// Warnings returns only the warnings.
func (l List) Warnings() List {
	return slices.DeleteFunc(slices.Clone(l), func(d Diagnostic) bool { return d.Severity != Warning })
}

// Sort orders diagnostics by file, line, resource, field and message, so
// output is stable across runs.
func (l List) Sort() {
	slices.SortStableFunc(l, func(a, b Diagnostic) int {
		return cmp.Or(
			cmp.Compare(a.Pos.File, b.Pos.File),
			cmp.Compare(a.Pos.Line, b.Pos.Line),
			a.Resource.Compare(b.Resource),
			cmp.Compare(a.Field, b.Field),
			cmp.Compare(a.Severity, b.Severity),
			cmp.Compare(a.Message, b.Message),
		)
	})
}

// Err returns nil when l has no errors, and otherwise an error listing every
// error in l, one per line.
func (l List) Err() error {
	errs := l.Errors()
	if len(errs) == 0 {
		return nil
	}
	return &ListError{List: errs}
}

// ListError is the error form of a list of error diagnostics.
type ListError struct{ List List }

func (e *ListError) Error() string {
	lines := make([]string, len(e.List))
	for i, d := range e.List {
		lines[i] = d.String()
	}
	return strings.Join(lines, "\n")
}
