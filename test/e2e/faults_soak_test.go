package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/controllers"
	"github.com/tidegate/tidegate/test/faultproxy"
	"github.com/tidegate/tidegate/verdict"
)

// The canary's member is blackholed while its wave soaks, with onFailure Rollback: its samples stop
// reading anything, so noDisruption cannot be decided on it. The gate is Inconclusive, not failed:
// the wave keeps soaking, the canary's Kustomization stays at the candidate (no rollback), Ready says
// why. Healed, the member is sampled again, the gate passes once it was observed over enough of the
// soak, and the rollout completes. No receipt of the revision failed.
func TestE2EFaultMemberBlackholedDuringSoak(t *testing.T) {
	parallel(t)
	s, first := newFleetSetupProxied(t, 3, demoPackage("v1"), []string{faultproxy.AllMembers})
	startTidegate(t, s, controllers.Options{})
	ctx, cancel := testContext(t, 10*time.Minute)
	defer cancel()
	rev1 := s.repo.Revision(first)
	s.createRollout(ctx, t, twoWaveRollout(s.ns), rev1, func(fr *v1alpha1.FleetRollout) {
		fr.Spec.Waves[0].Soak = &metav1.Duration{Duration: 30 * time.Second}
		fr.Spec.Rollback.OnFailure = v1alpha1.OnFailureRollback
	})
	canary := s.rollout(t, "web").Status.Waves[0].Clusters[0]
	s.probeRarely(ctx, t, canary)

	rev2 := s.commitVersion(t, "v2")
	eventually(ctx, t, "the canary wave soaking "+rev2, func() (bool, string) {
		fr := s.rollout(t, "web")
		return fr.Status.Candidate != nil && fr.Status.Candidate.Revision == rev2 && len(fr.Status.Waves) > 0 &&
			fr.Status.Waves[0].Phase == v1alpha1.WaveSoaking, describe(fr)
	})
	s.proxies.Member(canary).Set(faultproxy.Blackhole())

	// noDisruption reads Unknown before its decision too (the soak runs): wait for the wait itself.
	var fr *v1alpha1.FleetRollout
	eventually(ctx, t, "the rollout waiting on the inconclusive gate naming "+canary, func() (bool, string) {
		fr = s.rollout(t, "web")
		w := fr.Status.WaitingFor
		return w != nil && w.Reason == v1alpha1.WaitingForInconclusive && strings.Contains(w.Message, canary), describe(fr)
	})
	if c := findCondition(fr, v1alpha1.GateNoDisruption); c == nil || c.Status != metav1.ConditionUnknown {
		t.Errorf("noDisruption should be Unknown while it is inconclusive: %+v", c)
	}
	if fr.Status.Phase != v1alpha1.PhaseProgressing || fr.Status.Waves[0].Phase != v1alpha1.WaveSoaking {
		t.Fatalf("an inconclusive noDisruption must leave the wave soaking: %s", describe(fr))
	}
	rc := latestReceipt(s.receiptsOf(ctx, t, "web", rev2), v1alpha1.GateNoDisruption, "canary")
	if rc == nil || rc.Spec.Result != v1alpha1.ResultInconclusive {
		t.Fatalf("the canary's noDisruption receipt should be Inconclusive: %+v", rc)
	}
	var ev verdict.NoDisruptionEvidence
	evidenceOf(t, rc, &ev)
	if len(ev.Unobserved) != 1 || ev.Unobserved[0].Name != canary {
		t.Errorf("the evidence should list %s as unobserved: %+v", canary, ev.Unobserved)
	}
	// It stays so while the member is down: nothing rolls back or holds, the canary's
	// Kustomization stays at the candidate.
	consistently(ctx, t, "the rollout waiting on the unobservable "+canary, 15*time.Second, func() (bool, string) {
		fr := s.rollout(t, "web")
		ks := s.kustomization(t, "web", canary)
		return fr.Status.Phase == v1alpha1.PhaseProgressing && ks != nil && ks.Annotations[v1alpha1.RevisionAnnotation] == rev2, describe(fr)
	})

	s.proxies.Member(canary).Clear()
	done := s.waitPhase(ctx, t, "web", v1alpha1.PhaseCompleted, rev2)
	if done.Status.LastKnownGood == nil || done.Status.LastKnownGood.Revision != rev2 {
		t.Errorf("known-good %+v, want %s", done.Status.LastKnownGood, rev2)
	}
	s.everyMemberRuns(ctx, t, "v2")
	inconclusive := 0
	for _, rc := range s.receiptsOf(ctx, t, "web", rev2) {
		switch rc.Spec.Result {
		case v1alpha1.ResultFail:
			t.Errorf("receipt %s: %s failed on what could not be observed: %v", rc.Name, rc.Spec.Gate, rc.Spec.Reasons)
		case v1alpha1.ResultInconclusive:
			inconclusive++
		}
	}
	if pass := latestReceipt(s.receiptsOf(ctx, t, "web", rev2), v1alpha1.GateNoDisruption, "canary"); pass == nil || pass.Spec.Result != v1alpha1.ResultPass {
		t.Errorf("the canary's last noDisruption receipt should pass: %+v", pass)
	}
	// Decided again every sample interval while down, a receipt is written only when what could not
	// be observed changes.
	if inconclusive == 0 || inconclusive > 3 {
		t.Errorf("%d Inconclusive receipts, want a few (one per change of what was unobserved)", inconclusive)
	}
}

// A member that answers only after 30 seconds, in a wave of five with a failure budget of one: its
// preflight times out within its own deadline, so it is held back and counted against the budget;
// the four others switch, soak and pass without waiting on it, and the rollout completes. The slow
// member keeps the old revision and the wave's status says why.
func TestE2EFaultSlowMemberInAFiveMemberWave(t *testing.T) {
	parallel(t)
	s, first := newFleetSetupProxied(t, 5, demoPackage("v1"), []string{"member-3"})
	startTidegate(t, s, controllers.Options{})
	ctx, cancel := testContext(t, 10*time.Minute)
	defer cancel()
	rev1 := s.repo.Revision(first)
	one := int32(1)
	fr := twoWaveRollout(s.ns)
	fr.Spec.Waves = []v1alpha1.Wave{{Name: "all", Selector: &metav1.LabelSelector{}, MaxFailures: &one, Soak: &metav1.Duration{Duration: testSoak}}}
	s.createRollout(ctx, t, fr, rev1, nil)
	s.probeRarely(ctx, t, "member-3")
	s.proxies.Member("member-3").Set(faultproxy.Latency(30 * time.Second))

	rev2 := s.commitVersion(t, "v2")
	done := s.waitPhase(ctx, t, "web", v1alpha1.PhaseCompleted, rev2)
	wv := done.Status.Waves[0]
	if len(wv.Clusters) != 5 {
		t.Fatalf("the wave should keep its five members: %v", wv.Clusters)
	}
	if len(wv.HeldBack) != 1 || wv.HeldBack[0].Cluster != "member-3" || !strings.Contains(wv.HeldBack[0].Reason, "unreachable") {
		t.Errorf("member-3 should be held back as unreachable: %+v", wv.HeldBack)
	}
	for _, m := range s.members {
		want := "v2"
		if m.Name == "member-3" {
			want = "v1"
		}
		if got := s.memberVersion(ctx, m.Name); got != want {
			t.Errorf("%s runs %q, want %s", m.Name, got, want)
		}
	}
	byGate := map[string]int{}
	for _, rc := range s.receiptsOf(ctx, t, "web", rev2) {
		if rc.Spec.Result == v1alpha1.ResultPass {
			byGate[rc.Spec.Gate]++
		}
	}
	for _, g := range []string{v1alpha1.GateDeploySafe, v1alpha1.GateRollbackSafe, v1alpha1.GateRollbackSucceeds, v1alpha1.GateNoDisruption} {
		if byGate[g] != 1 {
			t.Errorf("%d passing %s receipts for the one wave, want 1", byGate[g], g)
		}
	}
}

// The controller is restarted mid-soak, after the canary's workload lost availability and recovered:
// the soak's samples so far were written to status.waves[].soaked as they accrued, the new controller
// continues from them, and noDisruption fails on the disruption seen before the restart (with only
// the samples taken after it, the canary would pass).
func TestE2ERestartMidSoakRemembersADisruption(t *testing.T) {
	parallel(t)
	s, first := newFleetSetup(t, 2, demoPackage("v1"))
	h := startTidegate(t, s, controllers.Options{})
	ctx, cancel := testContext(t, 8*time.Minute)
	defer cancel()
	rev1 := s.repo.Revision(first)
	s.createRollout(ctx, t, twoWaveRollout(s.ns), rev1, func(fr *v1alpha1.FleetRollout) {
		fr.Spec.Waves[0].Soak = &metav1.Duration{Duration: 50 * time.Second}
	})
	canary := s.rollout(t, "web").Status.Waves[0].Clusters[0]
	rev2 := s.commitVersion(t, "v2")
	s.loseAvailabilityOnceSoaking(ctx, t, "web", rev2, "v2", canary, 0)

	eventually(ctx, t, "the canary's lost availability written to status", func() (bool, string) {
		fr := s.rollout(t, "web")
		if fr.Status.Candidate == nil || fr.Status.Candidate.Revision != rev2 || len(fr.Status.Waves) == 0 {
			return false, describe(fr)
		}
		for _, e := range fr.Status.Waves[0].Soaked {
			if e.Cluster == canary && e.MinAvailablePermille < 900 {
				return true, ""
			}
		}
		return false, describe(fr)
	})
	s.faults.ClearFaults(canary)
	h.Stop(t)
	atStop := s.rollout(t, "web")
	if atStop.Status.Waves[0].Phase != v1alpha1.WaveSoaking {
		t.Fatalf("the canary should still soak when the controller stops: %s", describe(atStop))
	}
	// The workload recovers while no controller runs.
	eventually(ctx, t, "the canary's workload available again", func() (bool, string) {
		var d appsv1.Deployment
		if err := s.f.Member(canary).Client.Get(ctx, types.NamespacedName{Namespace: s.ns, Name: "web"}, &d); err != nil {
			return false, err.Error()
		}
		want := int32(1)
		if d.Spec.Replicas != nil {
			want = *d.Spec.Replicas
		}
		return d.Status.AvailableReplicas >= want, fmt.Sprintf("%d/%d available", d.Status.AvailableReplicas, want)
	})

	startTidegate(t, s, controllers.Options{})
	held := s.waitPhase(ctx, t, "web", v1alpha1.PhaseHeld, rev2)
	if w := held.Status.Waves[0]; w.Phase != v1alpha1.WaveFailed || !w.ReadyAt.Equal(atStop.Status.Waves[0].ReadyAt) {
		t.Fatalf("the canary wave should fail on the soak it started before the restart: %+v", w)
	}
	rc := latestReceipt(s.receiptsOf(ctx, t, "web", rev2), v1alpha1.GateNoDisruption, "canary")
	if rc == nil || rc.Spec.Result != v1alpha1.ResultFail || !reasonsContain(rc, "minAvailableRatio", canary) {
		t.Fatalf("noDisruption should fail on the canary's availability seen before the restart: %+v", rc)
	}
	if n := len(held.Status.Waves[0].Soaked); n != 0 {
		t.Errorf("a decided wave should drop its soak record: %d entries left", n)
	}
}
