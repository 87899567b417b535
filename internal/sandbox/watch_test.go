package sandbox

import (
	"bytes"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// The watcher prints a line for each change, and nothing for an observation that changed nothing.
func TestWatcherPrintsOneLinePerChange(t *testing.T) {
	var out bytes.Buffer
	now := time.Date(2026, 11, 30, 23, 0, 0, 0, time.UTC)
	labels := map[string]string{"main@sha1:1111": "v1", "main@sha1:2222": "v2"}
	w := newWatcher(&out, func(r string) string { return labels[r] })
	w.now = func() time.Time { return now }
	w.reset()

	fr := &v1alpha1.FleetRollout{}
	fr.Status.LastKnownGood = &v1alpha1.RevisionStatus{Revision: "main@sha1:1111"}
	fr.Status.Candidate = &v1alpha1.RevisionStatus{Revision: "main@sha1:2222"}
	fr.Status.Phase = v1alpha1.PhaseProgressing
	fr.Status.Waves = []v1alpha1.WaveStatus{{Name: "canary", Phase: v1alpha1.WavePending}, {Name: "rest", Phase: v1alpha1.WavePending}}
	w.observe(fr)
	w.observe(fr)

	now = now.Add(3 * time.Second)
	fr.Status.Waves[0].Gates = []v1alpha1.GateOutcome{{Gate: v1alpha1.GateRollbackSafe, Result: v1alpha1.ResultFail, Receipt: "podinfo-rollbacksafe-1"}}
	fr.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionFalse, Reason: v1alpha1.GateFailedReason, Message: "wave canary is blocked"}}
	w.observe(fr)
	w.observe(fr)

	now = now.Add(62 * time.Second)
	fr.Status.Waves[0].Gates = []v1alpha1.GateOutcome{{Gate: v1alpha1.GateRollbackSafe, Result: v1alpha1.ResultPass, Receipt: "podinfo-rollbacksafe-2"}}
	fr.Status.Waves[0].Phase = v1alpha1.WaveProgressing
	fr.Status.Waves[0].Clusters = []string{"member-1"}
	fr.Status.Waves[0].Updated = 1
	fr.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionUnknown, Reason: v1alpha1.ProgressingReason, Message: "switching"}}
	w.observe(fr)

	fr.Status.Waves[1].Phase, fr.Status.Waves[1].Message = v1alpha1.WaveSkipped, "no cluster left for this wave"
	w.observe(fr)

	want := []string{
		"0:00  v2   candidate v2 (main@sha1:2222), known-good v1",
		"0:00  v2   rollout Progressing",
		"0:00  v2   wave canary  Pending",
		"0:00  v2   wave rest    Pending",
		"0:03  v2   wave canary  rollbackSafe      Fail  receipt podinfo-rollbacksafe-1",
		"0:03  v2   Ready=False GateFailed: wave canary is blocked",
		"1:05  v2   wave canary  rollbackSafe      Pass  receipt podinfo-rollbacksafe-2",
		"1:05  v2   wave canary  Progressing on member-1 (1 updated, 0 healthy)",
		"1:05  v2   wave rest    Skipped: no cluster left for this wave",
	}
	got := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	if len(got) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(got), len(want), out.String())
	}
	for i := range want {
		if strings.TrimSpace(got[i]) != want[i] {
			t.Errorf("line %d = %q, want %q", i, strings.TrimSpace(got[i]), want[i])
		}
	}
}

// A rollout that did not complete says why: the gates that failed, or, with none failed, what its
// Ready condition says (a wave that could not be judged).
func TestWhyNotCompleted(t *testing.T) {
	fr := &v1alpha1.FleetRollout{}
	fr.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionFalse, Reason: v1alpha1.InvalidWaveReason,
		Message: `wave canary does not start, and nothing of it is applied: wave "gpu": spec.waves[1]: the wave has no clusters`}}
	if got, want := whyNotCompleted(fr), `no gate failed, and Ready is False (InvalidWave): wave canary does not start, and nothing of it is applied: wave "gpu": spec.waves[1]: the wave has no clusters`; got != want {
		t.Errorf("whyNotCompleted = %q, want %q", got, want)
	}
	fr.Status.Waves = []v1alpha1.WaveStatus{{Name: "ring", Gates: []v1alpha1.GateOutcome{{Gate: v1alpha1.GateNoDisruption, Result: v1alpha1.ResultFail, Receipt: "r1"}}}}
	if got, want := whyNotCompleted(fr), "noDisruption failed in wave ring (receipt r1)"; got != want {
		t.Errorf("whyNotCompleted = %q, want %q", got, want)
	}
}
