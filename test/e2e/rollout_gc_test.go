package e2e

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	sourcev1 "github.com/fluxcd/source-controller/api/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/controllers"
	"github.com/tidegate/tidegate/internal/localfleet"
)

// Rollback still works after the tracked branch moved on and source-controller garbage-collected the
// tracked source's old artifacts: the known-good pinned source keeps serving the known-good revision.
func TestE2ERollbackAfterArtifactGC(t *testing.T) {
	t.Parallel()
	// Keep one artifact per source and collect stale ones after a second, so the tracked source's
	// artifact of v1 is gone from storage by the time the rollback needs v1.
	s, first := newFleetSetupWith(t, 3, demoPackage("v1"), localfleet.Options{
		SourceControllerArgs: []string{"--artifact-retention-ttl=1s", "--artifact-retention-records=1"},
	})
	startTidegate(t, s.f, controllers.Options{})
	ctx, cancel := testContext(6 * time.Minute)
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
	for _, m := range s.f.Members {
		if v := s.memberVersion(ctx, m.Name); v != "v1" {
			t.Errorf("%s runs %q after the rollback, want v1", m.Name, v)
		}
		if ks := s.kustomization(t, "web", m.Name); ks == nil || ks.Status.LastAppliedRevision != rev1 {
			t.Errorf("kustomization of %s is not back at %s", m.Name, rev1)
		}
	}
}
