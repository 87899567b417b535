package controllers

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/verdict"
)

// The approvals of a revision that is neither the candidate, nor the known-good, nor the one the
// source serves now are stale; a revision named by its commit alone is the same revision.
func TestStaleApprovals(t *testing.T) {
	fr := &v1alpha1.FleetRollout{}
	fr.Status.Candidate = &v1alpha1.RevisionStatus{Revision: "main@sha1:ccc"}
	fr.Status.LastKnownGood = &v1alpha1.RevisionStatus{Revision: "main@sha1:kkk"}
	fr.Spec.Approvals = []v1alpha1.Approval{
		{Revision: "main@sha1:old", Wave: "ring"},
		{Revision: "main@sha1:ccc", Wave: "canary"},
		{Revision: "sha1:kkk", Irreversible: true},
		{Revision: "main@sha1:older"},
		{Revision: "main@sha1:next"},
	}
	if got := staleApprovals(fr, "main@sha1:next"); !slices.Equal(got, []int{0, 3}) {
		t.Errorf("stale approvals %v, want [0 3] (the past revisions)", got)
	}
	if got := staleApprovals(fr, "main@sha1:ccc"); !slices.Equal(got, []int{0, 3, 4}) {
		t.Errorf("with the candidate the source's revision, stale approvals %v, want [0 3 4]", got)
	}
	fr.Spec.Approvals = nil
	if got := staleApprovals(fr, ""); got != nil {
		t.Errorf("no approvals, stale %v", got)
	}
}

// The receipt of a wave's deploySafe records the approval that let the wave start, when the wave
// needs one (its spec, or the policy); other gates and waves record only what their evidence counted.
func TestCountedApprovals(t *testing.T) {
	at := metav1.Now()
	fr := &v1alpha1.FleetRollout{}
	fr.Spec.Waves = []v1alpha1.Wave{{Name: "canary"}, {Name: "ring", RequireApproval: true}, {Name: "rest"}}
	fr.Status.Candidate = &v1alpha1.RevisionStatus{Revision: "main@sha1:ccc"}
	ring := v1alpha1.Approval{Revision: "main@sha1:ccc", Wave: "ring", By: "alice", ApprovedAt: &at}
	all := v1alpha1.Approval{Revision: "main@sha1:ccc", By: "bob"}
	irreversible := v1alpha1.Approval{Revision: "main@sha1:ccc", Irreversible: true, By: "dba"}
	fr.Spec.Approvals = []v1alpha1.Approval{{Revision: "main@sha1:old", Wave: "ring"}, ring, all}
	var none verdict.Settings

	got := countedApprovals(fr, none, &v1alpha1.WaveStatus{Name: "ring"}, v1alpha1.GateDeploySafe, nil)
	if len(got) != 1 || got[0].By != "alice" {
		t.Errorf("the ring's deploySafe records %+v, want alice's approval of the ring", got)
	}
	got = countedApprovals(fr, none, &v1alpha1.WaveStatus{Name: "ring"}, v1alpha1.GateDeploySafe, []v1alpha1.Approval{irreversible, ring})
	if len(got) != 2 {
		t.Errorf("an approval the evidence counted already is not recorded twice: %+v", got)
	}
	if got := countedApprovals(fr, none, &v1alpha1.WaveStatus{Name: "ring"}, v1alpha1.GateRollbackSucceeds, nil); len(got) != 0 {
		t.Errorf("rollbackSucceeds of the ring records %+v, want nothing", got)
	}
	if got := countedApprovals(fr, none, &v1alpha1.WaveStatus{Name: "rest"}, v1alpha1.GateDeploySafe, nil); len(got) != 0 {
		t.Errorf("the rest needs no approval, and its deploySafe records %+v", got)
	}
	policy := verdict.Settings{Approvals: verdict.ApprovalSettings{Waves: []string{"rest"}}}
	got = countedApprovals(fr, policy, &v1alpha1.WaveStatus{Name: "rest"}, v1alpha1.GateDeploySafe, nil)
	if len(got) != 1 || got[0].By != "bob" {
		t.Errorf("the policy makes the rest wait; its deploySafe records %+v, want bob's approval of every wave", got)
	}
	// What the evidence passed in is not changed.
	counted := []v1alpha1.Approval{irreversible}
	_ = countedApprovals(fr, none, &v1alpha1.WaveStatus{Name: "ring"}, v1alpha1.GateDeploySafe, counted[:1:1])
	if len(counted) != 1 || counted[0].By != "dba" {
		t.Errorf("the evidence's approvals changed: %+v", counted)
	}
}
