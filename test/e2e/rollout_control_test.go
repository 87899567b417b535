package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/controllers"
)

// patchRollout applies fn to the latest rollout and updates it, retrying on conflicts.
func (s *fleetSetup) patchRollout(ctx context.Context, t *testing.T, name string, fn func(*v1alpha1.FleetRollout)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		fr := s.rollout(t, name)
		fn(fr)
		return s.f.Hub.Update(ctx, fr)
	})
	if err != nil {
		t.Fatalf("updating rollout %s: %v", name, err)
	}
}

// resourceVersions returns the resourceVersion of the rollout and the generation of each of its Kustomizations.
func (s *fleetSetup) resourceVersions(ctx context.Context, t *testing.T, name string) map[string]string {
	t.Helper()
	out := map[string]string{"rollout": s.rollout(t, name).ResourceVersion}
	var list kustomizev1.KustomizationList
	if err := s.f.Hub.List(ctx, &list, client.InNamespace(s.ns), client.MatchingLabels{v1alpha1.RolloutLabel: name}); err != nil {
		t.Fatal(err)
	}
	// Only tidegate writes a Kustomization's spec: its generation counts tidegate's writes, while its
	// resourceVersion also moves with kustomize-controller's status updates.
	for _, ks := range list.Items {
		out[ks.Name] = fmt.Sprintf("generation %d", ks.Generation)
	}
	return out
}

// Hold stops the rollout before its next wave and keeps what is applied; clearing it resumes.
// Suspend stops every write (checked on the rollout and its Kustomizations); clearing it resumes.
func TestE2EHoldAndSuspend(t *testing.T) {
	parallel(t)
	s, first := newFleetSetup(t, 5, demoPackage("v1"))
	startTidegate(t, s, controllers.Options{})
	ctx, cancel := testContext(t, 8*time.Minute)
	defer cancel()
	s.rollOutFirst(ctx, t, first, nil)

	// Hold as soon as the canary starts: the canary finishes, the ring never starts.
	s.patchRollout(ctx, t, "web", func(fr *v1alpha1.FleetRollout) { fr.Spec.Hold = &v1alpha1.Hold{Reason: "change freeze"} })
	rev2 := s.commitVersion(t, "v2")
	held := s.waitPhase(ctx, t, "web", v1alpha1.PhaseHeld, rev2)
	if c := findCondition(held, "Ready"); c == nil || c.Status != "False" || c.Message != "held: change freeze" {
		t.Errorf("Ready while held = %+v, want False with the hold's reason", c)
	}
	s.reconciledAgain(ctx, t, "web", reconciles(t, s.ns, "web"), 2)
	held = s.rollout(t, "web")
	for _, w := range held.Status.Waves {
		if w.Phase != v1alpha1.WavePending {
			t.Errorf("wave %s started while held: %s", w.Name, describe(held))
		}
	}
	for _, m := range s.members {
		if v := s.memberVersion(ctx, m.Name); v != "v1" {
			t.Errorf("%s runs %q while held, want v1", m.Name, v)
		}
	}

	// Resume, then suspend while the rollout is in the canary wave.
	s.patchRollout(ctx, t, "web", func(fr *v1alpha1.FleetRollout) { fr.Spec.Hold = nil })
	eventually(ctx, t, "canary started after resume", func() (bool, string) {
		fr := s.rollout(t, "web")
		return fr.Status.Waves[0].Phase != v1alpha1.WavePending, describe(fr)
	})
	s.patchRollout(ctx, t, "web", func(fr *v1alpha1.FleetRollout) { fr.Spec.Suspend = true })
	// Let anything in flight settle, then nothing may be written for a while.
	time.Sleep(2 * time.Second)
	before := s.resourceVersions(ctx, t, "web")
	time.Sleep(testSoak + 8*time.Second)
	after := s.resourceVersions(ctx, t, "web")
	for k, v := range before {
		if after[k] != v {
			t.Errorf("%s was written while suspended: %s → %s", k, v, after[k])
		}
	}
	if len(after) != len(before) {
		t.Errorf("objects appeared while suspended: %v → %v", before, after)
	}

	s.patchRollout(ctx, t, "web", func(fr *v1alpha1.FleetRollout) { fr.Spec.Suspend = false })
	done := s.waitPhase(ctx, t, "web", v1alpha1.PhaseCompleted, rev2)
	checkWaveOrder(t, done)
	for _, m := range s.members {
		if v := s.memberVersion(ctx, m.Name); v != "v2" {
			t.Errorf("%s runs %q after resume, want v2", m.Name, v)
		}
	}
}

// A new commit arriving while wave 2 is in progress waits: the rollout in progress finishes first
// (as docs/spec/v1alpha1/fleetrollouts.md says), then the newer revision rolls out wave by wave. No
// cluster ever runs the newer revision before the older one has finished everywhere.
func TestE2ENewRevisionDuringWave(t *testing.T) {
	parallel(t)
	s, first := newFleetSetup(t, 5, demoPackage("v1"))
	startTidegate(t, s, controllers.Options{})
	ctx, cancel := testContext(t, 8*time.Minute)
	defer cancel()
	s.rollOutFirst(ctx, t, first, nil)
	watch := s.watchVersions(t)

	rev2 := s.commitVersion(t, "v2")
	eventually(ctx, t, "ring wave of v2 in progress", func() (bool, string) {
		fr := s.rollout(t, "web")
		return fr.Status.Candidate != nil && fr.Status.Candidate.Revision == rev2 && fr.Status.CurrentWave == "ring", describe(fr)
	})
	rev3 := s.commitVersion(t, "v3")

	// v2 completes everywhere before v3 touches any cluster.
	eventually(ctx, t, "v2 completed", func() (bool, string) {
		fr := s.rollout(t, "web")
		if fr.Status.LastKnownGood != nil && fr.Status.LastKnownGood.Revision == rev2 {
			return true, ""
		}
		for _, m := range s.members {
			if watch.everRan(m.Name, "v3") {
				t.Fatalf("%s ran v3 before v2 finished: %s", m.Name, describe(fr))
			}
		}
		return false, describe(fr)
	})
	for _, m := range s.members {
		if !watch.everRan(m.Name, "v2") {
			t.Errorf("%s never ran v2: it was skipped", m.Name)
		}
	}
	done := s.waitPhase(ctx, t, "web", v1alpha1.PhaseCompleted, rev3)
	checkWaveOrder(t, done)
	for _, m := range s.members {
		if v := s.memberVersion(ctx, m.Name); v != "v3" {
			t.Errorf("%s runs %q, want v3", m.Name, v)
		}
	}
}

// Bad rollouts get a clear reason and change nothing in any cluster: a sourceRef that does not exist,
// a path missing from the artifact (deploySafe's render fails before the first wave), a selector that
// selects nothing.
func TestE2EBadRollouts(t *testing.T) {
	parallel(t)
	s, _ := newFleetSetup(t, 2, demoPackage("v1"))
	startTidegate(t, s, controllers.Options{})
	ctx, cancel := testContext(t, 4*time.Minute)
	defer cancel()

	noSource := threeWaveRollout(s.ns, "no-source")
	noSource.Spec.SourceRef.Name = "missing"
	noPath := threeWaveRollout(s.ns, "no-path")
	noPath.Spec.Path = "./does-not-exist"
	noPath.Spec.Waves = slices.Delete(noPath.Spec.Waves, 1, 2) // canary and rest: one member each
	noClusters := threeWaveRollout(s.ns, "no-clusters")
	noClusters.Spec.ClusterSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"region": "mars"}}
	// A wave whose selector matches no member, before a wave with one: refused, not skipped (an
	// empty wave after the last one with members is only a small fleet, and is skipped).
	emptyWave := threeWaveRollout(s.ns, "empty-wave")
	emptyWave.Spec.Waves = slices.Delete(emptyWave.Spec.Waves, 1, 2)
	emptyWave.Spec.Waves = slices.Insert(emptyWave.Spec.Waves, 1, v1alpha1.Wave{Name: "gpu",
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"gpu": "true"}}, Soak: emptyWave.Spec.Waves[0].Soak})
	for _, fr := range []*v1alpha1.FleetRollout{noSource, noPath, noClusters, emptyWave} {
		if err := s.f.Hub.Create(ctx, fr); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct{ name, reason, says string }{
		{"no-source", v1alpha1.SourceNotFoundReason, "GitRepository " + s.ns + "/missing not found"},
		{"no-path", v1alpha1.GateFailedReason, "does-not-exist"},
		{"no-clusters", v1alpha1.NoClustersSelectedReason, "selects no eligible FleetCluster"},
		{"empty-wave", v1alpha1.InvalidWaveReason, `wave "gpu": spec.waves[1]: the wave has no clusters`},
	} {
		eventually(ctx, t, tc.name+" explains itself", func() (bool, string) {
			fr := s.rollout(t, tc.name)
			c := findCondition(fr, "Ready")
			return c != nil && c.Status == "False" && c.Reason == tc.reason && containsStr(c.Message, tc.says), describe(fr)
		})
	}
	for _, m := range s.members {
		if v := s.memberVersion(ctx, m.Name); v != "" {
			t.Errorf("%s got the package (%q) from a bad rollout", m.Name, v)
		}
	}
	var list kustomizev1.KustomizationList
	if err := s.f.Hub.List(ctx, &list, client.InNamespace(s.ns)); err != nil {
		t.Fatal(err)
	}
	for _, ks := range list.Items {
		if r := ks.Labels[v1alpha1.RolloutLabel]; r == "no-source" || r == "no-clusters" || r == "no-path" || r == "empty-wave" {
			t.Errorf("rollout %s created kustomization %s", r, ks.Name)
		}
	}
}
