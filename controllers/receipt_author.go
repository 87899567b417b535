package controllers

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/internal/attest"
)

// ReceiptAuthor is the controller as the author of receipts: it signs the receipts it writes (with
// no Signer, it leaves them unsigned) and tells them from receipts someone else wrote. Only a
// receipt it wrote is taken up as a decision after a crash, or counted as the decision a write
// found already made: anything else with the right labels and name is ignored, and the gate is
// decided afresh.
type ReceiptAuthor struct {
	Signer *attest.Signer
}

// author is the reconciler as the author of its receipts.
func (r *FleetRolloutReconciler) author() ReceiptAuthor { return ReceiptAuthor{Signer: r.Signer} }

// sign signs rc when a signer is configured, and checks that, signed, it still fits.
func (a ReceiptAuthor) sign(rc *v1alpha1.GateReceipt) error {
	if a.Signer == nil {
		return nil
	}
	if err := attest.SignReceipt(a.Signer, rc); err != nil {
		return err
	}
	return v1alpha1.CheckReceiptSize(rc)
}

// Wrote says why rc is not a receipt this controller wrote, or nil when it is. With a signing key,
// its signature must verify with that key: nobody else holds it. Without one, every field manager
// of rc must be tidegate's, as WriteReceipt creates it. A client can name any field manager, so
// that tells the controller's receipts from those written by hand or by another tool, not from a
// forgery: what keeps a forger from writing receipts at all is the admission policy of
// config/admission, which lets only the controller's ServiceAccount write them.
func (a ReceiptAuthor) Wrote(rc *v1alpha1.GateReceipt) error {
	if a.Signer != nil {
		if _, err := attest.VerifyReceiptSignature(rc, attest.NewKeySet(a.Signer.Public())); err != nil {
			return fmt.Errorf("gatereceipt %s/%s is not signed by the controller's key %s: %w", rc.Namespace, rc.Name, a.Signer.KeyID(), err)
		}
		return nil
	}
	if len(rc.ManagedFields) == 0 {
		return fmt.Errorf("gatereceipt %s/%s records no field manager: the controller creates its receipts as field manager %s", rc.Namespace, rc.Name, v1alpha1.FieldManager)
	}
	for _, m := range rc.ManagedFields {
		if m.Manager != v1alpha1.FieldManager {
			return fmt.Errorf("gatereceipt %s/%s was written by field manager %q, not by the controller (%s)", rc.Namespace, rc.Name, m.Manager, v1alpha1.FieldManager)
		}
	}
	return nil
}

// maxReceiptNames bounds the names a receipt is tried under when others hold its name.
const maxReceiptNames = 5

// errNameTaken is a receipt's name held by a receipt the controller did not write.
var errNameTaken = errors.New("the name is held by a receipt the controller did not write")

// createReceipt creates rc under its digest name or, when a receipt the controller did not write
// holds that name (it would otherwise pass for the decision), under the name with "-2", "-3", ...
// appended: the same names in the same order every time, so a decision written under one of them
// before a crash is found there again. It signs rc under the name it is written under (the
// signature covers the name). It returns the receipt that holds the decision: rc, or the same
// decision written earlier.
func createReceipt(ctx context.Context, c client.Client, rc *v1alpha1.GateReceipt, a ReceiptAuthor) (*v1alpha1.GateReceipt, error) {
	base := rc.Name
	var taken []string
	for k := 1; k <= maxReceiptNames; k++ {
		if k > 1 {
			rc.Name = fmt.Sprintf("%s-%d", base, k)
		}
		if err := a.sign(rc); err != nil {
			return nil, err
		}
		err := c.Create(ctx, rc, client.FieldOwner(v1alpha1.FieldManager))
		switch {
		case err == nil:
			return rc, nil
		case !apierrors.IsAlreadyExists(err):
			return nil, fmt.Errorf("writing gate receipt %s/%s: %w", rc.Namespace, rc.Name, err)
		}
		existing := &v1alpha1.GateReceipt{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(rc), existing); err != nil {
			return nil, fmt.Errorf("reading gate receipt %s/%s, which exists already: %w", rc.Namespace, rc.Name, err)
		}
		same := existing.Annotations[v1alpha1.ContentDigestAnnotation] == rc.Annotations[v1alpha1.ContentDigestAnnotation]
		if a.Wrote(existing) == nil && same {
			return existing, nil
		}
		taken = append(taken, rc.Name)
	}
	return nil, fmt.Errorf("writing gate receipt %s/%s: %w: %v; a cluster admin can delete them (kubectl -n %s delete gatereceipt NAME)",
		rc.Namespace, base, errNameTaken, taken, rc.Namespace)
}
