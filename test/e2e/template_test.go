package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fluxcd/pkg/apis/kustomize"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/controllers"
)

// memberImage is the demo Deployment's image on a member ("" when absent).
func (s *fleetSetup) memberImage(ctx context.Context, cluster string) string {
	var d appsv1.Deployment
	if err := s.f.Member(cluster).Client.Get(ctx, types.NamespacedName{Namespace: s.ns, Name: "web"}, &d); err != nil || len(d.Spec.Template.Spec.Containers) == 0 {
		return ""
	}
	return d.Spec.Template.Spec.Containers[0].Image
}

// retag is a template edit: the demo image with tag.
func retag(tag string) func(*v1alpha1.FleetRollout) {
	return func(fr *v1alpha1.FleetRollout) {
		fr.Spec.Template.Images = []kustomize.Image{{Name: "ghcr.io/example/web", NewTag: tag}}
	}
}

// A template edit is a candidate of its own, not a rewrite of every Kustomization: the same
// revision with the new build goes canary → ring → rest, each wave through its gates with
// receipts naming the build, and spec.hold stops it between waves. A template edit that breaks the
// workload fails on the canary and is rolled back there to the known-good's build: the other
// clusters never get it, and that build is rejected while the revision stays the known-good.
func TestE2EATemplateEditIsACandidate(t *testing.T) {
	parallel(t)
	s, first := newFleetSetup(t, 3, demoPackage("v1"))
	startTidegate(t, s, controllers.Options{})
	ctx, cancel := testContext(t, 8*time.Minute)
	defer cancel()
	rev1 := s.rollOutFirst(ctx, t, first, func(fr *v1alpha1.FleetRollout) { fr.Spec.Rollback.OnFailure = v1alpha1.OnFailureRollback })
	firstBuild := s.rollout(t, "web").Status.LastKnownGood.BuildHash

	// The edit: the canary takes it; a hold set while the canary is under way lets the canary finish
	// and keeps the ring from starting. The canary soaks for holdWindow with this edit (a soak is not
	// part of the build or the plan: the same candidate), so the hold lands while it soaks however
	// slowly this test's throttled client reads and writes; testSoak alone (3 s) was a race it lost
	// on a loaded machine, the ring switched before the hold arrived.
	const holdWindow = 30 * time.Second
	s.patchRollout(ctx, t, "web", func(fr *v1alpha1.FleetRollout) {
		retag("v1-patched")(fr)
		fr.Spec.Waves[0].Soak = &metav1.Duration{Duration: holdWindow}
	})
	var fr *v1alpha1.FleetRollout
	eventually(ctx, t, "the canary takes the edit", func() (bool, string) {
		fr = s.rollout(t, "web")
		c := fr.Status.Candidate
		return c.Revision == rev1 && c.BuildHash != firstBuild && len(fr.Status.Waves) == 3 &&
			(fr.Status.Waves[0].Phase == v1alpha1.WaveProgressing || fr.Status.Waves[0].Phase == v1alpha1.WaveSoaking), describe(fr)
	})
	edit := fr.Status.Candidate.BuildHash
	canary := fr.Status.Waves[0].Clusters[0]
	s.patchRollout(ctx, t, "web", func(fr *v1alpha1.FleetRollout) { fr.Spec.Hold = &v1alpha1.Hold{Reason: "look at the canary"} })
	eventually(ctx, t, "held after the canary", func() (bool, string) {
		fr = s.rollout(t, "web")
		return fr.Status.Phase == v1alpha1.PhaseHeld && fr.Status.Waves[0].Phase == v1alpha1.WaveSucceeded, describe(fr)
	})
	s.reconciledAgain(ctx, t, "web", reconciles(t, s.ns, "web"), 2)
	fr = s.rollout(t, "web")
	if fr.Status.Phase != v1alpha1.PhaseHeld || fr.Status.Waves[1].Phase != v1alpha1.WavePending {
		t.Errorf("held between the canary and the ring: %s", describe(fr))
	}
	for _, m := range s.members {
		want := "ghcr.io/example/web:v1"
		if m.Name == canary {
			want = "ghcr.io/example/web:v1-patched"
		}
		if img := s.memberImage(ctx, m.Name); img != want {
			t.Errorf("%s runs %q while the rollout holds after the canary, want %s", m.Name, img, want)
		}
	}

	s.patchRollout(ctx, t, "web", func(fr *v1alpha1.FleetRollout) {
		fr.Spec.Hold = nil
		fr.Spec.Waves[0].Soak = &metav1.Duration{Duration: testSoak}
	})
	fr = s.waitPhase(ctx, t, "web", v1alpha1.PhaseCompleted, rev1)
	checkWaveOrder(t, fr)
	if kg := fr.Status.LastKnownGood; kg.BuildHash != edit || kg.Build == nil || len(kg.Build.Images) != 1 || len(fr.Status.History) < 2 || fr.Status.History[1].BuildHash != firstBuild {
		t.Errorf("the edit is the known-good, the first build the entry before it: %+v, history %+v", kg, fr.Status.History)
	}
	for _, m := range s.members {
		if img := s.memberImage(ctx, m.Name); img != "ghcr.io/example/web:v1-patched" {
			t.Errorf("%s runs %q after the edit completed", m.Name, img)
		}
	}
	passed := map[string]bool{}
	for _, rc := range s.receiptsOf(ctx, t, "web", rev1) {
		if rc.Spec.Candidate.BuildHash == edit && rc.Spec.Result == v1alpha1.ResultPass {
			passed[rc.Spec.Wave+"/"+rc.Spec.Gate] = true
		}
	}
	for _, wv := range fr.Status.Waves {
		if wv.Phase == v1alpha1.WaveSkipped {
			continue // three members: the canary and the ring take them all
		}
		for _, gate := range []string{v1alpha1.GateDeploySafe, v1alpha1.GateRollbackSucceeds, v1alpha1.GateNoDisruption} {
			if !passed[wv.Name+"/"+gate] {
				t.Errorf("no passing %s receipt of wave %s for the edit's build %s: %v", gate, wv.Name, edit, passed)
			}
		}
	}
	if !passed["canary/"+v1alpha1.GateRollbackSafe] {
		t.Errorf("no passing rollbackSafe receipt before the edit's canary")
	}

	// A breaking edit: the canary alone gets it, and goes back to the known-good's build.
	before := s.generations(t, "web")
	s.breakVersion("broken")
	s.patchRollout(ctx, t, "web", retag("broken"))
	eventually(ctx, t, "the breaking edit rolled back", func() (bool, string) {
		fr = s.rollout(t, "web")
		return fr.Status.Phase == v1alpha1.PhaseRolledBack && fr.Status.Candidate.BuildHash != edit, describe(fr)
	})
	broken := fr.Status.Candidate.BuildHash
	if !fr.IsRejectedBuild(rev1, broken) || fr.IsRejectedBuild(rev1, edit) || fr.Status.LastKnownGood.BuildHash != edit {
		t.Errorf("the breaking build is rejected, the known-good's is not: rejected %+v, known-good %+v", fr.Status.Rejected, fr.Status.LastKnownGood)
	}
	brokenCanary := fr.Status.Waves[0].Clusters[0]
	after := s.generations(t, "web")
	for _, m := range s.members {
		if m.Name != brokenCanary && after[m.Name] != before[m.Name] {
			t.Errorf("%s's Kustomization was written (generation %d → %d): only the canary may get the breaking edit", m.Name, before[m.Name], after[m.Name])
		}
	}
	eventually(ctx, t, "every member back on the known-good's build", func() (bool, string) {
		imgs := map[string]string{}
		ok := true
		for _, m := range s.members {
			imgs[m.Name] = s.memberImage(ctx, m.Name)
			ok = ok && imgs[m.Name] == "ghcr.io/example/web:v1-patched"
		}
		return ok, fmt.Sprint(imgs)
	})
	s.reconciledAgain(ctx, t, "web", reconciles(t, s.ns, "web"), 2)
	if fr = s.rollout(t, "web"); fr.Status.Phase != v1alpha1.PhaseRolledBack {
		t.Errorf("a rejected build is not rolled out again: %s", describe(fr))
	}
}
