package ops

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/verdict"
)

// ResultInvalidPolicy is the result of a decision the proposed policy cannot make over the
// recorded evidence (it leaves a value open that the evidence does not settle): under it, the
// rollout would stall.
const ResultInvalidPolicy = "InvalidPolicy"

// Replay says which of a rollout's recorded gate decisions a proposed policy would decide otherwise.
type Replay struct {
	Rollout      Ref    `json:"rollout"`
	PolicyDigest string `json:"policyDigest"`
	// Replayed counts the receipts of the rollout, each decided again or found unreadable.
	Replayed int `json:"replayed"`
	// Changed counts the decisions whose result the proposed policy changes.
	Changed int `json:"changed"`
	// Unreadable counts the receipts whose evidence could not be read: nobody can tell what the
	// proposed policy would decide, so they fail the replay as a change does.
	Unreadable int `json:"unreadable"`
	// Changes are the changed and the unreadable receipts, oldest decision first.
	Changes []ReplayedReceipt `json:"changes"`
}

// ReplayedReceipt is a receipt whose decision would change, or whose evidence could not be read.
type ReplayedReceipt struct {
	Receipt     string      `json:"receipt"`
	Gate        string      `json:"gate"`
	Wave        string      `json:"wave,omitempty"`
	Revision    string      `json:"revision"`
	EvaluatedAt metav1.Time `json:"evaluatedAt"`
	// Old is the decision as recorded.
	Old PolicyOutcome `json:"old"`
	// New is the decision under the proposed policy; nil when the evidence could not be read.
	New *PolicyOutcome `json:"new,omitempty"`
	// Unreadable says why the evidence could not be read.
	Unreadable string `json:"unreadable,omitempty"`
}

// OK is whether no decision would change and every receipt could be replayed.
func (r *Replay) OK() bool { return r.Changed == 0 && r.Unreadable == 0 }

// ReplayPolicy decides the evidence of every GateReceipt of rollout ns/name again with p, as the
// controller would decide it, and returns the decisions whose result would change. The rollout
// must exist (NotFound otherwise); evidence is read from where each receipt keeps it, its parts
// checked against their digests, and the whole against the receipt's evidenceDigest.
func ReplayPolicy(ctx context.Context, c client.Client, ns, name string, p *verdict.Policy) (*Replay, error) {
	if name == "" {
		return nil, Errorf(CodeInvalid, nil, "name the FleetRollout whose receipts to replay")
	}
	ref := RolloutRef(ns, name)
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &v1alpha1.FleetRollout{}); err != nil {
		return nil, AsError(err, ref)
	}
	var list v1alpha1.GateReceiptList
	if err := c.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{v1alpha1.RolloutLabel: name}); err != nil {
		return nil, AsError(err, Ref{Kind: "gatereceipts", Namespace: ns})
	}
	receipts := slices.DeleteFunc(list.Items, func(rc v1alpha1.GateReceipt) bool { return rc.Spec.Rollout != name })
	slices.SortFunc(receipts, func(a, b v1alpha1.GateReceipt) int {
		if c := a.Spec.EvaluatedAt.Compare(b.Spec.EvaluatedAt.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	r := &Replay{Rollout: ref, PolicyDigest: p.Digest(), Replayed: len(receipts), Changes: []ReplayedReceipt{}}
	for i := range receipts {
		rc := &receipts[i]
		item := ReplayedReceipt{
			Receipt: rc.Name, Gate: rc.Spec.Gate, Wave: rc.Spec.Wave, Revision: rc.Spec.Candidate.Revision, EvaluatedAt: rc.Spec.EvaluatedAt,
			Old: PolicyOutcome{Result: rc.Spec.Result, Reasons: rc.Spec.Reasons, Limits: rc.Spec.Limits, PolicyDigest: rc.Spec.PolicyDigest},
		}
		evidence, unreadable, err := recordedEvidence(ctx, c, rc)
		if err != nil {
			return nil, err
		}
		if unreadable != "" {
			item.Unreadable = unreadable
			r.Unreadable++
			r.Changes = append(r.Changes, item)
			continue
		}
		d := decideAgain(p, &rc.Spec, evidence)
		if d.Result == item.Old.Result {
			continue
		}
		item.New = &d
		r.Changed++
		r.Changes = append(r.Changes, item)
	}
	return r, nil
}

// digestOnly starts the unreadable reason of a receipt that keeps only its evidence's digest.
const digestOnly = "the receipt keeps no evidence, only its digest "

// recordedEvidence reads the evidence a receipt's decision was made over. unreadable says why it
// cannot be: a part is missing or does not have its digest, the evidence does not have the
// receipt's evidenceDigest, or the receipt keeps only that digest. An error is an API error other
// than a part not found.
func recordedEvidence(ctx context.Context, c client.Client, rc *v1alpha1.GateReceipt) (evidence []byte, unreadable string, err error) {
	var apiErr error
	raw, err := rc.Spec.StoredEvidence(func(p v1alpha1.EvidencePart) ([]byte, error) {
		var cm corev1.ConfigMap
		err := c.Get(ctx, client.ObjectKey{Namespace: rc.Namespace, Name: p.Name}, &cm)
		switch {
		case apierrors.IsNotFound(err):
			return nil, errors.New("not found")
		case err != nil:
			apiErr = AsError(err, Ref{Kind: "configmap", Namespace: rc.Namespace, Name: p.Name})
			return nil, apiErr
		}
		return cm.BinaryData[v1alpha1.EvidencePartKey], nil
	})
	switch {
	case apiErr != nil:
		return nil, "", apiErr
	case err != nil:
		return nil, "the evidence cannot be read: " + err.Error(), nil
	case raw == nil && rc.Spec.EvidenceDigest != "":
		return nil, digestOnly + rc.Spec.EvidenceDigest + " (older versions did not keep evidence over 64 KiB)", nil
	case raw == nil:
		return nil, "", nil // the decision was made over no evidence
	}
	if d, err := v1alpha1.EvidenceDigest(raw); err != nil || d != rc.Spec.EvidenceDigest {
		return nil, fmt.Sprintf("the evidence does not have the digest the receipt records (%s): tidegate receipts verify %s says more", rc.Spec.EvidenceDigest, rc.Name), nil
	}
	return raw, "", nil
}

// decideAgain is the decision the controller would record over the receipt's evidence under p.
func decideAgain(p *verdict.Policy, old *v1alpha1.GateReceiptSpec, evidence []byte) PolicyOutcome {
	gate := old.Gate
	// The controller decides without the policy when collecting the evidence failed (reasons
	// "<gate>: collecting the evidence failed: ..." and "<gate>: inconclusive: collecting the
	// evidence failed: ..."): any policy records the same decision over the same failure.
	if len(old.Reasons) == 1 && (strings.HasPrefix(old.Reasons[0], gate+": collecting the evidence failed: ") ||
		strings.HasPrefix(old.Reasons[0], gate+": inconclusive: collecting the evidence failed: ")) {
		return PolicyOutcome{Result: old.Result, Reasons: old.Reasons, PolicyDigest: p.Digest()}
	}
	d, err := verdict.Evaluate(p, gate, evidence)
	var pe *verdict.PolicyError
	switch {
	case errors.As(err, &pe):
		return PolicyOutcome{Result: ResultInvalidPolicy, Reasons: pe.Problems, PolicyDigest: p.Digest()}
	case err != nil:
		// As the controller records an evaluation that failed: the gate fails closed.
		return PolicyOutcome{Result: v1alpha1.ResultFail, Reasons: []string{gate + ": evaluation failed: " + err.Error()}, PolicyDigest: p.Digest()}
	}
	nd := PolicyOutcome{Result: resultOf(d), Reasons: d.Reasons, Limits: d.Limits, PolicyDigest: d.PolicyDigest}
	// An Inconclusive decision that had been so for longer than settings.inconclusiveAfter was
	// recorded as a Fail with that said first; the same history fails it again.
	if nd.Result == v1alpha1.ResultInconclusive && old.Result == v1alpha1.ResultFail && len(old.Reasons) > 0 && strings.HasPrefix(old.Reasons[0], "inconclusive since ") {
		nd.Result, nd.Reasons = v1alpha1.ResultFail, append([]string{old.Reasons[0]}, nd.Reasons...)
	}
	return nd
}
