package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/engine"
)

// staleApprovals lists, in order, the indexes in spec.approvals of the approvals that can count for
// nothing any more: of a revision that is neither the candidate, nor the known-good, nor target, the
// revision the rollout is about to take up (spec.revision or the tracked source's artifact; an
// approval given ahead for it is kept). What a decision counted is in its receipt and the revision's
// ledger already, so pruning loses nothing of the record, and spec.approvals, at most 64 entries,
// does not fill up with the approvals of past releases.
func staleApprovals(fr *v1alpha1.FleetRollout, target string) []int {
	var keep []string
	if c := fr.Status.Candidate; c != nil {
		keep = append(keep, c.Revision)
	}
	if kg := fr.Status.LastKnownGood; kg != nil {
		keep = append(keep, kg.Revision)
	}
	if target != "" {
		keep = append(keep, target)
	}
	var stale []int
	for i, a := range fr.Spec.Approvals {
		if !slices.ContainsFunc(keep, func(rev string) bool { return engine.SameRevision(rev, a.Revision) }) {
			stale = append(stale, i)
		}
	}
	return stale
}

// pruneApprovals removes the approvals at the indexes stale from spec.approvals, in one JSON patch
// that tests each entry before it removes it: an approval list changed since fr was read (an
// approval added, Flux applying the rollout) fails the whole patch, nothing is removed, and the
// next pass at rest prunes again from what it reads.
func (r *FleetRolloutReconciler) pruneApprovals(ctx context.Context, fr *v1alpha1.FleetRollout, stale []int) error {
	type op struct {
		Op    string             `json:"op"`
		Path  string             `json:"path"`
		Value *v1alpha1.Approval `json:"value,omitempty"`
	}
	ops := make([]op, 0, 2*len(stale))
	revisions := make([]string, 0, len(stale))
	for _, i := range slices.Backward(stale) {
		path := fmt.Sprintf("/spec/approvals/%d", i)
		ops = append(ops, op{Op: "test", Path: path, Value: &fr.Spec.Approvals[i]}, op{Op: "remove", Path: path})
		revisions = append(revisions, fr.Spec.Approvals[i].Revision)
	}
	body, err := json.Marshal(ops)
	if err != nil {
		return err
	}
	obj := &v1alpha1.FleetRollout{}
	obj.Namespace, obj.Name = fr.Namespace, fr.Name
	if err := r.Client.Patch(ctx, obj, client.RawPatch(types.JSONPatchType, body), client.FieldOwner(v1alpha1.FieldManager)); err != nil {
		return fmt.Errorf("pruning %d approvals of past revisions from fleetrollout %s/%s: %w", len(stale), fr.Namespace, fr.Name, err)
	}
	slices.Reverse(revisions)
	r.event(fr, corev1.EventTypeNormal, "ApprovalsPruned", "removed from spec.approvals %s of revisions that are neither the candidate nor the known-good (what decisions counted is in their receipts and ledgers): %s",
		engine.Plural(len(stale), "approval", "approvals"), strings.Join(slices.Compact(revisions), ", "))
	return nil
}
