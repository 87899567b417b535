package engine

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
	existing := map[string]Object{"a": ks("canary"), "b": ks("rest"), "c": ks("rest")}

	fr := &v1alpha1.FleetRollout{Status: v1alpha1.FleetRolloutStatus{
		Phase: v1alpha1.PhaseProgressing, Candidate: cand, LastKnownGood: kg,
		Waves: []v1alpha1.WaveStatus{
			{Name: "canary", Phase: v1alpha1.WaveSoaking, Clusters: []string{"a"}},
			{Name: "rest", Phase: v1alpha1.WavePending},
		},
	}}
	got := Targets(fr, plan, existing)
	if got["a"].Source != "web-2" {
		t.Errorf("the canary member runs the candidate: %+v", got["a"])
	}
	if _, ok := got["b"]; ok {
		t.Errorf("a cluster of a pending wave keeps what it runs: got %+v", got["b"])
	}
	if _, ok := got["d"]; ok {
		t.Errorf("a cluster without a Kustomization gets nothing until its wave (or a catch-up wave) starts: %+v", got["d"])
	}

	fr.Status.Phase = v1alpha1.PhaseRollingBack
	got = Targets(fr, plan, existing)
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
	got = Targets(first, plan, nil)
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

func TestDesiredTargetsHoldBack(t *testing.T) {
	plan := fleets.WavePlan{
		Waves:    []fleets.PlannedWave{{Name: "canary", Clusters: []string{"a"}}, {Name: "rest", Clusters: []string{"b", "c", "d"}}},
		Eligible: []string{"a", "b", "c", "d"},
	}
	kg := &v1alpha1.RevisionStatus{Revision: "main@sha1:1", Source: "web-1"}
	cand := &v1alpha1.RevisionStatus{Revision: "main@sha1:2", Source: "web-2"}
	at := func(source string) *kustomizev1.Kustomization {
		ks := &kustomizev1.Kustomization{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{v1alpha1.WaveLabel: "rest"}}}
		ks.Spec.SourceRef.Name = source
		return ks
	}
	// c's preflight failed (held back, it runs the known-good); d was held back with no
	// Kustomization yet.
	existing := map[string]Object{"a": at("web-2"), "b": at("web-1"), "c": at("web-1")}
	fr := &v1alpha1.FleetRollout{Status: v1alpha1.FleetRolloutStatus{
		Phase: v1alpha1.PhaseProgressing, Candidate: cand, LastKnownGood: kg,
		Waves: []v1alpha1.WaveStatus{
			{Name: "canary", Phase: v1alpha1.WaveSucceeded, Clusters: []string{"a"}},
			{Name: "rest", Phase: v1alpha1.WaveProgressing, Clusters: []string{"b", "c", "d"},
				HeldBack: []v1alpha1.HeldBackCluster{{Cluster: "c", Reason: "1 API(s) not served"}, {Cluster: "d"}}},
		},
	}}
	got := Targets(fr, plan, existing)
	if got["b"].Source != "web-2" {
		t.Errorf("b runs the candidate: %+v", got["b"])
	}
	if _, ok := got["c"]; ok {
		t.Errorf("a held-back member keeps what it runs: %+v", got["c"])
	}
	if _, ok := got["d"]; ok {
		t.Errorf("a held-back member without a Kustomization gets nothing: %+v", got["d"])
	}

	// Completed: the known-good is the candidate now, and the held-back members stay behind.
	fr.Status.Phase, fr.Status.LastKnownGood = v1alpha1.PhaseCompleted, cand
	fr.Status.Waves[1].Phase = v1alpha1.WaveSucceeded
	got = Targets(fr, plan, existing)
	if _, ok := got["c"]; ok {
		t.Errorf("after completion a held-back member is not switched: %+v", got["c"])
	}
	if _, ok := got["d"]; ok {
		t.Errorf("after completion a held-back member gets nothing it was not given: %+v", got["d"])
	}

	// The next candidate rolls back: c, held back at web-1 by the last rollout, stays there.
	next := &v1alpha1.RevisionStatus{Revision: "main@sha1:3", Source: "web-3"}
	existing["b"] = at("web-3")
	fr.Status = v1alpha1.FleetRolloutStatus{Phase: v1alpha1.PhaseRollingBack, Candidate: next, LastKnownGood: cand}
	got = Targets(fr, plan, existing)
	if got["b"].Source != "web-2" || got["a"].Source != "web-2" {
		t.Errorf("members at the candidate or the known-good go to the known-good: %+v", got)
	}
	if _, ok := got["c"]; ok {
		t.Errorf("a member held back at an older revision stays there: %+v", got["c"])
	}
}

func TestDesiredTargetsOfACatchUpWave(t *testing.T) {
	plan := fleets.WavePlan{
		Waves:    []fleets.PlannedWave{{Name: "canary", Clusters: []string{"a"}}, {Name: "rest", Clusters: []string{"b", "c"}}},
		Eligible: []string{"a", "b", "c"},
	}
	kg := &v1alpha1.RevisionStatus{Revision: "main@sha1:1", Source: "web-1"}
	fr := &v1alpha1.FleetRollout{Status: v1alpha1.FleetRolloutStatus{
		Phase: v1alpha1.PhaseProgressing, Candidate: kg, LastKnownGood: kg,
		Waves: []v1alpha1.WaveStatus{
			{Name: "canary", Phase: v1alpha1.WaveSucceeded, Clusters: []string{"a"}},
			{Name: "rest", Phase: v1alpha1.WaveSucceeded, Clusters: []string{"b"}, Excused: []v1alpha1.HeldBackCluster{{Cluster: "c"}}},
			{Name: "catch-up-1", Phase: v1alpha1.WavePending, Clusters: []string{"a", "c"}, CatchUp: true},
		},
	}}
	got := Targets(fr, plan, nil)
	if _, ok := got["c"]; ok {
		t.Errorf("an excused member gets nothing before its catch-up wave starts: %+v", got["c"])
	}
	fr.Status.Waves[2].Phase = v1alpha1.WaveProgressing
	got = Targets(fr, plan, nil)
	if got["c"] != (Target{Source: "web-1", Revision: kg.Revision, Wave: "rest"}) {
		t.Errorf("an excused member goes to the known-good in its catch-up wave, labelled with its planned wave: %+v", got["c"])
	}
	if got["a"].Wave != "canary" {
		t.Errorf("a catch-up member keeps the label of the wave it was a member of: %+v", got["a"])
	}
	isMoving := Moving(&fr.Status)
	if !isMoving("a") || !isMoving("c") || isMoving("b") {
		t.Errorf("only the members of the catch-up wave being switched may change: a=%v c=%v b=%v", isMoving("a"), isMoving("c"), isMoving("b"))
	}
}
