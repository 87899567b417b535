package attest_test

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/internal/attest"
)

// A record longer than a ledger holds goes on in ledgers that continue it: three parts, the first
// two full, verify as one chain with the signing key. Each way of cutting the chain is caught by
// the check that names it.
func TestALedgerContinuedVerifiesAsOneChain(t *testing.T) {
	s, _, _, err := attest.GenerateKey(false)
	if err != nil {
		t.Fatal(err)
	}
	keys := attest.NewKeySet(s.Public())
	cand := v1alpha1.RevisionStatus{Revision: "main@sha1:4f2a9c", Digest: "sha256:" + strings.Repeat("ab", 32)}
	first := v1alpha1.LedgerName("web", cand.Revision)
	chain := func(t *testing.T) []*v1alpha1.RolloutLedger {
		t.Helper()
		parts := []*v1alpha1.RolloutLedger{{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: first},
			Spec: v1alpha1.RolloutLedgerSpec{Rollout: "web", Candidate: cand}}}
		at := metav1.Now()
		for range 2*v1alpha1.MaxLedgerEntries + 3 {
			tail := parts[len(parts)-1]
			if len(tail.Spec.Entries) == v1alpha1.MaxLedgerEntries {
				parts = append(parts, attest.Continuation(tail, first, len(parts)))
				tail = parts[len(parts)-1]
			}
			if err := attest.Append(tail, v1alpha1.LedgerEntry{Type: v1alpha1.LedgerEntryOutcome, Outcome: &v1alpha1.LedgerOutcome{Phase: v1alpha1.OutcomeHeld}}, at, s); err != nil {
				t.Fatal(err)
			}
		}
		return parts
	}
	parts := chain(t)
	if len(parts) != 3 || parts[1].Name != v1alpha1.LedgerPartName(first, 2) || parts[2].Name != v1alpha1.LedgerPartName(first, 3) || len(parts[2].Spec.Entries) != 3 {
		t.Fatalf("parts %d, names %s %s", len(parts), parts[1].Name, parts[2].Name)
	}
	if v := attest.Verify(attest.NewBundle(parts, nil, metav1.Now()), keys); !v.Verified {
		t.Fatalf("the chain of three ledgers: %+v", v.Failures())
	}

	for _, tc := range []struct {
		name   string
		tamper func(parts []*v1alpha1.RolloutLedger) []*v1alpha1.RolloutLedger
		check  string
		detail string
	}{
		{"a middle ledger dropped", func(p []*v1alpha1.RolloutLedger) []*v1alpha1.RolloutLedger {
			return []*v1alpha1.RolloutLedger{p[0], p[2]}
		},
			"ledger-link", "a part was removed or reordered"},
		{"two ledgers swapped", func(p []*v1alpha1.RolloutLedger) []*v1alpha1.RolloutLedger {
			return []*v1alpha1.RolloutLedger{p[0], p[2], p[1]}
		},
			"ledger-link", "a part was removed or reordered"},
		{"an entry of a full ledger changed", func(p []*v1alpha1.RolloutLedger) []*v1alpha1.RolloutLedger {
			p[1].Spec.Entries[7].Outcome.Phase = v1alpha1.OutcomeCompleted
			return p
		}, "ledger-digest", "the entry was changed"},
		{"the last entry of a full ledger replaced", func(p []*v1alpha1.RolloutLedger) []*v1alpha1.RolloutLedger {
			p[0].Spec.Entries[v1alpha1.MaxLedgerEntries-1].Digest = "sha256:" + strings.Repeat("0", 64)
			return p
		}, "ledger-link", "the ledger it continues was changed"},
		{"a continuing ledger of another candidate", func(p []*v1alpha1.RolloutLedger) []*v1alpha1.RolloutLedger {
			p[2].Spec.Candidate.Revision = "main@sha1:0000"
			return p
		}, "ledger-link", "candidate main@sha1:0000"},
		{"a first ledger that continues another", func(p []*v1alpha1.RolloutLedger) []*v1alpha1.RolloutLedger { return p[1:] },
			"ledger-link", "which the bundle does not hold"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := attest.Verify(attest.NewBundle(tc.tamper(chain(t)), nil, metav1.Now()), keys)
			for _, c := range v.Failures() {
				if c.Check == tc.check && strings.Contains(c.Detail, tc.detail) {
					return
				}
			}
			t.Errorf("want a %s failure saying %q, got %+v", tc.check, tc.detail, v.Failures())
		})
	}
}
