package ops

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/internal/scheme"
)

// A build of a revision of its own (a template or values edit) keeps a ledger apart from the
// revision's: the export of the rollout's candidate reads the candidate's ledger, and the export of
// a revision reads its own ledger, else its one build's, and names them when it has several.
func TestExportBundleFindsTheLedgerOfABuild(t *testing.T) {
	const ns, rollout, rev = "fleet", "web", "main@sha1:4f2c0d9e81aa4f2c0d9e81aa4f2c0d9e81aa4f2c"
	build := func(source string) *v1alpha1.RevisionStatus {
		return &v1alpha1.RevisionStatus{Revision: rev, Source: source}
	}
	ledger := func(c *v1alpha1.RevisionStatus) *v1alpha1.RolloutLedger {
		return &v1alpha1.RolloutLedger{
			ObjectMeta: metav1.ObjectMeta{Name: c.LedgerName(rollout), Namespace: ns, Labels: map[string]string{v1alpha1.RolloutLabel: rollout}},
			Spec:       v1alpha1.RolloutLedgerSpec{Rollout: rollout, Candidate: *c},
		}
	}
	edited, other := build("web-build-1"), build("web-build-2")
	if edited.LedgerName(rollout) == v1alpha1.LedgerName(rollout, rev) {
		t.Fatal("a build's ledger must be apart from its revision's")
	}
	fr := &v1alpha1.FleetRollout{ObjectMeta: metav1.ObjectMeta{Name: rollout, Namespace: ns}}
	fr.Status.Candidate = edited
	exported := func(c client.Reader, revision string) (string, error) {
		b, _, err := ExportBundle(context.Background(), c, ns, rollout, revision)
		if err != nil {
			return "", err
		}
		return b.Ledger.Name, nil
	}

	one := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(fr, ledger(edited)).Build()
	for _, revision := range []string{"", rev} {
		if got, err := exported(one, revision); err != nil || got != edited.LedgerName(rollout) {
			t.Errorf("export of revision %q: ledger %s (%v), want the build's %s", revision, got, err, edited.LedgerName(rollout))
		}
	}

	two := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(fr, ledger(edited), ledger(other)).Build()
	if got, err := exported(two, ""); err != nil || got != edited.LedgerName(rollout) {
		t.Errorf("export of the candidate: ledger %s (%v), want the candidate's %s", got, err, edited.LedgerName(rollout))
	}
	_, err := exported(two, rev)
	if CodeOf(err) != CodeInvalid || !strings.Contains(err.Error(), edited.LedgerName(rollout)) || !strings.Contains(err.Error(), other.LedgerName(rollout)) {
		t.Errorf("export of a revision with two builds' ledgers: %v, want an error naming both", err)
	}

	own := build("")
	three := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(fr, ledger(edited), ledger(other), ledger(own)).Build()
	if got, err := exported(three, rev); err != nil || got != own.LedgerName(rollout) {
		t.Errorf("export of a revision with a ledger of its own: %s (%v), want %s", got, err, own.LedgerName(rollout))
	}
}

// Ledger reads a revision's ledger and the ledger that continues it as one: every entry in order,
// each signature reduced to its key id, the outcome of the latest Outcome entry though the part
// that holds it is not the last; a rollout with no ledger yet is Unmet.
func TestLedgerReadsItsPartsAsOne(t *testing.T) {
	const ns, rollout = "fleet", "web"
	cand := &v1alpha1.RevisionStatus{Revision: "main@sha1:4f2c0d9e81aa4f2c0d9e81aa4f2c0d9e81aa4f2c"}
	fr := &v1alpha1.FleetRollout{ObjectMeta: metav1.ObjectMeta{Name: rollout, Namespace: ns}}
	fr.Status.Candidate = cand
	first := &v1alpha1.RolloutLedger{ObjectMeta: metav1.ObjectMeta{Name: cand.LedgerName(rollout), Namespace: ns},
		Spec: v1alpha1.RolloutLedgerSpec{Rollout: rollout, Candidate: *cand, Outcome: v1alpha1.OutcomeCompleted}}
	for i := range v1alpha1.MaxLedgerEntries {
		e := v1alpha1.LedgerEntry{Index: i, Type: v1alpha1.LedgerEntryReceipt, Receipt: &v1alpha1.LedgerReceipt{Name: "r"},
			Signature: &v1alpha1.RecordSignature{KeyID: "k1", Envelope: "{}"}}
		if i == v1alpha1.MaxLedgerEntries-1 {
			e = v1alpha1.LedgerEntry{Index: i, Type: v1alpha1.LedgerEntryOutcome, Outcome: &v1alpha1.LedgerOutcome{Phase: v1alpha1.OutcomeCompleted}}
		}
		first.Spec.Entries = append(first.Spec.Entries, e)
	}
	second := &v1alpha1.RolloutLedger{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.LedgerPartName(first.Name, 2), Namespace: ns},
		Spec: v1alpha1.RolloutLedgerSpec{Rollout: rollout, Candidate: *cand, Continues: &v1alpha1.LedgerLink{Name: first.Name},
			Entries: []v1alpha1.LedgerEntry{{Index: v1alpha1.MaxLedgerEntries, Type: v1alpha1.LedgerEntryApproval, Approval: &v1alpha1.Approval{Revision: cand.Revision}}}}}
	c := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(fr, first, second).Build()
	v, err := Ledger(context.Background(), c, ns, rollout, "")
	if err != nil {
		t.Fatal(err)
	}
	if v.Ledger.Name != first.Name || len(v.Parts) != 2 || v.Parts[1] != second.Name || len(v.Entries) != v1alpha1.MaxLedgerEntries+1 ||
		v.Outcome != v1alpha1.OutcomeCompleted || v.Candidate.Revision != cand.Revision {
		t.Fatalf("ledger %s parts %v, %d entries, outcome %q, candidate %s", v.Ledger.Name, v.Parts, len(v.Entries), v.Outcome, v.Candidate.Revision)
	}
	if e := v.Entries[0]; e.SignedBy != "k1" || e.Signature != nil {
		t.Errorf("entry 0: signed by %q, signature %v: want the key id and no envelope", e.SignedBy, e.Signature)
	}
	if e := v.Entries[v1alpha1.MaxLedgerEntries]; e.Type != v1alpha1.LedgerEntryApproval || e.SignedBy != "" {
		t.Errorf("the continuing part's entry: %+v", e)
	}
	none := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(fr).Build()
	if _, err := Ledger(context.Background(), none, ns, rollout, ""); CodeOf(err) != CodeUnmet {
		t.Errorf("a rollout without a ledger: %v, want Unmet", err)
	}
}
