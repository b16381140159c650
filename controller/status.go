package controller

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/novaedge/novaedge/diag"
)

// Condition types and reasons the controller writes.
const (
	CondAccepted = "Accepted"
	CondReady    = "Ready"

	ReasonAccepted    = "Accepted"
	ReasonInvalid     = "Invalid"
	ReasonNoAddress   = "NoAddress"
	ReasonHealthy     = "Healthy"
	ReasonNotEnough   = "NotEnoughHealthyNodes"
	ReasonAllocated   = "Allocated"
	ReasonPoolProblem = "AllocationFailed"
)

// maxMessage keeps condition messages within the API's 32 KiB limit with
// room to spare; longer lists end with a count.
const maxMessage = 4096

// problemIndex groups a build's diagnostics by the resource they concern.
type problemIndex map[diag.Ref]diag.List

func indexDiagnostics(l diag.List) problemIndex {
	idx := problemIndex{}
	for _, d := range l {
		idx[d.Resource] = append(idx[d.Resource], d)
	}
	return idx
}

// accepted is the Accepted condition of one resource: False with every
// error (field and message) when it has errors, else True, listing
// warnings in the message.
func (idx problemIndex) accepted(r diag.Ref, gen int64, extra ...string) metav1.Condition {
	var errs, warns []string
	for _, d := range idx[r] {
		m := d.Message
		if d.Field != "" {
			m = d.Field + ": " + m
		}
		if d.Severity == diag.Error {
			errs = append(errs, m)
		} else {
			warns = append(warns, m)
		}
	}
	errs = append(errs, extra...)
	c := metav1.Condition{Type: CondAccepted, ObservedGeneration: gen}
	switch {
	case len(errs) > 0:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, ReasonInvalid, joinMessages(errs)
	case len(warns) > 0:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, ReasonAccepted, "accepted with warnings: "+joinMessages(warns)
	default:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, ReasonAccepted, "accepted"
	}
	return c
}

func joinMessages(ms []string) string {
	slices.Sort(ms)
	ms = slices.Compact(ms)
	var b strings.Builder
	for i, m := range ms {
		if b.Len()+len(m) > maxMessage {
			fmt.Fprintf(&b, "; and %d more", len(ms)-i)
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(m)
	}
	return b.String()
}

// setConditions applies want to a copy of have with meta.SetStatusCondition
// (which keeps LastTransitionTime when the status does not change) and
// reports whether anything changed. When nothing does, it returns have
// itself: a build checks the conditions of every object, and nearly all
// stay as they are.
func setConditions(have []metav1.Condition, want ...metav1.Condition) ([]metav1.Condition, bool) {
	var out []metav1.Condition
	for _, c := range want {
		cur := have
		if out != nil {
			cur = out
		}
		old := meta.FindStatusCondition(cur, c.Type)
		if old != nil && old.Status == c.Status && old.Reason == c.Reason && old.Message == c.Message && old.ObservedGeneration == c.ObservedGeneration {
			continue
		}
		if out == nil {
			out = slices.Clone(have)
		}
		meta.SetStatusCondition(&out, c)
	}
	if out == nil {
		return have, false
	}
	return out, true
}
