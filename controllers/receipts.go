package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// maxInlineEvidence is the largest evidence document kept inside a receipt; larger evidence is
// recorded by digest only, so receipts stay well under etcd's object size limit.
const maxInlineEvidence = 64 << 10

// maxReceiptsPerRollout bounds how many receipts a rollout keeps; the oldest are pruned.
const maxReceiptsPerRollout = 200

// buildReceipt turns a decision into a receipt. Its name carries the digest of its content (without
// the evaluation time), so the same decision made again is recorded once.
func buildReceipt(fr *v1alpha1.FleetRollout, wave *v1alpha1.WaveStatus, targets []string, gate string, d GateDecision, approvals []v1alpha1.Approval, now metav1.Time) (*v1alpha1.GateReceipt, error) {
	evidence, err := json.Marshal(d.Evidence)
	if err != nil {
		return nil, fmt.Errorf("encoding %s evidence for fleetrollout %s/%s: %w", gate, fr.Namespace, fr.Name, err)
	}
	evidenceDigest, err := v1alpha1.EvidenceDigest(evidence)
	if err != nil {
		return nil, fmt.Errorf("digesting %s evidence for fleetrollout %s/%s: %w", gate, fr.Namespace, fr.Name, err)
	}
	spec := v1alpha1.GateReceiptSpec{
		Gate:           gate,
		Rollout:        fr.Name,
		Wave:           waveName(wave),
		Targets:        slices.Sorted(slices.Values(targets)),
		Class:          fr.Spec.Class,
		Owner:          fr.Spec.Owner,
		Cadence:        fr.Spec.Cadence,
		BlastRadius:    fr.Spec.BlastRadius,
		PolicyDigest:   d.PolicyDigest,
		EvidenceDigest: evidenceDigest,
		Approvals:      approvals,
		Result:         d.Result,
		Reasons:        sortedUnique(d.Reasons),
		Limits:         sortedUnique(d.Limits),
		EvaluatedAt:    now,
	}
	if fr.Status.Candidate != nil {
		spec.Candidate = *fr.Status.Candidate.DeepCopy()
	}
	if fr.Status.LastKnownGood != nil {
		spec.KnownGood = fr.Status.LastKnownGood.DeepCopy()
	}
	if len(evidence) <= maxInlineEvidence {
		spec.Evidence = &apiextensionsv1.JSON{Raw: evidence}
	}
	digest, err := spec.ContentDigest()
	if err != nil {
		return nil, err
	}
	return &v1alpha1.GateReceipt{
		ObjectMeta: metav1.ObjectMeta{
			Name:        v1alpha1.ReceiptName(fr.Name, gate, digest),
			Namespace:   fr.Namespace,
			Labels:      map[string]string{v1alpha1.RolloutLabel: fr.Name},
			Annotations: map[string]string{ReceiptDigestAnnotation: digest},
		},
		Spec: spec,
	}, nil
}

// ReceiptDigestAnnotation holds the content digest a receipt was named after; `tidegate receipts verify` recomputes it.
const ReceiptDigestAnnotation = "tidegate.dev/content-digest"

// writeReceipt creates the receipt; one that already exists with the same name is the same decision.
func writeReceipt(ctx context.Context, c client.Client, fr *v1alpha1.FleetRollout, rc *v1alpha1.GateReceipt) error {
	if err := controllerutil.SetOwnerReference(fr, rc, c.Scheme()); err != nil {
		return err
	}
	if err := c.Create(ctx, rc, client.FieldOwner(v1alpha1.FieldManager)); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("writing gate receipt %s/%s: %w", rc.Namespace, rc.Name, err)
	}
	return nil
}

// pruneReceipts deletes the oldest receipts of the rollout past maxReceiptsPerRollout, never one
// the rollout's status still references.
func pruneReceipts(ctx context.Context, c client.Client, fr *v1alpha1.FleetRollout) error {
	var list v1alpha1.GateReceiptList
	if err := c.List(ctx, &list, client.InNamespace(fr.Namespace), client.MatchingLabels{v1alpha1.RolloutLabel: fr.Name}); err != nil {
		return err
	}
	if len(list.Items) <= maxReceiptsPerRollout {
		return nil
	}
	referenced := map[string]bool{}
	for _, w := range fr.Status.Waves {
		for _, g := range w.Gates {
			referenced[g.Receipt] = true
		}
	}
	sort.Slice(list.Items, func(i, j int) bool {
		return list.Items[i].Spec.EvaluatedAt.Before(&list.Items[j].Spec.EvaluatedAt)
	})
	excess := len(list.Items) - maxReceiptsPerRollout
	for i := 0; i < len(list.Items) && excess > 0; i++ {
		rc := &list.Items[i]
		if referenced[rc.Name] {
			continue
		}
		if err := c.Delete(ctx, rc); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("pruning gate receipt %s/%s: %w", rc.Namespace, rc.Name, err)
		}
		excess--
	}
	return nil
}

// sortedUnique returns a sorted copy of in without repeats.
func sortedUnique(in []string) []string {
	return slices.Compact(slices.Sorted(slices.Values(in)))
}
