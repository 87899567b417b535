package e2e

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	sourcev1 "github.com/fluxcd/source-controller/api/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/controllers"
	"github.com/tidegate/tidegate/internal/localfleet"
	"github.com/tidegate/tidegate/internal/ops"
)

// Rollback still works after the tracked branch moved on and source-controller garbage-collected the
// tracked source's old artifacts: the known-good pinned source keeps serving the known-good revision.
// Then, once the fixed revision completed, a rollback of the completed rollout takes the fleet back
// to the previous known-good of status.history through the gates, wave by wave, from its pinned
// source (the tracked source has no artifact of it any more), and the revision gone back from stays
// rejected though the branch still has it.
func TestE2ERollbackAfterArtifactGC(t *testing.T) {
	parallel(t)
	// Keep one artifact per source and collect stale ones after a second, so the tracked source's
	// artifact of v1 is gone from storage by the time the rollback needs v1.
	s, first := newFleetSetupWith(t, 3, demoPackage("v1"), localfleet.Options{
		SourceControllerArgs: []string{"--artifact-retention-ttl=1s", "--artifact-retention-records=1"},
	})
	startTidegate(t, s, controllers.Options{})
	ctx, cancel := testContext(t, 10*time.Minute)
	defer cancel()
	rev1 := s.rollOutFirst(ctx, t, first, func(fr *v1alpha1.FleetRollout) { fr.Spec.Rollback.OnFailure = v1alpha1.OnFailureRollback })
	var tracked sourcev1.GitRepository
	if err := s.f.Hub.Get(ctx, keyOf(s.ns, "fleet"), &tracked); err != nil {
		t.Fatal(err)
	}
	v1Artifact := filepath.Join(s.f.Dir, "source-storage", tracked.Status.Artifact.Path)

	// The branch moves on to a broken revision; the tracked source keeps only its newest artifact.
	s.breakVersion("v2")
	bad := s.commitVersion(t, "v2")
	eventually(ctx, t, "tracked source's v1 artifact garbage-collected", func() (bool, string) {
		_, err := os.Stat(v1Artifact)
		return os.IsNotExist(err), "still at " + v1Artifact
	})

	got := s.waitPhase(ctx, t, "web", v1alpha1.PhaseRolledBack, bad)
	var pin sourcev1.GitRepository
	if err := s.f.Hub.Get(ctx, keyOf(s.ns, got.Status.LastKnownGood.Source), &pin); err != nil {
		t.Fatalf("known-good pinned source: %v", err)
	}
	if pin.Status.Artifact == nil || pin.Status.Artifact.Revision != rev1 || pin.Status.Artifact.Digest != got.Status.LastKnownGood.Digest {
		t.Errorf("known-good pin serves %+v, want %s with digest %s", pin.Status.Artifact, rev1, got.Status.LastKnownGood.Digest)
	}
	for _, m := range s.members {
		if v := s.memberVersion(ctx, m.Name); v != "v1" {
			t.Errorf("%s runs %q after the rollback, want v1", m.Name, v)
		}
		if ks := s.kustomization(t, "web", m.Name); ks == nil || ks.Status.LastAppliedRevision != rev1 {
			t.Errorf("kustomization of %s is not back at %s", m.Name, rev1)
		}
	}

	s.rollBackCompleted(ctx, t, rev1, bad)
}

// rollBackCompleted fixes revision bad, lets it go again (spec.retry) until it completes, then rolls
// the completed rollout back to prev through the write and job calls the CLI and MCP server make.
func (s *fleetSetup) rollBackCompleted(ctx context.Context, t *testing.T, prev, bad string) {
	t.Helper()
	for _, m := range s.members {
		s.faults.ClearFaults(m.Name)
	}
	if _, _, _, err := ops.Apply(ctx, s.f.Hub, s.ns, "web", ops.Retry(time.Now())); err != nil {
		t.Fatal(err)
	}
	done := s.waitPhase(ctx, t, "web", v1alpha1.PhaseCompleted, bad)
	if h := historyRevisions(done); !slices.Equal(h, []string{bad, prev}) {
		t.Fatalf("status.history after %s completed: %v, want [%s %s]", bad, h, bad, prev)
	}

	_, ch, job, err := ops.Apply(ctx, s.f.Hub, s.ns, "web", ops.Rollback(time.Now()))
	if err != nil || ch.Warning != "" {
		t.Fatalf("rollback of the completed rollout: %+v, %v", ch, err)
	}
	st, err := ops.Follow(ctx, s.f.Hub, job, time.Second, nil)
	if err != nil || st.State != ops.JobSettled || st.Phase != v1alpha1.PhaseCompleted || st.KnownGood == nil || st.KnownGood.Revision != prev {
		t.Fatalf("the rollback's job: %+v, %v", st, err)
	}
	back := s.rollout(t, "web")
	if h := historyRevisions(back); !slices.Equal(h, []string{prev, bad}) || back.Status.Revert != nil || !back.IsRejected(bad) {
		t.Errorf("after the rollback: history %v, revert %+v, rejected %+v", h, back.Status.Revert, back.Status.Rejected)
	}
	for _, m := range s.members {
		if v := s.memberVersion(ctx, m.Name); v != "v1" {
			t.Errorf("%s runs %q after the rollback of the completed rollout, want v1", m.Name, v)
		}
	}
	// Every wave of the way back that has members passed its gates again: noDisruption receipts of
	// prev, decided after the request (three members leave the last wave empty).
	gated := map[string]bool{}
	for _, rc := range s.receiptsOf(ctx, t, "web", prev) {
		if rc.Spec.Gate == v1alpha1.GateNoDisruption && rc.Spec.Result == v1alpha1.ResultPass && !rc.Spec.EvaluatedAt.Before(back.Status.History[1].CompletedAt) {
			gated[rc.Spec.Wave] = true
		}
	}
	for _, w := range back.Status.Waves {
		if len(w.Clusters) > 0 && !gated[w.Name] {
			t.Errorf("wave %s of the way back to %s has no noDisruption receipt decided after the request: %v", w.Name, prev, gated)
		}
	}
	// The branch still has bad: the rollout waits for a retry, it does not bring it back.
	eventually(ctx, t, "the rollout waiting for a retry of "+bad, func() (bool, string) {
		fr := s.rollout(t, "web")
		return fr.Status.WaitingFor != nil && fr.Status.WaitingFor.Reason == v1alpha1.WaitingForRetry, describe(fr)
	})
	if fr := s.rollout(t, "web"); fr.Status.Candidate.Revision != prev || fr.Status.Phase != v1alpha1.PhaseCompleted {
		t.Errorf("after the rollback the candidate is %s (%s), want %s Completed", fr.Status.Candidate.Revision, fr.Status.Phase, prev)
	}
}

func historyRevisions(fr *v1alpha1.FleetRollout) []string {
	var out []string
	for _, h := range fr.Status.History {
		out = append(out, h.Revision)
	}
	return out
}
