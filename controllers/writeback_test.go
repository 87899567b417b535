package controllers

import (
	"context"
	"strings"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/engine"
)

// A soaking member whose Kustomization someone edited is written back and keeps its health, against
// a real API server: kustomize-controller failed the edited path (Ready=False for the edited
// generation), tidegate puts its spec back, and the wave, which allows no failure, goes on soaking
// instead of being decided on a condition about a spec that no longer is. The pass that wrote it
// back judges the cluster on what the API server answered, not on a copy with no status. Once
// kustomize-controller fails tidegate's own spec, the wave is decided.
func TestAWriteBackDuringTheSoakIsNotALossOfReadiness(t *testing.T) {
	hub := startTestHub(t)
	ctx := context.Background()
	r := &FleetRolloutReconciler{Client: hub.admin, APIReader: hub.admin}
	rev1, rev2 := "main@sha1:"+strings.Repeat("1", 40), "main@sha1:"+strings.Repeat("2", 40)
	const ns, cluster = "writeback", "a"
	now := time.Now()

	fr := &v1alpha1.FleetRollout{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: ns},
		Spec: v1alpha1.FleetRolloutSpec{SourceRef: v1alpha1.SourceReference{Kind: sourcev1.GitRepositoryKind, Name: "fleet"}, Path: "./app",
			Waves: []v1alpha1.Wave{{Name: "all", Percent: ptr.To[int32](100), Soak: &metav1.Duration{Duration: 10 * time.Minute}}}},
	}
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&sourcev1.GitRepository{ObjectMeta: metav1.ObjectMeta{Name: "fleet", Namespace: ns},
			Spec: sourcev1.GitRepositorySpec{URL: "https://git.example/fleet.git", Interval: metav1.Duration{Duration: time.Minute},
				Reference: &sourcev1.GitRepositoryRef{Branch: "main"}}},
		&v1alpha1.FleetCluster{ObjectMeta: metav1.ObjectMeta{Name: cluster, Namespace: ns}},
		fr,
	} {
		if err := hub.admin.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	started, ready := metav1.NewTime(now.Add(-2*time.Minute).Truncate(time.Second)), metav1.NewTime(now.Add(-time.Minute).Truncate(time.Second))
	fr.Status = v1alpha1.FleetRolloutStatus{
		Phase:         v1alpha1.PhaseProgressing,
		Candidate:     &v1alpha1.RevisionStatus{Revision: rev2, Source: v1alpha1.PinnedSourceName(fr.Name, rev2)},
		LastKnownGood: &v1alpha1.RevisionStatus{Revision: rev1, Source: v1alpha1.PinnedSourceName(fr.Name, rev1)},
		Waves: []v1alpha1.WaveStatus{{Name: "all", Phase: v1alpha1.WaveSoaking, Clusters: []string{cluster},
			StartedAt: &started, ReadyAt: &ready}},
	}
	if err := hub.admin.Status().Update(ctx, fr); err != nil {
		t.Fatal(err)
	}

	// The rollout's Kustomization at the candidate, applied and Ready, as kustomize-controller leaves it.
	controller := true
	ks := engine.DesiredKustomization(fr, &v1alpha1.FleetCluster{ObjectMeta: metav1.ObjectMeta{Name: cluster, Namespace: ns}},
		engine.Target{Source: fr.Status.Candidate.Source, Revision: rev2, Wave: "all"})
	ks.OwnerReferences = []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: v1alpha1.FleetRolloutKind,
		Name: fr.Name, UID: fr.UID, Controller: &controller}}
	if err := hub.admin.Create(ctx, ks); err != nil {
		t.Fatal(err)
	}
	setReady := func(ks *kustomizev1.Kustomization, status metav1.ConditionStatus, reason, msg string) {
		t.Helper()
		if status == metav1.ConditionTrue {
			ks.Status.ObservedGeneration = ks.Generation // kustomize-controller moves it on success only
		}
		ks.Status.LastAppliedRevision = rev2
		apimeta.SetStatusCondition(&ks.Status.Conditions, metav1.Condition{Type: meta.ReadyCondition, Status: status,
			Reason: reason, Message: msg, ObservedGeneration: ks.Generation})
		if err := hub.admin.Status().Update(ctx, ks); err != nil {
			t.Fatal(err)
		}
	}
	setReady(ks, metav1.ConditionTrue, meta.ReconciliationSucceededReason, "Applied revision: "+rev2)

	// Someone points it elsewhere, and kustomize-controller fails that path.
	ks.Spec.Path = "./elsewhere"
	if err := hub.admin.Update(ctx, ks); err != nil {
		t.Fatal(err)
	}
	setReady(ks, metav1.ConditionFalse, meta.ArtifactFailedReason, "kustomization path not found: stat /tmp/elsewhere: no such file or directory")

	// pass runs the sub-steps of a reconcile up to the step, as the reconciler does, and the step.
	pass := func() *engine.StepResult {
		t.Helper()
		p := &pass{World: &engine.World{Rollout: fr, Now: now}}
		for _, sub := range []func(context.Context, *pass) outcome{r.resolveTarget, r.plan, r.act, r.observe} {
			if o := sub(ctx, p); o.kind != proceed {
				t.Fatalf("the pass ended before the step: %+v", o)
			}
		}
		// No source-controller runs: the candidate is taken as fetched.
		p.Target, p.Candidate = rev2, engine.SourceState{Exists: true, Ready: true, Revision: rev2}
		res := engine.Step(p.World)
		return &res
	}
	get := func() *kustomizev1.Kustomization {
		t.Helper()
		var got kustomizev1.Kustomization
		if err := hub.admin.Get(ctx, client.ObjectKeyFromObject(ks), &got); err != nil {
			t.Fatal(err)
		}
		return &got
	}

	// The pass that writes it back, then one that reads it back from the API server: neither decides.
	for i, what := range []string{"the pass that writes it back", "the pass after it"} {
		res := pass()
		if got := get(); got.Spec.Path != "./app" {
			t.Fatalf("%s: the Kustomization's path is %q, want it written back to ./app", what, got.Spec.Path)
		}
		if res.GateWave != -1 || fr.Status.Waves[0].Phase != v1alpha1.WaveSoaking {
			t.Fatalf("%s (%d): the soaking wave was decided (gate wave %d, phase %s) on a condition about the edited spec: %+v",
				what, i, res.GateWave, fr.Status.Waves[0].Phase, fr.Status.Waves[0])
		}
	}

	// kustomize-controller fails tidegate's own spec: that is a failure of the candidate, decided now.
	setReady(get(), metav1.ConditionFalse, meta.HealthCheckFailedReason, "timeout waiting for: [Deployment/web/web status: 'InProgress']")
	if res := pass(); res.GateWave != 0 {
		t.Fatalf("a failed health check of the written-back spec left the wave undecided: gate wave %d, %+v", res.GateWave, fr.Status.Waves[0])
	}
}
