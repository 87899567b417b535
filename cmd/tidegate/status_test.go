package main

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// TestWaiting covers what `status` says a wave waits for in the phases the golden files do not show.
func TestWaiting(t *testing.T) {
	base := func() *v1alpha1.FleetRollout {
		return &v1alpha1.FleetRollout{
			Spec: v1alpha1.FleetRolloutSpec{Waves: []v1alpha1.Wave{{Name: "canary"}, {Name: "everyone"}}},
			Status: v1alpha1.FleetRolloutStatus{
				Phase:     v1alpha1.PhaseProgressing,
				Candidate: webCandidate,
				Waves: []v1alpha1.WaveStatus{
					{Name: "canary", Phase: v1alpha1.WaveSucceeded, Clusters: []string{"eu-1"}, FinishedAt: atp(5, 0)},
					{Name: "everyone", Phase: v1alpha1.WavePending, Clusters: []string{"eu-2", "us-1"}},
				},
			},
		}
	}
	tests := []struct {
		name string
		edit func(fr *v1alpha1.FleetRollout)
		wave int
		want string
	}{
		{"next wave, its gates", nil, 1, "its pre-wave gates since 2026-03-01T10:05:00Z (5m ago)"},
		{"awaiting approval", func(fr *v1alpha1.FleetRollout) { fr.Status.Waves[1].Phase = v1alpha1.WaveAwaiting }, 1,
			"an approval of " + webCandidate.Revision + " for this wave since 2026-03-01T10:05:00Z (5m ago)"},
		{"progressing", func(fr *v1alpha1.FleetRollout) {
			fr.Status.Waves[1].Phase, fr.Status.Waves[1].StartedAt, fr.Status.Waves[1].Healthy = v1alpha1.WaveProgressing, atp(5, 30), 1
		}, 1, "members Ready at the candidate (1/2) since 2026-03-01T10:05:30Z (4m30s ago)"},
		{"soaking with the policy's soak", func(fr *v1alpha1.FleetRollout) {
			fr.Status.Waves[1].Phase, fr.Status.Waves[1].ReadyAt = v1alpha1.WaveSoaking, atp(9, 0)
		}, 1, "the soak since 2026-03-01T10:09:00Z (60s ago)"},
		{"soak over", func(fr *v1alpha1.FleetRollout) {
			fr.Spec.Waves[1].Soak = &metav1.Duration{Duration: 60_000_000_000}
			fr.Status.Waves[1].Phase, fr.Status.Waves[1].ReadyAt = v1alpha1.WaveSoaking, atp(8, 0)
		}, 1, "the soak of 1m0s since 2026-03-01T10:08:00Z (2m ago), until 2026-03-01T10:09:00Z (60s ago)"},
		{"rehearsal going back", func(fr *v1alpha1.FleetRollout) {
			fr.Status.Waves[0].Phase = v1alpha1.WaveRehearsing
			fr.Status.Waves[0].Rehearsal = &v1alpha1.RehearsalStatus{Phase: v1alpha1.RehearsalRollingBack, BackStartedAt: atp(6, 0)}
		}, 0, "rehearsal: members Ready at the known-good since 2026-03-01T10:06:00Z (4m ago)"},
		{"rehearsal paused by a hold", func(fr *v1alpha1.FleetRollout) {
			fr.Spec.Hold = &v1alpha1.Hold{Reason: "incident"}
			fr.Status.Waves[0].Phase = v1alpha1.WaveRehearsing
			fr.Status.Waves[0].Rehearsal = &v1alpha1.RehearsalStatus{Phase: v1alpha1.RehearsalRollingBack, BackStartedAt: atp(6, 0), BackReadyAt: atp(7, 0)}
		}, 0, "rehearsal paused at the known-good: spec.hold to be cleared (incident) since 2026-03-01T10:07:00Z (3m ago)"},
		{"rehearsal going forward", func(fr *v1alpha1.FleetRollout) {
			fr.Status.Waves[0].Phase = v1alpha1.WaveRehearsing
			fr.Status.Waves[0].Rehearsal = &v1alpha1.RehearsalStatus{Phase: v1alpha1.RehearsalRollingForward, BackReadyAt: atp(7, 0), ForwardStartedAt: atp(7, 1)}
		}, 0, "rehearsal: members Ready at the candidate again since 2026-03-01T10:07:01Z (2m59s ago)"},
		{"failed and held", func(fr *v1alpha1.FleetRollout) {
			fr.Status.Phase = v1alpha1.PhaseHeld
			fr.Status.Waves[0].Phase = v1alpha1.WaveFailed
			fr.Status.Waves[0].Gates = []v1alpha1.GateOutcome{{Gate: v1alpha1.GateNoDisruption, Result: v1alpha1.ResultFail}}
		}, 0, "failed (noDisruption): held until a new revision, spec.retry or spec.rollback.request since 2026-03-01T10:05:00Z (5m ago)"},
		{"after a failed wave", func(fr *v1alpha1.FleetRollout) {
			fr.Status.Phase = v1alpha1.PhaseHeld
			fr.Status.Waves[0].Phase = v1alpha1.WaveFailed
		}, 1, "wave canary to succeed"},
		{"rolling back, started wave", func(fr *v1alpha1.FleetRollout) { fr.Status.Phase = v1alpha1.PhaseRollingBack }, 0, "its members Ready at the known-good (rolling back)"},
		{"rolling back, pending wave", func(fr *v1alpha1.FleetRollout) { fr.Status.Phase = v1alpha1.PhaseRollingBack }, 1, "-"},
		{"rolled back", func(fr *v1alpha1.FleetRollout) { fr.Status.Phase = v1alpha1.PhaseRolledBack }, 0, "-"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fr := base()
			if tt.edit != nil {
				tt.edit(fr)
			}
			if got := waitingCell(fixedNow, waitingFor(fr, tt.wave)); got != tt.want {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}
