package controllers

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
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
