package e2e

import (
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/controllers"
)

// A commit that touches only another path of the repository is a new revision of the tracked
// source that builds, at the rollout's path, what the known-good does: it is not rolled out. No
// Kustomization moves and no gate is decided; status.unchanged names it and the known-good whose
// render it is, and its ledger ends Unchanged. The next commit to the package rolls out as usual.
func TestE2EACommitOutsideThePackageIsNoChange(t *testing.T) {
	parallel(t)
	s, first := newFleetSetup(t, 2, demoPackage("v1"))
	startTidegate(t, s, controllers.Options{})
	ctx, cancel := testContext(t, 6*time.Minute)
	defer cancel()
	rev1 := s.repo.Revision(first)
	s.createRollout(ctx, t, twoWaveRollout(s.ns), rev1, nil)
	before := s.generations(t, "web")
	receipts := len(s.receiptNames(ctx, t, "web"))

	rev2 := s.commitFiles(t, "docs only", map[string]string{"docs/notes.md": "# not part of ./app\n"})
	var fr *v1alpha1.FleetRollout
	eventually(ctx, t, rev2+" recorded as no change", func() (bool, string) {
		fr = s.rollout(t, "web")
		u := fr.Status.Unchanged
		return u != nil && u.Revision == rev2 && u.SameAs == rev1, fmt.Sprintf("%+v %s", u, describe(fr))
	})
	s.reconciledAgain(ctx, t, "web", reconciles(t, s.ns, "web"), 2)
	fr = s.rollout(t, "web")
	if fr.Status.Phase != v1alpha1.PhaseCompleted || fr.Status.Candidate.Revision != rev1 || fr.Status.LastKnownGood.Revision != rev1 {
		t.Errorf("the rollout stays Completed on %s: %s", rev1, describe(fr))
	}
	if after := s.generations(t, "web"); !maps.Equal(after, before) {
		t.Errorf("a Kustomization moved: generations %v, were %v", after, before)
	}
	if n := len(s.receiptNames(ctx, t, "web")); n != receipts {
		t.Errorf("%d receipts, were %d: no gate is decided for no change", n, receipts)
	}
	l := s.ledger(ctx, t, "web", rev2)
	if n := len(l.Spec.Entries); n != 1 || l.Spec.Entries[0].Outcome == nil || l.Spec.Entries[0].Outcome.Phase != v1alpha1.OutcomeUnchanged ||
		l.Spec.Entries[0].Outcome.SameAs != rev1 {
		t.Errorf("the ledger of %s: %+v, want one Outcome Unchanged, sameAs %s", rev2, l.Spec.Entries, rev1)
	}

	rev3 := s.commitVersion(t, "v2")
	s.waitPhase(ctx, t, "web", v1alpha1.PhaseCompleted, rev3)
	for _, m := range s.members {
		if v := s.memberVersion(ctx, m.Name); v != "v2" {
			t.Errorf("%s runs %q, want v2", m.Name, v)
		}
	}
}
