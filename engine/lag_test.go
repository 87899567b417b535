package engine

import (
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/fleets"
)

func (s *sim) setReachability(cluster string, r fleets.Reachability) {
	for i := range s.inv {
		if s.inv[i].Name == cluster {
			s.inv[i].Reachability = r
		}
	}
}

func laggingNames(st *v1alpha1.FleetRolloutStatus) []string {
	var out []string
	for _, l := range st.Lagging {
		out = append(out, l.Cluster)
	}
	return out
}

// A rollback does not wait for ever on a member that does not answer: at its deadline the rollout
// is RolledBack with that member unconfirmed (its Kustomization points at the known-good), Ready
// says so, and it lags; when it answers again Flux converges it, it is confirmed and the lag clears.
func TestRollbackEndsAtItsDeadline(t *testing.T) {
	s := newSim(t, "a", "b", "c")
	s.fr.Spec.Rollback.OnFailure = v1alpha1.OnFailureRollback
	s.fr.Spec.Rollback.Timeout = &metav1.Duration{Duration: time.Minute}
	s.run("r1", v1alpha1.PhaseCompleted)
	// The canary stops answering as r2 goes out: its wave fails, and it cannot go back either.
	s.frozen["a"] = true
	s.run("r2", v1alpha1.PhaseRolledBack)

	st := &s.fr.Status
	rb := st.Rollback
	if rb == nil || rb.To != "r1" || !slices.Equal(rb.Confirmed, []string{"b", "c"}) || !slices.Equal(rb.Unconfirmed, []string{"a"}) {
		t.Fatalf("rollback = %+v, want b and c confirmed, a unconfirmed", rb)
	}
	if !rb.Deadline.Time.Equal(rb.StartedAt.Add(time.Minute)) || rb.FinishedAt.Before(rb.Deadline) {
		t.Errorf("the rollback should end at startedAt + spec.rollback.timeout: %+v", rb)
	}
	if s.applied["a"].Source != v1alpha1.PinnedSourceName("web", "r1") {
		t.Errorf("a's Kustomization should point at the known-good: %+v", s.applied["a"])
	}
	if !s.fr.IsRejected("r2") {
		t.Errorf("r2 should be rejected: %+v", st.Rejected)
	}
	if got := laggingNames(st); !slices.Equal(got, []string{"a"}) || st.LaggingCount != 1 {
		t.Errorf("lagging = %+v, want a", st.Lagging)
	}

	s.frozen["a"] = false
	for range 5 {
		s.once("r2")
	}
	if !slices.Equal(rb.Confirmed, []string{"a", "b", "c"}) || len(rb.Unconfirmed) != 0 || len(st.Lagging) != 0 || st.LaggingCount != 0 {
		t.Fatalf("once a answers it should be confirmed and lag no more: %+v lagging %+v", rb, st.Lagging)
	}
	if st.Phase != v1alpha1.PhaseRolledBack || s.ks["a"].LastApplied != "r1" {
		t.Errorf("phase %s, a at %s", st.Phase, s.ks["a"].LastApplied)
	}
}

// A member that becomes unreachable while its wave runs stays in it, and the plan of the others does
// not shift: no cluster is reported late, and the next wave takes the clusters it was planned to.
func TestAWaveKeepsAMemberThatBecomesUnreachable(t *testing.T) {
	s := newSim(t, "a", "b", "c", "d")
	one := int32(1)
	soak := &metav1.Duration{Duration: 10 * time.Second}
	s.fr.Spec.Waves = []v1alpha1.Wave{
		{Name: "canary", Count: &one, Soak: soak},
		{Name: "ring", Count: &one, Soak: soak},
		{Name: "rest", Selector: &metav1.LabelSelector{}, Soak: soak},
	}
	s.run("r1", v1alpha1.PhaseCompleted)
	s.untilWave("r2", 0, v1alpha1.WaveSoaking)
	s.setReachability("a", fleets.Unreachable)
	for turn := 0; turn < 200 && s.fr.Status.Phase != v1alpha1.PhaseCompleted; turn++ {
		s.once("r2")
		setLateJoiners(s.fr, s.plan)
		if late := s.fr.Status.LateJoiners; len(late) > 0 {
			t.Fatalf("late joiners %v: every cluster was in the fleet from the start", late)
		}
		if len(s.plan.Skipped) > 0 {
			t.Fatalf("a member of a started wave is not skipped: %+v", s.plan.Skipped)
		}
	}
	st := s.fr.Status
	for i, want := range [][]string{{"a"}, {"b"}, {"c", "d"}} {
		if got := st.Waves[i].Clusters; !slices.Equal(got, want) {
			t.Errorf("wave %s = %v, want %v", st.Waves[i].Name, got, want)
		}
	}
}

// A cluster whose Kustomization the hub refuses counts as failed in its wave, so the wave is
// decided at once (beyond its budget) instead of waiting for its deadline; a transient failure
// is only retried.
func TestARefusedWriteCountsAsFailed(t *testing.T) {
	for _, tc := range []struct {
		reason  string
		decided bool
	}{{v1alpha1.WriteRefused, true}, {v1alpha1.WriteNameTaken, true}, {v1alpha1.WriteFailed, false}} {
		t.Run(tc.reason, func(t *testing.T) {
			s := newSim(t, "a", "b")
			s.run("r1", v1alpha1.PhaseCompleted)
			s.untilWave("r2", 0, v1alpha1.WaveProgressing)
			s.frozen["a"] = true // its Kustomization keeps what it had: the write did not go through
			s.ks["a"] = s.ks["b"]
			s.fr.Status.WriteFailures = []v1alpha1.WriteFailure{{Cluster: "a", Reason: tc.reason, Message: "cluster a: ..."}}
			res, _ := s.turn("r2")
			if got := res.GateWave == 0; got != tc.decided {
				t.Errorf("decided = %v, want %v: %+v", got, tc.decided, res)
			}
		})
	}
}
