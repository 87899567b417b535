package main

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// TestWaiting covers what `status` says a wave waits for: what status.waitingFor records.
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
	wait := func(reason, wave, msg string, since, until *metav1.Time) func(fr *v1alpha1.FleetRollout) {
		return func(fr *v1alpha1.FleetRollout) {
			fr.Status.WaitingFor = &v1alpha1.WaitingFor{Reason: reason, Wave: wave, Message: msg, Since: since, Until: until}
		}
	}
	tests := []struct {
		name string
		edit func(fr *v1alpha1.FleetRollout)
		wave int
		want string
	}{
		{"what status says, on the wave it names", wait(v1alpha1.WaitingForApproval, "everyone", "wave everyone needs an approval", atp(5, 0), nil), 1,
			"wave everyone needs an approval since 2026-03-01T10:05:00Z (5m ago)"},
		{"not on another wave", wait(v1alpha1.WaitingForApproval, "everyone", "wave everyone needs an approval", atp(5, 0), nil), 0, "-"},
		{"a soak with its end, as the controller computed it from the policy", wait(v1alpha1.WaitingForSoak, "everyone", "wave everyone soaking for 2m0s", atp(9, 0), atp(11, 0)), 1,
			"wave everyone soaking for 2m0s since 2026-03-01T10:09:00Z (60s ago), until 2026-03-01T10:11:00Z (60s left)"},
		{"nothing recorded", nil, 1, "-"},
		{"a later wave waits for its turn", func(fr *v1alpha1.FleetRollout) {
			fr.Status.Waves[0].Phase = v1alpha1.WaveSoaking
		}, 1, "its turn, after wave canary"},
		{"rolling back: every started wave", func(fr *v1alpha1.FleetRollout) {
			fr.Status.Phase = v1alpha1.PhaseRollingBack
			fr.Status.Waves[0].StartedAt = atp(1, 0)
			wait(v1alpha1.WaitingForRollback, "", "rolling back: 0/1 clusters Ready at known-good", nil, nil)(fr)
		}, 0, "rolling back: 0/1 clusters Ready at known-good"},
		{"rolling back, pending wave", func(fr *v1alpha1.FleetRollout) {
			fr.Status.Phase = v1alpha1.PhaseRollingBack
			wait(v1alpha1.WaitingForRollback, "", "rolling back", nil, nil)(fr)
		}, 1, "-"},
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

// TestStatusListsHeldBack: members a wave held back are listed under the wave table, with why.
func TestStatusListsHeldBack(t *testing.T) {
	fr := &v1alpha1.FleetRollout{Status: v1alpha1.FleetRolloutStatus{
		Phase: v1alpha1.PhaseCompleted, Candidate: webCandidate, LastKnownGood: webCandidate,
		Waves: []v1alpha1.WaveStatus{{Name: "everyone", Phase: v1alpha1.WaveSucceeded, Clusters: []string{"eu-2", "us-1"}, Updated: 1, Healthy: 1,
			HeldBack: []v1alpha1.HeldBackCluster{{Cluster: "us-1", Reason: "1 API(s) not served: monitoring.coreos.com/v1, Kind=ServiceMonitor"}}}},
	}}
	var b strings.Builder
	if err := printStatus(&b, outputTable, fixedNow, fr); err != nil {
		t.Fatal(err)
	}
	if want := "held back in wave everyone: us-1 (1 API(s) not served: monitoring.coreos.com/v1, Kind=ServiceMonitor)\n"; !strings.HasSuffix(b.String(), want) {
		t.Errorf("status:\n%s\nwant it to end with %q", b.String(), want)
	}
}
