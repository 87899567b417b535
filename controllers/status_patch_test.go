package controllers

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// A pass's status lands whole or not at all. The hub refuses the status write of a pass that
// decided the canary's deploySafe (an admission policy here; a timeout or an unavailable hub in
// production): the rollout must keep the status it had, conditions included, and not carry a gate
// condition about a wave whose members and decision are not recorded. Once the hub accepts, the
// same patch lands whole.
func TestStatusOfAPassLandsWholeOrNotAtAll(t *testing.T) {
	hub := startTestHub(t)
	ctx := context.Background()
	r := &FleetRolloutReconciler{Client: hub.admin, APIReader: hub.admin}
	fr := createRolloutIn(t, hub, "whole")
	rev := "main@sha1:" + strings.Repeat("2", 40)
	fr.Status = v1alpha1.FleetRolloutStatus{
		Phase:     v1alpha1.PhaseProgressing,
		Candidate: &v1alpha1.RevisionStatus{Revision: rev, Source: v1alpha1.PinnedSourceName(fr.Name, rev)},
		Waves:     []v1alpha1.WaveStatus{{Name: "canary", Phase: v1alpha1.WavePending}, {Name: "rest", Phase: v1alpha1.WavePending}},
	}
	conditions.MarkUnknown(fr, meta.ReadyCondition, v1alpha1.ProgressingReason, "rolling out %s", rev)
	if err := hub.admin.Status().Update(ctx, fr); err != nil {
		t.Fatal(err)
	}

	deny := &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "no-canary-status"},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Update},
					Rule: admissionv1.Rule{APIGroups: []string{v1alpha1.GroupVersion.Group}, APIVersions: []string{"*"},
						Resources: []string{"fleetrollouts/status"}},
				},
			}}},
			Validations: []admissionv1.Validation{{
				Expression: "!has(object.status.currentWave) || object.status.currentWave != 'canary'",
				Message:    "the hub takes no status of wave canary",
			}},
		},
	}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: deny.Name},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: deny.Name,
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny}},
	}
	for _, o := range []client.Object{deny, binding} {
		if err := hub.admin.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	// The pass: read, then what deciding the canary's deploySafe leaves in status.
	decide := func(fr *v1alpha1.FleetRollout) {
		fr.Status.CurrentWave = "canary"
		fr.Status.Waves[0].Clusters = []string{"member-1"}
		fr.Status.WaitingFor = &v1alpha1.WaitingFor{Reason: v1alpha1.WaitingForInconclusive, Wave: "canary", Message: "wave canary waits before it starts"}
		conditions.Set(fr, &metav1.Condition{Type: v1alpha1.GateDeploySafe, Status: metav1.ConditionUnknown, Reason: v1alpha1.GateInconclusiveReason, Message: "wave canary: inconclusive"})
		conditions.MarkFalse(fr, meta.ReadyCondition, v1alpha1.GateInconclusiveReason, "wave canary waits before it starts")
	}
	read := func() *v1alpha1.FleetRollout {
		t.Helper()
		var got v1alpha1.FleetRollout
		if err := hub.admin.Get(ctx, client.ObjectKeyFromObject(fr), &got); err != nil {
			t.Fatal(err)
		}
		return &got
	}

	// The policy takes a moment to be enforced: until then a write may land, and is undone.
	var err error
	eventually(t, "the admission policy enforced", func() (bool, string) {
		pass := read()
		patcher := newStatusPatch(pass)
		decide(pass)
		err = r.finalizeStatus(ctx, pass, patcher)
		if err == nil {
			undo := read()
			undo.Status = fr.Status
			if uerr := hub.admin.Status().Update(ctx, undo); uerr != nil {
				t.Fatal(uerr)
			}
		}
		return err != nil && strings.Contains(err.Error(), "the hub takes no status of wave canary"), fmt.Sprint(err)
	})
	got := read()
	if c := conditions.Get(got, v1alpha1.GateDeploySafe); c != nil {
		t.Errorf("the refused status write left its gate condition behind: %+v (currentWave %q, canary members %v)",
			c, got.Status.CurrentWave, got.Status.Waves[0].Clusters)
	}
	if c := conditions.Get(got, meta.ReadyCondition); c == nil || c.Reason != v1alpha1.ProgressingReason {
		t.Errorf("the refused status write changed Ready: %+v", c)
	}
	if got.Status.CurrentWave != "" || len(got.Status.Waves[0].Clusters) != 0 || got.Status.WaitingFor != nil {
		t.Errorf("the refused status write changed status: %+v", got.Status)
	}

	// The hub takes status again: the same pass lands whole.
	for _, o := range []client.Object{binding, deny} {
		if err := hub.admin.Delete(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the status written once the policy is gone", func() (bool, string) {
		pass := read()
		patcher := newStatusPatch(pass)
		decide(pass)
		err := r.finalizeStatus(ctx, pass, patcher)
		return err == nil, fmt.Sprint(err)
	})
	got = read()
	if c := conditions.Get(got, v1alpha1.GateDeploySafe); c == nil || got.Status.CurrentWave != "canary" ||
		len(got.Status.Waves[0].Clusters) != 1 || got.Status.WaitingFor == nil || !conditions.IsFalse(got, meta.ReadyCondition) {
		t.Errorf("the accepted status write did not land whole: %+v", got.Status)
	}
	// With it, the revision kubectl's Candidate column shows, as flux get prints it.
	if got.Status.Short == nil || got.Status.Short.Candidate != "main@sha1:22222222" || got.Status.Short.KnownGood != "" {
		t.Errorf("status.short = %+v, want the candidate main@sha1:22222222 and no known-good", got.Status.Short)
	}
}

// A writer whose read is stale cannot undo a decision: two passes read the rollout at the same
// resourceVersion (a deposed leader still in its pass, and the new leader); the new leader records
// that the canary succeeded and the ring started, then the stale pass's patch, computed from the
// older read with the canary still soaking, is refused with a Conflict and changes nothing. Its
// next reconcile reads again.
func TestAStaleStatusWriteIsRefused(t *testing.T) {
	hub := startTestHub(t)
	ctx := context.Background()
	r := &FleetRolloutReconciler{Client: hub.admin, APIReader: hub.admin}
	fr := createRolloutIn(t, hub, "stale")
	rev := "main@sha1:" + strings.Repeat("3", 40)
	fr.Status = v1alpha1.FleetRolloutStatus{
		Phase: v1alpha1.PhaseProgressing, CurrentWave: "canary",
		Candidate: &v1alpha1.RevisionStatus{Revision: rev, Source: v1alpha1.PinnedSourceName(fr.Name, rev)},
		Waves: []v1alpha1.WaveStatus{{Name: "canary", Phase: v1alpha1.WaveSoaking, Clusters: []string{"member-1"}},
			{Name: "ring", Phase: v1alpha1.WavePending}},
	}
	if err := hub.admin.Status().Update(ctx, fr); err != nil {
		t.Fatal(err)
	}
	read := func() *v1alpha1.FleetRollout {
		t.Helper()
		var got v1alpha1.FleetRollout
		if err := hub.admin.Get(ctx, client.ObjectKeyFromObject(fr), &got); err != nil {
			t.Fatal(err)
		}
		return &got
	}
	stale, leader := read(), read()
	stalePatch, leaderPatch := newStatusPatch(stale), newStatusPatch(leader)

	leader.Status.Waves[0].Phase = v1alpha1.WaveSucceeded
	leader.Status.Waves[1].Phase, leader.Status.Waves[1].Clusters = v1alpha1.WaveProgressing, []string{"member-2"}
	leader.Status.CurrentWave = "ring"
	if err := r.finalizeStatus(ctx, leader, leaderPatch); err != nil {
		t.Fatal(err)
	}
	// The stale pass still sees the canary soaking, and writes what it made of that.
	now := metav1.Now()
	stale.Status.Waves[0].Soaked = []v1alpha1.SoakSamples{{Cluster: "member-1", Samples: 3, First: now, Last: now}}
	stale.Status.WaitingFor = &v1alpha1.WaitingFor{Reason: v1alpha1.WaitingForSoak, Wave: "canary", Message: "wave canary soaking"}
	err := r.finalizeStatus(ctx, stale, stalePatch)
	if !apierrors.IsConflict(err) {
		t.Fatalf("the stale pass's status write: %v, want a Conflict", err)
	}
	got := read()
	if got.Status.CurrentWave != "ring" || got.Status.Waves[0].Phase != v1alpha1.WaveSucceeded || got.Status.Waves[1].Phase != v1alpha1.WaveProgressing ||
		got.Status.WaitingFor != nil || len(got.Status.Waves[0].Soaked) != 0 {
		t.Errorf("the stale write changed the status the leader wrote: %+v", got.Status)
	}
}

// createRolloutIn creates namespace ns on the hub and rollout app in it, and returns the rollout.
func createRolloutIn(t *testing.T, hub *testHub, ns string) *v1alpha1.FleetRollout {
	t.Helper()
	fr := &v1alpha1.FleetRollout{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: ns},
		Spec:       v1alpha1.FleetRolloutSpec{SourceRef: v1alpha1.SourceReference{Kind: sourcev1.GitRepositoryKind, Name: "fleet"}, Path: "./app"},
	}
	for _, o := range []client.Object{&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, fr} {
		if err := hub.admin.Create(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
	return fr
}
