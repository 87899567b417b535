package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	tgcue "github.com/tidegate/tidegate/cue"
)

// maxReceiptsPerRollout bounds how many receipts a rollout keeps; the oldest are pruned.
const maxReceiptsPerRollout = 200

// A receipt keeps at most maxReceiptReasons reasons (and as many limits), each at most
// maxReceiptReasonBytes, and says how many more there were: a wave of 1,000 clusters can fail
// with a reason per cluster, and the evidence holds them all.
const (
	maxReceiptReasons     = 50
	maxReceiptReasonBytes = 1024
)

// ReceiptObjects is a receipt and the ConfigMaps that keep its evidence's parts (none unless the
// evidence compresses to more than v1alpha1.MaxInlineGzip).
type ReceiptObjects struct {
	*v1alpha1.GateReceipt
	Parts []*corev1.ConfigMap
}

// BuildReceipt turns a decision into a receipt. Its name carries the digest of its content (without
// the evaluation time), so the same decision made again is recorded once; its evidence is kept as
// v1alpha1.NewGateReceipt says.
func BuildReceipt(fr *v1alpha1.FleetRollout, wave *v1alpha1.WaveStatus, targets []string, gate string, d GateDecision, approvals []v1alpha1.Approval, now metav1.Time) (*ReceiptObjects, error) {
	evidence, err := json.Marshal(d.Evidence)
	if err != nil {
		return nil, fmt.Errorf("encoding %s evidence for fleetrollout %s/%s: %w", gate, fr.Namespace, fr.Name, err)
	}
	spec := v1alpha1.GateReceiptSpec{
		Gate:         gate,
		Rollout:      fr.Name,
		Wave:         waveName(wave),
		Targets:      slices.Sorted(slices.Values(targets)),
		Class:        fr.Spec.Class,
		Owner:        fr.Spec.Owner,
		Cadence:      fr.Spec.Cadence,
		BlastRadius:  fr.Spec.BlastRadius,
		PolicyDigest: d.PolicyDigest,
		Approvals:    approvals,
		Result:       d.Result,
		Reasons:      capList(d.Reasons),
		Limits:       capList(d.Limits),
		EvaluatedAt:  now,
	}
	if fr.Status.Candidate != nil {
		spec.Candidate = *fr.Status.Candidate.DeepCopy()
	}
	if fr.Status.LastKnownGood != nil {
		spec.KnownGood = fr.Status.LastKnownGood.DeepCopy()
	}
	rc, parts, err := v1alpha1.NewGateReceipt(fr.Namespace, spec, evidence)
	if err != nil {
		return nil, fmt.Errorf("%s receipt for fleetrollout %s/%s: %w", gate, fr.Namespace, fr.Name, err)
	}
	return &ReceiptObjects{GateReceipt: rc, Parts: parts}, nil
}

// ReceiptDigestAnnotation holds the content digest a receipt was named after; `tidegate receipts verify` recomputes it.
const ReceiptDigestAnnotation = v1alpha1.ContentDigestAnnotation

// WriteReceipt creates the receipt, then its parts, owned by the receipt (so they go when it goes).
// The receipt has no owner reference: it is the record of a decision, and outlives the rollout
// (labelled tidegate.dev/rollout; deleting them is the user's explicit act). A receipt that already
// exists with the same name is the same decision: its parts are written again, since a write may
// have stopped between the receipt and its parts.
func WriteReceipt(ctx context.Context, c client.Client, ro *ReceiptObjects) error {
	rc := ro.GateReceipt
	err := c.Create(ctx, rc, client.FieldOwner(v1alpha1.FieldManager))
	switch {
	case err == nil:
	case !apierrors.IsAlreadyExists(err):
		return fmt.Errorf("writing gate receipt %s/%s: %w", rc.Namespace, rc.Name, err)
	case len(ro.Parts) == 0:
		return nil
	default:
		existing := &v1alpha1.GateReceipt{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(rc), existing); err != nil {
			return fmt.Errorf("reading gate receipt %s/%s to write its evidence's parts: %w", rc.Namespace, rc.Name, err)
		}
		if !slices.Equal(existing.Spec.EvidenceParts, rc.Spec.EvidenceParts) {
			return nil // the same decision, its evidence kept another way
		}
		rc = existing
	}
	for _, p := range ro.Parts {
		p.OwnerReferences = []metav1.OwnerReference{{
			APIVersion: v1alpha1.GroupVersion.String(), Kind: v1alpha1.GateReceiptKind, Name: rc.Name, UID: rc.UID,
		}}
		if err := c.Create(ctx, p, client.FieldOwner(v1alpha1.FieldManager)); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("writing configmap %s/%s, a part of the evidence of gate receipt %s: %w", p.Namespace, p.Name, rc.Name, err)
		}
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

// capList is in sorted, each entry cut to maxReceiptReasonBytes, without repeats, and at most
// maxReceiptReasons of them followed by "… and N more".
func capList(in []string) []string {
	out := make([]string, 0, len(in))
	for _, s := range in {
		out = append(out, tgcue.Truncate(s, maxReceiptReasonBytes))
	}
	out = sortedUnique(out)
	if len(out) > maxReceiptReasons {
		out = append(out[:maxReceiptReasons:maxReceiptReasons], fmt.Sprintf("… and %d more", len(out)-maxReceiptReasons))
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// sortedUnique returns a sorted copy of in without repeats.
func sortedUnique(in []string) []string {
	return slices.Compact(slices.Sorted(slices.Values(in)))
}
