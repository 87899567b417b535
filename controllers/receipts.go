package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	tgcue "github.com/tidegate/tidegate/cue"
	"github.com/tidegate/tidegate/evidence/collector"
	"github.com/tidegate/tidegate/internal/attest"
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
	rc.Annotations[ReceiptGenerationAnnotation] = strconv.FormatInt(fr.Generation, 10)
	return &ReceiptObjects{GateReceipt: rc, Parts: parts}, nil
}

// ReceiptGenerationAnnotation holds the rollout's metadata.generation when the receipt's decision
// was made: a decision written but not recorded in status is taken up after a restart only while
// the spec is the one it was made for (unrecordedReceipt).
const ReceiptGenerationAnnotation = "tidegate.dev/rollout-generation"

// ReceiptDigestAnnotation holds the content digest a receipt was named after; `tidegate receipts verify` recomputes it.
const ReceiptDigestAnnotation = v1alpha1.ContentDigestAnnotation

// WriteReceipt signs the receipt as a's (createReceipt) and creates it, then its parts, owned by
// the receipt (so they go when it goes). The receipt has no owner reference: it is the record of a
// decision, and outlives the rollout (labelled tidegate.dev/rollout; deleting them is the user's
// explicit act). A receipt a wrote that already exists with the same name and content is the same
// decision: its parts are written again, since a write may have stopped between the receipt and
// its parts. ro's receipt ends up named as it was written.
func WriteReceipt(ctx context.Context, c client.Client, ro *ReceiptObjects, a ReceiptAuthor) error {
	rc, err := createReceipt(ctx, c, ro.GateReceipt, a)
	if err != nil || len(ro.Parts) == 0 {
		return err
	}
	if rc != ro.GateReceipt && !slices.Equal(rc.Spec.EvidenceParts, ro.Spec.EvidenceParts) {
		return nil // the same decision, its evidence kept another way
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
// the rollout's status still references or a ledger lists. With export, each is exported first,
// and one that is not is kept. beforeDelete, when set, runs just before each delete (the
// crash-point hook).
func pruneReceipts(ctx context.Context, c client.Client, fr *v1alpha1.FleetRollout, export *ReceiptExport, beforeDelete func(name string) error) error {
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
	// A receipt a ledger lists is part of the record of its revision: it is kept with the ledger.
	var ledgers v1alpha1.RolloutLedgerList
	if err := c.List(ctx, &ledgers, client.InNamespace(fr.Namespace), client.MatchingLabels{v1alpha1.RolloutLabel: fr.Name}); err != nil {
		return err
	}
	for i := range ledgers.Items {
		for name := range attest.ListedIn(&ledgers.Items[i]).Receipts {
			referenced[name] = true
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
		if export != nil {
			if err := export.export(ctx, rc); err != nil {
				return err
			}
		}
		if beforeDelete != nil {
			if err := beforeDelete(rc.Name); err != nil {
				return err
			}
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

// unrecordedDecision is the decision of gate for wave i, among the rollout's receipts, whose
// receipt was written but that status does not record (the controller stopped between the two, or
// a later write of the pass failed), or nil: the receipt, if the controller wrote it, is the decision, so it is recorded as it
// was made, never made again, which would write a second receipt over other evidence. The receipts
// come from the manager's cache, which a restarted manager syncs before its first reconcile, and
// which holds them without their evidence (trimReceipt): a deploySafe receipt's evidence, which names
// the targets to hold back, is read from the API server. One that cannot be read, or whose evidence
// is kept in parts, is not taken up (the controller reads no ConfigMap): that gate is decided again.
func (r *FleetRolloutReconciler) unrecordedDecision(ctx context.Context, p *pass, receipts []v1alpha1.GateReceipt, i int, gate string) (*decidedGate, *v1alpha1.GateReceipt) {
	freshness := collector.DefaultFreshness
	if r.Evidence != nil && r.Evidence.Freshness > 0 {
		freshness = r.Evidence.Freshness
	}
	rc := unrecordedReceipt(receipts, p.Rollout, i, gate, p.Now, freshness, r.author())
	if rc == nil {
		return nil, nil
	}
	d := GateDecision{Result: rc.Spec.Result, Reasons: slices.Clone(rc.Spec.Reasons), Limits: slices.Clone(rc.Spec.Limits), PolicyDigest: rc.Spec.PolicyDigest}
	if gate == v1alpha1.GateDeploySafe {
		// Its evidence names the targets to hold back.
		full := &v1alpha1.GateReceipt{}
		var reader client.Reader = r.APIReader
		if reader == nil {
			reader = r.Client
		}
		if err := reader.Get(ctx, client.ObjectKeyFromObject(rc), full); err != nil {
			return nil, nil
		}
		raw, err := full.Spec.StoredEvidence(nil)
		var ds tgcue.DeploySafeEvidence
		if err != nil || json.Unmarshal(raw, &ds) != nil {
			return nil, nil
		}
		d.Evidence = ds
	}
	return &decidedGate{Gate: gate, Decision: d, Receipt: rc.Name, Evidence: d.Evidence}, rc
}

// rolloutReceipts lists the rollout's receipts from the manager's cache, shared with it: they are
// only read.
func (r *FleetRolloutReconciler) rolloutReceipts(ctx context.Context, fr *v1alpha1.FleetRollout) ([]v1alpha1.GateReceipt, error) {
	var list v1alpha1.GateReceiptList
	if err := r.List(ctx, &list, client.InNamespace(fr.Namespace), client.MatchingLabels{v1alpha1.RolloutLabel: fr.Name}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing gate receipts of fleetrollout %s/%s: %w", fr.Namespace, fr.Name, err)
	}
	return list.Items, nil
}

// unrecordedReceipt picks, of the rollout's receipts, the latest one of gate for wave i of the
// candidate over the wave's members that status does not record and that was made for the decision
// due now: after the gate's last recorded decision on the wave; for a wave that started, since its
// start (a rehearsal's decision, since the rehearsal's start); for a wave not started yet (pre-wave
// gates), at the rollout's current generation and at most freshness old, as evidence gathered ahead
// may be. Only a receipt a wrote is taken up (ReceiptAuthor.Wrote): one injected by anyone else is
// ignored, and the gate decided afresh. nil when there is none.
func unrecordedReceipt(items []v1alpha1.GateReceipt, fr *v1alpha1.FleetRollout, i int, gate string, now time.Time, freshness time.Duration, a ReceiptAuthor) *v1alpha1.GateReceipt {
	st := &fr.Status
	if st.Candidate == nil || i < 0 || i >= len(st.Waves) {
		return nil
	}
	wv := &st.Waves[i]
	recorded := map[string]bool{}
	for _, w := range st.Waves {
		for _, g := range w.Gates {
			recorded[g.Receipt] = true
		}
	}
	prev := gateOutcome(wv, gate)
	preWave := wv.Phase == v1alpha1.WavePending || wv.Phase == v1alpha1.WaveAwaiting
	var since *metav1.Time
	switch {
	case wv.Phase == v1alpha1.WaveRehearsing && wv.Rehearsal != nil:
		since = wv.Rehearsal.BackStartedAt
	case !preWave:
		since = wv.StartedAt
	}
	generation := strconv.FormatInt(fr.Generation, 10)
	targets := slices.Sorted(slices.Values(wv.Clusters))
	var best *v1alpha1.GateReceipt
	for k := range items {
		rc := &items[k]
		s := &rc.Spec
		at := s.EvaluatedAt.Time
		switch {
		case rc.Annotations[UndecidedAnnotation] != "", recorded[rc.Name], s.Rollout != fr.Name, s.Gate != gate, s.Wave != wv.Name,
			s.Candidate.Key() != st.Candidate.Key(), !slices.Equal(s.Targets, targets):
			continue
		case prev != nil && prev.DecidedAt != nil && !at.After(prev.DecidedAt.Time):
			continue
		case since != nil && at.Before(since.Time):
			continue
		case preWave && (rc.Annotations[ReceiptGenerationAnnotation] != generation || now.Sub(at) > freshness):
			continue
		}
		if a.Wrote(rc) != nil {
			continue
		}
		if best == nil || at.After(best.Spec.EvaluatedAt.Time) {
			best = rc
		}
	}
	return best
}
