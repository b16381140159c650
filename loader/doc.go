// Package loader reads resources from YAML files into a snapshot.Input, the
// way the standalone agent and novaedgectl take their configuration.
//
// Load reads documents with package manifest (which keeps the line of every
// field), checks each NovaEdge resource against the embedded CRDs with
// package schema exactly as a kube-apiserver would on create (unknown
// fields, OpenAPI schema, CEL rules; defaults applied), decodes core and
// Gateway API objects strictly, and appends every valid object to the
// Input. A document with an error is left out and reported; the others are
// kept. Every diagnostic names the file and line of the offending field.
//
// The snapshot builder reports problems by resource and field path only;
// Result.Locate adds the file and line of those fields afterwards.
//
// A Load reuses what the previous one made of each part of a file between
// "---" lines whose bytes did not change (a copy of each object, positions
// moved to where the part now is; a part with problems is checked again
// when it moved), so re-reading a large configuration after an edit checks
// only what the edit touched.
package loader
