package engine

import (
	"slices"
	"strings"
	"testing"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// historyOf is status.history's revisions, newest first.
func historyOf(st v1alpha1.FleetRolloutStatus) []string {
	var out []string
	for _, h := range st.History {
		out = append(out, h.Revision)
	}
	return out
}

// A rollback requested once a rollout is Completed goes back to the previous known-good through the
// gates, wave by wave, while the source still has the newer revision; that revision stays rejected
// until spec.retry changes.
func TestStepRevertCompleted(t *testing.T) {
	s := newSim(t, "a", "b", "c")
	s.run("r1", v1alpha1.PhaseCompleted)
	s.run("r2", v1alpha1.PhaseCompleted)
	if got := historyOf(s.fr.Status); !slices.Equal(got, []string{"r2", "r1"}) {
		t.Fatalf("history after r1 and r2: %v", got)
	}
	if h := s.fr.Status.History[0]; h.Source != v1alpha1.PinnedSourceName("web", "r2") || h.CompletedAt == nil || h.Digest == "" {
		t.Errorf("history entry of r2: %+v", h)
	}
	s.log = nil
	decided := s.decisions[v1alpha1.GateNoDisruption]

	s.fr.Spec.Rollback.Request = "1"
	s.run("r2", v1alpha1.PhaseCompleted)
	s.expect(
		"Progressing canary=Pending[] rest=Pending[] knownGood=r2",
		"Progressing canary=Progressing[a] rest=Pending[] knownGood=r2",
		"Progressing canary=Soaking[a] rest=Pending[] knownGood=r2",
		"Progressing canary=Succeeded[a] rest=Pending[] knownGood=r2",
		"Progressing canary=Succeeded[a] rest=Progressing[b c] knownGood=r2",
		"Progressing canary=Succeeded[a] rest=Soaking[b c] knownGood=r2",
		"Progressing canary=Succeeded[a] rest=Succeeded[b c] knownGood=r2",
		"Completed canary=Succeeded[a] rest=Succeeded[b c] knownGood=r1",
	)
	st := s.fr.Status
	if s.decisions[v1alpha1.GateNoDisruption] != decided+2 {
		t.Errorf("the way back was not gated wave by wave: %d noDisruption decisions, want 2", s.decisions[v1alpha1.GateNoDisruption]-decided)
	}
	for _, c := range []string{"a", "b", "c"} {
		if s.ks[c].LastApplied != "r1" {
			t.Errorf("cluster %s runs %q after the rollback, want r1", c, s.ks[c].LastApplied)
		}
	}
	if !s.fr.IsRejected("r2") || st.Revert != nil || !slices.Equal(historyOf(st), []string{"r1", "r2"}) {
		t.Errorf("after the rollback: rejected %+v, revert %+v, history %v", st.Rejected, st.Revert, historyOf(st))
	}

	// The source still has r2: it is not rolled out again by itself.
	for range 10 {
		s.once("r2")
	}
	if s.fr.Status.Phase != v1alpha1.PhaseCompleted || s.fr.Status.LastKnownGood.Revision != "r1" {
		t.Fatalf("r2 came back without a retry: %+v", s.fr.Status)
	}
	// spec.retry lets it go again.
	s.fr.Spec.Retry = "1"
	s.run("r2", v1alpha1.PhaseProgressing)
	s.run("r2", v1alpha1.PhaseCompleted)
	if s.fr.Status.LastKnownGood.Revision != "r2" || !slices.Equal(historyOf(s.fr.Status), []string{"r2", "r1"}) {
		t.Errorf("after the retry: %+v, history %v", s.fr.Status.LastKnownGood, historyOf(s.fr.Status))
	}
}

func TestStepRevertRefusedWithoutHistory(t *testing.T) {
	s := newSim(t, "a", "b")
	s.run("r1", v1alpha1.PhaseCompleted)
	s.fr.Spec.Rollback.Request = "1"
	res, _ := s.turn("r1")
	if !strings.Contains(res.Refused, "no known-good revision before r1") || s.fr.Status.Phase != v1alpha1.PhaseCompleted || s.fr.Status.Revert != nil {
		t.Errorf("a rollback with nothing earlier to go back to: refused %q, status %+v", res.Refused, s.fr.Status)
	}

	// historyLimit 0 keeps only the known-good.
	zero := int32(0)
	s.fr.Spec.HistoryLimit = &zero
	s.run("r2", v1alpha1.PhaseProgressing)
	s.run("r2", v1alpha1.PhaseCompleted)
	if got := historyOf(s.fr.Status); !slices.Equal(got, []string{"r2"}) {
		t.Errorf("history with historyLimit 0: %v", got)
	}
}

// A way back that fails its gates is rolled back like any candidate: to the revision it left.
func TestStepRevertThatFailsRollsBack(t *testing.T) {
	s := newSim(t, "a", "b", "c")
	s.fr.Spec.Rollback.OnFailure = v1alpha1.OnFailureRollback
	s.run("r1", v1alpha1.PhaseCompleted)
	s.run("r2", v1alpha1.PhaseCompleted)
	s.broken["a"] = true // r1 no longer works on the canary
	s.fr.Spec.Rollback.Request = "1"
	s.run("r2", v1alpha1.PhaseRolledBack)
	st := s.fr.Status
	if st.LastKnownGood.Revision != "r2" || st.Revert != nil || !s.fr.IsRejected("r1") || s.ks["a"].LastApplied != "r2" || s.ks["b"].LastApplied != "r2" {
		t.Errorf("a failed way back: known-good %+v, revert %+v, rejected %+v, a at %q, b at %q",
			st.LastKnownGood, st.Revert, st.Rejected, s.ks["a"].LastApplied, s.ks["b"].LastApplied)
	}
}

// A rollback requested once a template edit completed goes back, through the gates, to the same
// revision with the build before the edit, which history kept; the edit's build is rejected, so the
// spec that still asks for it does not bring it back until spec.retry changes.
func TestStepRevertATemplateEdit(t *testing.T) {
	s := newSim(t, "a", "b")
	s.run("r1", v1alpha1.PhaseCompleted)
	first := s.fr.Status.LastKnownGood.DeepCopy()
	s.fr.Spec.Template.TargetNamespace = "edited"
	s.run("r1", v1alpha1.PhaseProgressing)
	s.run("r1", v1alpha1.PhaseCompleted)
	edited := s.fr.Status.LastKnownGood.DeepCopy()
	decided := s.decisions[v1alpha1.GateNoDisruption]

	s.fr.Spec.Rollback.Request = "1"
	s.run("r1", v1alpha1.PhaseProgressing)
	s.run("r1", v1alpha1.PhaseCompleted)
	st := s.fr.Status
	if kg := st.LastKnownGood; kg.BuildHash != first.BuildHash || kg.Source != first.Source || st.Revert != nil {
		t.Fatalf("the known-good is the first build again: %+v (first %+v), revert %+v", kg, first, st.Revert)
	}
	if s.decisions[v1alpha1.GateNoDisruption] != decided+2 {
		t.Errorf("the way back was not gated wave by wave: %d noDisruption decisions, want 2", s.decisions[v1alpha1.GateNoDisruption]-decided)
	}
	for _, c := range []string{"a", "b"} {
		if ks := s.objects[c]; ks.Spec.TargetNamespace != "" || ks.Spec.SourceRef.Name != first.Source {
			t.Errorf("%s runs the first build again: %+v", c, ks.Spec)
		}
	}
	if !s.fr.IsRejectedBuild("r1", edited.BuildHash) || s.fr.IsRejectedBuild("r1", first.BuildHash) {
		t.Errorf("the edit's build is rejected, the first is not: %+v", st.Rejected)
	}
	for range 10 {
		if p := s.once("r1"); p != v1alpha1.PhaseCompleted || s.fr.Status.LastKnownGood.BuildHash != first.BuildHash {
			t.Fatalf("the rejected edit came back without a retry: %s %+v", p, s.fr.Status.LastKnownGood)
		}
	}
	s.fr.Spec.Retry = "1"
	s.run("r1", v1alpha1.PhaseProgressing)
	s.run("r1", v1alpha1.PhaseCompleted)
	if s.fr.Status.LastKnownGood.BuildHash != edited.BuildHash {
		t.Errorf("after the retry the edit is the known-good again: %+v", s.fr.Status.LastKnownGood)
	}
}
