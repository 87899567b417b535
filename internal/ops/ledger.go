package ops

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// LedgerView is the RolloutLedger of one revision of a rollout as a reader wants it: the ledger and
// the ledgers that continue it read as one, its entries oldest first.
type LedgerView struct {
	// Ledger is the first ledger; Parts name it and every ledger that continues it, in order.
	Ledger    Ref                     `json:"ledger"`
	Parts     []string                `json:"parts"`
	Rollout   string                  `json:"rollout"`
	Candidate v1alpha1.RevisionStatus `json:"candidate"`
	// Outcome is the outcome of the latest Outcome entry, in whichever part it is.
	Outcome string            `json:"outcome,omitempty"`
	Entries []LedgerEntryView `json:"entries"`
}

// LedgerEntryView is an entry as recorded, its signature reduced to the key that made it: the
// envelope (up to 256 KiB of base64 each) says nothing to a reader that does not verify it, and
// tidegate receipts verify checks it.
type LedgerEntryView struct {
	v1alpha1.LedgerEntry
	// SignedBy is the id of the key whose envelope the entry carries; empty when it is unsigned.
	SignedBy string `json:"signedBy,omitempty"`
}

// Ledger reads the ledger of rollout's revision (its candidate's when revision is empty), as
// ExportBundle finds it, without the receipts it lists.
func Ledger(ctx context.Context, c client.Reader, ns, rollout, revision string) (*LedgerView, error) {
	parts, err := readLedger(ctx, c, ns, rollout, revision, "read")
	if err != nil {
		return nil, err
	}
	first := parts[0]
	v := &LedgerView{
		Ledger:  Ref{Kind: "rolloutledger", Namespace: ns, Name: first.Name},
		Rollout: first.Spec.Rollout, Candidate: first.Spec.Candidate,
		Entries: []LedgerEntryView{},
	}
	for _, l := range parts {
		v.Parts = append(v.Parts, l.Name)
		for _, e := range l.Spec.Entries {
			ev := LedgerEntryView{LedgerEntry: e}
			if e.Signature != nil {
				ev.SignedBy, ev.Signature = e.Signature.KeyID, nil
			}
			if e.Outcome != nil {
				v.Outcome = e.Outcome.Phase
			}
			v.Entries = append(v.Entries, ev)
		}
	}
	return v, nil
}
