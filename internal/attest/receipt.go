package attest

import (
	"errors"
	"fmt"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// CheckMissing is the result of a receipt check that cannot be made because the receipt no longer
// keeps what it is made over (its evidence, of which only the digest is left). It fails, as
// CheckFail does.
const CheckMissing = "missing"

// The checks of a receipt's content, by name.
const (
	CheckContentDigest  = "content-digest"
	CheckName           = "name"
	CheckEvidenceDigest = "evidence-digest"
)

// ReceiptCheck is one check of a receipt's content against what the receipt records of it. Each
// caller words it its own way (receipts verify on the hub, a bundle's verification offline); what
// passes and what fails is decided here alone.
type ReceiptCheck struct {
	// Check is CheckContentDigest, CheckName or CheckEvidenceDigest.
	Check string
	// Result is CheckPass, CheckFail or CheckMissing.
	Result string
	// Recorded is what the receipt records: its content-digest annotation, its name, its
	// spec.evidenceDigest. Empty for a content digest that could not be recomputed.
	Recorded string
	// Recomputed is what the receipt's content gives; empty when it could not be computed (Cause).
	Recomputed string
	// Cause is why the check could not be recomputed, when it could not; the check then fails.
	Cause error
}

// CheckReceipt recomputes what rc's content-digest annotation, its name and its
// spec.evidenceDigest say of its content, over evidence: the receipt's evidence as read from
// where it is kept, nil when it keeps none, and unread, when not nil, why it could not be read.
//
// Evidence that cannot be read fails the content and evidence digests, and a content digest that
// cannot be recomputed ends the checks: the name is the digest's, and the evidence that could not
// be put in canonical form for one cannot be for the other. A receipt that records an evidence
// digest and keeps no evidence is CheckMissing; one that records neither has no evidence to check
// (its content digest covers that it has none).
func CheckReceipt(rc *v1alpha1.GateReceipt, evidence []byte, unread error) []ReceiptCheck {
	if unread != nil {
		return []ReceiptCheck{
			{Check: CheckContentDigest, Result: CheckFail, Cause: fmt.Errorf("the evidence cannot be read: %w", unread)},
			{Check: CheckEvidenceDigest, Result: CheckFail, Recorded: rc.Spec.EvidenceDigest, Cause: errors.New("the evidence cannot be read")},
		}
	}
	digest, err := rc.Spec.ContentDigestOf(evidence)
	if err != nil {
		return []ReceiptCheck{{Check: CheckContentDigest, Result: CheckFail, Cause: err}}
	}
	checks := []ReceiptCheck{
		compared(CheckContentDigest, rc.Annotations[v1alpha1.ContentDigestAnnotation], digest),
		compared(CheckName, rc.Name, v1alpha1.ReceiptName(rc.Spec.Rollout, rc.Spec.Gate, digest)),
	}
	ed := ReceiptCheck{Check: CheckEvidenceDigest, Result: CheckPass, Recorded: rc.Spec.EvidenceDigest}
	switch {
	case evidence == nil && ed.Recorded != "":
		ed.Result = CheckMissing
	case evidence != nil:
		d, err := v1alpha1.EvidenceDigest(evidence)
		if err != nil {
			ed.Result, ed.Cause = CheckFail, err
		} else {
			ed = compared(CheckEvidenceDigest, ed.Recorded, d)
		}
	}
	return append(checks, ed)
}

// compared is the check that recorded is recomputed.
func compared(check, recorded, recomputed string) ReceiptCheck {
	c := ReceiptCheck{Check: check, Result: CheckPass, Recorded: recorded, Recomputed: recomputed}
	if recorded != recomputed {
		c.Result = CheckFail
	}
	return c
}
