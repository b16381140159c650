// Package crdcheck checks a CustomResourceDefinition's definition as the
// kube-apiserver does when it is created (schema.CRDCheck): structural
// schema, CEL rules that compile within their cost budget, names, versions.
// It is a package of its own so that only what reads CRDs it did not ship
// (tests, tools) links the apiserver's validation code.
package crdcheck

import (
	"context"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
)

// Check returns every problem the apiserver would report for crd, or nil.
func Check(crd *apiextensions.CustomResourceDefinition) error {
	if errs := validation.ValidateCustomResourceDefinition(context.Background(), crd); len(errs) > 0 {
		return errs.ToAggregate()
	}
	return nil
}
