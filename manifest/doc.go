// Package manifest reads Kubernetes-style resources from YAML files for the
// standalone agent, keeping where each value came from.
//
// Every document becomes the map the kube-apiserver would see after kubectl
// sent it as JSON: integers are int64, other numbers float64 (a whole float
// such as 1.0 becomes int64, as it does through JSON), keys are strings,
// aliases are resolved. Scalars follow YAML 1.2 as gopkg.in/yaml.v3 reads
// them, so yes/no/on/off are strings, not booleans as kubectl's YAML 1.1
// reader would make them.
//
// Problems are reported as diag diagnostics with file and line, and a problem
// in one document never hides the documents of another file, nor (when the
// documents are separated by "---" lines) the other documents of the same
// file. Document.Line maps a field path from a validation error back to a
// line of the source.
//
// For large configurations, Walk hands over documents one at a time instead
// of returning them all, and Document.Detach drops a document's parsed
// forms while keeping its positions (found again by parsing its part of the
// file once more when asked), so a caller holds kilobytes per resource only
// while it works on it.
package manifest
