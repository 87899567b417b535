package attest

import (
	"encoding/json"
	"fmt"
	"maps"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// entryPredicate is what entry i of l is digested and signed as: the ledger it belongs to and the
// entry without its digest and signature.
func entryPredicate(l *v1alpha1.RolloutLedger, e *v1alpha1.LedgerEntry) LedgerEntryPredicate {
	c := e.DeepCopy()
	c.Digest, c.Signature = "", nil
	return LedgerEntryPredicate{Namespace: l.Namespace, Ledger: l.Name, Rollout: l.Spec.Rollout, Candidate: l.Spec.Candidate, Entry: *c}
}

// EntryDigest is the digest of entry e of ledger l: the sha256 of the canonical JSON of
// LedgerEntryPredicate without digest. It covers e.previous, so each digest covers every entry
// before it.
func EntryDigest(l *v1alpha1.RolloutLedger, e *v1alpha1.LedgerEntry) (string, error) {
	b, err := canonical(entryPredicate(l, e))
	if err != nil {
		return "", fmt.Errorf("digesting entry %d of rolloutledger %s/%s: %w", e.Index, l.Namespace, l.Name, err)
	}
	return sha256Digest(b), nil
}

// Append appends e to l at at: it sets the entry's index, previous (the last entry's digest) and
// digest, and with a signer its signature, a statement about the ledger's candidate whose
// predicate is the entry. An Outcome entry sets spec.outcome. The first entry of a ledger that
// continues another names as previous the digest spec.continues gives. It refuses to grow the
// ledger past v1alpha1.MaxLedgerEntries: the record goes on in a ledger that continues it
// (Continuation).
func Append(l *v1alpha1.RolloutLedger, e v1alpha1.LedgerEntry, at metav1.Time, s *Signer) error {
	n := len(l.Spec.Entries)
	if n >= v1alpha1.MaxLedgerEntries {
		return fmt.Errorf("rolloutledger %s/%s holds %d entries, the most a ledger holds: append to a ledger that continues it", l.Namespace, l.Name, n)
	}
	e.Index, e.At, e.Previous, e.Digest, e.Signature = n, at, "", "", nil
	switch {
	case n > 0:
		e.Previous = l.Spec.Entries[n-1].Digest
	case l.Spec.Continues != nil:
		e.Previous = l.Spec.Continues.Digest
	}
	d, err := EntryDigest(l, &e)
	if err != nil {
		return err
	}
	e.Digest = d
	if s != nil {
		subject, err := candidateSubject(l.Spec.Candidate)
		if err != nil {
			return fmt.Errorf("signing entry %d of rolloutledger %s/%s: %w", n, l.Namespace, l.Name, err)
		}
		p := entryPredicate(l, &e)
		p.Digest = d
		payload, err := statement(subject, PredicateLedgerEntry, p)
		if err != nil {
			return err
		}
		if e.Signature, err = signed(s, payload); err != nil {
			return fmt.Errorf("signing entry %d of rolloutledger %s/%s: %w", n, l.Namespace, l.Name, err)
		}
	}
	if e.Type == v1alpha1.LedgerEntryOutcome && e.Outcome != nil {
		l.Spec.Outcome = e.Outcome.Phase
	}
	l.Spec.Entries = append(l.Spec.Entries, e)
	return nil
}

// Continuation is the ledger that continues full, part n+1 of the record whose part n is full:
// the same rollout and candidate, named by v1alpha1.LedgerPartName of the first part's name
// (first), and linked to full's last entry.
func Continuation(full *v1alpha1.RolloutLedger, first string, n int) *v1alpha1.RolloutLedger {
	c := &v1alpha1.RolloutLedger{
		TypeMeta: full.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{Namespace: full.Namespace, Name: v1alpha1.LedgerPartName(first, n+1),
			Labels: maps.Clone(full.Labels)},
		Spec: v1alpha1.RolloutLedgerSpec{Rollout: full.Spec.Rollout, Candidate: *full.Spec.Candidate.DeepCopy(), Outcome: full.Spec.Outcome},
	}
	if k := len(full.Spec.Entries); k > 0 {
		c.Spec.Continues = &v1alpha1.LedgerLink{Name: full.Name, Digest: full.Spec.Entries[k-1].Digest}
	}
	return c
}

// VerifyEntrySignature checks the signature of entry e of l with keys, as VerifyReceiptSignature
// checks a receipt's.
func VerifyEntrySignature(l *v1alpha1.RolloutLedger, e *v1alpha1.LedgerEntry, keys *KeySet) (string, error) {
	if e.Signature == nil {
		return "", ErrUnsigned
	}
	subject, err := candidateSubject(l.Spec.Candidate)
	if err != nil {
		return "", err
	}
	p := entryPredicate(l, e)
	p.Digest = e.Digest
	return verifyStatement(e.Signature, keys, subject, PredicateLedgerEntry, p)
}

// approvalKey identifies an approval in a ledger: its JSON.
func approvalKey(a *v1alpha1.Approval) string {
	b, _ := json.Marshal(a)
	return string(b)
}

// Listed is what a ledger already records: its receipts by name and its approvals.
type Listed struct {
	Receipts  map[string]bool
	approvals map[string]bool
}

// ListedIn is what l records.
func ListedIn(l *v1alpha1.RolloutLedger) Listed {
	out := Listed{Receipts: map[string]bool{}, approvals: map[string]bool{}}
	for i := range l.Spec.Entries {
		e := &l.Spec.Entries[i]
		if e.Receipt != nil {
			out.Receipts[e.Receipt.Name] = true
		}
		if e.Approval != nil {
			out.approvals[approvalKey(e.Approval)] = true
		}
	}
	return out
}

// Approval reports whether a is recorded, and marks it recorded.
func (l Listed) Approval(a *v1alpha1.Approval) bool {
	k := approvalKey(a)
	seen := l.approvals[k]
	l.approvals[k] = true
	return seen
}
