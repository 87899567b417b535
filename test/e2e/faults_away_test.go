package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/controllers"
	"github.com/tidegate/tidegate/test/faultproxy"
)

// waveGate is wave wv's latest outcome of gate, or nil.
func waveGate(wv v1alpha1.WaveStatus, gate string) *v1alpha1.GateOutcome {
	for i := range wv.Gates {
		if wv.Gates[i].Gate == gate {
			return &wv.Gates[i]
		}
	}
	return nil
}

// Two of three members stop answering just before a release: the rollout does not complete on the
// canary alone. The ring, which holds them, waits Inconclusive, naming them, with nothing of it
// applied; when they answer again the ring switches them through its gates, whose receipts name
// them. Then, under a policy that excuses after 30s (settings.onInconclusive Excuse), a member that
// does not answer when the next release's ring is due is excused on record: the rollout completes
// without it, and it lags, unswitched. Once it answers, a catch-up wave brings it the release
// through the gates, with receipts.
func TestE2EFaultMembersAwayWhenAReleaseStarts(t *testing.T) {
	parallel(t)
	// Proxies of its own in front of the shared fleet's members.
	s, first := newFleetSetupProxied(t, 3, demoPackage("v1"), []string{faultproxy.AllMembers})
	policies := s.policyRepo(t, map[string]string{"policy/policy.cue": defaultPolicy(t)})
	startTidegate(t, s, controllers.Options{})
	ctx, cancel := testContext(t, 14*time.Minute)
	defer cancel()
	s.rollOutFirst(ctx, t, first, usePolicy)
	kg1 := s.rollout(t, "web").Status.LastKnownGood.Source
	away := []string{"member-2", "member-3"}
	for _, c := range away {
		s.probeEvery(ctx, t, c, 10*time.Second)
		s.proxies.Member(c).Set(faultproxy.Blackhole())
	}
	for _, c := range away {
		s.waitReachable(ctx, t, c, metav1.ConditionFalse)
	}

	rev2 := s.commitVersion(t, "v2")
	var fr *v1alpha1.FleetRollout
	eventually(ctx, t, "the ring waits, Inconclusive about member-2 and member-3", func() (bool, string) {
		fr = s.rollout(t, "web")
		if fr.Status.Candidate == nil || fr.Status.Candidate.Revision != rev2 || len(fr.Status.Waves) < 2 {
			return false, describe(fr)
		}
		o := waveGate(fr.Status.Waves[1], v1alpha1.GateDeploySafe)
		return fr.Status.Waves[0].Phase == v1alpha1.WaveSucceeded && o != nil && o.Result == v1alpha1.ResultInconclusive &&
			slices.Equal(o.Unobserved, away), describe(fr)
	})
	s.reconciledAgain(ctx, t, "web", reconciles(t, s.ns, "web"), 2)
	fr = s.rollout(t, "web")
	if fr.Status.Phase != v1alpha1.PhaseProgressing || fr.Status.Waves[1].StartedAt != nil || !slices.Equal(fr.Status.Waves[1].Clusters, away) {
		t.Errorf("the ring, member-2 and member-3, has not started and the rollout is not Completed: %s", describe(fr))
	}
	if wf := fr.Status.WaitingFor; wf == nil || wf.Reason != v1alpha1.WaitingForInconclusive || !strings.Contains(wf.Message, "member-2, member-3") {
		t.Errorf("the rollout says what it waits on: %+v", wf)
	}
	for _, c := range away {
		if ks := s.kustomization(t, "web", c); ks == nil || ks.Spec.SourceRef.Name != kg1 {
			t.Errorf("%s's Kustomization moved while it did not answer: %+v", c, ks)
		}
	}

	for _, c := range away {
		s.proxies.Member(c).Clear()
	}
	done := s.waitPhase(ctx, t, "web", v1alpha1.PhaseCompleted, rev2)
	for _, m := range s.members {
		if v := s.memberVersion(ctx, m.Name); v != "v2" {
			t.Errorf("%s runs %q, want v2", m.Name, v)
		}
	}
	for _, gate := range []string{v1alpha1.GateDeploySafe, v1alpha1.GateNoDisruption} {
		rc := latestReceipt(s.receiptsOf(ctx, t, "web", rev2), gate, "ring")
		if rc == nil || rc.Spec.Result != v1alpha1.ResultPass || !slices.Equal(rc.Spec.Targets, away) {
			t.Errorf("the ring's %s: %+v, want a Pass over member-2 and member-3", gate, rc)
		}
	}
	if ready := findCondition(done, "Ready"); ready == nil || !strings.Contains(ready.Message, "runs on 3 clusters") {
		t.Errorf("Ready counts the clusters that run it: %+v", ready)
	}

	// The next release, under a policy that excuses what it could not observe for 30s.
	if _, err := policies.Commit("excuse after 30s", map[string]string{"policy/policy.cue": defaultPolicy(t,
		`onFail:         "Hold"`, `onFail:         "Hold"
	inconclusiveAfter: "30s"
	onInconclusive:    "Excuse"`)}, nil); err != nil {
		t.Fatal(err)
	}
	s.proxies.Member("member-3").Set(faultproxy.Blackhole())
	s.waitReachable(ctx, t, "member-3", metav1.ConditionFalse)
	rev3 := s.commitVersion(t, "v3")
	done = s.waitPhase(ctx, t, "web", v1alpha1.PhaseCompleted, rev3)
	ring := done.Status.Waves[1]
	if !slices.Equal(ring.Clusters, []string{"member-2"}) || len(ring.Excused) != 1 || ring.Excused[0].Cluster != "member-3" {
		t.Fatalf("the ring went on without member-3, excused: %+v", ring)
	}
	excused := latestReceipt(s.receiptsOf(ctx, t, "web", rev3), v1alpha1.GateDeploySafe, "ring")
	if excused == nil || excused.Spec.Result != v1alpha1.ResultPass || !reasonsContain(excused, "excused", "member-3") ||
		!strings.Contains(ring.Excused[0].Reason, excused.Name) {
		t.Errorf("the receipt that excused member-3: %+v; excused %+v", excused, ring.Excused)
	}
	if ks := s.kustomization(t, "web", "member-3"); ks == nil || ks.Spec.SourceRef.Name == done.Status.LastKnownGood.Source {
		t.Errorf("member-3 is not switched while it does not answer: %+v", ks)
	}
	eventually(ctx, t, "member-3 lags, and Ready counts the two that run v3", func() (bool, string) {
		fr = s.rollout(t, "web")
		ready := findCondition(fr, "Ready")
		return len(fr.Status.Lagging) == 1 && fr.Status.Lagging[0].Cluster == "member-3" && strings.Contains(fr.Status.Lagging[0].Reason, "does not answer") &&
			ready != nil && strings.Contains(ready.Message, "runs on 2 clusters"), fmt.Sprintf("%+v %s", fr.Status.Lagging, describe(fr))
	})

	s.proxies.Member("member-3").Clear()
	eventually(ctx, t, "a catch-up wave brings member-3 to v3", func() (bool, string) {
		fr = s.rollout(t, "web")
		n := len(fr.Status.Waves)
		return fr.Status.Phase == v1alpha1.PhaseCompleted && n > 0 && fr.Status.Waves[n-1].Name == "catch-up-1" &&
			fr.Status.Waves[n-1].Phase == v1alpha1.WaveSucceeded && s.memberVersion(ctx, "member-3") == "v3", describe(fr)
	})
	for _, gate := range []string{v1alpha1.GateDeploySafe, v1alpha1.GateRollbackSucceeds, v1alpha1.GateNoDisruption} {
		rc := latestReceipt(s.receiptsOf(ctx, t, "web", rev3), gate, "catch-up-1")
		if rc == nil || rc.Spec.Result != v1alpha1.ResultPass || !slices.Equal(rc.Spec.Targets, []string{"member-3"}) {
			t.Errorf("the catch-up wave's %s: %+v, want a Pass over member-3", gate, rc)
		}
	}
	if fr.Status.LaggingCount != 0 || fr.Status.LastKnownGood.Revision != rev3 {
		t.Errorf("nothing lags once member-3 caught up: %+v %s", fr.Status.Lagging, describe(fr))
	}
}
