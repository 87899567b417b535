package ops

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/internal/attest"
)

// ExportBundle reads the ledger of rollout's revision (its candidate's when revision is empty), with
// the ledgers that continue it, and
// every receipt it lists, each with its evidence read from where the receipt keeps it (parts
// included), as the bundle tidegate receipts export writes. missing names the receipts the ledger
// lists that are gone; a receipt whose evidence cannot be read is exported without it (verifying
// the bundle names it).
func ExportBundle(ctx context.Context, c client.Reader, ns, rollout, revision string) (b *attest.Bundle, missing []string, err error) {
	parts, err := readLedger(ctx, c, ns, rollout, revision, "export")
	if err != nil {
		return nil, nil, err
	}
	var entries []v1alpha1.LedgerEntry
	for _, l := range parts {
		entries = append(entries, l.Spec.Entries...)
	}
	var receipts []attest.BundleReceipt
	seen := map[string]bool{}
	for _, e := range entries {
		if e.Receipt == nil || seen[e.Receipt.Name] {
			continue
		}
		seen[e.Receipt.Name] = true
		var rc v1alpha1.GateReceipt
		rref := Ref{Kind: "gatereceipt", Namespace: ns, Name: e.Receipt.Name}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: e.Receipt.Name}, &rc); err != nil {
			if apierrors.IsNotFound(err) {
				missing = append(missing, e.Receipt.Name)
				continue
			}
			return nil, nil, AsError(err, rref)
		}
		br, err := BundleReceiptOf(ctx, c, &rc)
		if err != nil {
			return nil, nil, err
		}
		receipts = append(receipts, br)
	}
	return attest.NewBundle(parts, receipts, metav1.Now()), missing, nil
}

// readLedger reads the ledger of rollout's revision (its candidate's when revision is empty) and the
// ledgers that continue it, in order. verb says what is done with it, for the error that asks for a
// revision when the rollout is gone: its ledgers outlive it.
func readLedger(ctx context.Context, c client.Reader, ns, rollout, revision, verb string) ([]*v1alpha1.RolloutLedger, error) {
	var first string
	if revision == "" {
		var fr v1alpha1.FleetRollout
		ref := RolloutRef(ns, rollout)
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: rollout}, &fr); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, Errorf(CodeNotFound, &ref, "fleetrollout %s/%s not found: give the revision to %s the ledger of a deleted rollout (kubectl -n %s get rolloutledgers -l %s=%s lists them)", ns, rollout, verb, ns, v1alpha1.RolloutLabel, rollout)
			}
			return nil, AsError(err, ref)
		}
		if fr.Status.Candidate == nil {
			return nil, Errorf(CodeInvalid, &ref, "fleetrollout %s/%s has no candidate yet: give the revision", ns, rollout)
		}
		revision = fr.Status.Candidate.Revision
		// The candidate's own ledger: a build of the revision of its own (an edit of the template
		// or of a cluster's values) keeps one apart from the revision's.
		first = fr.Status.Candidate.LedgerName(rollout)
	}
	if first == "" {
		var err error
		if first, err = ledgerOfRevision(ctx, c, ns, rollout, revision); err != nil {
			return nil, err
		}
	}
	ref := Ref{Kind: "rolloutledger", Namespace: ns, Name: first}
	parts, err := LedgerParts(ctx, c, ns, first)
	if err != nil {
		return nil, AsError(err, ref)
	}
	if len(parts) == 0 {
		return nil, Errorf(CodeUnmet, &ref, "no rolloutledger of fleetrollout %s/%s revision %s (%s): nothing was decided for it yet, or it was decided by a version without ledgers", ns, rollout, revision, ref.Name)
	}
	return parts, nil
}

// ledgerOfRevision names the first ledger of rollout's revision: the revision's own, or, when it has
// none, the one ledger of a build of it (a template or values edit), found by its candidate. A
// revision with several such ledgers and none of its own is refused with their names.
func ledgerOfRevision(ctx context.Context, c client.Reader, ns, rollout, revision string) (string, error) {
	own := v1alpha1.LedgerName(rollout, revision)
	var list v1alpha1.RolloutLedgerList
	if err := c.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{v1alpha1.RolloutLabel: rollout}); err != nil {
		return "", AsError(err, RolloutRef(ns, rollout))
	}
	var builds []string
	for _, l := range list.Items {
		switch {
		case l.Name == own:
			return own, nil
		case l.Spec.Continues == nil && l.Spec.Rollout == rollout && l.Spec.Candidate.Revision == revision:
			builds = append(builds, l.Name)
		}
	}
	if len(builds) > 1 {
		ref := RolloutRef(ns, rollout)
		return "", Errorf(CodeInvalid, &ref, "fleetrollout %s/%s revision %s has %d ledgers, one per build of the package (%s): export the rollout's candidate by giving no revision, or read one with kubectl -n %s get rolloutledger NAME -o yaml",
			ns, rollout, revision, len(builds), strings.Join(builds, ", "), ns)
	}
	if len(builds) == 1 {
		return builds[0], nil
	}
	return own, nil
}

// LedgerParts reads the ledger named first and every ledger that continues it (each part past a
// full one, v1alpha1.LedgerPartName), in order; none when there is no ledger of that name.
func LedgerParts(ctx context.Context, c client.Reader, namespace, first string) ([]*v1alpha1.RolloutLedger, error) {
	var parts []*v1alpha1.RolloutLedger
	for n := 1; ; n++ {
		l := &v1alpha1.RolloutLedger{}
		key := client.ObjectKey{Namespace: namespace, Name: v1alpha1.LedgerPartName(first, n)}
		err := c.Get(ctx, key, l)
		switch {
		case apierrors.IsNotFound(err):
			return parts, nil // the last part is full and nothing continues it yet
		case err != nil:
			return nil, fmt.Errorf("reading rolloutledger %s/%s: %w", key.Namespace, key.Name, err)
		}
		parts = append(parts, l)
		if len(l.Spec.Entries) < v1alpha1.MaxLedgerEntries {
			return parts, nil
		}
	}
}

// BundleReceiptOf is rc as a bundle holds it, with its evidence read from where the receipt keeps
// it (its spec, or ConfigMap parts read with c). A receipt whose evidence is gone or does not read
// back is kept without it (verifying it names the receipt); another error reading it is returned.
func BundleReceiptOf(ctx context.Context, c client.Reader, rc *v1alpha1.GateReceipt) (attest.BundleReceipt, error) {
	evidence, err := rc.Spec.StoredEvidence(func(p v1alpha1.EvidencePart) ([]byte, error) {
		var cm corev1.ConfigMap
		if err := c.Get(ctx, client.ObjectKey{Namespace: rc.Namespace, Name: p.Name}, &cm); err != nil {
			return nil, err
		}
		return cm.BinaryData[v1alpha1.EvidencePartKey], nil
	})
	if err != nil {
		if CodeOf(err) != CodeInternal && CodeOf(err) != CodeNotFound {
			return attest.BundleReceipt{}, AsError(fmt.Errorf("the evidence of gatereceipt %s/%s: %w", rc.Namespace, rc.Name, err),
				Ref{Kind: "gatereceipt", Namespace: rc.Namespace, Name: rc.Name})
		}
		evidence = nil
	}
	return attest.NewBundleReceipt(rc, evidence), nil
}
