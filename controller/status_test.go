package controller

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestSetConditions: the conditions are set on a copy, the transition
// time moves only with the status, and an unchanged set comes back as
// it was, not copied.
func TestSetConditions(t *testing.T) {
	then := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	accepted := metav1.Condition{Type: CondAccepted, Status: metav1.ConditionTrue, Reason: "Accepted", Message: "ok", ObservedGeneration: 2, LastTransitionTime: then}
	have := []metav1.Condition{accepted}

	got, changed := setConditions(have, accepted)
	if changed || &got[0] != &have[0] {
		t.Fatalf("same condition: changed=%v, copied=%v; want the slice given back unchanged", changed, &got[0] != &have[0])
	}

	newer := accepted
	newer.ObservedGeneration, newer.Message = 3, "still ok"
	got, changed = setConditions(have, newer)
	if !changed || &got[0] == &have[0] || have[0].ObservedGeneration != 2 {
		t.Fatalf("new generation: changed=%v, copied=%v, given slice generation %d; want a changed copy", changed, &got[0] != &have[0], have[0].ObservedGeneration)
	}
	if got[0].ObservedGeneration != 3 || got[0].Message != "still ok" || !got[0].LastTransitionTime.Equal(&then) {
		t.Fatalf("new generation: %+v; want generation 3, the new message, the old transition time (same status)", got[0])
	}

	rejected := accepted
	rejected.Status, rejected.Reason = metav1.ConditionFalse, "Invalid"
	rejected.LastTransitionTime = metav1.Time{}
	ready := metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Healthy", ObservedGeneration: 2}
	got, changed = setConditions(have, rejected, ready)
	if !changed || len(got) != 2 || len(have) != 1 {
		t.Fatalf("two conditions: changed=%v, %d conditions (given %d); want 2 on a copy", changed, len(got), len(have))
	}
	if got[0].Status != metav1.ConditionFalse || got[0].LastTransitionTime.Equal(&then) || got[1].Type != "Ready" {
		t.Fatalf("two conditions: %+v; want Accepted False with a new transition time, then Ready", got)
	}
}
