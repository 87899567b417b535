package engine

import (
	"strings"
	"testing"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// TestNewCandidateClearsGateConditions: the gate conditions of the previous revision are not shown
// as the new candidate's.
func TestNewCandidateClearsGateConditions(t *testing.T) {
	s := newSim(t, "a", "b")
	s.run("r1", v1alpha1.PhaseCompleted)
	for _, g := range v1alpha1.Gates {
		apimeta.SetStatusCondition(&s.fr.Status.Conditions, metav1.Condition{Type: g, Status: metav1.ConditionTrue, Reason: v1alpha1.GatePassedReason, Message: "wave rest: Pass (receipt x)"})
	}
	s.turn("r2")
	if s.fr.Status.Candidate == nil || s.fr.Status.Candidate.Revision != "r2" {
		t.Fatalf("r2 is not the candidate: %+v", s.fr.Status.Candidate)
	}
	for _, g := range v1alpha1.Gates {
		if c := apimeta.FindStatusCondition(s.fr.Status.Conditions, g); c != nil {
			t.Errorf("%s of r1 still shown for r2: %+v", g, c)
		}
	}
}

// TestPlanChangeIsReported: an edit of the waves mid-rollout is noticed by status.planHash and said
// once, as a note the reconciler emits as an event.
func TestPlanChangeIsReported(t *testing.T) {
	s := newSim(t, "a", "b", "c")
	res, _ := s.turn("r1")
	if len(res.Notes) != len(mustPlan(t, s).Notes) {
		t.Errorf("a new candidate's plan notes are not passed on: %v", res.Notes)
	}
	s.turn("r1")
	two := int32(2)
	s.fr.Spec.Waves[0].Count = &two
	res, _ = s.turn("r1")
	if len(res.Notes) != 1 || !strings.Contains(res.Notes[0], "waves of spec changed") {
		t.Fatalf("notes after an edit of the waves = %v", res.Notes)
	}
	if res, _ = s.turn("r1"); len(res.Notes) != 0 {
		t.Errorf("the edit is reported again: %v", res.Notes)
	}
}
