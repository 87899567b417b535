package attest

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// BundleKind is the kind of an exported bundle (apiVersion tidegate.dev/v1alpha1).
const BundleKind = "ReceiptBundle"

// Bundle is the whole record of one revision's rollout, to verify with no cluster: its ledger and
// every receipt the ledger lists, each with its evidence.
type Bundle struct {
	APIVersion string                  `json:"apiVersion"`
	Kind       string                  `json:"kind"`
	ExportedAt metav1.Time             `json:"exportedAt"`
	Ledger     *v1alpha1.RolloutLedger `json:"ledger"`
	// Continued are the ledgers that continue Ledger once it is full, in order: each names the
	// one before it (spec.continues).
	Continued []*v1alpha1.RolloutLedger `json:"continued,omitempty"`
	Receipts  []BundleReceipt           `json:"receipts"`
}

// BundleReceipt is a receipt as exported: the object without its managed fields, its evidence moved
// out of the spec (spec.evidence, evidenceGzip and evidenceParts are empty) into evidence, decoded.
type BundleReceipt struct {
	Receipt  *v1alpha1.GateReceipt `json:"receipt"`
	Evidence json.RawMessage       `json:"evidence,omitempty"`
}

// NewBundleReceipt is rc as a bundle keeps it, with evidence (its stored evidence, decoded; nil for none).
func NewBundleReceipt(rc *v1alpha1.GateReceipt, evidence []byte) BundleReceipt {
	c := rc.DeepCopy()
	c.ManagedFields = nil
	c.Spec.Evidence, c.Spec.EvidenceGzip, c.Spec.EvidenceParts = nil, "", nil
	c.APIVersion, c.Kind = v1alpha1.GroupVersion.String(), v1alpha1.GateReceiptKind
	return BundleReceipt{Receipt: c, Evidence: evidence}
}

// NewBundle is the bundle of the ledger parts (the first, then each that continues it) and receipts.
func NewBundle(parts []*v1alpha1.RolloutLedger, receipts []BundleReceipt, now metav1.Time) *Bundle {
	b := &Bundle{APIVersion: v1alpha1.GroupVersion.String(), Kind: BundleKind, ExportedAt: now, Receipts: receipts}
	for i, l := range parts {
		c := l.DeepCopy()
		c.ManagedFields = nil
		c.APIVersion, c.Kind = v1alpha1.GroupVersion.String(), v1alpha1.RolloutLedgerKind
		if i == 0 {
			b.Ledger = c
		} else {
			b.Continued = append(b.Continued, c)
		}
	}
	return b
}

// Check results.
const (
	CheckPass = "pass"
	CheckFail = "fail"
	// CheckSkipped is a signature check made without keys: it fails nothing, and says so.
	CheckSkipped = "skipped"
)

// Check is one check of a verification: what was checked, of which record, and why it failed.
type Check struct {
	// Record is the receipt or ledger entry checked: "gatereceipt NAME", "entry N", or "bundle".
	Record string `json:"record"`
	// Check names the check: content-digest, name, evidence-digest, signature, ledger-index,
	// ledger-chain, ledger-link, ledger-digest, ledger-signature, ledger-receipt, candidate,
	// outcome-gates.
	Check  string `json:"check"`
	Result string `json:"result"`
	Detail string `json:"detail,omitempty"`
	// KeyID is, for a signature check that passed, the key that signed.
	KeyID string `json:"keyID,omitempty"`
}

// Verification is the checks of a bundle, in order; Verified when none failed.
type Verification struct {
	Rollout   string  `json:"rollout"`
	Candidate string  `json:"candidate"`
	Verified  bool    `json:"verified"`
	Checks    []Check `json:"checks"`
}

// Failures are the checks that failed.
func (v *Verification) Failures() []Check {
	var out []Check
	for _, c := range v.Checks {
		if c.Result == CheckFail {
			out = append(out, c)
		}
	}
	return out
}

func (v *Verification) add(record, check string, err error, detail string) {
	c := Check{Record: record, Check: check, Result: CheckPass, Detail: detail}
	if err != nil {
		c.Result, c.Detail = CheckFail, err.Error()
	}
	v.Checks = append(v.Checks, c)
}

// Verify checks b with keys. With keys, every receipt and entry must be signed by one of them; with
// none, signatures are not checked (each signature check is skipped and says so), the rest is:
//
//   - each receipt: its content digest recomputed over its evidence against its annotation and its
//     name, its evidence digest, and its signature (a statement about its candidate whose predicate
//     is its content, by a key of keys);
//   - the ledger: each entry's index, its previous against the digest of the entry before it, its
//     digest recomputed, and its signature; each ledger that continues a full one (Continued)
//     names the one before it and its last digest, and its first entry chains on from there;
//   - each Receipt entry: the receipt is in the bundle with that content digest, gate, wave and
//     result, about the ledger's candidate;
//   - each Completed outcome: every gate it says a wave passed on is a Pass receipt of that gate and
//     wave that an earlier entry lists.
func Verify(b *Bundle, keys *KeySet) *Verification {
	v := &Verification{}
	if b == nil || b.Ledger == nil {
		v.add("bundle", "bundle", errors.New("the bundle has no ledger"), "")
		return v
	}
	l := b.Ledger
	v.Rollout, v.Candidate = l.Namespace+"/"+l.Spec.Rollout, l.Spec.Candidate.Revision
	if b.Kind != BundleKind || b.APIVersion != v1alpha1.GroupVersion.String() {
		v.add("bundle", "bundle", fmt.Errorf("a %s %s, not a %s %s", b.APIVersion, b.Kind, v1alpha1.GroupVersion, BundleKind), "")
	}
	signed := keys.Len() > 0

	receipts := map[string]*v1alpha1.GateReceipt{}
	for i := range b.Receipts {
		br := &b.Receipts[i]
		if br.Receipt == nil {
			v.add(fmt.Sprintf("receipts[%d]", i), "bundle", errors.New("an entry without a receipt"), "")
			continue
		}
		rc := br.Receipt
		rec := "gatereceipt " + rc.Name
		receipts[rc.Name] = rc
		v.verifyReceipt(rec, rc, br.Evidence, keys, signed)
		if rc.Namespace != l.Namespace || rc.Spec.Rollout != l.Spec.Rollout || rc.Spec.Candidate.Revision != l.Spec.Candidate.Revision ||
			rc.Spec.Candidate.Digest != l.Spec.Candidate.Digest ||
			(rc.Spec.Candidate.BuildHash != "" && l.Spec.Candidate.BuildHash != "" && rc.Spec.Candidate.BuildHash != l.Spec.Candidate.BuildHash) {
			v.add(rec, "candidate", fmt.Errorf("about %s/%s candidate %s (%s), the ledger is of %s/%s candidate %s (%s)",
				rc.Namespace, rc.Spec.Rollout, rc.Spec.Candidate.Revision, rc.Spec.Candidate.Digest,
				l.Namespace, l.Spec.Rollout, l.Spec.Candidate.Revision, l.Spec.Candidate.Digest), "")
		}
	}

	passed := map[string]bool{} // gate/wave of the Pass receipts listed so far
	prev := ""
	parts := append([]*v1alpha1.RolloutLedger{l}, b.Continued...)
	for k, p := range parts {
		if k > 0 {
			v.add("rolloutledger "+p.Name, "ledger-link", checkLink(p, parts[k-1], l), "")
		} else if p.Spec.Continues != nil {
			v.add("rolloutledger "+p.Name, "ledger-link", fmt.Errorf("the bundle's first ledger continues %s, which the bundle does not hold", p.Spec.Continues.Name), "")
		}
		prev = v.verifyEntries(p, k, prev, receipts, passed, keys, signed)
	}
	v.Verified = len(v.Failures()) == 0
	return v
}

// checkLink checks that ledger p continues full, the part before it of the record whose first
// part is first: it names full and its last entry, full holds as many entries as a ledger
// holds, and both record the same rollout and candidate.
func checkLink(p, full, first *v1alpha1.RolloutLedger) error {
	c := p.Spec.Continues
	n := len(full.Spec.Entries)
	switch {
	case c == nil:
		return fmt.Errorf("follows rolloutledger %s and names no ledger it continues", full.Name)
	case c.Name != full.Name:
		return fmt.Errorf("continues %s, the ledger before it is %s: a part was removed or reordered", c.Name, full.Name)
	case n < v1alpha1.MaxLedgerEntries:
		return fmt.Errorf("continues %s, which holds %d entries, fewer than the %d a ledger is continued after", full.Name, n, v1alpha1.MaxLedgerEntries)
	case c.Digest != full.Spec.Entries[n-1].Digest:
		return fmt.Errorf("continues %s at digest %s, its last entry has %s: the ledger it continues was changed", full.Name, c.Digest, full.Spec.Entries[n-1].Digest)
	case p.Namespace != first.Namespace || p.Spec.Rollout != first.Spec.Rollout || p.Spec.Candidate.Revision != first.Spec.Candidate.Revision ||
		p.Spec.Candidate.Digest != first.Spec.Candidate.Digest || p.Spec.Candidate.BuildHash != first.Spec.Candidate.BuildHash:
		return fmt.Errorf("records %s/%s candidate %s, the ledger it continues %s/%s candidate %s", p.Namespace, p.Spec.Rollout, p.Spec.Candidate.Revision,
			first.Namespace, first.Spec.Rollout, first.Spec.Candidate.Revision)
	}
	return nil
}

// verifyEntries checks the entries of ledger l, part k of the record (from 0), chained from prev,
// the digest of the entry before its first; it returns the digest of its last.
func (v *Verification) verifyEntries(l *v1alpha1.RolloutLedger, k int, prev string, receipts map[string]*v1alpha1.GateReceipt,
	passed map[string]bool, keys *KeySet, signed bool) string {
	for i := range l.Spec.Entries {
		e := &l.Spec.Entries[i]
		rec := fmt.Sprintf("entry %d", i)
		if k > 0 {
			rec = fmt.Sprintf("rolloutledger %s entry %d", l.Name, i)
		}
		var err error
		if e.Index != i {
			err = fmt.Errorf("entry %d says it is entry %d: the ledger was reordered or an entry removed", i, e.Index)
		}
		v.add(rec, "ledger-index", err, "")
		err = nil
		if e.Previous != prev {
			err = fmt.Errorf("names the previous entry's digest %s, the entry before it has %s: the chain is broken (an entry reordered, removed or changed)", orNone(e.Previous), orNone(prev))
		}
		v.add(rec, "ledger-chain", err, "")
		d, err := EntryDigest(l, e)
		if err == nil && d != e.Digest {
			err = fmt.Errorf("records digest %s, its content digests to %s: the entry was changed", e.Digest, d)
		}
		v.add(rec, "ledger-digest", err, "")
		prev = e.Digest
		if signed {
			id, err := VerifyEntrySignature(l, e, keys)
			v.addSignature(rec, "ledger-signature", id, err)
		} else {
			v.skip(rec, "ledger-signature", e.Signature)
		}
		switch e.Type {
		case v1alpha1.LedgerEntryReceipt:
			v.add(rec, "ledger-receipt", checkListedReceipt(e, receipts), receiptName(e))
			if e.Receipt != nil && e.Receipt.Result == v1alpha1.ResultPass {
				if rc := receipts[e.Receipt.Name]; rc != nil && rc.Spec.Result == v1alpha1.ResultPass {
					passed[e.Receipt.Gate+"/"+e.Receipt.Wave+"/"+e.Receipt.Name] = true
				}
			}
		case v1alpha1.LedgerEntryOutcome:
			if e.Outcome != nil && e.Outcome.Phase == v1alpha1.OutcomeCompleted {
				v.add(rec, "outcome-gates", checkOutcome(e.Outcome, passed), "")
			}
		}
	}
	return prev
}

// verifyReceipt checks one receipt of the bundle (CheckReceipt over the evidence the bundle holds
// for it) and its signature.
func (v *Verification) verifyReceipt(rec string, rc *v1alpha1.GateReceipt, evidence json.RawMessage, keys *KeySet, signed bool) {
	var ev []byte
	if len(evidence) > 0 && string(evidence) != "null" {
		ev = evidence
	}
	for _, ch := range CheckReceipt(rc, ev, nil) {
		v.add(rec, ch.Check, receiptFailure(ch), "")
	}
	if signed {
		id, err := VerifyReceiptSignature(rc, keys)
		v.addSignature(rec, "signature", id, err)
	} else {
		v.skip(rec, "signature", rc.Spec.Signature)
	}
}

// receiptFailure says why a check of CheckReceipt failed, as a bundle's verification reports it;
// nil when it passed.
func receiptFailure(ch ReceiptCheck) error {
	switch {
	case ch.Result == CheckPass:
		return nil
	case ch.Check == CheckContentDigest && ch.Cause != nil:
		return ch.Cause
	case ch.Check == CheckContentDigest:
		return fmt.Errorf("content digests to %s, the receipt was named after %s: its content or evidence was changed", ch.Recomputed, orNone(ch.Recorded))
	case ch.Check == CheckName:
		return fmt.Errorf("its name is not %s, the name of its content", ch.Recomputed)
	case ch.Result == CheckMissing:
		return fmt.Errorf("records evidence digest %s and the bundle holds no evidence for it", ch.Recorded)
	case ch.Cause != nil:
		return fmt.Errorf("the evidence is not JSON: %w", ch.Cause)
	}
	return fmt.Errorf("the evidence digests to %s, the receipt records %s: the evidence was changed", ch.Recomputed, orNone(ch.Recorded))
}

// skip records a signature check made without keys.
func (v *Verification) skip(record, check string, sig *v1alpha1.RecordSignature) {
	detail := "unsigned"
	if sig != nil {
		detail = "signed by key " + sig.KeyID + ", not checked: no key given (--key)"
	}
	v.Checks = append(v.Checks, Check{Record: record, Check: check, Result: CheckSkipped, Detail: detail})
}

func checkListedReceipt(e *v1alpha1.LedgerEntry, receipts map[string]*v1alpha1.GateReceipt) error {
	lr := e.Receipt
	if lr == nil {
		return errors.New("a Receipt entry that names no receipt")
	}
	rc := receipts[lr.Name]
	if rc == nil {
		return fmt.Errorf("gatereceipt %s, which the ledger lists, is not in the bundle: a receipt was dropped", lr.Name)
	}
	var diffs []string
	if got := rc.Annotations[v1alpha1.ContentDigestAnnotation]; got != lr.ContentDigest {
		diffs = append(diffs, fmt.Sprintf("content digest %s, the ledger lists %s", got, lr.ContentDigest))
	}
	if rc.Spec.Gate != lr.Gate || rc.Spec.Wave != lr.Wave || rc.Spec.Result != lr.Result {
		diffs = append(diffs, fmt.Sprintf("%s %s on wave %q, the ledger lists %s %s on wave %q", rc.Spec.Gate, rc.Spec.Result, rc.Spec.Wave, lr.Gate, lr.Result, lr.Wave))
	}
	if len(diffs) > 0 {
		return fmt.Errorf("gatereceipt %s has %s", lr.Name, strings.Join(diffs, "; "))
	}
	return nil
}

func checkOutcome(o *v1alpha1.LedgerOutcome, passed map[string]bool) error {
	var missing []string
	for _, w := range o.Waves {
		for _, g := range w.Gates {
			if g.Result != v1alpha1.ResultPass || !passed[g.Gate+"/"+w.Name+"/"+g.Receipt] {
				missing = append(missing, fmt.Sprintf("%s of wave %s (%s, receipt %s)", g.Gate, w.Name, g.Result, orNone(g.Receipt)))
			}
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("the outcome Completed relies on gates without a passing receipt listed before it: %s", strings.Join(missing, ", "))
	}
	return nil
}

func receiptName(e *v1alpha1.LedgerEntry) string {
	if e.Receipt == nil {
		return ""
	}
	return e.Receipt.Name
}

// addSignature records a signature check: by key id when it passed.
func (v *Verification) addSignature(record, check, keyID string, err error) {
	if err != nil {
		v.add(record, check, err, "")
		return
	}
	v.Checks = append(v.Checks, Check{Record: record, Check: check, Result: CheckPass, Detail: "key " + keyID, KeyID: keyID})
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
