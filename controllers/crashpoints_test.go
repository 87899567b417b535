package controllers

import (
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/engine"
	"github.com/tidegate/tidegate/fleets"
)

// TestUnrecordedReceiptIsTheDecisionDueNow: a receipt written but not recorded in status is taken
// up only when it was made for the decision due now.
func TestUnrecordedReceiptIsTheDecisionDueNow(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(d time.Duration) metav1.Time { return metav1.NewTime(t0.Add(d)) }
	ptr := func(d time.Duration) *metav1.Time { m := at(d); return &m }
	const rev = "main@sha1:2222222222222222222222222222222222222222"
	rollout := func(phase string) *v1alpha1.FleetRollout {
		fr := &v1alpha1.FleetRollout{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "fleet", Generation: 4}}
		fr.Status.Candidate = &v1alpha1.RevisionStatus{Revision: rev}
		fr.Status.Waves = []v1alpha1.WaveStatus{
			{Name: "canary", Phase: v1alpha1.WaveSucceeded, Clusters: []string{"a"}, Gates: []v1alpha1.GateOutcome{
				{Gate: v1alpha1.GateNoDisruption, Result: v1alpha1.ResultPass, Receipt: "recorded", DecidedAt: ptr(0)}}},
			{Name: "ring", Phase: phase, Clusters: []string{"c", "b"}},
		}
		if phase == v1alpha1.WaveSoaking {
			fr.Status.Waves[1].StartedAt = ptr(10 * time.Second)
		}
		return fr
	}
	receipt := func(name, gate, wave string, evaluated time.Duration, generation string, mutate ...func(*v1alpha1.GateReceiptSpec)) v1alpha1.GateReceipt {
		rc := v1alpha1.GateReceipt{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{ReceiptGenerationAnnotation: generation},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: v1alpha1.FieldManager, Operation: metav1.ManagedFieldsOperationUpdate}}},
			Spec: v1alpha1.GateReceiptSpec{Gate: gate, Rollout: "web", Wave: wave, Targets: []string{"b", "c"},
				Candidate: v1alpha1.RevisionStatus{Revision: rev}, Result: v1alpha1.ResultPass, EvaluatedAt: at(evaluated)}}
		for _, m := range mutate {
			m(&rc.Spec)
		}
		return rc
	}
	const fresh = 2 * time.Minute
	// pick is the receipt taken up, read whole; the controller, which reads receipts' metadata
	// first and then the candidates they name whole, latest first, must take up the same one.
	pick := func(fr *v1alpha1.FleetRollout, gate string, now time.Duration, items ...v1alpha1.GateReceipt) string {
		t.Helper()
		picked := ""
		if rc := unrecordedReceipt(items, fr, 1, gate, t0.Add(now), fresh, ReceiptAuthor{}); rc != nil {
			picked = rc.Name
		}
		whole := map[string]*v1alpha1.GateReceipt{}
		var metadata []metav1.PartialObjectMetadata
		for _, rc := range items {
			rc := rc.DeepCopy()
			annotateDecision(rc)
			whole[rc.Name] = rc
			metadata = append(metadata, metav1.PartialObjectMetadata{ObjectMeta: rc.ObjectMeta})
		}
		due, byMetadata := newDueDecision(fr, 1, gate, t0.Add(now), fresh), ""
		for _, key := range due.candidates(metadata) {
			if due.takesUp(whole[key.Name], ReceiptAuthor{}) {
				byMetadata = key.Name
				break
			}
		}
		if byMetadata != picked {
			t.Errorf("from the receipts' metadata the controller takes up %q, read whole %q", byMetadata, picked)
		}
		return picked
	}

	soaking := rollout(v1alpha1.WaveSoaking)
	nd := v1alpha1.GateNoDisruption
	if got := pick(soaking, nd, time.Hour, receipt("after-soak", nd, "ring", 40*time.Second, "3")); got != "after-soak" {
		t.Errorf("a noDisruption receipt of the running wave was not taken up (got %q): it is the decision, whatever its age or the spec's generation", got)
	}
	if got := pick(soaking, nd, time.Minute,
		receipt("older", nd, "ring", 20*time.Second, "4"), receipt("newer", nd, "ring", 30*time.Second, "4")); got != "newer" {
		t.Errorf("got %q, want the latest unrecorded receipt", got)
	}
	for name, rc := range map[string]v1alpha1.GateReceipt{
		"before the wave started (a retried wave)": receipt("x", nd, "ring", 5*time.Second, "4"),
		"of another wave":                          receipt("x", nd, "canary", 40*time.Second, "4"),
		"of another gate":                          receipt("x", v1alpha1.GateDeploySafe, "ring", 40*time.Second, "4"),
		"of another candidate": receipt("x", nd, "ring", 40*time.Second, "4", func(s *v1alpha1.GateReceiptSpec) {
			s.Candidate.Revision = "main@sha1:1111111111111111111111111111111111111111"
		}),
		"over other targets": receipt("x", nd, "ring", 40*time.Second, "4", func(s *v1alpha1.GateReceiptSpec) { s.Targets = []string{"b"} }),
		"of another rollout": receipt("x", nd, "ring", 40*time.Second, "4", func(s *v1alpha1.GateReceiptSpec) { s.Rollout = "api" }),
	} {
		if got := pick(soaking, nd, time.Minute, rc); got != "" {
			t.Errorf("a receipt %s was taken up", name)
		}
	}
	byHand := receipt("by-hand", nd, "ring", 40*time.Second, "4")
	byHand.ManagedFields = append(byHand.ManagedFields, metav1.ManagedFieldsEntry{Manager: "kubectl-edit", Operation: metav1.ManagedFieldsOperationUpdate})
	if got := pick(soaking, nd, time.Minute, byHand); got != "" {
		t.Errorf("a receipt another field manager wrote to was taken up")
	}
	recorded := rollout(v1alpha1.WaveSoaking)
	recorded.Status.Waves[0].Gates[0].Receipt = "after-soak"
	if got := pick(recorded, nd, time.Minute, receipt("after-soak", nd, "ring", 40*time.Second, "4")); got != "" {
		t.Errorf("a receipt status records was taken up again")
	}

	pending := rollout(v1alpha1.WavePending)
	ds := v1alpha1.GateDeploySafe
	if got := pick(pending, ds, 50*time.Second, receipt("pre", ds, "ring", 40*time.Second, "4")); got != "pre" {
		t.Errorf("a fresh pre-wave receipt of this generation was not taken up (got %q)", got)
	}
	if got := pick(pending, ds, 50*time.Second, receipt("pre", ds, "ring", 40*time.Second, "3")); got != "" {
		t.Errorf("a pre-wave receipt made before the spec changed was taken up")
	}
	if got := pick(pending, ds, 40*time.Second+fresh+time.Second, receipt("pre", ds, "ring", 40*time.Second, "4")); got != "" {
		t.Errorf("a pre-wave receipt older than the freshness bound was taken up")
	}
	blocked := rollout(v1alpha1.WavePending)
	blocked.Status.Waves[1].Gates = []v1alpha1.GateOutcome{{Gate: ds, Result: v1alpha1.ResultFail, Receipt: "first", DecidedAt: ptr(40 * time.Second)}}
	if got := pick(blocked, ds, 50*time.Second, receipt("before-the-last", ds, "ring", 30*time.Second, "4")); got != "" {
		t.Errorf("a receipt older than the gate's last recorded decision was taken up")
	}
	if got := pick(blocked, ds, 50*time.Second, receipt("again", ds, "ring", 45*time.Second, "4")); got != "again" {
		t.Errorf("a decision made again after the recorded one was not taken up (got %q)", got)
	}
}

// TestStatusPointsNameWhatThePatchRecords: the status crash points name the changes of the pass.
func TestStatusPointsNameWhatThePatchRecords(t *testing.T) {
	r := &FleetRolloutReconciler{TestHook: func(string) error { return nil }}
	fr := &v1alpha1.FleetRollout{}
	fr.Status.Phase = v1alpha1.PhaseCompleted
	before := engine.ProgressOf(&fr.Status)
	engine.Step(&engine.World{Rollout: fr, Target: "main@sha1:2", Plan: fleets.WavePlan{Waves: []fleets.PlannedWave{{Name: "canary"}, {Name: "rest"}}}})
	if got, want := r.statusPoints(before, &fr.Status), []string{"status:candidate", "status:phase:Progressing", "status"}; !slices.Equal(got, want) {
		t.Errorf("a new candidate: %q, want %q", got, want)
	}
	before = engine.ProgressOf(&fr.Status)
	fr.Status.Waves[0].Phase = v1alpha1.WaveSoaking
	fr.Status.Waves[1].Phase = v1alpha1.WaveAwaiting
	fr.Status.Waves[0].Rehearsal = &v1alpha1.RehearsalStatus{Phase: v1alpha1.RehearsalRollingBack}
	if got, want := r.statusPoints(before, &fr.Status), []string{"status:wave:canary:Soaking", "status:rehearsal:canary:RollingBack", "status:wave:rest:AwaitingApproval", "status"}; !slices.Equal(got, want) {
		t.Errorf("wave changes: %q, want %q", got, want)
	}
	if got := (&FleetRolloutReconciler{}).statusPoints(before, &fr.Status); got != nil {
		t.Errorf("without a hook: %q, want none", got)
	}
}
