package controllers

import (
	"context"
	"errors"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/verdict"
)

// UndecidedAnnotation marks a receipt that records a gate that could not be decided (its value
// says why: "policy", a policy that does not compile or cannot evaluate). Such a receipt is a
// record, never a decision: status does not record it, the ledger does not list it, and no pass
// takes it up; the rollout stalls until the policy is fixed.
const UndecidedAnnotation = "tidegate.dev/undecided"

// recordUndecided writes, for each gate due on wave i that the policy could not decide (perr, a
// *verdict.PolicyError), an Inconclusive receipt saying so and why, with no evidence: the same
// error on the same decision is the same receipt (its name is its content digest), so a stall
// leaves one receipt per gate, not one per reconcile.
func (r *FleetRolloutReconciler) recordUndecided(ctx context.Context, p *pass, i int, gates []string, perr error) error {
	var pe *verdict.PolicyError
	if !errors.As(perr, &pe) || i < 0 || i >= len(p.Rollout.Status.Waves) {
		return nil
	}
	fr := p.Rollout
	wv := &fr.Status.Waves[i]
	for _, gate := range gates {
		d := GateDecision{Result: v1alpha1.ResultInconclusive, PolicyDigest: pe.Digest,
			Reasons: []string{gate + ": not decided: the rollout's policy cannot decide: " + perr.Error()},
			Limits:  []string{"no evidence was collected: the policy could not decide, and the rollout stalls until it is fixed"}}
		rc, err := BuildReceipt(fr, wv, wv.Clusters, gate, d, nil, metav1.NewTime(p.Now))
		if err != nil {
			return err
		}
		rc.Annotations[UndecidedAnnotation] = "policy"
		if err := WriteReceipt(ctx, r.Client, rc, r.author()); err != nil {
			return err
		}
	}
	return nil
}
