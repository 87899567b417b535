package engine

import (
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/verdict"
)

// rollbackChecksSim is a sim of three clusters whose canary breaks on r2, rolled back on failure
// within a minute, with a policy check "smoke" on every wave.
func rollbackChecksSim(t *testing.T) *sim {
	s := newSim(t, "a", "b", "c")
	s.fr.Spec.Rollback.OnFailure = v1alpha1.OnFailureRollback
	s.fr.Spec.Rollback.Timeout = &metav1.Duration{Duration: time.Minute}
	s.settings.Checks = map[string]verdict.CheckSettings{"smoke": {Timeout: "1m"}}
	s.run("r1", v1alpha1.PhaseCompleted)
	s.broken["a"] = true
	s.run("r2", v1alpha1.PhaseRollingBack)
	return s
}

// A rollback runs the policy's checks at the known-good on the clusters sent back, once they are
// Ready there: it stays RollingBack while they run, then records them in status.rollback.checks.
func TestARollbackWaitsForItsChecksAtTheKnownGood(t *testing.T) {
	s := rollbackChecksSim(t)
	var checkedOn [][]WaveClusters
	pending := 3
	s.knownGoodChecks = func(w *World) *KnownGoodChecks {
		checkedOn = append(checkedOn, CheckedBack(w.Rollout, w))
		if pending > 0 {
			pending--
			return &KnownGoodChecks{Pending: []string{"a (smoke): Job smoke-1 has not finished"}}
		}
		return &KnownGoodChecks{Runs: []v1alpha1.CheckRun{{Cluster: "a", Check: "smoke", Result: verdict.CheckPassed, Message: "Job smoke-1 completed"}}}
	}
	sawChecksWait := false
	for turn := 0; turn < 50 && s.fr.Status.Phase == v1alpha1.PhaseRollingBack; turn++ {
		s.once("r2")
		if w := s.fr.Status.WaitingFor; w != nil && strings.Contains(w.Message, "checks there: a (smoke)") {
			sawChecksWait = true
		}
	}
	st := &s.fr.Status
	if st.Phase != v1alpha1.PhaseRolledBack || !sawChecksWait {
		t.Fatalf("phase %s (waited on the checks: %v), want RolledBack after waiting on them:\n%s", st.Phase, sawChecksWait, strings.Join(s.log, "\n"))
	}
	if rb := st.Rollback; len(rb.Checks) != 1 || rb.Checks[0].Result != verdict.CheckPassed || len(rb.Unchecked) != 0 {
		t.Errorf("rollback %+v: want the canary's passed check recorded", rb)
	}
	// Only the canary was switched: it alone was sent back and checked.
	if got := checkedOn[len(checkedOn)-1]; len(got) != 1 || got[0].Wave != st.Waves[0].Name || !slices.Equal(got[0].Clusters, []string{"a"}) {
		t.Errorf("checked %+v, want the canary a", got)
	}
}

// A check that has not finished by the rollback's deadline does not pass: the rollout is RolledBack
// at the deadline, the check listed as unchecked.
func TestARollbackCheckUnfinishedAtTheDeadlineIsUnchecked(t *testing.T) {
	s := rollbackChecksSim(t)
	s.knownGoodChecks = func(*World) *KnownGoodChecks {
		return &KnownGoodChecks{Pending: []string{"a (smoke): the member cannot be reached"}}
	}
	s.runFor("r2", v1alpha1.PhaseRolledBack, 60)
	rb := s.fr.Status.Rollback
	if len(rb.Checks) != 0 || !slices.Equal(rb.Unchecked, []string{"a (smoke): the member cannot be reached"}) || rb.FinishedAt.Before(rb.Deadline) {
		t.Errorf("rollback %+v: want the unfinished check named, at the deadline", rb)
	}
}

// Checks that apply but were not observed (the pass that began the rollback ran none) are waited
// for, never taken as none; with no check for the waves sent back, nothing is waited for.
func TestARollbackWaitsForChecksNotYetObserved(t *testing.T) {
	s := rollbackChecksSim(t)
	for range 5 {
		s.once("r2")
	}
	if st := &s.fr.Status; st.Phase != v1alpha1.PhaseRollingBack || st.WaitingFor == nil || !strings.Contains(st.WaitingFor.Message, "its checks start") {
		t.Fatalf("phase %s, waiting %+v: want RollingBack, waiting for the checks to start", st.Phase, st.WaitingFor)
	}

	s = rollbackChecksSim(t)
	s.settings.Checks = map[string]verdict.CheckSettings{"smoke": {Timeout: "1m", Waves: []string{"elsewhere"}}}
	s.runFor("r2", v1alpha1.PhaseRolledBack, 10)
	if rb := s.fr.Status.Rollback; len(rb.Checks) != 0 || len(rb.Unchecked) != 0 {
		t.Errorf("rollback %+v: no check applies, none should be listed", rb)
	}
}
