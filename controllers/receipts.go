package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/engine"
	"github.com/tidegate/tidegate/evidence/collector"
	"github.com/tidegate/tidegate/internal/attest"
	"github.com/tidegate/tidegate/verdict"
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
	annotateDecision(rc)
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
// crash-point hook). receipts are the metadata of the rollout's receipts (rolloutReceipts); the
// oldest are those evaluated first (ReceiptEvaluatedAtAnnotation, else when they were created).
func pruneReceipts(ctx context.Context, c client.Client, receipts []metav1.PartialObjectMetadata, fr *v1alpha1.FleetRollout, export *ReceiptExport, beforeDelete func(name string) error) error {
	if len(receipts) <= maxReceiptsPerRollout {
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
	evaluated := func(m *metav1.PartialObjectMetadata) time.Time {
		if at, ok := evaluatedAt(m); ok {
			return at
		}
		return m.CreationTimestamp.Time
	}
	oldest := slices.Clone(receipts)
	slices.SortStableFunc(oldest, func(a, b metav1.PartialObjectMetadata) int { return evaluated(&a).Compare(evaluated(&b)) })
	excess := len(oldest) - maxReceiptsPerRollout
	for i := 0; i < len(oldest) && excess > 0; i++ {
		m := &oldest[i]
		if referenced[m.Name] {
			continue
		}
		key := client.ObjectKey{Namespace: m.Namespace, Name: m.Name}
		if export != nil {
			if err := export.export(ctx, key); err != nil {
				return err
			}
		}
		if beforeDelete != nil {
			if err := beforeDelete(m.Name); err != nil {
				return err
			}
		}
		rc := &v1alpha1.GateReceipt{ObjectMeta: metav1.ObjectMeta{Namespace: m.Namespace, Name: m.Name}}
		if err := c.Delete(ctx, rc); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("pruning gate receipt %s/%s: %w", m.Namespace, m.Name, err)
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
		out = append(out, verdict.Truncate(s, maxReceiptReasonBytes))
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

// unrecordedDecision is the decision of gate for wave i whose receipt was written but that status
// does not record (the controller stopped between the two, or a later write of the pass failed),
// or nil: the receipt, if the controller wrote it, is the decision, so it is recorded as it was
// made, never made again, which would write a second receipt over other evidence. The receipts'
// metadata come from the manager's cache, which a restarted manager syncs before its first
// reconcile and which holds nothing else of a receipt: the annotations BuildReceipt writes pick the
// receipts that may hold the decision due (in steady state none), and each is read whole from the
// API server, latest first, until one is the decision and the controller's (dueDecision.takesUp).
// A deploySafe receipt's evidence, which names the targets to hold back, must decode: one whose
// evidence is kept in parts is not taken up (the controller reads no ConfigMap), nor one that
// cannot be read; that gate is decided again.
func (r *FleetRolloutReconciler) unrecordedDecision(ctx context.Context, p *pass, receipts []metav1.PartialObjectMetadata, i int, gate string) (*engine.DecidedGate, *v1alpha1.GateReceipt) {
	freshness := collector.DefaultFreshness
	if r.Evidence != nil && r.Evidence.Freshness > 0 {
		freshness = r.Evidence.Freshness
	}
	due := newDueDecision(p.Rollout, i, gate, p.Now, freshness)
	if due == nil {
		return nil, nil
	}
	var reader client.Reader = r.APIReader
	if reader == nil {
		reader = r.Client
	}
	for _, key := range due.candidates(receipts) {
		rc := &v1alpha1.GateReceipt{}
		if err := reader.Get(ctx, key, rc); err != nil || !due.takesUp(rc, r.author()) {
			continue
		}
		d := GateDecision{Result: rc.Spec.Result, Reasons: slices.Clone(rc.Spec.Reasons), Limits: slices.Clone(rc.Spec.Limits), PolicyDigest: rc.Spec.PolicyDigest}
		if gate == v1alpha1.GateDeploySafe {
			raw, err := rc.Spec.StoredEvidence(nil)
			var ds verdict.DeploySafeEvidence
			if err != nil || json.Unmarshal(raw, &ds) != nil {
				return nil, nil
			}
			d.Evidence = ds
		}
		return &engine.DecidedGate{Gate: gate, Decision: d, Receipt: rc.Name, Evidence: d.Evidence}, rc
	}
	return nil, nil
}

// receiptMetadataList is a list of GateReceipts' metadata, as the manager caches them.
func receiptMetadataList() *metav1.PartialObjectMetadataList {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind(v1alpha1.GateReceiptKind + "List"))
	return list
}

// rolloutReceipts lists the metadata of the rollout's receipts from the manager's cache, shared
// with it: they are only read.
func (r *FleetRolloutReconciler) rolloutReceipts(ctx context.Context, fr *v1alpha1.FleetRollout) ([]metav1.PartialObjectMetadata, error) {
	var reader client.Reader = r.Receipts
	if reader == nil {
		reader = r.Client
	}
	list := receiptMetadataList()
	if err := reader.List(ctx, list, client.InNamespace(fr.Namespace), client.MatchingLabels{v1alpha1.RolloutLabel: fr.Name}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing gate receipts of fleetrollout %s/%s: %w", fr.Namespace, fr.Name, err)
	}
	return list.Items, nil
}

// ReceiptDecisionAnnotation holds the digest of what a receipt's decision was made on: the rollout,
// the gate, the wave, the candidate and the wave's targets (decisionKey). With
// ReceiptEvaluatedAtAnnotation it lets the controller tell, from the receipts' metadata alone,
// which receipts may hold a decision it wrote and did not record. A receipt without them (written
// before they were) is never taken up: its gate is decided again.
const ReceiptDecisionAnnotation = "tidegate.dev/decision"

// ReceiptEvaluatedAtAnnotation holds a receipt's spec.evaluatedAt (RFC 3339).
const ReceiptEvaluatedAtAnnotation = "tidegate.dev/evaluated-at"

// annotateDecision writes on rc the annotations by which the controller finds and orders receipts
// from their metadata: what its decision was made on, and when.
func annotateDecision(rc *v1alpha1.GateReceipt) {
	s := &rc.Spec
	if rc.Annotations == nil {
		rc.Annotations = map[string]string{}
	}
	rc.Annotations[ReceiptDecisionAnnotation] = decisionKey(s.Rollout, s.Gate, s.Wave, &s.Candidate, s.Targets)
	rc.Annotations[ReceiptEvaluatedAtAnnotation] = s.EvaluatedAt.UTC().Format(time.RFC3339)
}

// evaluatedAt is a receipt's spec.evaluatedAt as its metadata hold it (ReceiptEvaluatedAtAnnotation),
// and false when they do not.
func evaluatedAt(m *metav1.PartialObjectMetadata) (time.Time, bool) {
	at, err := time.Parse(time.RFC3339, m.Annotations[ReceiptEvaluatedAtAnnotation])
	return at, err == nil
}

// decisionKey is the digest ReceiptDecisionAnnotation holds; targets are sorted.
func decisionKey(rollout, gate, wave string, candidate *v1alpha1.RevisionStatus, targets []string) string {
	h := sha256.New()
	for _, s := range append([]string{rollout, gate, wave, candidate.Key()}, targets...) {
		fmt.Fprintf(h, "%d:%s\n", len(s), s)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// dueDecision is what a receipt must be to hold the decision of a gate for a wave that is due now
// and that status does not record: of the candidate, over the wave's members, not recorded in
// status, and made for the decision due: after the gate's last recorded decision on the wave; for
// a wave that started, since its start (a rehearsal's decision, since the rehearsal's start); for a
// wave not started yet (pre-wave gates), at the rollout's current generation and at most freshness
// old, as evidence gathered ahead may be.
type dueDecision struct {
	key        string
	recorded   map[string]bool
	after      time.Time // the gate's last recorded decision on the wave, if any
	since      time.Time // the wave's (or its rehearsal's) start, if it started
	preWave    bool
	generation string
	oldest     time.Time // for a pre-wave gate, the oldest a decision may be
}

// newDueDecision is the decision of gate for wave i due now, or nil when there is none.
func newDueDecision(fr *v1alpha1.FleetRollout, i int, gate string, now time.Time, freshness time.Duration) *dueDecision {
	st := &fr.Status
	if st.Candidate == nil || i < 0 || i >= len(st.Waves) {
		return nil
	}
	wv := &st.Waves[i]
	d := &dueDecision{
		key:        decisionKey(fr.Name, gate, wv.Name, st.Candidate, slices.Sorted(slices.Values(wv.Clusters))),
		recorded:   map[string]bool{},
		preWave:    wv.Phase == v1alpha1.WavePending || wv.Phase == v1alpha1.WaveAwaiting,
		generation: strconv.FormatInt(fr.Generation, 10),
		oldest:     now.Add(-freshness),
	}
	for _, w := range st.Waves {
		for _, g := range w.Gates {
			d.recorded[g.Receipt] = true
		}
	}
	if prev := engine.GateOutcome(wv, gate); prev != nil && prev.DecidedAt != nil {
		d.after = prev.DecidedAt.Time
	}
	switch {
	case wv.Phase == v1alpha1.WaveRehearsing && wv.Rehearsal != nil:
		if wv.Rehearsal.BackStartedAt != nil {
			d.since = wv.Rehearsal.BackStartedAt.Time
		}
	case !d.preWave && wv.StartedAt != nil:
		d.since = wv.StartedAt.Time
	}
	return d
}

// admits tells whether a receipt named name, with annotations, of decision key evaluated at may
// hold the decision due.
func (d *dueDecision) admits(name string, annotations map[string]string, key string, at time.Time) bool {
	switch {
	case annotations[UndecidedAnnotation] != "", d.recorded[name], key != d.key, at.IsZero():
		return false
	case !d.after.IsZero() && !at.After(d.after), !d.since.IsZero() && at.Before(d.since):
		return false
	case d.preWave && (annotations[ReceiptGenerationAnnotation] != d.generation || at.Before(d.oldest)):
		return false
	}
	return true
}

// candidates are the receipts whose metadata say they may hold the decision due, latest first.
func (d *dueDecision) candidates(receipts []metav1.PartialObjectMetadata) []client.ObjectKey {
	type candidate struct {
		key client.ObjectKey
		at  time.Time
	}
	var found []candidate
	for k := range receipts {
		m := &receipts[k]
		at, _ := evaluatedAt(m)
		if d.admits(m.Name, m.Annotations, m.Annotations[ReceiptDecisionAnnotation], at) {
			found = append(found, candidate{client.ObjectKey{Namespace: m.Namespace, Name: m.Name}, at})
		}
	}
	slices.SortStableFunc(found, func(a, b candidate) int { return b.at.Compare(a.at) })
	keys := make([]client.ObjectKey, len(found))
	for k, c := range found {
		keys[k] = c.key
	}
	return keys
}

// takesUp tells whether rc, read whole, holds the decision due and a wrote it
// (ReceiptAuthor.Wrote): one injected by anyone else is ignored, and the gate decided afresh. It
// judges rc by its spec, not by the annotations that made it a candidate.
func (d *dueDecision) takesUp(rc *v1alpha1.GateReceipt, a ReceiptAuthor) bool {
	s := &rc.Spec
	key := decisionKey(s.Rollout, s.Gate, s.Wave, &s.Candidate, s.Targets)
	return d.admits(rc.Name, rc.Annotations, key, s.EvaluatedAt.Time) && a.Wrote(rc) == nil
}

// unrecordedReceipt is, of items (receipts read whole), the latest that holds the decision of gate
// for wave i due now and that status does not record (dueDecision), or nil.
func unrecordedReceipt(items []v1alpha1.GateReceipt, fr *v1alpha1.FleetRollout, i int, gate string, now time.Time, freshness time.Duration, a ReceiptAuthor) *v1alpha1.GateReceipt {
	due := newDueDecision(fr, i, gate, now, freshness)
	if due == nil {
		return nil
	}
	var best *v1alpha1.GateReceipt
	for k := range items {
		if rc := &items[k]; due.takesUp(rc, a) && (best == nil || rc.Spec.EvaluatedAt.After(best.Spec.EvaluatedAt.Time)) {
			best = rc
		}
	}
	return best
}
