package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/controllers"
	"github.com/tidegate/tidegate/internal/simulator"
	"github.com/tidegate/tidegate/test/faultproxy"
)

// A member is blackholed while its wave runs, and the wave fails on another member (v2 never
// becomes available on member-3): the rollback sends the canary and the rest wave back to v1, and
// cannot confirm member-2, which does not answer. The rollback does not wait for it: at its
// deadline (spec.rollback.timeout) the rollout is RolledBack with member-2 listed as unconfirmed,
// in status and in Ready, and lagging; its Kustomization already points at the known-good. When the
// proxy heals, Flux converges member-2 to v1, it is confirmed, and the lag clears. Every cluster
// was switched once each way, and the receipts are those status names.
func TestE2EFaultMemberBlackholedDuringRollback(t *testing.T) {
	parallel(t)
	s, first := newFleetSetupProxied(t, 3, demoPackage("v1"), []string{faultproxy.AllMembers})
	startTidegate(t, s, controllers.Options{})
	ctx, cancel := testContext(t, 10*time.Minute)
	defer cancel()
	rev1 := s.repo.Revision(first)
	s.createRollout(ctx, t, twoWaveRollout(s.ns), rev1, func(fr *v1alpha1.FleetRollout) {
		fr.Spec.Rollback.OnFailure = v1alpha1.OnFailureRollback
		fr.Spec.Rollback.Timeout = &metav1.Duration{Duration: 45 * time.Second}
	})
	gen1 := s.generations(t, "web")

	s.faults.SetFault("member-3", simulator.Fault{Workload: "web", Mode: simulator.NeverAvailable, Image: ":v2"})
	rev2 := s.commitVersion(t, "v2")
	// member-2 runs v2 in the rest wave, then stops answering; member-3 is still failing its health check.
	eventually(ctx, t, "member-2 Ready at v2 in the rest wave", func() (bool, string) {
		fr := s.rollout(t, "web")
		ks := s.kustomization(t, "web", "member-2")
		if ks == nil || len(fr.Status.Waves) < 2 {
			return false, describe(fr)
		}
		ready := findConditionOf(ks.Status.Conditions, "Ready")
		return fr.Status.Waves[1].StartedAt != nil && ks.Status.LastAppliedRevision == rev2 && ready != nil && ready.Status == metav1.ConditionTrue,
			fmt.Sprintf("%s; member-2 %s %+v", describe(fr), ks.Status.LastAppliedRevision, ready)
	})
	if fr := s.rollout(t, "web"); fr.Status.Phase != v1alpha1.PhaseProgressing {
		t.Fatalf("the rest wave decided before member-3 failed: %s", describe(fr))
	}
	s.proxies.Member("member-2").Set(faultproxy.Blackhole())

	s.waitPhase(ctx, t, "web", v1alpha1.PhaseRollingBack, rev2)
	got := s.waitPhase(ctx, t, "web", v1alpha1.PhaseRolledBack, rev2)
	st := got.Status
	rb := st.Rollback
	if rb == nil || rb.To != rev1 || !slices.Equal(rb.Unconfirmed, []string{"member-2"}) || !slices.Equal(rb.Confirmed, []string{"member-1", "member-3"}) {
		t.Fatalf("rollback = %+v, want member-1 and member-3 confirmed, member-2 unconfirmed", rb)
	}
	// It ended at its deadline, not by confirming member-2, which still does not answer.
	if rb.Deadline == nil || rb.FinishedAt == nil || rb.FinishedAt.Before(rb.Deadline) ||
		!rb.Deadline.Time.Equal(rb.StartedAt.Add(45*time.Second)) {
		t.Errorf("the rollback should end at startedAt + spec.rollback.timeout: %+v", rb)
	}
	ready := findCondition(got, "Ready")
	if ready == nil || ready.Reason != v1alpha1.RolledBackReason || !strings.Contains(ready.Message, "2 confirmed, 1 unconfirmed: member-2") {
		t.Errorf("Ready should name the unconfirmed member: %+v", ready)
	}
	if len(st.Lagging) != 1 || st.Lagging[0].Cluster != "member-2" || st.LaggingCount != 1 {
		t.Errorf("lagging = %+v, want member-2", st.Lagging)
	}
	if ks := s.kustomization(t, "web", "member-2"); ks == nil || ks.Spec.SourceRef.Name != st.LastKnownGood.Source {
		t.Errorf("member-2's Kustomization should point at the known-good's %s: %+v", st.LastKnownGood.Source, ks)
	}
	if !got.IsRejected(rev2) {
		t.Errorf("%s should be rejected: %+v", rev2, st.Rejected)
	}
	for _, c := range []string{"member-1", "member-3"} {
		if v := s.memberVersion(ctx, c); v != "v1" {
			t.Errorf("%s runs %q after the rollback, want v1", c, v)
		}
	}

	s.proxies.Member("member-2").Clear()
	var healed *v1alpha1.FleetRollout
	eventually(ctx, t, "member-2 converged to v1, confirmed, no lag", func() (bool, string) {
		healed = s.rollout(t, "web")
		rb := healed.Status.Rollback
		return s.memberVersion(ctx, "member-2") == "v1" && rb != nil && len(rb.Unconfirmed) == 0 && len(rb.Confirmed) == 3 &&
			healed.Status.LaggingCount == 0 && len(healed.Status.Lagging) == 0, describe(healed) + fmt.Sprintf(" %+v %+v", rb, healed.Status.Lagging)
	})
	if healed.Status.Phase != v1alpha1.PhaseRolledBack {
		t.Errorf("the rollout moved on its own: %s", describe(healed))
	}
	if ready := findCondition(healed, "Ready"); ready == nil || !strings.Contains(ready.Message, "3 confirmed") || strings.Contains(ready.Message, "unconfirmed") {
		t.Errorf("Ready after member-2 converged: %+v", ready)
	}

	// Nothing switched twice: each cluster to v2 once and back once.
	gen2 := s.generations(t, "web")
	for c, g := range gen1 {
		if gen2[c] != g+2 {
			t.Errorf("%s's Kustomization generation %d → %d, want %d: one switch to v2 and one back", c, g, gen2[c], g+2)
		}
	}
	s.receiptsMatchStatus(ctx, t, healed)
	if rc := latestReceipt(s.receiptsOf(ctx, t, "web", rev2), v1alpha1.GateNoDisruption, "rest"); rc == nil || rc.Spec.Result != v1alpha1.ResultFail {
		t.Errorf("the rest wave's noDisruption should have failed: %+v", rc)
	}
}

// receiptsMatchStatus checks that every gate outcome status records names a receipt of that gate,
// wave, candidate and result.
func (s *fleetSetup) receiptsMatchStatus(ctx context.Context, t *testing.T, fr *v1alpha1.FleetRollout) {
	t.Helper()
	rev := fr.Status.Candidate.Revision
	byName := map[string]v1alpha1.GateReceipt{}
	for _, rc := range s.receiptsOf(ctx, t, fr.Name, rev) {
		byName[rc.Name] = rc
	}
	for _, wv := range fr.Status.Waves {
		for _, o := range wv.Gates {
			rc, ok := byName[o.Receipt]
			if !ok {
				t.Errorf("wave %s gate %s names receipt %s, which does not exist", wv.Name, o.Gate, o.Receipt)
				continue
			}
			if rc.Spec.Gate != o.Gate || rc.Spec.Wave != wv.Name || rc.Spec.Result != o.Result {
				t.Errorf("receipt %s is %s/%s/%s, status says %s/%s/%s", rc.Name, rc.Spec.Gate, rc.Spec.Wave, rc.Spec.Result, o.Gate, wv.Name, o.Result)
			}
		}
	}
}
