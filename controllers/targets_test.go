package controllers

import (
	"testing"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/fleets"
)

func TestDesiredTargets(t *testing.T) {
	plan := fleets.WavePlan{
		Waves:    []fleets.PlannedWave{{Name: "canary", Clusters: []string{"a"}}, {Name: "rest", Clusters: []string{"b", "c", "d"}}},
		Eligible: []string{"a", "b", "c", "d"},
	}
	kg := &v1alpha1.RevisionStatus{Revision: "main@sha1:1", Source: "web-1"}
	cand := &v1alpha1.RevisionStatus{Revision: "main@sha1:2", Source: "web-2"}
	ks := func(wave string) *kustomizev1.Kustomization {
		return &kustomizev1.Kustomization{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{v1alpha1.WaveLabel: wave}}}
	}
	existing := map[string]*kustomizev1.Kustomization{"a": ks("canary"), "b": ks("rest"), "c": ks("rest")}

	fr := &v1alpha1.FleetRollout{Status: v1alpha1.FleetRolloutStatus{
		Phase: v1alpha1.PhaseProgressing, Candidate: cand, LastKnownGood: kg,
		Waves: []v1alpha1.WaveStatus{
			{Name: "canary", Phase: v1alpha1.WaveSoaking, Clusters: []string{"a"}},
			{Name: "rest", Phase: v1alpha1.WavePending},
		},
	}}
	got := desiredTargets(fr, plan, existing)
	if got["a"].Source != "web-2" {
		t.Errorf("the canary member runs the candidate: %+v", got["a"])
	}
	if _, ok := got["b"]; ok {
		t.Errorf("a cluster of a pending wave keeps what it runs: got %+v", got["b"])
	}
	if got["d"].Source != "web-1" || got["d"].Wave != "rest" {
		t.Errorf("a cluster without a Kustomization gets the known-good in its planned wave: %+v", got["d"])
	}

	fr.Status.Phase = v1alpha1.PhaseRollingBack
	got = desiredTargets(fr, plan, existing)
	for _, c := range []string{"a", "b", "c"} {
		if got[c].Source != "web-1" {
			t.Errorf("rolling back sends %s to the known-good: %+v", c, got[c])
		}
	}
	if _, ok := got["d"]; ok {
		t.Errorf("rolling back creates nothing new: %+v", got["d"])
	}

	first := &v1alpha1.FleetRollout{Status: v1alpha1.FleetRolloutStatus{
		Phase: v1alpha1.PhaseProgressing, Candidate: cand,
		Waves: []v1alpha1.WaveStatus{{Name: "canary", Phase: v1alpha1.WaveProgressing, Clusters: []string{"a"}}, {Name: "rest", Phase: v1alpha1.WavePending}},
	}}
	got = desiredTargets(first, plan, nil)
	if len(got) != 1 || got["a"].Source != "web-2" {
		t.Errorf("a first rollout touches only started waves: %+v", got)
	}
}

func TestLateJoinersAreReported(t *testing.T) {
	fr := &v1alpha1.FleetRollout{Status: v1alpha1.FleetRolloutStatus{Waves: []v1alpha1.WaveStatus{
		{Name: "canary", Phase: v1alpha1.WaveSucceeded, Clusters: []string{"b"}, StartedAt: &metav1.Time{}},
		{Name: "rest", Phase: v1alpha1.WavePending},
	}}}
	// "a" was created after the canary started; today's plan would have put it in the canary.
	plan := fleets.WavePlan{Waves: []fleets.PlannedWave{{Name: "canary", Clusters: []string{"a"}}, {Name: "rest", Clusters: []string{"b", "c"}}}}
	setLateJoiners(fr, plan)
	if len(fr.Status.LateJoiners) != 1 || fr.Status.LateJoiners[0] != "a" {
		t.Errorf("late joiners = %v, want [a]", fr.Status.LateJoiners)
	}
	fr.Status.Waves[0].Clusters = []string{"a", "b"}
	setLateJoiners(fr, plan)
	if fr.Status.LateJoiners != nil {
		t.Errorf("no late joiners once every cluster is held: %v", fr.Status.LateJoiners)
	}
}
