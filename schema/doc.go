// Package schema validates resources against CustomResourceDefinition
// manifests the way the kube-apiserver does on create, so that resources read
// from files in standalone mode get the checks they would get in a cluster.
//
// It uses the apiserver's own libraries (k8s.io/apiextensions-apiserver) and
// applies, in the apiserver's order: unknown fields are pruned (and reported,
// as with kubectl's default strict field validation), the namespace of a
// namespaced resource defaults to "default", schema defaults are applied,
// then object metadata, the OpenAPI schema, list-type rules and the CEL
// x-kubernetes-validations rules are checked. Unlike the apiserver, which
// stops at unknown fields, every problem is reported in one go; like the
// apiserver, CEL rules are skipped while a missing, mistyped or unsupported
// value would make them meaningless.
package schema
