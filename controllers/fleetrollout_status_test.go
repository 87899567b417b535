package controllers

import (
	"errors"
	"strings"
	"testing"

	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// TestSetConditions is the truth table of the one function that sets Ready, Reconciling, Stalled,
// Held and RollingOut.
func TestSetConditions(t *testing.T) {
	cand := &v1alpha1.RevisionStatus{Revision: "main@sha1:2", Source: "web-2"}
	good := &v1alpha1.RevisionStatus{Revision: "main@sha1:1", Source: "web-1"}
	type want struct {
		ready, reconciling, stalled, held, rollingOut string // "Status/Reason", "" when absent
		readyMessage                                  string // a part of Ready's message
	}
	for _, tc := range []struct {
		name   string
		edit   func(fr *v1alpha1.FleetRollout)
		out    outcome
		onFail string
		want   want
	}{
		{
			name: "invalid spec stalls",
			out:  stalled(v1alpha1.InvalidSpecReason, errors.New("spec.waves[1]: duplicate name"), 0),
			want: want{ready: "False/InvalidSpec", stalled: "True/InvalidSpec", rollingOut: "False/NotRollingOut", readyMessage: "duplicate name"},
		},
		{
			name: "a transient error is retried",
			edit: func(fr *v1alpha1.FleetRollout) {
				fr.Status.Phase, fr.Status.Candidate = v1alpha1.PhaseProgressing, cand
			},
			out:  retryable(errors.New("applying kustomization fleet/web-a: connection refused")),
			want: want{ready: "False/ReconciliationFailed", reconciling: "True/ProgressingWithRetry", rollingOut: "True/Progressing", readyMessage: "connection refused"},
		},
		{
			name: "the source is missing",
			out:  waitingOn(v1alpha1.SourceNotFoundReason, "GitRepository fleet/web not found", 0),
			want: want{ready: "False/SourceNotFound", reconciling: "True/Progressing", rollingOut: "False/NotRollingOut", readyMessage: "not found"},
		},
		{
			name: "progressing says what it waits for",
			edit: func(fr *v1alpha1.FleetRollout) {
				fr.Status.Phase, fr.Status.Candidate, fr.Status.CurrentWave = v1alpha1.PhaseProgressing, cand, "canary"
				fr.Status.WaitingFor = &v1alpha1.WaitingFor{Reason: v1alpha1.WaitingForSoak, Wave: "canary", Message: "wave canary soaking for 1m0s"}
			},
			out:  doneAfter(0),
			want: want{ready: "Unknown/Progressing", reconciling: "True/Progressing", rollingOut: "True/Progressing", readyMessage: "soaking for 1m0s"},
		},
		{
			name: "a pre-wave gate blocks the wave",
			edit: func(fr *v1alpha1.FleetRollout) {
				fr.Status.Phase, fr.Status.Candidate, fr.Status.CurrentWave = v1alpha1.PhaseProgressing, cand, "canary"
				fr.Status.Waves = []v1alpha1.WaveStatus{{Name: "canary", Phase: v1alpha1.WavePending,
					Gates: []v1alpha1.GateOutcome{{Gate: v1alpha1.GateRollbackSafe, Result: v1alpha1.ResultFail, Receipt: "r1"}}}}
				fr.Status.WaitingFor = &v1alpha1.WaitingFor{Reason: v1alpha1.WaitingForGateBlocked, Wave: "canary", Message: "wave canary is blocked"}
				conditions.MarkFalse(fr, v1alpha1.GateRollbackSafe, v1alpha1.GateFailedReason, "needs an approval")
			},
			out:  doneAfter(0),
			want: want{ready: "False/GateFailed", reconciling: "True/Progressing", rollingOut: "True/Progressing", readyMessage: "rollbackSafe: needs an approval"},
		},
		{
			name: "held by spec",
			edit: func(fr *v1alpha1.FleetRollout) {
				fr.Spec.Hold = &v1alpha1.Hold{Reason: "incident 42"}
				fr.Status.Phase, fr.Status.Candidate = v1alpha1.PhaseHeld, cand
			},
			out:  doneAfter(0),
			want: want{ready: "False/Held", held: "True/Held", rollingOut: "True/Held", readyMessage: "held: incident 42"},
		},
		{
			name: "held by a failed wave that has nothing to go back to",
			edit: func(fr *v1alpha1.FleetRollout) {
				fr.Status.Phase, fr.Status.Candidate = v1alpha1.PhaseHeld, cand
				fr.Status.Waves = []v1alpha1.WaveStatus{{Name: "canary", Phase: v1alpha1.WaveFailed,
					Gates: []v1alpha1.GateOutcome{{Gate: v1alpha1.GateNoDisruption, Result: v1alpha1.ResultFail, Receipt: "r2"}}}}
			},
			out:    doneAfter(0),
			onFail: v1alpha1.OnFailureRollback,
			want:   want{ready: "False/Held", held: "True/GateFailed", rollingOut: "True/Held", readyMessage: "no known-good revision to roll back to"},
		},
		{
			name: "rolling back",
			edit: func(fr *v1alpha1.FleetRollout) {
				fr.Status.Phase, fr.Status.Candidate, fr.Status.LastKnownGood = v1alpha1.PhaseRollingBack, cand, good
				fr.Status.WaitingFor = &v1alpha1.WaitingFor{Reason: v1alpha1.WaitingForRollback, Message: "rolling back: 1/2 clusters Ready at known-good"}
			},
			out:  doneAfter(0),
			want: want{ready: "False/RollingBack", reconciling: "True/RollingBack", rollingOut: "True/RollingBack", readyMessage: "1/2 clusters"},
		},
		{
			name: "rolled back",
			edit: func(fr *v1alpha1.FleetRollout) {
				fr.Status.Phase, fr.Status.Candidate, fr.Status.LastKnownGood = v1alpha1.PhaseRolledBack, cand, good
			},
			out:  doneAfter(0),
			want: want{ready: "False/RolledBack", rollingOut: "False/NotRollingOut", readyMessage: "was rolled back to main@sha1:1"},
		},
		{
			name: "completed, with a newer revision waiting",
			edit: func(fr *v1alpha1.FleetRollout) {
				fr.Status.Phase, fr.Status.Candidate, fr.Status.LastKnownGood = v1alpha1.PhaseCompleted, cand, cand
				fr.Status.Waves = []v1alpha1.WaveStatus{{Name: "all", Phase: v1alpha1.WaveSucceeded, Clusters: []string{"a", "b"}}}
				fr.Status.RunningCount = 2
				fr.Status.WaitingFor = &v1alpha1.WaitingFor{Reason: v1alpha1.WaitingForRetry, Message: "revision main@sha1:3 was rejected"}
			},
			out:  doneAfter(0),
			want: want{ready: "True/Succeeded", rollingOut: "False/NotRollingOut", readyMessage: "runs on 2 clusters; revision main@sha1:3 was rejected"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fr := &v1alpha1.FleetRollout{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "fleet"}}
			// What an earlier pass left must not survive: Stalled is re-derived every pass.
			conditions.MarkStalled(fr, v1alpha1.InvalidPolicyReason, "old")
			if tc.edit != nil {
				tc.edit(fr)
			}
			setConditions(fr, tc.out, tc.onFail)
			got := want{
				ready: cond(fr, meta.ReadyCondition), reconciling: cond(fr, meta.ReconcilingCondition), stalled: cond(fr, meta.StalledCondition),
				held: cond(fr, v1alpha1.HeldCondition), rollingOut: cond(fr, v1alpha1.RollingOutCondition), readyMessage: tc.want.readyMessage,
			}
			if got != tc.want {
				t.Errorf("conditions\n got %+v\nwant %+v", got, tc.want)
			}
			if c := conditions.Get(fr, meta.ReadyCondition); c == nil || !strings.Contains(c.Message, tc.want.readyMessage) {
				t.Errorf("Ready message %q does not say %q", c.Message, tc.want.readyMessage)
			}
		})
	}
}

func cond(fr *v1alpha1.FleetRollout, typ string) string {
	c := conditions.Get(fr, typ)
	if c == nil {
		return ""
	}
	return string(c.Status) + "/" + c.Reason
}

// TestNewCandidateClearsGateConditions: the gate conditions of the previous revision are not shown
// as the new candidate's.
func TestNewCandidateClearsGateConditions(t *testing.T) {
	s := newSim(t, "a", "b")
	s.run("r1", v1alpha1.PhaseCompleted)
	for _, g := range v1alpha1.Gates {
		conditions.MarkTrue(s.fr, g, v1alpha1.GatePassedReason, "wave rest: Pass (receipt x)")
	}
	s.turn("r2")
	if s.fr.Status.Candidate == nil || s.fr.Status.Candidate.Revision != "r2" {
		t.Fatalf("r2 is not the candidate: %+v", s.fr.Status.Candidate)
	}
	for _, g := range v1alpha1.Gates {
		if c := conditions.Get(s.fr, g); c != nil {
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
