package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/controllers"
	"github.com/tidegate/tidegate/internal/attest"
	"github.com/tidegate/tidegate/internal/simulator"
)

// crashPoint is one stop of a chain of crashes: the engine is stopped at point, after during (run
// while the crashing manager runs) made the rollout get there, and atCrash checks what the hub
// holds at the crash.
type crashPoint struct {
	point   string
	during  func()
	atCrash func()
}

// crashThrough starts a manager that crashes at each point in turn, stops it there as if the
// process had died, and starts the next one; the caller starts the manager that finishes.
func (s *fleetSetup) crashThrough(ctx context.Context, t *testing.T, points ...crashPoint) {
	t.Helper()
	for _, p := range points {
		crash := newCrashAt(p.point)
		h := startTidegate(t, s, controllers.Options{TestHook: crash.hook})
		if p.during != nil {
			p.during()
		}
		crash.wait(ctx, t)
		h.Stop(t)
		t.Logf("crashed at %s: %s", p.point, describe(s.rollout(t, "web")))
		if p.atCrash != nil {
			p.atCrash()
		}
	}
}

// receiptsByDecision counts the receipts of the rollout's candidate rev by "gate/wave".
func (s *fleetSetup) receiptsByDecision(ctx context.Context, t *testing.T, rev string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, rc := range s.receiptsOf(ctx, t, "web", rev) {
		k := rc.Spec.Gate + "/" + rc.Spec.Wave
		out[k] = append(out[k], rc.Name)
	}
	return out
}

// checkDecisions asserts that every decision of candidate rev was made once and recorded: exactly
// one receipt for each gate of each wave, want lists the gates each wave decides, and the status of
// the finished rollout fr records that very receipt with its result. A gate a wave decides twice is
// listed twice (rollbackSucceeds, before the first wave and after its rehearsal): two receipts,
// and status records the later. The candidate's ledger lists every decision once.
//
// A soak's noDisruption may also have Inconclusive receipts before its decision: a controller
// stopped mid-soak takes no samples while it is down, and when the soak ends short of the policy's
// sample coverage the gate is Inconclusive (a receipt says so) and decided again as samples come
// in. Those are not decisions; any other gate's Inconclusive receipt is an error.
func (s *fleetSetup) checkDecisions(ctx context.Context, t *testing.T, fr *v1alpha1.FleetRollout, rev string, want map[string][]string) {
	t.Helper()
	got := map[string][]string{}
	byName := map[string]v1alpha1.GateReceipt{}
	for _, rc := range s.receiptsOf(ctx, t, "web", rev) {
		k := rc.Spec.Gate + "/" + rc.Spec.Wave
		if rc.Spec.Result == v1alpha1.ResultInconclusive {
			if rc.Spec.Gate != v1alpha1.GateNoDisruption {
				t.Errorf("receipt %s: %s Inconclusive for wave %s: %v", rc.Name, rc.Spec.Gate, rc.Spec.Wave, rc.Spec.Reasons)
			}
			t.Logf("receipt %s: %s Inconclusive before its decision: %v", rc.Name, k, rc.Spec.Reasons)
			continue
		}
		got[k] = append(got[k], rc.Name+" ("+rc.Spec.Result+")")
		byName[rc.Name] = rc
	}
	expected, distinct := 0, 0
	for wave, gates := range want {
		times := map[string]int{}
		for _, g := range gates {
			times[g]++
		}
		for g, n := range times {
			expected += n
			distinct++
			if got := got[g+"/"+wave]; len(got) != n {
				t.Errorf("%d receipts of %s for wave %s, want exactly %d: %v", len(got), g, wave, n, got)
			}
		}
	}
	if len(byName) != expected {
		t.Errorf("%d receipts of %s, want %d: %v", len(byName), rev, expected, got)
	}
	recorded := 0
	for _, wv := range fr.Status.Waves {
		for _, o := range wv.Gates {
			recorded++
			rc, ok := byName[o.Receipt]
			switch {
			case !ok:
				t.Errorf("wave %s records %s receipt %s, which does not exist", wv.Name, o.Gate, o.Receipt)
			case rc.Spec.Result != o.Result || rc.Spec.Gate != o.Gate || rc.Spec.Wave != wv.Name:
				t.Errorf("wave %s records %s %s (receipt %s), the receipt says %s %s for wave %s", wv.Name, o.Gate, o.Result, o.Receipt, rc.Spec.Gate, rc.Spec.Result, rc.Spec.Wave)
			}
		}
	}
	if recorded != distinct {
		t.Errorf("status records %d decisions, want %d (a decision written and never recorded is lost)", recorded, expected)
	}
	// The ledger lists each decision once, and its chain holds.
	l := s.ledger(ctx, t, "web", rev)
	listed := map[string]int{}
	var receiptsOfLedger []attest.BundleReceipt
	for _, e := range l.Spec.Entries {
		if e.Receipt == nil {
			continue
		}
		if listed[e.Receipt.Name]++; listed[e.Receipt.Name] == 1 {
			rc, ok := byName[e.Receipt.Name]
			if !ok {
				continue // an Inconclusive receipt before a decision
			}
			ev, err := rc.Spec.StoredEvidence(nil)
			if err != nil {
				t.Fatal(err)
			}
			receiptsOfLedger = append(receiptsOfLedger, attest.NewBundleReceipt(&rc, ev))
		}
	}
	for name, rc := range byName {
		if listed[name] != 1 {
			t.Errorf("wave %s: %s receipt %s is listed %d times in the ledger, want once", rc.Spec.Wave, rc.Spec.Gate, name, listed[name])
		}
	}
	if l.Spec.Outcome != fr.Status.Phase {
		t.Errorf("the ledger's outcome is %q, the rollout is %s", l.Spec.Outcome, fr.Status.Phase)
	}
	v := attest.Verify(attest.NewBundle([]*v1alpha1.RolloutLedger{l}, receiptsOfLedger, metav1.Now()), nil)
	for _, c := range v.Failures() {
		if c.Check != "ledger-receipt" || !strings.Contains(c.Detail, "is not in the bundle") {
			t.Errorf("the ledger of %s: %s %s: %s", rev, c.Record, c.Check, c.Detail)
		}
	}
}

// ledger is the RolloutLedger of rollout's revision rev.
func (s *fleetSetup) ledger(ctx context.Context, t *testing.T, rollout, rev string) *v1alpha1.RolloutLedger {
	t.Helper()
	var l v1alpha1.RolloutLedger
	if err := s.f.Hub.Get(ctx, types.NamespacedName{Namespace: s.ns, Name: v1alpha1.LedgerName(rollout, rev)}, &l); err != nil {
		t.Fatalf("the ledger of %s: %v", rev, err)
	}
	return &l
}

// checkSwitches asserts that every cluster's Kustomization moved by want generations from gen1
// (one per switch) and that the member runs version.
func (s *fleetSetup) checkSwitches(ctx context.Context, t *testing.T, gen1 map[string]int64, want func(cluster string) int64, version string) {
	t.Helper()
	gen2 := s.generations(t, "web")
	for c, g := range gen1 {
		if gen2[c] != g+want(c) {
			t.Errorf("%s's Kustomization went from generation %d to %d, want %d switches", c, g, gen2[c], want(c))
		}
		if v := s.memberVersion(ctx, c); v != version {
			t.Errorf("%s runs %q, want %s", c, v, version)
		}
	}
}

func (s *fleetSetup) pinExists(ctx context.Context, t *testing.T, rev string) bool {
	t.Helper()
	err := s.f.Hub.Get(ctx, types.NamespacedName{Namespace: s.ns, Name: v1alpha1.PinnedSourceName("web", rev)}, &sourcev1.GitRepository{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil
}

var (
	canaryGates = []string{v1alpha1.GateDeploySafe, v1alpha1.GateRollbackSafe, v1alpha1.GateRollbackSucceeds, v1alpha1.GateNoDisruption}
	laterGates  = []string{v1alpha1.GateDeploySafe, v1alpha1.GateRollbackSucceeds, v1alpha1.GateNoDisruption}
)

// The controller is stopped at every point of a rollout from its creation to the prune after it,
// one after the other, and a fresh one is started each time: before the finalizer is added, before
// the known-good's lost pinned source is created again, before a new candidate is recorded, before its pinned source is created, before a gate's receipt is
// written, between writing receipts and recording them (before and after the wave's start, and after
// a soak), before a wave's start, a soak's start, a wave's success and a wait for an approval are
// recorded, halfway through a wave's switches, in the middle of a soak, before the completion is
// recorded, and before the old known-good's pinned source is pruned. The rollout ends as one
// without crashes would: every cluster switched once, one receipt per gate and wave, each recorded
// in status, the soak counted from when it started.
func TestE2ECrashPointsAlongARollout(t *testing.T) {
	parallel(t)
	s, first := newFleetSetup(t, 5, demoPackage("v1"))
	ctx, cancel := testContext(t, 15*time.Minute)
	defer cancel()

	fr := threeWaveRollout(s.ns, "web")
	zero := int32(0)
	fr.Spec.HistoryLimit = &zero
	s.crashThrough(ctx, t, crashPoint{
		point: "finalizer:add",
		during: func() {
			if err := s.f.Hub.Create(ctx, fr); err != nil {
				t.Fatal(err)
			}
		},
		atCrash: func() {
			got := s.rollout(t, "web")
			if controllerutil.ContainsFinalizer(got, v1alpha1.Finalizer) || got.Status.Phase != "" || len(s.generations(t, "web")) != 0 {
				t.Fatalf("before its finalizer the rollout should have nothing written: %s", describe(got))
			}
		},
	})
	h := startTidegate(t, s, controllers.Options{})
	rev1 := s.repo.Revision(first)
	s.waitPhase(ctx, t, "web", v1alpha1.PhaseCompleted, rev1)
	// The ring needs an approval, and soaks long enough for the controller to be stopped in the middle.
	const ringSoak = 15 * time.Second
	// An approval of the known-good stays until the next revision completes, then is pruned.
	s.patchRollout(ctx, t, "web", func(fr *v1alpha1.FleetRollout) {
		fr.Spec.Waves[1].RequireApproval = true
		fr.Spec.Waves[1].Soak = &metav1.Duration{Duration: ringSoak}
		fr.Spec.Approvals = append(fr.Spec.Approvals, v1alpha1.Approval{Revision: rev1, Wave: "ring", By: "past-release", ApprovedAt: &metav1.Time{Time: time.Now()}})
	})
	eventually(ctx, t, "the spec change observed", func() (bool, string) {
		got := s.rollout(t, "web")
		return got.Status.ObservedGeneration == got.Generation, describe(got)
	})
	h.Stop(t)
	gen1 := s.generations(t, "web")
	// While the controller is down the known-good's pinned source is lost, and a new revision comes.
	if err := s.f.Hub.Delete(ctx, &sourcev1.GitRepository{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: v1alpha1.PinnedSourceName("web", rev1)}}); err != nil {
		t.Fatal(err)
	}
	eventually(ctx, t, "the known-good's pinned source gone", func() (bool, string) { return !s.pinExists(ctx, t, rev1), "still there" })
	rev2 := s.commitVersion(t, "v2")
	receipts := func(want int) func() {
		return func() {
			if n := len(s.receiptsOf(ctx, t, "web", rev2)); n != want {
				t.Fatalf("%d receipts of %s at the crash, want %d: %v", n, rev2, want, s.receiptsByDecision(ctx, t, rev2))
			}
		}
	}
	wave := func(i int, phase string, gates int) func() {
		return func() {
			got := s.rollout(t, "web")
			if wv := got.Status.Waves[i]; wv.Phase != phase || len(wv.Gates) != gates {
				t.Fatalf("at the crash wave %s should be %s with %d decisions recorded: %s", wv.Name, phase, gates, describe(got))
			}
		}
	}
	both := func(fs ...func()) func() {
		return func() {
			for _, f := range fs {
				f()
			}
		}
	}
	s.crashThrough(ctx, t,
		crashPoint{point: "pin:" + rev1, atCrash: func() {
			if got := s.rollout(t, "web"); got.Status.Candidate.Revision != rev1 || s.pinExists(ctx, t, rev1) {
				t.Fatalf("at the crash the known-good's pin should still be missing and no new candidate recorded: %s", describe(got))
			}
		}},
		crashPoint{point: "status:candidate", atCrash: func() {
			if !s.pinExists(ctx, t, rev1) {
				t.Fatalf("the known-good's pinned source was not created again")
			}
			if got := s.rollout(t, "web"); got.Status.Candidate.Revision != rev1 {
				t.Fatalf("the new candidate was recorded before the crash point: %s", describe(got))
			}
		}},
		crashPoint{point: "pin:" + rev2, atCrash: func() {
			if got := s.rollout(t, "web"); got.Status.Candidate.Revision != rev2 || s.pinExists(ctx, t, rev2) {
				t.Fatalf("at the crash the candidate should be recorded and not pinned: %s", describe(got))
			}
		}},
		crashPoint{point: "receipt:deploySafe:canary", atCrash: receipts(0)},
		// Killed between writing receipts and recording them: deploySafe's and rollbackSafe's are written.
		crashPoint{point: "decided:rollbackSafe:canary", atCrash: both(receipts(2), wave(0, v1alpha1.WavePending, 0))},
		// Every pre-wave receipt is written and the wave's start is decided, but not recorded.
		crashPoint{point: "status:wave:canary:Progressing", atCrash: both(receipts(3), wave(0, v1alpha1.WavePending, 0))},
		// The ledger lists them, and status still does not record them.
		crashPoint{point: "ledger:" + rev2, atCrash: both(receipts(3), wave(0, v1alpha1.WavePending, 0), func() {
			if n := len(s.ledger(ctx, t, "web", rev2).Spec.Entries); n != 3 {
				t.Fatalf("the ledger of %s has %d entries at the crash, want the 3 receipts", rev2, n)
			}
		})},
		crashPoint{point: "switch:member-1", atCrash: func() {
			wave(0, v1alpha1.WaveProgressing, 3)()
			if ks := s.kustomization(t, "web", "member-1"); ks.Generation != gen1["member-1"] {
				t.Fatalf("member-1 was switched before the crash point")
			}
		}},
		crashPoint{point: "status:wave:canary:Soaking", atCrash: wave(0, v1alpha1.WaveProgressing, 3)},
		// Killed between writing the soak's decision and recording it.
		crashPoint{point: "decided:noDisruption:canary", atCrash: both(receipts(4), wave(0, v1alpha1.WaveSoaking, 3))},
		// Its decision is taken up from the receipt, then the wave's success is not recorded.
		crashPoint{point: "status:wave:canary:Succeeded", atCrash: both(receipts(4), wave(0, v1alpha1.WaveSoaking, 3))},
		crashPoint{point: "status:wave:ring:AwaitingApproval", atCrash: both(wave(0, v1alpha1.WaveSucceeded, 4), wave(1, v1alpha1.WavePending, 0))},
		crashPoint{point: "decided:rollbackSucceeds:ring",
			during: func() {
				eventually(ctx, t, "the ring awaiting its approval", func() (bool, string) {
					got := s.rollout(t, "web")
					return got.Status.Waves[1].Phase == v1alpha1.WaveAwaiting, describe(got)
				})
				s.approve(ctx, t, "web", v1alpha1.Approval{Revision: rev2, Wave: "ring"})
			},
			atCrash: both(receipts(6), wave(1, v1alpha1.WaveAwaiting, 0))},
		// Halfway through the ring's switches (member-2, then member-3).
		crashPoint{point: "switch:member-3", atCrash: func() {
			wave(1, v1alpha1.WaveProgressing, 2)()
			if ks := s.kustomization(t, "web", "member-2"); ks.Generation != gen1["member-2"]+1 {
				t.Fatalf("member-2 should have been switched before the crash at member-3")
			}
			if ks := s.kustomization(t, "web", "member-3"); ks.Generation != gen1["member-3"] {
				t.Fatalf("member-3 was switched before the crash point")
			}
		}},
	)

	// In the middle of the ring's soak, the controller stops (nothing is being written) and another starts.
	h = startTidegate(t, s, controllers.Options{})
	var soaking *v1alpha1.FleetRollout
	eventually(ctx, t, "the ring soaking", func() (bool, string) {
		soaking = s.rollout(t, "web")
		return soaking.Status.Waves[1].Phase == v1alpha1.WaveSoaking, describe(soaking)
	})
	h.Stop(t)
	ring := soaking.Status.Waves[1]
	if left := time.Until(ring.ReadyAt.Add(ringSoak)); left <= 0 {
		t.Logf("the ring's soak was over when the controller stopped: the mid-soak point was missed")
	}

	s.crashThrough(ctx, t,
		crashPoint{point: "status:phase:Completed", atCrash: func() {
			got := s.rollout(t, "web")
			if got.Status.Phase != v1alpha1.PhaseProgressing || got.Status.Waves[2].Phase != v1alpha1.WaveSucceeded || !s.pinExists(ctx, t, rev1) {
				t.Fatalf("at the crash every wave should have succeeded, the completion not be recorded and the known-good's pin be there: %s", describe(got))
			}
		}},
		crashPoint{point: "prune:" + v1alpha1.PinnedSourceName("web", rev1), atCrash: func() {
			if got := s.rollout(t, "web"); got.Status.Phase != v1alpha1.PhaseCompleted || !s.pinExists(ctx, t, rev1) {
				t.Fatalf("at the crash the completion should be recorded and the old pin not pruned yet: %s", describe(got))
			}
		}},
	)
	startTidegate(t, s, controllers.Options{})
	eventually(ctx, t, "the old known-good's pinned source pruned", func() (bool, string) {
		return !s.pinExists(ctx, t, rev1), "still there"
	})
	done := s.waitPhase(ctx, t, "web", v1alpha1.PhaseCompleted, rev2)
	checkWaveOrder(t, done)
	if got := done.Status.Waves[1]; !got.ReadyAt.Equal(ring.ReadyAt) || !got.StartedAt.Equal(ring.StartedAt) {
		t.Errorf("the ring's soak started again after the restart: readyAt %v then %v, startedAt %v then %v", ring.ReadyAt, got.ReadyAt, ring.StartedAt, got.StartedAt)
	}
	s.checkSwitches(ctx, t, gen1, func(string) int64 { return 1 }, "v2")
	s.checkDecisions(ctx, t, done, rev2, map[string][]string{"canary": canaryGates, "ring": laterGates, "rest": laterGates})
	// The ring's approval is in the receipt that started the ring, and so in the ledger, once.
	ringStart := latestReceipt(s.receiptsOf(ctx, t, "web", rev2), v1alpha1.GateDeploySafe, "ring")
	if ringStart == nil || len(ringStart.Spec.Approvals) != 1 || ringStart.Spec.Approvals[0].Revision != rev2 || ringStart.Spec.Approvals[0].Wave != "ring" {
		t.Errorf("the ring's deploySafe receipt should record the approval that started the ring: %+v", ringStart)
	}
	var approvals int
	for _, e := range s.ledger(ctx, t, "web", rev2).Spec.Entries {
		if e.Type == v1alpha1.LedgerEntryApproval && e.Approval.Revision == rev2 && e.Approval.Wave == "ring" {
			approvals++
		}
	}
	if approvals != 1 {
		t.Errorf("the ledger of %s lists the ring's approval %d times, want once", rev2, approvals)
	}
	eventually(ctx, t, "the approval of the past known-good pruned, the known-good's kept", func() (bool, string) {
		got := s.rollout(t, "web").Spec.Approvals
		return len(got) == 1 && got[0].Revision == rev2 && got[0].Wave == "ring", fmt.Sprintf("%+v", got)
	})
}

// The controller is stopped at the points of a failed wave and its rollback: between writing the
// failing decision and recording it, before the rollback's start is recorded, halfway through the
// rollback's switches, before the end of the rollback is recorded, and, once the rollout is deleted,
// before its finalizer is removed. The rollout ends rolled back with the decision made once and
// each cluster switched back once, and its deletion completes with the members left running.
func TestE2ECrashPointsAlongARollback(t *testing.T) {
	parallel(t)
	s, first := newFleetSetup(t, 5, demoPackage("v1"))
	ctx, cancel := testContext(t, 10*time.Minute)
	defer cancel()
	h := startTidegate(t, s, controllers.Options{})
	one := int32(1)
	s.rollOutFirst(ctx, t, first, func(fr *v1alpha1.FleetRollout) {
		fr.Spec.Rollback.OnFailure = v1alpha1.OnFailureRollback
		fr.Spec.Waves[1].MaxFailures = &one
	})
	h.Stop(t)
	gen1 := s.generations(t, "web")

	// v2 is broken on both ring members: the canary passes, the ring fails beyond its budget.
	s.faults.SetFault("member-2", simulator.Fault{Workload: "web", Mode: simulator.NeverAvailable, Image: ":v2"})
	s.faults.SetFault("member-3", simulator.Fault{Workload: "web", Mode: simulator.NeverAvailable, Image: ":v2"})
	rev2 := s.commitVersion(t, "v2")
	phase := func(want string) func() {
		return func() {
			if got := s.rollout(t, "web"); got.Status.Phase != want {
				t.Fatalf("at the crash the rollout should be %s: %s", want, describe(got))
			}
		}
	}
	s.crashThrough(ctx, t,
		crashPoint{point: "decided:noDisruption:ring", atCrash: func() {
			phase(v1alpha1.PhaseProgressing)()
			if n := len(s.receiptsByDecision(ctx, t, rev2)["noDisruption/ring"]); n != 1 {
				t.Fatalf("%d noDisruption receipts of the ring at the crash, want the one written", n)
			}
		}},
		// The failing decision is taken up from its receipt; the rollback it starts is not recorded.
		crashPoint{point: "status:phase:" + v1alpha1.PhaseRollingBack, atCrash: phase(v1alpha1.PhaseProgressing)},
		crashPoint{point: "rollback:member-2", atCrash: phase(v1alpha1.PhaseRollingBack)},
		crashPoint{point: "status:phase:" + v1alpha1.PhaseRolledBack, atCrash: phase(v1alpha1.PhaseRollingBack)},
	)
	h = startTidegate(t, s, controllers.Options{})
	done := s.waitPhase(ctx, t, "web", v1alpha1.PhaseRolledBack, rev2)
	if !done.IsRejected(rev2) {
		t.Errorf("the rolled back revision should be rejected: %+v", done.Status.Rejected)
	}
	s.checkSwitches(ctx, t, gen1, func(c string) int64 {
		if c == "member-1" || c == "member-2" || c == "member-3" {
			return 2 // to v2, then back to v1
		}
		return 0
	}, "v1")
	s.checkDecisions(ctx, t, done, rev2, map[string][]string{"canary": canaryGates, "ring": laterGates})
	if o := done.Status.Waves[1].Gates; len(o) == 0 || findGate(o, v1alpha1.GateNoDisruption).Result != v1alpha1.ResultFail {
		t.Errorf("the ring's noDisruption should be recorded as failed: %+v", o)
	}
	h.Stop(t)

	// Deleted: stopped before the finalizer goes; the next controller finishes the deletion.
	s.crashThrough(ctx, t, crashPoint{
		point: "finalizer:remove",
		during: func() {
			if err := s.f.Hub.Delete(ctx, done); err != nil {
				t.Fatal(err)
			}
		},
		atCrash: func() {
			if got := s.rollout(t, "web"); !controllerutil.ContainsFinalizer(got, v1alpha1.Finalizer) {
				t.Fatalf("the finalizer went before the crash point")
			}
		},
	})
	startTidegate(t, s, controllers.Options{})
	eventually(ctx, t, "the rollout deleted", func() (bool, string) {
		var got v1alpha1.FleetRollout
		err := s.f.Hub.Get(ctx, types.NamespacedName{Namespace: s.ns, Name: "web"}, &got)
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	for _, m := range s.members {
		if v := s.memberVersion(ctx, m.Name); v != "v1" {
			t.Errorf("%s runs %q after the rollout was deleted (deletionPolicy Orphan), want v1", m.Name, v)
		}
	}
}

func findGate(gates []v1alpha1.GateOutcome, gate string) v1alpha1.GateOutcome {
	for _, g := range gates {
		if g.Gate == gate {
			return g
		}
	}
	return v1alpha1.GateOutcome{}
}
