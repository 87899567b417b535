package controllers

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/engine"
)

// One cluster's Kustomization that cannot be written stops no other, against a real API server: in
// a wave, cluster b's name is taken by a Kustomization the rollout does not own and cluster c's is
// denied by an admission policy; a and d are written all the same, b's Kustomization is left as it
// is (never taken over), and both failures are recorded for their cluster with the fix, counted in
// the wave. In a rollback, c's denial does not keep a, b and d from going back to the known-good.
// A failed write is not tried again before its backoff; once the policy is gone it goes through and
// its failure leaves status.
func TestOneFailedKustomizationWriteStopsNoOther(t *testing.T) {
	hub := startTestHub(t)
	ctx := context.Background()
	r := &FleetRolloutReconciler{Client: hub.admin, APIReader: hub.admin}
	now := time.Now()
	rev1, rev2 := "main@sha1:"+strings.Repeat("1", 40), "main@sha1:"+strings.Repeat("2", 40)
	clusters := []string{"a", "b", "c", "d"}

	// setup makes a namespace with a tracked source, the four FleetClusters and a rollout whose
	// status is as given; owned lists the clusters whose Kustomization the rollout already wrote, at
	// the candidate.
	setup := func(ns string, phase string, owned ...string) *v1alpha1.FleetRollout {
		t.Helper()
		objs := []client.Object{
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
			&sourcev1.GitRepository{ObjectMeta: metav1.ObjectMeta{Name: "fleet", Namespace: ns},
				Spec: sourcev1.GitRepositorySpec{URL: "https://git.example/fleet.git", Interval: metav1.Duration{Duration: time.Minute},
					Reference: &sourcev1.GitRepositoryRef{Branch: "main"}}},
		}
		for _, c := range clusters {
			objs = append(objs, &v1alpha1.FleetCluster{ObjectMeta: metav1.ObjectMeta{Name: c, Namespace: ns}})
		}
		fr := &v1alpha1.FleetRollout{
			ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: ns},
			Spec:       v1alpha1.FleetRolloutSpec{SourceRef: v1alpha1.SourceReference{Kind: sourcev1.GitRepositoryKind, Name: "fleet"}, Path: "./app"},
		}
		for _, o := range append(objs, fr) {
			if err := hub.admin.Create(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
		started := metav1.NewTime(now.Add(-time.Minute))
		fr.Status = v1alpha1.FleetRolloutStatus{
			Phase:         phase,
			Candidate:     &v1alpha1.RevisionStatus{Revision: rev2, Source: v1alpha1.PinnedSourceName(fr.Name, rev2)},
			LastKnownGood: &v1alpha1.RevisionStatus{Revision: rev1, Source: v1alpha1.PinnedSourceName(fr.Name, rev1)},
			Waves:         []v1alpha1.WaveStatus{{Name: "all", Phase: v1alpha1.WaveProgressing, Clusters: clusters, StartedAt: &started}},
		}
		if err := hub.admin.Status().Update(ctx, fr); err != nil {
			t.Fatal(err)
		}
		controller := true
		for _, c := range owned {
			ks := engine.DesiredKustomization(fr, &v1alpha1.FleetCluster{ObjectMeta: metav1.ObjectMeta{Name: c, Namespace: ns}}, engine.Target{Source: fr.Status.Candidate.Source, Revision: rev2, Wave: "all"})
			ks.OwnerReferences = []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: v1alpha1.FleetRolloutKind,
				Name: fr.Name, UID: fr.UID, Controller: &controller}}
			if err := hub.admin.Create(ctx, ks); err != nil {
				t.Fatal(err)
			}
		}
		return fr
	}
	// act runs the sub-steps up to act, as a reconcile does, and the step after it.
	act := func(fr *v1alpha1.FleetRollout, at time.Time) *pass {
		t.Helper()
		p := &pass{World: &engine.World{Rollout: fr, Now: at}}
		for _, sub := range []func(context.Context, *pass) outcome{r.resolveTarget, r.plan, r.act} {
			if o := sub(ctx, p); o.kind != proceed {
				t.Fatalf("the pass ended before the step: %+v", o)
			}
		}
		p.Observe(p.Objects)
		// No source-controller runs: the candidate is taken as fetched.
		p.Target, p.Candidate = rev2, engine.SourceState{Exists: true, Ready: true, Revision: rev2}
		p.res = engine.Step(p.World)
		return p
	}
	sourceOf := func(ns, cluster string) string {
		t.Helper()
		var ks kustomizev1.Kustomization
		if err := hub.admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: v1alpha1.KustomizationName("app", cluster)}, &ks); err != nil {
			return err.Error()
		}
		return ks.Spec.SourceRef.Name
	}
	failureOf := func(fr *v1alpha1.FleetRollout, cluster string) *v1alpha1.WriteFailure {
		for i := range fr.Status.WriteFailures {
			if fr.Status.WriteFailures[i].Cluster == cluster {
				return &fr.Status.WriteFailures[i]
			}
		}
		return nil
	}

	// An admission policy that refuses every Kustomization of cluster c.
	deny := &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "no-kustomization-for-c"},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Create, admissionv1.Update},
					Rule:       admissionv1.Rule{APIGroups: []string{kustomizev1.GroupVersion.Group}, APIVersions: []string{"*"}, Resources: []string{"kustomizations"}},
				},
			}}},
			Validations: []admissionv1.Validation{{
				Expression: "!has(object.metadata.labels) || !('tidegate.dev/cluster' in object.metadata.labels) || object.metadata.labels['tidegate.dev/cluster'] != 'c'",
				Message:    "cluster c takes no Kustomization",
			}},
		},
	}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "no-kustomization-for-c"},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: deny.Name,
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny}},
	}

	// A wave, with the rollback's Kustomizations for c written before the policy exists.
	wave := setup("wave", v1alpha1.PhaseProgressing)
	back := setup("rollback", v1alpha1.PhaseRollingBack, clusters...)
	for _, o := range []client.Object{deny, binding} {
		if err := hub.admin.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	foreign := &kustomizev1.Kustomization{
		ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.KustomizationName("app", "b"), Namespace: "wave"},
		Spec: kustomizev1.KustomizationSpec{Interval: metav1.Duration{Duration: time.Hour}, Path: "./other", Prune: true,
			SourceRef: kustomizev1.CrossNamespaceSourceReference{Kind: sourcev1.GitRepositoryKind, Name: "someone-elses"}},
	}
	if err := hub.admin.Create(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	// The policy takes a moment to be enforced.
	eventually(t, "the admission policy enforced", func() (bool, string) {
		probe := engine.DesiredKustomization(wave, &v1alpha1.FleetCluster{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "wave"}}, engine.Target{Source: "probe", Revision: rev2, Wave: "all"})
		probe.Name = "probe"
		err := hub.admin.Create(ctx, probe, client.DryRunAll)
		return err != nil && strings.Contains(err.Error(), "cluster c takes no Kustomization"), fmt.Sprint(err)
	})

	p := act(wave, now)
	cand := wave.Status.Candidate.Source
	for _, c := range []string{"a", "d"} {
		if got := sourceOf("wave", c); got != cand {
			t.Errorf("cluster %s's Kustomization points at %q, want %s: a failed write of another cluster stopped it", c, got, cand)
		}
	}
	var ks kustomizev1.Kustomization
	if err := hub.admin.Get(ctx, client.ObjectKeyFromObject(foreign), &ks); err != nil {
		t.Fatal(err)
	}
	if ks.Spec.SourceRef.Name != "someone-elses" || len(ks.OwnerReferences) != 0 || ks.Spec.Path != "./other" {
		t.Errorf("the Kustomization tidegate does not own was taken over: %+v %+v", ks.Spec, ks.OwnerReferences)
	}
	if got := sourceOf("wave", "c"); !strings.Contains(got, "not found") {
		t.Errorf("cluster c's Kustomization was written through the policy: %s", got)
	}
	st := &wave.Status
	if st.WriteFailureCount != 2 || len(st.WriteFailures) != 2 {
		t.Fatalf("write failures = %d %+v, want b and c", st.WriteFailureCount, st.WriteFailures)
	}
	if f := failureOf(wave, "b"); f == nil || f.Reason != v1alpha1.WriteNameTaken ||
		!strings.Contains(f.Message, "cluster b") || !strings.Contains(f.Message, "wave/app-b") || !strings.Contains(f.Message, "rename or delete") {
		t.Errorf("b's failure = %+v, want NameTaken naming the cluster, the Kustomization and the fix", f)
	}
	if f := failureOf(wave, "c"); f == nil || f.Reason != v1alpha1.WriteRefused ||
		!strings.Contains(f.Message, "cluster c") || !strings.Contains(f.Message, "cluster c takes no Kustomization") || !strings.Contains(f.Message, "admission policy") {
		t.Errorf("c's failure = %+v, want Refused with the policy's message and the fix", f)
	}
	// Both count as failed in the wave: over its budget of 0, the gate is decided now.
	if p.res.GateWave != 0 {
		t.Errorf("a wave with two refused writes and no budget should be decided at once: %+v", p.res)
	}

	// The rollback: a, b and d go back; c is recorded.
	act(back, now)
	kg := back.Status.LastKnownGood.Source
	for _, c := range []string{"a", "b", "d"} {
		if got := sourceOf("rollback", c); got != kg {
			t.Errorf("cluster %s's Kustomization points at %q, want the known-good's %s", c, got, kg)
		}
	}
	if got := sourceOf("rollback", "c"); got != back.Status.Candidate.Source {
		t.Errorf("cluster c's Kustomization points at %q through the policy", got)
	}
	if f := failureOf(back, "c"); back.Status.WriteFailureCount != 1 || f == nil || f.Reason != v1alpha1.WriteRefused {
		t.Fatalf("rollback write failures = %+v", back.Status.WriteFailures)
	}
	since := failureOf(back, "c").Since

	// Within its backoff the write is not tried again; the failure stays, with when it began.
	act(back, now.Add(2*time.Second))
	if f := failureOf(back, "c"); f == nil || !f.Since.Equal(since) {
		t.Errorf("within the backoff the failure should stay as it was: %+v", back.Status.WriteFailures)
	}
	if err := hub.admin.Delete(ctx, binding); err != nil {
		t.Fatal(err)
	}
	eventually(t, "c's Kustomization written once the policy is gone and its backoff is over", func() (bool, string) {
		act(back, time.Now().Add(time.Minute))
		return sourceOf("rollback", "c") == kg && back.Status.WriteFailureCount == 0 && back.Status.WriteFailures == nil,
			fmt.Sprintf("%s %+v", sourceOf("rollback", "c"), back.Status.WriteFailures)
	})
}
