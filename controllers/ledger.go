package controllers

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/engine"
	"github.com/tidegate/tidegate/internal/attest"
	"github.com/tidegate/tidegate/internal/ops"
)

// recordLedger appends to the ledger of the rollout's candidate what the status about to be
// written records and the ledger does not yet list: each gate's receipt, wave by wave, after the
// approvals it counted, and the outcome of a rollout that came to rest (Completed, RolledBack with
// the reversal as executed and checked, Held). When the candidate changed from one whose ledger has no outcome, that ledger ends
// Superseded. It runs before the status patch: what status records, the ledger lists, and a pass
// whose ledger write failed records nothing (the next pass takes its decisions up from their
// receipts). receipts are the receipts the pass decided by; others are read from the cache.
func (r *FleetRolloutReconciler) recordLedger(ctx context.Context, fr *v1alpha1.FleetRollout, wasCandidate *v1alpha1.RevisionStatus, receipts map[string]*v1alpha1.GateReceipt) error {
	now := metav1.NewTime(r.now())
	st := &fr.Status
	if wasCandidate != nil && (st.Candidate == nil || st.Candidate.Key() != wasCandidate.Key()) {
		if err := r.appendLedger(ctx, fr, *wasCandidate, func(l *v1alpha1.RolloutLedger) ([]v1alpha1.LedgerEntry, error) {
			if len(l.Spec.Entries) == 0 || l.Spec.Entries[len(l.Spec.Entries)-1].Type == v1alpha1.LedgerEntryOutcome {
				return nil, nil
			}
			return []v1alpha1.LedgerEntry{{Type: v1alpha1.LedgerEntryOutcome, Outcome: &v1alpha1.LedgerOutcome{Phase: v1alpha1.OutcomeSuperseded}}}, nil
		}, now); err != nil {
			return err
		}
	}
	if st.Candidate == nil || st.Candidate.Digest == "" {
		return nil
	}
	return r.appendLedger(ctx, fr, *st.Candidate, func(l *v1alpha1.RolloutLedger) ([]v1alpha1.LedgerEntry, error) {
		return r.ledgerEntries(ctx, fr, l, receipts)
	}, now)
}

// recordUnchanged gives a revision the step found unchanged (status.unchanged, new in this pass) a
// ledger of its own that says so: one Outcome entry, Unchanged, naming the known-good whose render
// it is. It runs before the status patch, as recordLedger does. tracked is the tracked source,
// which serves the revision.
func (r *FleetRolloutReconciler) recordUnchanged(ctx context.Context, fr *v1alpha1.FleetRollout, was *v1alpha1.UnchangedRevision, tracked engine.SourceState) error {
	u := fr.Status.Unchanged
	if u == nil || (was != nil && was.Revision == u.Revision) || tracked.Revision != u.Revision {
		return nil
	}
	rev := v1alpha1.RevisionStatus{Revision: u.Revision, Digest: tracked.Digest}
	return r.appendLedger(ctx, fr, rev, func(l *v1alpha1.RolloutLedger) ([]v1alpha1.LedgerEntry, error) {
		if n := len(l.Spec.Entries); n > 0 && l.Spec.Entries[n-1].Type == v1alpha1.LedgerEntryOutcome {
			return nil, nil
		}
		return []v1alpha1.LedgerEntry{{Type: v1alpha1.LedgerEntryOutcome, Outcome: &v1alpha1.LedgerOutcome{Phase: v1alpha1.OutcomeUnchanged, SameAs: u.SameAs}}}, nil
	}, metav1.NewTime(r.now()))
}

// ledgerEntries are the entries the status of fr adds to its candidate's ledger l.
func (r *FleetRolloutReconciler) ledgerEntries(ctx context.Context, fr *v1alpha1.FleetRollout, l *v1alpha1.RolloutLedger, receipts map[string]*v1alpha1.GateReceipt) ([]v1alpha1.LedgerEntry, error) {
	st := &fr.Status
	listed := attest.ListedIn(l)
	var add []v1alpha1.LedgerEntry
	for _, w := range st.Waves {
		for _, g := range w.Gates {
			if g.Receipt == "" || listed.Receipts[g.Receipt] {
				continue
			}
			rc, err := r.ledgerReceipt(ctx, fr.Namespace, g.Receipt, receipts)
			if err != nil {
				return nil, err
			}
			if rc == nil || !sameCandidate(&rc.Spec.Candidate, &l.Spec.Candidate) {
				continue // pruned before ledgers existed, or of another candidate
			}
			listed.Receipts[rc.Name] = true
			for k := range rc.Spec.Approvals {
				if a := &rc.Spec.Approvals[k]; !listed.Approval(a) {
					add = append(add, v1alpha1.LedgerEntry{Type: v1alpha1.LedgerEntryApproval, Approval: a.DeepCopy()})
				}
			}
			add = append(add, v1alpha1.LedgerEntry{Type: v1alpha1.LedgerEntryReceipt, Receipt: &v1alpha1.LedgerReceipt{
				Name: rc.Name, ContentDigest: rc.Annotations[v1alpha1.ContentDigestAnnotation], Gate: rc.Spec.Gate, Wave: rc.Spec.Wave, Result: rc.Spec.Result,
			}})
		}
	}
	switch st.Phase {
	case v1alpha1.PhaseCompleted, v1alpha1.PhaseRolledBack, v1alpha1.PhaseHeld:
	default:
		return add, nil
	}
	n := len(l.Spec.Entries)
	if len(add) == 0 && n > 0 && l.Spec.Entries[n-1].Type == v1alpha1.LedgerEntryOutcome && l.Spec.Entries[n-1].Outcome.Phase == st.Phase {
		return nil, nil // the outcome is recorded
	}
	o := &v1alpha1.LedgerOutcome{Phase: st.Phase}
	for _, w := range st.Waves {
		lw := v1alpha1.LedgerWave{Name: w.Name, Phase: w.Phase}
		for _, g := range w.Gates {
			lw.Gates = append(lw.Gates, v1alpha1.LedgerGate{Gate: g.Gate, Result: g.Result, Receipt: g.Receipt})
		}
		o.Waves = append(o.Waves, lw)
	}
	if rb := st.Rollback; st.Phase == v1alpha1.PhaseRolledBack && rb != nil {
		o.Rollback = ledgerRollback(rb)
	}
	return append(add, v1alpha1.LedgerEntry{Type: v1alpha1.LedgerEntryOutcome, Outcome: o}), nil
}

// ledgerRollback is the rollback rb as the ledger's outcome records it: how many clusters were
// seen Ready at the known-good, those that were not, and the checks run there (bounded as status
// bounds them).
func ledgerRollback(rb *v1alpha1.RollbackStatus) *v1alpha1.LedgerRollback {
	lr := &v1alpha1.LedgerRollback{To: rb.To, Confirmed: int32(len(rb.Confirmed)), Unconfirmed: rb.Unconfirmed,
		Checks: rb.Checks, Unchecked: rb.Unchecked}
	if len(lr.Unconfirmed) > 100 {
		lr.Unconfirmed = lr.Unconfirmed[:100]
	}
	return lr.DeepCopy()
}

// ledgerReceipt is the receipt named name: one the pass decided by, else the API server's (the
// manager caches receipts' metadata only); nil when it is gone.
func (r *FleetRolloutReconciler) ledgerReceipt(ctx context.Context, namespace, name string, receipts map[string]*v1alpha1.GateReceipt) (*v1alpha1.GateReceipt, error) {
	if rc := receipts[name]; rc != nil {
		return rc, nil
	}
	rc := &v1alpha1.GateReceipt{}
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, rc)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading gatereceipt %s/%s to list it in the ledger: %w", namespace, name, err)
	}
	return rc, nil
}

// appendLedger appends the entries add returns to the ledger of candidate, creating it. add sees
// the whole record: the entries of every part of the ledger, in order. An entry that would grow a
// full part past v1alpha1.MaxLedgerEntries goes to the part that continues it, created here, so
// a long record never stops the status write that follows.
func (r *FleetRolloutReconciler) appendLedger(ctx context.Context, fr *v1alpha1.FleetRollout, candidate v1alpha1.RevisionStatus,
	add func(*v1alpha1.RolloutLedger) ([]v1alpha1.LedgerEntry, error), now metav1.Time) error {
	first := candidate.LedgerName(fr.Name)
	// From the cache: a copy that lags the ledger's last write makes the write that follows conflict
	// (or, for a new part, already exist), and the pass is retried.
	parts, err := ops.LedgerParts(ctx, r.Client, fr.Namespace, first)
	if err != nil {
		return err
	}
	created := len(parts) == 0
	if created {
		parts = []*v1alpha1.RolloutLedger{{
			TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: v1alpha1.RolloutLedgerKind},
			ObjectMeta: metav1.ObjectMeta{Name: first, Namespace: fr.Namespace, Labels: map[string]string{v1alpha1.RolloutLabel: fr.Name}},
			Spec: v1alpha1.RolloutLedgerSpec{Rollout: fr.Name, Candidate: v1alpha1.RevisionStatus{Revision: candidate.Revision, Digest: candidate.Digest,
				Build: candidate.Build.DeepCopy(), BuildHash: candidate.BuildHash}},
		}}
	}
	entries, err := add(wholeLedger(parts))
	if err != nil || len(entries) == 0 {
		return err
	}
	written := len(parts) - 1 // the parts before it are full and stay as they are
	had := len(parts[written].Spec.Entries)
	for _, e := range entries {
		tail := parts[len(parts)-1]
		if len(tail.Spec.Entries) >= v1alpha1.MaxLedgerEntries {
			parts = append(parts, attest.Continuation(tail, first, len(parts)))
			tail = parts[len(parts)-1]
		}
		if err := attest.Append(tail, e, now, r.Signer); err != nil {
			return err
		}
	}
	for i := written; i < len(parts); i++ {
		l := parts[i]
		switch {
		case i > written || created:
			err = r.Create(ctx, l, client.FieldOwner(v1alpha1.FieldManager))
		case len(l.Spec.Entries) > had:
			err = r.Update(ctx, l, client.FieldOwner(v1alpha1.FieldManager))
		}
		if err != nil {
			return fmt.Errorf("appending %d entries to rolloutledger %s/%s: %w", len(entries), l.Namespace, l.Name, err)
		}
	}
	return r.hook("ledger:" + candidate.Revision)
}

// wholeLedger is the record parts hold, as one ledger to read: the last part with the entries of
// every part.
func wholeLedger(parts []*v1alpha1.RolloutLedger) *v1alpha1.RolloutLedger {
	if len(parts) == 1 {
		return parts[0]
	}
	whole := *parts[len(parts)-1]
	whole.Spec.Entries = nil
	for _, p := range parts {
		whole.Spec.Entries = append(whole.Spec.Entries, p.Spec.Entries...)
	}
	return &whole
}

// sameCandidate tells whether a and b are the same candidate: the same revision, with the same
// build where both name one (records written before builds were name none).
func sameCandidate(a, b *v1alpha1.RevisionStatus) bool {
	return a.Revision == b.Revision && (a.BuildHash == "" || b.BuildHash == "" || a.BuildHash == b.BuildHash)
}
