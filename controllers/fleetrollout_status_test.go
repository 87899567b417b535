package controllers

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/engine"
	"github.com/tidegate/tidegate/fleets"
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
		{
			name: "rolled back, with a member not seen Ready at the known-good",
			edit: func(fr *v1alpha1.FleetRollout) {
				fr.Status.Phase, fr.Status.Candidate, fr.Status.LastKnownGood = v1alpha1.PhaseRolledBack, cand, good
				fr.Status.Rollback = &v1alpha1.RollbackStatus{To: good.Revision, Confirmed: []string{"b", "c"}, Unconfirmed: []string{"a"}}
			},
			out:  doneAfter(0),
			want: want{ready: "False/RolledBack", rollingOut: "False/NotRollingOut", readyMessage: "rolled back to main@sha1:1: 2 confirmed, 1 unconfirmed: a"},
		},
		{
			name: "rolled back, every member confirmed",
			edit: func(fr *v1alpha1.FleetRollout) {
				fr.Status.Phase, fr.Status.Candidate, fr.Status.LastKnownGood = v1alpha1.PhaseRolledBack, cand, good
				fr.Status.Rollback = &v1alpha1.RollbackStatus{To: good.Revision, Confirmed: []string{"a", "b", "c"}}
			},
			out:  doneAfter(0),
			want: want{ready: "False/RolledBack", rollingOut: "False/NotRollingOut", readyMessage: "rolled back to main@sha1:1: 3 confirmed"},
		},
		{
			name: "completed, counting the clusters that run it",
			edit: func(fr *v1alpha1.FleetRollout) {
				fr.Status.Phase, fr.Status.Candidate, fr.Status.LastKnownGood = v1alpha1.PhaseCompleted, cand, cand
				fr.Status.RunningCount = 3
			},
			out:  doneAfter(0),
			want: want{ready: "True/Succeeded", rollingOut: "False/NotRollingOut", readyMessage: "runs on 3 clusters"},
		},
		{
			name: "held on a wave plan that cannot be judged",
			edit: func(fr *v1alpha1.FleetRollout) {
				fr.Status.Phase, fr.Status.Candidate, fr.Status.CurrentWave = v1alpha1.PhaseHeld, cand, "canary"
				fr.Status.WaitingFor = &v1alpha1.WaitingFor{Reason: v1alpha1.WaitingForWavePlan, Wave: "canary",
					Message: `wave canary does not start, and nothing of it is applied: wave "gpu": spec.waves[1]: the wave has no clusters`}
			},
			out:  doneAfter(0),
			want: want{ready: "False/InvalidWave", held: "True/InvalidWave", rollingOut: "True/Held", readyMessage: `wave "gpu"`},
		},
		{
			name: "held on a candidate no cluster is Ready at",
			edit: func(fr *v1alpha1.FleetRollout) {
				fr.Status.Phase, fr.Status.Candidate, fr.Status.LastKnownGood = v1alpha1.PhaseHeld, cand, good
				fr.Status.WaitingFor = &v1alpha1.WaitingFor{Reason: v1alpha1.WaitingForMembers,
					Message: "every wave of main@sha1:2 passed or was skipped, but no cluster is Ready at it"}
			},
			out:  doneAfter(0),
			want: want{ready: "False/Held", held: "True/Held", rollingOut: "True/Held", readyMessage: "no cluster is Ready at it"},
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

// A rollback of 1,000 clusters whose names are as long as they may be keeps both lists in status,
// well within what an object may hold, and Ready names a few of the unconfirmed.
func TestARollbackOfAThousandClustersFitsInStatus(t *testing.T) {
	fr := &v1alpha1.FleetRollout{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "fleet"}}
	kg := &v1alpha1.RevisionStatus{Revision: "main@sha1:1", Source: "web-1"}
	now := time.Unix(1_000_000, 0)
	start, deadline := metav1.NewTime(now.Add(-time.Hour)), metav1.NewTime(now.Add(-time.Minute))
	fr.Status = v1alpha1.FleetRolloutStatus{Phase: v1alpha1.PhaseRollingBack, LastKnownGood: kg,
		Candidate: &v1alpha1.RevisionStatus{Revision: "main@sha1:2", Source: "web-2"},
		Rollback:  &v1alpha1.RollbackStatus{To: kg.Revision, StartedAt: &start, Deadline: &deadline}}
	w := &engine.World{Rollout: fr, Now: now, Kustomizations: map[string]engine.Observation{}}
	for i := range 1000 {
		c := fmt.Sprintf("%s-%04d", strings.Repeat("c", 58), i)
		w.Inventory = append(w.Inventory, fleets.Cluster{Name: c})
		o := engine.Observation{Exists: true, Source: kg.Source, Current: true, ReadyCurrent: true, Ready: metav1.ConditionTrue, LastApplied: kg.Revision}
		if i%100 == 0 {
			o.Ready, o.Reason = metav1.ConditionFalse, "ReconciliationFailed"
		}
		w.Kustomizations[c] = o
	}
	engine.Step(w)
	rb := fr.Status.Rollback
	if fr.Status.Phase != v1alpha1.PhaseRolledBack || len(rb.Confirmed) != 990 || len(rb.Unconfirmed) != 10 {
		t.Fatalf("phase %s, %d confirmed, %d unconfirmed", fr.Status.Phase, len(rb.Confirmed), len(rb.Unconfirmed))
	}
	b, err := json.Marshal(fr.Status)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 128<<10 {
		t.Errorf("the status of a 1,000-cluster rollback is %d bytes", len(b))
	}
	setConditions(fr, outcome{kind: done}, "")
	if msg := conditions.Get(fr, meta.ReadyCondition).Message; len(msg) > maxConditionMessage || !strings.Contains(msg, "990 confirmed, 10 unconfirmed") || !strings.Contains(msg, "and 5 more") {
		t.Errorf("Ready = %q", msg)
	}
}
