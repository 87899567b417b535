package controllers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/engine"
	"github.com/tidegate/tidegate/internal/attest"
	"github.com/tidegate/tidegate/internal/ops"
)

// A full ledger does not stop a rollback: the ledger of the candidate holds as many entries as a
// ledger holds when the rollout's rollback ends. The pass that records RolledBack appends its
// outcome to a ledger that continues the full one, on a real API server (which enforces the
// ledger's size and append-only rules), and its status lands. The exported bundle holds both
// ledgers, and verifies with the signing key as one chain.
func TestAFullLedgerDoesNotStopARollback(t *testing.T) {
	hub := startTestHub(t)
	ctx := context.Background()
	signer, _, _, err := attest.GenerateKey(false)
	if err != nil {
		t.Fatal(err)
	}
	r := &FleetRolloutReconciler{Client: hub.admin, APIReader: hub.admin, Signer: signer}
	fr := createRolloutIn(t, hub, "full-ledger")
	rev := "main@sha1:" + strings.Repeat("4", 40)
	candidate := v1alpha1.RevisionStatus{Revision: rev, Digest: "sha256:" + strings.Repeat("a", 64), Source: v1alpha1.PinnedSourceName(fr.Name, rev)}
	fr.Status = v1alpha1.FleetRolloutStatus{
		Phase: v1alpha1.PhaseRollingBack, Candidate: candidate.DeepCopy(),
		Waves: []v1alpha1.WaveStatus{{Name: "canary", Phase: v1alpha1.WaveFailed, Clusters: []string{"member-1"}}},
	}
	if err := hub.admin.Status().Update(ctx, fr); err != nil {
		t.Fatal(err)
	}

	// The record of the revision so far: MaxLedgerEntries entries, written as the controller
	// writes them.
	held := v1alpha1.LedgerEntry{Type: v1alpha1.LedgerEntryOutcome, Outcome: &v1alpha1.LedgerOutcome{Phase: v1alpha1.OutcomeHeld}}
	if err := r.appendLedger(ctx, fr, candidate, func(*v1alpha1.RolloutLedger) ([]v1alpha1.LedgerEntry, error) {
		entries := make([]v1alpha1.LedgerEntry, v1alpha1.MaxLedgerEntries)
		for i := range entries {
			entries[i] = *held.DeepCopy()
		}
		return entries, nil
	}, metav1.Now()); err != nil {
		t.Fatal(err)
	}
	first := candidate.LedgerName(fr.Name)
	var full v1alpha1.RolloutLedger
	if err := hub.admin.Get(ctx, client.ObjectKey{Namespace: fr.Namespace, Name: first}, &full); err != nil {
		t.Fatal(err)
	}
	if n := len(full.Spec.Entries); n != v1alpha1.MaxLedgerEntries {
		t.Fatalf("the ledger holds %d entries, want %d", n, v1alpha1.MaxLedgerEntries)
	}
	// The API server takes no more in it.
	over := full.DeepCopy()
	if err := attest.Append(over, *held.DeepCopy(), metav1.Now(), nil); err == nil {
		t.Fatal("appending to a full ledger")
	}
	over.Spec.Entries = append(over.Spec.Entries, over.Spec.Entries[0])
	if err := hub.admin.Update(ctx, over); !apierrors.IsInvalid(err) {
		t.Fatalf("the API server took a ledger over %d entries: %v", v1alpha1.MaxLedgerEntries, err)
	}

	// The rollback ends: the pass records its outcome, then its status.
	pass := &v1alpha1.FleetRollout{}
	if err := hub.admin.Get(ctx, client.ObjectKeyFromObject(fr), pass); err != nil {
		t.Fatal(err)
	}
	patcher := newStatusPatch(pass)
	pass.Status.Phase = v1alpha1.PhaseRolledBack
	if err := r.recordLedger(ctx, pass, pass.Status.Candidate.DeepCopy(), nil); err != nil {
		t.Fatalf("recording the rollback in a full ledger: %v", err)
	}
	if err := r.finalizeStatus(ctx, pass, patcher); err != nil {
		t.Fatal(err)
	}
	got := &v1alpha1.FleetRollout{}
	if err := hub.admin.Get(ctx, client.ObjectKeyFromObject(fr), got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != v1alpha1.PhaseRolledBack {
		t.Errorf("the rollout is %s, want RolledBack", got.Status.Phase)
	}

	var next v1alpha1.RolloutLedger
	if err := hub.admin.Get(ctx, client.ObjectKey{Namespace: fr.Namespace, Name: v1alpha1.LedgerPartName(first, 2)}, &next); err != nil {
		t.Fatalf("the ledger that continues %s: %v", first, err)
	}
	last := full.Spec.Entries[len(full.Spec.Entries)-1].Digest
	if c := next.Spec.Continues; c == nil || c.Name != first || c.Digest != last {
		t.Errorf("%s continues %+v, want %s at %s", next.Name, c, first, last)
	}
	if n := len(next.Spec.Entries); n != 1 || next.Spec.Entries[0].Previous != last || next.Spec.Entries[0].Outcome.Phase != v1alpha1.OutcomeRolledBack ||
		next.Spec.Outcome != v1alpha1.OutcomeRolledBack || next.Labels[v1alpha1.RolloutLabel] != fr.Name {
		t.Errorf("%s records %+v (outcome %q, labels %v), want one RolledBack entry chained to %s", next.Name, next.Spec.Entries, next.Spec.Outcome, next.Labels, last)
	}
	// A second pass at rest records nothing more.
	if err := r.recordLedger(ctx, got, got.Status.Candidate.DeepCopy(), nil); err != nil {
		t.Fatal(err)
	}
	if err := hub.admin.Get(ctx, client.ObjectKeyFromObject(&next), &next); err != nil || len(next.Spec.Entries) != 1 {
		t.Errorf("a pass at rest appended to %s: %d entries, %v", next.Name, len(next.Spec.Entries), err)
	}

	b, missing, err := ops.ExportBundle(ctx, hub.admin, fr.Namespace, fr.Name, rev)
	if err != nil || len(missing) != 0 {
		t.Fatalf("exporting the record: %v (missing %v)", err, missing)
	}
	if b.Ledger.Name != first || len(b.Continued) != 1 || b.Continued[0].Name != next.Name {
		t.Fatalf("the bundle holds %s and %d continuing ledgers, want %s and %s", b.Ledger.Name, len(b.Continued), first, next.Name)
	}
	if v := attest.Verify(b, attest.NewKeySet(signer.Public())); !v.Verified {
		t.Errorf("the record of two ledgers does not verify: %+v", v.Failures())
	}
}

// Crash points of the writes a pass makes without Flux (ledgers, receipts), on a real API server:
// a controller whose test hook fails at a point writes nothing from there on, as a process that
// died there, and a fresh controller (a new reconciler with no hook) runs the same pass again from
// what the hub holds.

// crashHook fails at point and at every point after it; the points it was called with are kept in
// seen.
type crashHook struct {
	point   string
	crashed bool
	seen    []string
}

func (c *crashHook) hook(point string) error {
	c.seen = append(c.seen, point)
	if c.crashed {
		return errors.New("crashed")
	}
	if point == c.point {
		c.crashed = true
		return errors.New("crash at " + point)
	}
	return nil
}

// testCandidate is a candidate of rollout at rev whose artifact digest repeats d.
func testCandidate(rollout, rev, d string) *v1alpha1.RevisionStatus {
	return &v1alpha1.RevisionStatus{Revision: rev, Digest: "sha256:" + strings.Repeat(d, 64), Source: v1alpha1.PinnedSourceName(rollout, rev)}
}

// runPass runs one pass of r over the rollout key as the hub holds it: change makes the pass's
// decisions in status, then r writes what the pass leaves as Reconcile does (writePass). receipts
// are the receipts the pass decided by.
func runPass(ctx context.Context, t *testing.T, r *FleetRolloutReconciler, key client.ObjectKey, change func(*v1alpha1.FleetRollout), receipts ...*v1alpha1.GateReceipt) error {
	t.Helper()
	fr := &v1alpha1.FleetRollout{}
	if err := r.Get(ctx, key, fr); err != nil {
		t.Fatal(err)
	}
	patcher := newStatusPatch(fr)
	read := fr.Status.DeepCopy()
	change(fr)
	byName := map[string]*v1alpha1.GateReceipt{}
	for _, rc := range receipts {
		byName[rc.Name] = rc
	}
	read.Unchanged = fr.Status.Unchanged.DeepCopy()
	return r.writePass(ctx, fr, patcher, read, engine.SourceState{}, byName)
}

// writeTestReceipt writes the decision of gate on the rollout's first wave, over its candidate, as
// r writes receipts.
func writeTestReceipt(ctx context.Context, t *testing.T, r *FleetRolloutReconciler, fr *v1alpha1.FleetRollout, gate string, d GateDecision, at time.Time) *v1alpha1.GateReceipt {
	t.Helper()
	wv := &fr.Status.Waves[0]
	ro, err := BuildReceipt(fr, wv, wv.Clusters, gate, d, nil, metav1.NewTime(at))
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteReceipt(ctx, r.Client, ro, r.author()); err != nil {
		t.Fatal(err)
	}
	return ro.GateReceipt
}

// TestCrashPointsOnTheHub runs the crash points below on one API server, each rollout in a
// namespace of its own.
func TestCrashPointsOnTheHub(t *testing.T) {
	hub := startTestHub(t)
	t.Run("the Superseded ledger write", func(t *testing.T) { crashAtTheSupersededLedgerWrite(t, hub) })
	t.Run("receipt pruning", func(t *testing.T) { crashWhilePruningReceipts(t, hub) })
}

// The controller dies right after it appended Superseded to the ledger of a candidate that a new
// revision replaced mid-rollout (the "ledger:<previous revision>" point), before the status that
// records the new candidate. A fresh controller records the new candidate and writes no second
// outcome to the old ledger; the new candidate's decisions go to a ledger of its own. Both records
// verify with the controller's key, each chain intact.
func crashAtTheSupersededLedgerWrite(t *testing.T, hub *testHub) {
	ctx := context.Background()
	signer, _, _, err := attest.GenerateKey(false)
	if err != nil {
		t.Fatal(err)
	}
	controller := func(hook func(string) error) *FleetRolloutReconciler {
		return &FleetRolloutReconciler{Client: hub.admin, APIReader: hub.admin, Signer: signer, TestHook: hook}
	}
	fr := createRolloutIn(t, hub, "superseded")
	key := client.ObjectKeyFromObject(fr)
	rev1, rev2 := "main@sha1:"+strings.Repeat("1", 40), "main@sha1:"+strings.Repeat("2", 40)
	ledgerOf := func(rev string) (*v1alpha1.RolloutLedger, error) {
		l := &v1alpha1.RolloutLedger{}
		return l, hub.admin.Get(ctx, client.ObjectKey{Namespace: fr.Namespace, Name: v1alpha1.LedgerName(fr.Name, rev)}, l)
	}
	startWith := func(rev, d string) func(*v1alpha1.FleetRollout) {
		return func(fr *v1alpha1.FleetRollout) {
			fr.Status.Phase = v1alpha1.PhaseProgressing
			fr.Status.Candidate = testCandidate(fr.Name, rev, d)
			fr.Status.Waves = []v1alpha1.WaveStatus{{Name: "canary", Phase: v1alpha1.WavePending, Clusters: []string{"member-1"}}}
		}
	}
	// recordStart is the pass that records the canary's deploySafe and its start.
	recordStart := func(r *FleetRolloutReconciler, rev, d string) {
		t.Helper()
		cur := &v1alpha1.FleetRollout{}
		if err := hub.admin.Get(ctx, key, cur); err != nil {
			t.Fatal(err)
		}
		startWith(rev, d)(cur)
		pass := GateDecision{Result: v1alpha1.ResultPass, PolicyDigest: "sha256:" + strings.Repeat("c", 64)}
		rc := writeTestReceipt(ctx, t, r, cur, v1alpha1.GateDeploySafe, pass, time.Now())
		if err := runPass(ctx, t, r, key, func(fr *v1alpha1.FleetRollout) {
			startWith(rev, d)(fr)
			wv := &fr.Status.Waves[0]
			decidedAt := metav1.Now()
			wv.Gates = append(wv.Gates, v1alpha1.GateOutcome{Gate: v1alpha1.GateDeploySafe, Result: pass.Result, Receipt: rc.Name,
				DecidedAt: &decidedAt, ObservedGeneration: fr.Generation})
			wv.Phase, wv.StartedAt = v1alpha1.WaveProgressing, &metav1.Time{Time: time.Now()}
		}, rc); err != nil {
			t.Fatal(err)
		}
	}

	// rev1 starts: its ledger lists the canary's deploySafe, and has no outcome.
	recordStart(controller(nil), rev1, "a")
	l1, err := ledgerOf(rev1)
	if err != nil || len(l1.Spec.Entries) != 1 || l1.Spec.Outcome != "" {
		t.Fatalf("the ledger of %s: %d entries, outcome %q, %v; want its one receipt and no outcome", rev1, len(l1.Spec.Entries), l1.Spec.Outcome, err)
	}

	// rev2 supersedes it mid-rollout; the controller dies once Superseded is appended.
	crash := &crashHook{point: "ledger:" + rev1}
	if err := runPass(ctx, t, controller(crash.hook), key, startWith(rev2, "b")); err == nil || !crash.crashed {
		t.Fatalf("the pass that supersedes %s did not stop at ledger:%s (points %v): %v", rev1, rev1, crash.seen, err)
	}
	if want := []string{"status:candidate", "status", "ledger:" + rev1}; strings.Join(crash.seen, " ") != strings.Join(want, " ") {
		t.Errorf("the pass's points were %v, want %v", crash.seen, want)
	}
	atCrash, err := ledgerOf(rev1)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(atCrash.Spec.Entries); n != 2 || atCrash.Spec.Entries[1].Type != v1alpha1.LedgerEntryOutcome ||
		atCrash.Spec.Entries[1].Outcome.Phase != v1alpha1.OutcomeSuperseded || atCrash.Spec.Outcome != v1alpha1.OutcomeSuperseded {
		t.Fatalf("at the crash the ledger of %s should end Superseded: %d entries, outcome %q", rev1, n, atCrash.Spec.Outcome)
	}
	got := &v1alpha1.FleetRollout{}
	if err := hub.admin.Get(ctx, key, got); err != nil || got.Status.Candidate.Revision != rev1 {
		t.Fatalf("at the crash status should still record %s: %+v, %v", rev1, got.Status.Candidate, err)
	}
	if _, err := ledgerOf(rev2); !apierrors.IsNotFound(err) {
		t.Fatalf("the ledger of %s exists at the crash: %v", rev2, err)
	}

	// A fresh controller supersedes rev1 again, then goes on with rev2.
	fresh := controller(nil)
	if err := runPass(ctx, t, fresh, key, startWith(rev2, "b")); err != nil {
		t.Fatal(err)
	}
	after, err := ledgerOf(rev1)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(after.Spec.Entries); n != 2 || after.Spec.Entries[1].Digest != atCrash.Spec.Entries[1].Digest {
		t.Errorf("the ledger of %s has %d entries after the restart, want the 2 it had at the crash (no second Superseded)", rev1, n)
	}
	if err := hub.admin.Get(ctx, key, got); err != nil || got.Status.Candidate.Revision != rev2 {
		t.Fatalf("the fresh controller did not record %s: %+v, %v", rev2, got.Status.Candidate, err)
	}
	recordStart(fresh, rev2, "b")
	l2, err := ledgerOf(rev2)
	if err != nil || len(l2.Spec.Entries) != 1 || l2.Spec.Entries[0].Receipt == nil || l2.Spec.Outcome != "" {
		t.Fatalf("the ledger of %s: %+v, %v; want the canary's deploySafe and no outcome", rev2, l2.Spec.Entries, err)
	}
	if after, err = ledgerOf(rev1); err != nil || len(after.Spec.Entries) != 2 {
		t.Errorf("the ledger of %s changed after %s went on: %d entries, %v", rev1, rev2, len(after.Spec.Entries), err)
	}

	for _, rev := range []string{rev1, rev2} {
		b, missing, err := ops.ExportBundle(ctx, hub.admin, fr.Namespace, fr.Name, rev)
		if err != nil || len(missing) != 0 {
			t.Fatalf("exporting the record of %s: %v (missing %v)", rev, err, missing)
		}
		if v := attest.Verify(b, attest.NewKeySet(signer.Public())); !v.Verified {
			t.Errorf("the record of %s does not verify: %+v", rev, v.Failures())
		}
	}
}

// The controller dies halfway through pruning a rollout's receipts past maxReceiptsPerRollout (the
// "prune:<receipt>" point), oldest first. A fresh controller prunes the rest, down to exactly
// maxReceiptsPerRollout, and neither prunes the two oldest receipts: one status references, one an
// older revision's ledger lists.
func crashWhilePruningReceipts(t *testing.T, hub *testHub) {
	ctx := context.Background()
	fr := createRolloutIn(t, hub, "prune")
	key := client.ObjectKeyFromObject(fr)
	rev0, rev1 := "main@sha1:"+strings.Repeat("0", 40), "main@sha1:"+strings.Repeat("1", 40)
	fr.Status = v1alpha1.FleetRolloutStatus{
		Phase: v1alpha1.PhaseCompleted, Candidate: testCandidate(fr.Name, rev1, "a"), LastKnownGood: testCandidate(fr.Name, rev1, "a"),
		Waves: []v1alpha1.WaveStatus{{Name: "canary", Phase: v1alpha1.WaveSucceeded, Clusters: []string{"member-1"}}},
	}

	// The receipts, oldest first: the first is of rev0 and its ledger lists it, the second is the
	// one status records; the rest nothing references.
	const excess = 6
	t0 := time.Now().Add(-time.Hour)
	var names []string
	for i := 0; i < maxReceiptsPerRollout+excess; i++ {
		at := fr.DeepCopy()
		if i == 0 {
			at.Status.Candidate = testCandidate(fr.Name, rev0, "b")
		}
		d := GateDecision{Result: v1alpha1.ResultPass, Reasons: []string{fmt.Sprintf("decision %d", i)}}
		ro, err := BuildReceipt(at, &at.Status.Waves[0], at.Status.Waves[0].Clusters, v1alpha1.GateNoDisruption, d, nil, metav1.NewTime(t0.Add(time.Duration(i)*time.Second)))
		if err != nil {
			t.Fatal(err)
		}
		if err := hub.admin.Create(ctx, ro.GateReceipt); err != nil {
			t.Fatal(err)
		}
		names = append(names, ro.Name)
	}
	listed, recorded := names[0], names[1]
	r := &FleetRolloutReconciler{Client: hub.admin, APIReader: hub.admin}
	if err := r.appendLedger(ctx, fr, *testCandidate(fr.Name, rev0, "b"), func(*v1alpha1.RolloutLedger) ([]v1alpha1.LedgerEntry, error) {
		return []v1alpha1.LedgerEntry{{Type: v1alpha1.LedgerEntryReceipt, Receipt: &v1alpha1.LedgerReceipt{
			Name: listed, Gate: v1alpha1.GateNoDisruption, Wave: "canary", Result: v1alpha1.ResultPass}}}, nil
	}, metav1.Now()); err != nil {
		t.Fatal(err)
	}
	fr.Status.Waves[0].Gates = []v1alpha1.GateOutcome{{Gate: v1alpha1.GateNoDisruption, Result: v1alpha1.ResultPass, Receipt: recorded}}
	if err := hub.admin.Status().Update(ctx, fr); err != nil {
		t.Fatal(err)
	}

	// prunePass runs the prune of a pass of r at rest.
	prunePass := func(r *FleetRolloutReconciler) error {
		cur := &v1alpha1.FleetRollout{}
		if err := hub.admin.Get(ctx, key, cur); err != nil {
			t.Fatal(err)
		}
		return r.prune(ctx, &pass{World: &engine.World{Rollout: cur, Now: time.Now()}, res: engine.StepResult{GateWave: -1, Decided: -1}}).err
	}
	left := func() map[string]bool {
		var list v1alpha1.GateReceiptList
		if err := hub.admin.List(ctx, &list, client.InNamespace(fr.Namespace), client.MatchingLabels{v1alpha1.RolloutLabel: fr.Name}); err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, rc := range list.Items {
			out[rc.Name] = true
		}
		return out
	}
	// The ones to prune are the oldest after those two; the controller dies before the fourth.
	prunable := names[2 : 2+excess]
	crash := &crashHook{point: "prune:" + prunable[3]}
	if err := prunePass(&FleetRolloutReconciler{Client: hub.admin, APIReader: hub.admin, TestHook: crash.hook}); err == nil || !crash.crashed {
		t.Fatalf("the prune did not stop at prune:%s (points %v): %v", prunable[3], crash.seen, err)
	}
	got := left()
	if len(got) != maxReceiptsPerRollout+excess-3 || !got[listed] || !got[recorded] {
		t.Fatalf("at the crash %d receipts are left (want %d), the listed one kept %v, the recorded one kept %v",
			len(got), maxReceiptsPerRollout+excess-3, got[listed], got[recorded])
	}
	for i, name := range prunable {
		if got[name] != (i >= 3) {
			t.Errorf("at the crash receipt %s (the %d. to prune) is there: %v", name, i+1, got[name])
		}
	}

	if err := prunePass(&FleetRolloutReconciler{Client: hub.admin, APIReader: hub.admin}); err != nil {
		t.Fatal(err)
	}
	got = left()
	if len(got) != maxReceiptsPerRollout {
		t.Errorf("%d receipts left after the restart, want %d", len(got), maxReceiptsPerRollout)
	}
	for i, name := range names {
		pruned := i >= 2 && i < 2+excess
		if got[name] == pruned {
			t.Errorf("receipt %d (%s): left %v, want pruned %v", i, name, got[name], pruned)
		}
	}
	// At rest with maxReceiptsPerRollout receipts, the next pass prunes nothing.
	crash = &crashHook{point: "none"}
	if err := prunePass(&FleetRolloutReconciler{Client: hub.admin, APIReader: hub.admin, TestHook: crash.hook}); err != nil {
		t.Fatal(err)
	}
	for _, p := range crash.seen {
		if strings.HasPrefix(p, "prune:") {
			t.Errorf("a pass at the bound would prune: %s", p)
		}
	}
}
