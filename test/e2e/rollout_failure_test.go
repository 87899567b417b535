package e2e

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/controllers"
)

// versionWatch samples every member's running version in the background and records every version each
// cluster was ever seen running, so a test can assert a bad revision never reached a cluster.
type versionWatch struct {
	mu   sync.Mutex
	seen map[string]map[string]bool
	stop context.CancelFunc
	done chan struct{}
}

func (s *fleetSetup) watchVersions(t *testing.T) *versionWatch {
	ctx, cancel := context.WithCancel(context.Background())
	w := &versionWatch{seen: map[string]map[string]bool{}, stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for ctx.Err() == nil {
			for _, m := range s.members {
				v := s.memberVersion(ctx, m.Name)
				w.mu.Lock()
				if w.seen[m.Name] == nil {
					w.seen[m.Name] = map[string]bool{}
				}
				w.seen[m.Name][v] = true
				w.mu.Unlock()
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()
	t.Cleanup(func() { cancel(); <-w.done })
	return w
}

func (w *versionWatch) everRan(cluster, version string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seen[cluster][version]
}

// The simulator breaks the workload on the canary for v2: the wave does not advance, and with
// rollback Hold the rollout holds with a reason naming the gate, the wave and the receipt; the other
// clusters never see v2.
func TestE2EBrokenCanaryHolds(t *testing.T) {
	parallel(t)
	s, first := newFleetSetup(t, 5, demoPackage("v1"))
	startTidegate(t, s, controllers.Options{})
	ctx, cancel := testContext(t, 6*time.Minute)
	defer cancel()
	rev1 := s.rollOutFirst(ctx, t, first, func(fr *v1alpha1.FleetRollout) { fr.Spec.Rollback.OnFailure = v1alpha1.OnFailureHold })

	// v2 crash-loops wherever it runs.
	s.breakVersion("v2")
	watch := s.watchVersions(t)
	rev2 := s.commitVersion(t, "v2")
	got := s.waitPhase(ctx, t, "web", v1alpha1.PhaseHeld, rev2)

	canary := got.Status.Waves[0]
	var noDisruption v1alpha1.GateOutcome
	for _, g := range canary.Gates {
		want := v1alpha1.ResultPass // the gates decided before the wave started passed
		if g.Gate == v1alpha1.GateNoDisruption {
			want, noDisruption = v1alpha1.ResultFail, g
		}
		if g.Result != want {
			t.Errorf("canary gate %s = %s, want %s", g.Gate, g.Result, want)
		}
	}
	if canary.Phase != v1alpha1.WaveFailed || len(canary.Gates) != 4 || noDisruption.Result != v1alpha1.ResultFail {
		t.Fatalf("canary wave = %+v, want Failed: deploySafe, rollbackSafe and rollbackSucceeds passed, noDisruption failed", canary)
	}
	for _, w := range got.Status.Waves[1:] {
		if w.Phase != v1alpha1.WavePending || len(w.Clusters) != 0 {
			t.Errorf("wave %s should not have started: %+v", w.Name, w)
		}
	}
	ready := findCondition(got, "Ready")
	if ready == nil || ready.Status != "False" || ready.Reason != v1alpha1.HeldReason ||
		!strings.Contains(ready.Message, "noDisruption") || !strings.Contains(ready.Message, noDisruption.Receipt) {
		t.Errorf("Ready should be False/Held naming the gate and receipt: %+v", ready)
	}
	if held := findCondition(got, v1alpha1.HeldCondition); held == nil || held.Status != "True" {
		t.Errorf("Held condition should be True: %+v", held)
	}
	// The hold lasts: nothing moves through the next two reconciles.
	s.reconciledAgain(ctx, t, "web", reconciles(t, s.ns, "web"), 2)
	got = s.rollout(t, "web")
	if got.Status.Phase != v1alpha1.PhaseHeld || got.Status.Waves[1].Phase != v1alpha1.WavePending {
		t.Errorf("rollout moved while held: %s", describe(got))
	}
	for _, m := range s.members {
		if m.Name != canary.Clusters[0] && watch.everRan(m.Name, "v2") {
			t.Errorf("%s ran v2, but only the canary %s should ever have", m.Name, canary.Clusters[0])
		}
	}
	var rc v1alpha1.GateReceipt
	if err := s.f.Hub.Get(ctx, keyOf(s.ns, noDisruption.Receipt), &rc); err != nil {
		t.Fatalf("receipt %s: %v", noDisruption.Receipt, err)
	}
	if rc.Spec.Result != v1alpha1.ResultFail || len(rc.Spec.Reasons) == 0 || rc.Spec.Candidate.Revision != rev2 ||
		rc.Spec.KnownGood == nil || rc.Spec.KnownGood.Revision != rev1 {
		t.Errorf("receipt = %+v, want a failure about %s with known-good %s and reasons", rc.Spec, rev2, rev1)
	}
}

// With rollback: Rollback, the broken canary goes back to the known-good revision, the rollout reports
// RolledBack, the candidate is rejected, and the other clusters never see the bad revision. The
// controller's metrics follow: the phase, each wave's, the gate decisions, the rollback.
func TestE2EBrokenCanaryRollsBack(t *testing.T) {
	parallel(t)
	// Its namespace, its own on the shared fleet, tells its metrics apart (metric).
	s, first := newFleetSetup(t, 5, demoPackage("v1"))
	startTidegate(t, s, controllers.Options{})
	ctx, cancel := testContext(t, 6*time.Minute)
	defer cancel()
	rev1 := s.rollOutFirst(ctx, t, first, func(fr *v1alpha1.FleetRollout) { fr.Spec.Rollback.OnFailure = v1alpha1.OnFailureRollback })
	web := map[string]string{"namespace": s.ns, "name": "web"}
	with := func(kv ...string) map[string]string {
		l := map[string]string{"namespace": s.ns, "name": "web"}
		for i := 0; i < len(kv); i += 2 {
			l[kv[i]] = kv[i+1]
		}
		return l
	}
	wantMetric(t, "completed", "tidegate_rollout_phase", with("phase", v1alpha1.PhaseCompleted), equals(1))
	wantMetric(t, "completed", "tidegate_rollout_phase", with("phase", v1alpha1.PhaseProgressing), equals(0))
	for _, wave := range []string{"canary", "ring", "rest"} {
		wantMetric(t, "wave "+wave+" done", "tidegate_wave_phase", with("wave", wave, "phase", v1alpha1.WaveSucceeded), equals(1))
		wantMetric(t, "wave "+wave+" done", "tidegate_wave_duration_seconds", with("wave", wave), atLeast(0))
		wantMetric(t, "wave "+wave+" decided", "tidegate_gate_decisions_total", with("gate", v1alpha1.GateNoDisruption, "result", v1alpha1.ResultPass), atLeast(1))
	}
	if v, _ := metric(t, "tidegate_rollbacks_total", web); v != 0 {
		t.Errorf("first rollout: %v rollbacks counted, want none", v)
	}
	wantMetric(t, "members probed", "tidegate_fleetcluster_reachable", map[string]string{"namespace": s.ns, "name": "member-1"}, equals(1))
	passes, _ := metric(t, "tidegate_gate_decisions_total", with("gate", v1alpha1.GateDeploySafe, "result", v1alpha1.ResultPass))
	s.breakVersion("v2")
	watch := s.watchVersions(t)
	rev2 := s.commitVersion(t, "v2")
	got := s.waitPhase(ctx, t, "web", v1alpha1.PhaseRolledBack, rev2)
	canary := got.Status.Waves[0].Clusters[0]
	if !watch.everRan(canary, "v2") {
		t.Errorf("the canary %s never ran v2: the failure was not observed from the workload", canary)
	}
	for _, m := range s.members {
		if v := s.memberVersion(ctx, m.Name); v != "v1" {
			t.Errorf("%s runs %q after the rollback, want v1", m.Name, v)
		}
		if m.Name != canary && watch.everRan(m.Name, "v2") {
			t.Errorf("%s ran v2, but only the canary should ever have", m.Name)
		}
		if ks := s.kustomization(t, "web", m.Name); ks == nil || ks.Status.LastAppliedRevision != rev1 {
			t.Errorf("kustomization of %s should be back at %s", m.Name, rev1)
		}
	}
	if !got.IsRejected(rev2) {
		t.Errorf("%s should be recorded as rejected: %+v", rev2, got.Status.Rejected)
	}
	if got.Status.LastKnownGood.Revision != rev1 {
		t.Errorf("lastKnownGood = %s, want %s", got.Status.LastKnownGood.Revision, rev1)
	}
	if ready := findCondition(got, "Ready"); ready == nil || ready.Reason != v1alpha1.RolledBackReason {
		t.Errorf("Ready should say RolledBack: %+v", ready)
	}
	// The rejected revision is not retried by accident: later reconciles leave it rejected.
	s.reconciledAgain(ctx, t, "web", reconciles(t, s.ns, "web"), 2)
	if again := s.rollout(t, "web"); again.Status.Phase != v1alpha1.PhaseRolledBack {
		t.Errorf("rollout left RolledBack on its own: %s", describe(again))
	}

	wantMetric(t, "rolled back", "tidegate_rollout_phase", with("phase", v1alpha1.PhaseRolledBack), equals(1))
	wantMetric(t, "rolled back", "tidegate_rollout_phase", with("phase", v1alpha1.PhaseCompleted), equals(0))
	wantMetric(t, "rolled back", "tidegate_rollbacks_total", web, equals(1))
	wantMetric(t, "canary failed", "tidegate_gate_decisions_total", with("gate", v1alpha1.GateNoDisruption, "result", v1alpha1.ResultFail), atLeast(1))
	wantMetric(t, "canary decided", "tidegate_gate_decisions_total", with("gate", v1alpha1.GateDeploySafe, "result", v1alpha1.ResultPass), atLeast(passes+1))
	wantMetric(t, "evidence collected", "tidegate_evidence_collection_duration_seconds", map[string]string{"gate": v1alpha1.GateNoDisruption}, atLeast(1))
}
