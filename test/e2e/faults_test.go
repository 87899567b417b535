package e2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/controllers"
	"github.com/tidegate/tidegate/test/faultproxy"
	"github.com/tidegate/tidegate/verdict"
)

// The canary's member is blackholed (its fault proxy accepts connections and never answers) when a
// new revision arrives, after the last reachability probe said it was reachable, so it is planned
// into the first wave and the first wave's deploySafe preflights it. Its preflight entry fails as
// unreachable within the member's own deadline (not the gate's), the others pass, and deploySafe is
// Inconclusive, not failed: what could not be observed holds the wave, with Ready=False
// GateInconclusive naming the member, and nothing is switched: no Kustomization points at the
// revision and every member runs the old version. Cleared, the member answers again, the gate is
// decided again (at the end of its backoff), passes, and the rollout completes everywhere.
//
// Then v3, and the canary's API server answers kustomize-controller's applies of the Deployment
// 503 (its dry-runs, tidegate's preflight among them, go through): the canary's first apply of v3
// fails with ReconciliationFailed. The canary's wave allows no failure, and it is not failed: the
// member is pending, the rollout Progressing, until the fault clears; kustomize-controller's retry
// (the template's retryInterval) applies v3, and the rollout completes with no receipt failed.
func TestE2EFaultMemberBlackholedDuringPreflight(t *testing.T) {
	parallel(t)
	s, first := newFleetSetupProxied(t, 3, demoPackage("v1"), []string{faultproxy.AllMembers})
	startTidegate(t, s, controllers.Options{})
	ctx, cancel := testContext(t, 8*time.Minute)
	defer cancel()
	rev1 := s.repo.Revision(first)
	s.createRollout(ctx, t, twoWaveRollout(s.ns), rev1, func(fr *v1alpha1.FleetRollout) {
		fr.Spec.Template.RetryInterval = &metav1.Duration{Duration: 5 * time.Second}
	})
	canary := s.rollout(t, "web").Status.Waves[0].Clusters[0]

	// Probed now and then not for an hour, the canary stays Reachable=True in the inventory while
	// it is blackholed, so the planner keeps it in the first wave.
	s.probeRarely(ctx, t, canary)
	s.proxies.Member(canary).Set(faultproxy.Blackhole())
	rev2 := s.commitVersion(t, "v2")

	s.waitGate(ctx, t, "web", v1alpha1.GateDeploySafe, metav1.ConditionUnknown)
	fr := s.rollout(t, "web")
	if ready := findCondition(fr, "Ready"); ready == nil || ready.Reason != v1alpha1.GateInconclusiveReason || !strings.Contains(ready.Message, canary) {
		t.Errorf("Ready should say the wave waits on an inconclusive gate naming %s: %+v", canary, ready)
	}
	if fr.Status.Phase != v1alpha1.PhaseProgressing || fr.Status.WaitingFor == nil || fr.Status.WaitingFor.Reason != v1alpha1.WaitingForInconclusive {
		t.Errorf("an inconclusive gate waits, it does not hold or roll back: %s", describe(fr))
	}
	if got := fr.Status.Waves[0].Clusters; len(got) != 1 || got[0] != canary {
		t.Fatalf("the first wave of %s should be %s: %v", rev2, canary, got)
	}
	rc := latestReceipt(s.receiptsOf(ctx, t, "web", rev2), v1alpha1.GateDeploySafe, "canary")
	if rc == nil || rc.Spec.Result != v1alpha1.ResultInconclusive {
		t.Fatalf("the canary's deploySafe should be Inconclusive: %+v", rc)
	}
	var ds verdict.DeploySafeEvidence
	evidenceOf(t, rc, &ds)
	if len(ds.Preflight.Clusters) != 1 || ds.Preflight.Clusters[0].Name != canary {
		t.Fatalf("the canary's preflight should list %s: %+v", canary, ds.Preflight.Clusters)
	}
	entry := ds.Preflight.Clusters[0]
	// The server version was asked within the member's own deadline, which ran out (the request's
	// timeout or its context's, whichever fires first): not the gate's time ("not checked: ...").
	timedOut := strings.Contains(entry.Unreachable, "deadline exceeded") || strings.Contains(entry.Unreachable, "Client.Timeout exceeded")
	if entry.Reachable || !strings.Contains(entry.Unreachable, "asking the server version") || !timedOut ||
		strings.Contains(entry.Unreachable, "not checked") {
		t.Errorf("%s's preflight should fail as unreachable within its own deadline: %+v", canary, entry)
	}
	for _, w := range ds.Preflight.LaterWaves {
		for _, c := range w.Clusters {
			if !c.Reachable || c.Failed() {
				t.Errorf("%s in wave %s answers and should pass its preflight: %+v", c.Name, w.Name, c)
			}
		}
	}
	s.nothingApplied(ctx, t, "web", rev2, "v2")
	if ks := s.kustomization(t, "web", canary); ks == nil || ks.Annotations[v1alpha1.RevisionAnnotation] != rev1 {
		t.Errorf("%s's Kustomization should stay at %s", canary, rev1)
	}

	s.proxies.Member(canary).Clear()
	s.waitPhase(ctx, t, "web", v1alpha1.PhaseCompleted, rev2)
	s.everyMemberRuns(ctx, t, "v2")
	for _, rc := range s.receiptsOf(ctx, t, "web", rev2) {
		if rc.Spec.Result == v1alpha1.ResultFail {
			t.Errorf("receipt %s: %s failed on what could not be observed: %v", rc.Name, rc.Spec.Gate, rc.Spec.Reasons)
		}
	}

	// v3, with the canary's API server unavailable to applies of the Deployment.
	s.proxies.Member(canary).Set(faultproxy.ServerError(http.StatusServiceUnavailable).Only(
		faultproxy.Method(http.MethodPatch), faultproxy.Resource("deployments"),
		func(r *http.Request) bool { return r.URL.Query().Get("dryRun") == "" }))
	rev3 := s.commitVersion(t, "v3")
	eventually(ctx, t, "the canary's first apply of v3 failed with the 503", func() (bool, string) {
		ks := s.kustomization(t, "web", canary)
		if ks == nil {
			return false, "no Kustomization"
		}
		c := findConditionOf(ks.Status.Conditions, "Ready")
		return ks.Annotations[v1alpha1.RevisionAnnotation] == rev3 && c != nil && c.Status == metav1.ConditionFalse &&
			c.Reason == "ReconciliationFailed" && strings.Contains(c.Message, "the server is currently unable to handle the request"), fmt.Sprintf("%+v", c)
	})
	// The controller has seen the failure (two more reconciles), and waits on the member.
	s.reconciledAgain(ctx, t, "web", reconciles(t, s.ns, "web"), 2)
	fr = s.rollout(t, "web")
	if fr.Status.Phase != v1alpha1.PhaseProgressing || fr.Status.Candidate.Revision != rev3 || fr.Status.Waves[0].Phase != v1alpha1.WaveProgressing ||
		fr.Status.WaitingFor == nil || fr.Status.WaitingFor.Reason != v1alpha1.WaitingForMembers {
		t.Errorf("a member unavailable at the switch is pending, not a failure of the canary: %s", describe(fr))
	}
	s.proxies.Member(canary).Clear()
	s.waitPhase(ctx, t, "web", v1alpha1.PhaseCompleted, rev3)
	s.everyMemberRuns(ctx, t, "v3")
	for _, rc := range s.receiptsOf(ctx, t, "web", rev3) {
		if rc.Spec.Result != v1alpha1.ResultPass {
			t.Errorf("receipt %s: %s %s: %v", rc.Name, rc.Spec.Gate, rc.Spec.Result, rc.Spec.Reasons)
		}
	}
}

// probeRarely sets the FleetCluster's probe interval to an hour and waits for the probe that the
// change of spec makes, so that the next one is an hour away.
func (s *fleetSetup) probeRarely(ctx context.Context, t *testing.T, cluster string) {
	t.Helper()
	s.probeEvery(ctx, t, cluster, time.Hour)
}

// probeEvery sets the FleetCluster's probe interval and waits for the probe that the change of spec
// makes.
func (s *fleetSetup) probeEvery(ctx context.Context, t *testing.T, cluster string, interval time.Duration) {
	t.Helper()
	var fc v1alpha1.FleetCluster
	key := types.NamespacedName{Namespace: s.ns, Name: cluster}
	if err := s.f.Hub.Get(ctx, key, &fc); err != nil {
		t.Fatal(err)
	}
	fc.Spec.Interval = &metav1.Duration{Duration: interval}
	if err := s.f.Hub.Update(ctx, &fc); err != nil {
		t.Fatal(err)
	}
	eventually(ctx, t, "FleetCluster "+cluster+" probed at its new generation", func() (bool, string) {
		if err := s.f.Hub.Get(ctx, key, &fc); err != nil {
			return false, err.Error()
		}
		c := findConditionOf(fc.Status.Conditions, v1alpha1.ReachableCondition)
		return fc.Status.ObservedGeneration == fc.Generation && c != nil && c.Status == metav1.ConditionTrue, fmt.Sprintf("%+v", fc.Status)
	})
}

// waitReachable waits until the FleetCluster's Reachable condition has status.
func (s *fleetSetup) waitReachable(ctx context.Context, t *testing.T, cluster string, status metav1.ConditionStatus) {
	t.Helper()
	eventually(ctx, t, "FleetCluster "+cluster+" Reachable="+string(status), func() (bool, string) {
		var fc v1alpha1.FleetCluster
		if err := s.f.Hub.Get(ctx, types.NamespacedName{Namespace: s.ns, Name: cluster}, &fc); err != nil {
			return false, err.Error()
		}
		c := findConditionOf(fc.Status.Conditions, v1alpha1.ReachableCondition)
		return c != nil && c.Status == status, fmt.Sprintf("%+v", c)
	})
}

func findConditionOf(conds []metav1.Condition, typ string) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == typ {
			return &conds[i]
		}
	}
	return nil
}

// Stable waves, with five members: member-5 is blackholed and Reachable=False before v2, and is
// planned all the same (canary member-1, ring 40 % of five: member-2 and member-3, rest member-4
// and member-5). Once the ring has started, member-2 is blackholed too and becomes Reachable=False;
// a hold keeps the rollout after the ring. The ring keeps member-2 (its budget of one failure
// counts it), no cluster moves into the ring's place in the plan and none is reported as a late
// joiner. Released, the rest wave does not start without member-5: its deploySafe is Inconclusive
// about it. When both proxies heal, the rest wave switches member-4 and member-5 through its
// gates, member-2 converges, and the rollout completes with nothing lagging.
func TestE2EFaultMemberUnreachableMidWaveKeepsItsPlace(t *testing.T) {
	parallel(t)
	s, first := newFleetSetupProxied(t, 5, demoPackage("v1"), []string{faultproxy.AllMembers})
	startTidegate(t, s, controllers.Options{})
	ctx, cancel := testContext(t, 12*time.Minute)
	defer cancel()
	one := int32(1)
	s.rollOutFirst(ctx, t, first, func(fr *v1alpha1.FleetRollout) { fr.Spec.Waves[1].MaxFailures = &one })
	for _, c := range []string{"member-2", "member-5"} {
		s.probeEvery(ctx, t, c, 10*time.Second)
	}
	s.proxies.Member("member-5").Set(faultproxy.Blackhole())
	s.waitReachable(ctx, t, "member-5", metav1.ConditionFalse)

	rev2 := s.commitVersion(t, "v2")
	eventually(ctx, t, "the ring started", func() (bool, string) {
		fr := s.rollout(t, "web")
		return fr.Status.Candidate != nil && fr.Status.Candidate.Revision == rev2 && len(fr.Status.Waves) == 3 &&
			fr.Status.Waves[1].StartedAt != nil, describe(fr)
	})
	s.patchRollout(ctx, t, "web", func(fr *v1alpha1.FleetRollout) { fr.Spec.Hold = &v1alpha1.Hold{Reason: "look at the ring"} })
	s.proxies.Member("member-2").Set(faultproxy.Blackhole())
	s.waitReachable(ctx, t, "member-2", metav1.ConditionFalse)

	held := s.waitPhase(ctx, t, "web", v1alpha1.PhaseHeld, rev2)
	eventually(ctx, t, "the ring decided, the rollout held before the rest", func() (bool, string) {
		held = s.rollout(t, "web")
		return held.Status.Waves[1].Phase == v1alpha1.WaveSucceeded && held.Status.Phase == v1alpha1.PhaseHeld, describe(held)
	})
	// More passes while member-2 is Reachable=False: each derives the late joiners and the skipped
	// clusters again.
	s.reconciledAgain(ctx, t, "web", reconciles(t, s.ns, "web"), 2)
	held = s.rollout(t, "web")
	if late := held.Status.LateJoiners; len(late) > 0 {
		t.Errorf("late joiners %v: every cluster was in the fleet from the start", late)
	}
	if ring := held.Status.Waves[1].Clusters; !slices.Equal(ring, []string{"member-2", "member-3"}) {
		t.Errorf("the ring = %v, want member-2 and member-3 as planned", ring)
	}
	for _, sk := range held.Status.Skipped {
		if sk.Name == "member-2" {
			t.Errorf("member-2 is in the ring and not skipped: %+v", held.Status.Skipped)
		}
	}

	s.patchRollout(ctx, t, "web", func(fr *v1alpha1.FleetRollout) { fr.Spec.Hold = nil })
	eventually(ctx, t, "the rest wave waits, Inconclusive about member-5", func() (bool, string) {
		fr := s.rollout(t, "web")
		o := waveGate(fr.Status.Waves[2], v1alpha1.GateDeploySafe)
		return o != nil && o.Result == v1alpha1.ResultInconclusive && slices.Equal(o.Unobserved, []string{"member-5"}) &&
			fr.Status.Waves[2].StartedAt == nil && fr.Status.Phase == v1alpha1.PhaseProgressing, describe(fr)
	})

	s.proxies.Member("member-2").Clear()
	s.proxies.Member("member-5").Clear()
	done := s.waitPhase(ctx, t, "web", v1alpha1.PhaseCompleted, rev2)
	for i, want := range [][]string{{"member-1"}, {"member-2", "member-3"}, {"member-4", "member-5"}} {
		if got := done.Status.Waves[i].Clusters; !slices.Equal(got, want) {
			t.Errorf("wave %s = %v, want %v", done.Status.Waves[i].Name, got, want)
		}
	}
	eventually(ctx, t, "every member runs v2 and none lags", func() (bool, string) {
		fr := s.rollout(t, "web")
		var versions []string
		for _, m := range s.members {
			versions = append(versions, s.memberVersion(ctx, m.Name))
		}
		return !slices.ContainsFunc(versions, func(v string) bool { return v != "v2" }) && fr.Status.LaggingCount == 0 && len(fr.Status.Lagging) == 0,
			fmt.Sprintf("%v %+v", versions, fr.Status.Lagging)
	})
	if fr := s.rollout(t, "web"); fr.Status.Phase != v1alpha1.PhaseCompleted || fr.Status.LastKnownGood.Revision != rev2 {
		t.Errorf("the rollout moved: %s", describe(fr))
	}
}
