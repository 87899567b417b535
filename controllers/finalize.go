package controllers

import (
	"context"
	"fmt"
	"sort"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/engine"
)

// Deleting a FleetRollout. Its per-cluster Kustomizations and pinned sources carry it as their
// controller, so the hub's garbage collector deletes them once it is gone, and kustomize-controller
// then does to each member what the Kustomization's spec.deletionPolicy says. A Kustomization that
// kept Flux's default (MirrorPrune, with prune true) would prune the package from its member: the
// finalizer makes sure, before the rollout goes, that every Kustomization says what the rollout's
// spec.deletionPolicy asks.
//
//   - Orphan: each Kustomization is set to Flux's deletionPolicy Orphan, then the finalizer is
//     removed; the garbage collector deletes the Kustomizations and every member keeps running
//     what it runs, no longer managed by anything.
//   - Delete: each Kustomization is set to deletionPolicy Delete and deleted; the finalizer stays
//     until every one of them is gone, that is until kustomize-controller pruned what it applied
//     (a member that cannot be reached keeps the rollout until it can, or until the policy is
//     changed to Orphan).
//
// engine.DesiredKustomization writes the same deletionPolicy on every Kustomization all along, so a
// deletion that does not wait for the finalizer (a foreground cascade, the namespace deleted)
// does the same; the finalizer covers Kustomizations written before a policy change that was not
// acted on yet (a suspended rollout writes nothing). GateReceipts carry no owner reference and
// outlive the rollout (WriteReceipt).

// deletionRequeue bounds how long a rollout being deleted with policy Delete waits before it looks
// at its Kustomizations again; their deletion also triggers a reconcile through the watch.
const deletionRequeue = waitingRequeue

// ensureFinalizer adds tidegate's finalizer to a rollout that does not carry it yet, before
// anything is written for it.
func (r *FleetRolloutReconciler) ensureFinalizer(ctx context.Context, fr *v1alpha1.FleetRollout) error {
	if controllerutil.ContainsFinalizer(fr, v1alpha1.Finalizer) {
		return nil
	}
	if err := r.hook("finalizer:add"); err != nil {
		return err
	}
	patch := client.MergeFromWithOptions(fr.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.AddFinalizer(fr, v1alpha1.Finalizer)
	if err := r.Patch(ctx, fr, patch, client.FieldOwner(v1alpha1.FieldManager)); err != nil {
		return fmt.Errorf("adding finalizer %s to fleetrollout %s/%s: %w", v1alpha1.Finalizer, fr.Namespace, fr.Name, err)
	}
	return nil
}

// finalize does what the rollout's deletion policy asks of its Kustomizations and removes the
// finalizer once that is done. Nothing else is written, status included.
func (r *FleetRolloutReconciler) finalize(ctx context.Context, fr *v1alpha1.FleetRollout) (reconcile.Result, error) {
	if !controllerutil.ContainsFinalizer(fr, v1alpha1.Finalizer) {
		return reconcile.Result{}, nil
	}
	policy := fr.GetDeletionPolicy()
	owned, err := ownedKustomizations(ctx, r.APIReader, fr)
	if err != nil {
		return reconcile.Result{}, err
	}
	for _, ks := range owned {
		if ks.Spec.DeletionPolicy != policy {
			if err := r.hook("finalize:" + ks.Labels[v1alpha1.ClusterLabel]); err != nil {
				return reconcile.Result{}, err
			}
		}
		if err := setDeletionPolicy(ctx, r.Client, ks, policy); err != nil {
			return reconcile.Result{}, err
		}
	}
	if policy == v1alpha1.DeletionPolicyDelete && len(owned) > 0 {
		var left []string
		for _, ks := range owned {
			left = append(left, ks.Name)
			if !ks.DeletionTimestamp.IsZero() {
				continue
			}
			if err := r.hook("finalize:" + ks.Labels[v1alpha1.ClusterLabel]); err != nil {
				return reconcile.Result{}, err
			}
			if err := r.Delete(ctx, ks, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil && !apierrors.IsNotFound(err) {
				return reconcile.Result{}, fmt.Errorf("deleting kustomization %s/%s of fleetrollout %s (deletionPolicy Delete): %w", ks.Namespace, ks.Name, fr.Name, err)
			}
		}
		r.event(fr, corev1.EventTypeNormal, "Pruning", "deletionPolicy Delete: waiting for kustomize-controller to prune the package and delete %s", engine.FirstNames(left, 10))
		return reconcile.Result{RequeueAfter: deletionRequeue}, nil
	}

	if err := r.hook("finalizer:remove"); err != nil {
		return reconcile.Result{}, err
	}
	patch := client.MergeFromWithOptions(fr.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(fr, v1alpha1.Finalizer)
	if err := r.Patch(ctx, fr, patch, client.FieldOwner(v1alpha1.FieldManager)); err != nil {
		if apierrors.IsNotFound(err) {
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, fmt.Errorf("removing finalizer %s from fleetrollout %s/%s: %w", v1alpha1.Finalizer, fr.Namespace, fr.Name, err)
	}
	msg := "deletionPolicy Delete: the package was pruned from every member"
	if policy == v1alpha1.DeletionPolicyOrphan {
		msg = fmt.Sprintf("deletionPolicy Orphan: %d Kustomizations set to orphan; the members keep running what they run", len(owned))
	}
	r.event(fr, corev1.EventTypeNormal, "Finalized", "%s", msg)
	log.FromContext(ctx).Info("finalized", "deletionPolicy", policy, "kustomizations", len(owned))
	return reconcile.Result{}, nil
}

// ownedKustomizations lists, uncached, the Kustomizations that fr controls: the finalizer must not
// miss one the cache has not seen yet.
func ownedKustomizations(ctx context.Context, c client.Reader, fr *v1alpha1.FleetRollout) ([]*kustomizev1.Kustomization, error) {
	var list kustomizev1.KustomizationList
	if err := c.List(ctx, &list, client.InNamespace(fr.Namespace), client.MatchingLabels{v1alpha1.RolloutLabel: fr.Name}); err != nil {
		return nil, fmt.Errorf("listing kustomizations of fleetrollout %s/%s: %w", fr.Namespace, fr.Name, err)
	}
	var out []*kustomizev1.Kustomization
	for i := range list.Items {
		if metav1.IsControlledBy(&list.Items[i], fr) {
			out = append(out, &list.Items[i])
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// setDeletionPolicy sets Flux's spec.deletionPolicy of ks to policy unless it says so already. A
// merge patch of that one field: the rest of what tidegate applied stays as it is.
func setDeletionPolicy(ctx context.Context, c client.Client, ks *kustomizev1.Kustomization, policy string) error {
	if ks.Spec.DeletionPolicy == policy {
		return nil
	}
	body := fmt.Sprintf(`{"spec":{"deletionPolicy":%q}}`, policy)
	target := &kustomizev1.Kustomization{ObjectMeta: metav1.ObjectMeta{Namespace: ks.Namespace, Name: ks.Name}}
	if err := c.Patch(ctx, target, client.RawPatch(types.MergePatchType, []byte(body)), client.FieldOwner(v1alpha1.FieldManager)); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("setting deletionPolicy %s on kustomization %s/%s: %w", policy, ks.Namespace, ks.Name, err)
	}
	ks.Spec.DeletionPolicy = policy
	return nil
}
