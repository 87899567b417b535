package controllers

import (
	"context"
	"fmt"
	"sort"
	"strings"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
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
// A chart rollout's HelmReleases have no deletionPolicy: helm-controller uninstalls the release
// when a HelmRelease is deleted, unless it is suspended. Orphan suspends each HelmRelease
// (spec.suspend true) before it goes, and Delete resumes a suspended one, so that its deletion
// uninstalls the release (memberDeletionPolicy).
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
		if memberDeletionPolicy(ks) != policy {
			if err := r.hook("finalize:" + ks.GetLabels()[v1alpha1.ClusterLabel]); err != nil {
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
			left = append(left, ks.GetName())
			if ks.GetDeletionTimestamp() != nil {
				continue
			}
			if err := r.hook("finalize:" + ks.GetLabels()[v1alpha1.ClusterLabel]); err != nil {
				return reconcile.Result{}, err
			}
			if err := r.Delete(ctx, ks, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil && !apierrors.IsNotFound(err) {
				return reconcile.Result{}, fmt.Errorf("deleting %s %s/%s of fleetrollout %s (deletionPolicy Delete): %w",
					strings.ToLower(engine.MemberKind(fr)), ks.GetNamespace(), ks.GetName(), fr.Name, err)
			}
		}
		r.event(fr, corev1.EventTypeNormal, "Pruning", "deletionPolicy Delete: waiting for Flux to remove the package from the members and delete %s", engine.FirstNames(left, 10))
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
		msg = fmt.Sprintf("deletionPolicy Orphan: %d %ss set to orphan; the members keep running what they run", len(owned), engine.MemberKind(fr))
	}
	r.event(fr, corev1.EventTypeNormal, "Finalized", "%s", msg)
	log.FromContext(ctx).Info("finalized", "deletionPolicy", policy, "kustomizations", len(owned))
	return reconcile.Result{}, nil
}

// ownedKustomizations lists, uncached, the members (Kustomizations, or HelmReleases for a chart)
// that fr controls: the finalizer must not miss one the cache has not seen yet.
func ownedKustomizations(ctx context.Context, c client.Reader, fr *v1alpha1.FleetRollout) ([]client.Object, error) {
	list := engine.NewMemberList(fr)
	if err := c.List(ctx, list, client.InNamespace(fr.Namespace), client.MatchingLabels{v1alpha1.RolloutLabel: fr.Name}); err != nil {
		return nil, fmt.Errorf("listing %ss of fleetrollout %s/%s: %w", strings.ToLower(engine.MemberKind(fr)), fr.Namespace, fr.Name, err)
	}
	var out []client.Object
	for _, m := range engine.MemberItems(list) {
		if metav1.IsControlledBy(m, fr) {
			out = append(out, m)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetName() < out[j].GetName() })
	return out, nil
}

// memberDeletionPolicy is what deleting member obj does to its cluster: a Kustomization's
// spec.deletionPolicy; for a HelmRelease, Orphan when it is suspended (helm-controller then
// uninstalls nothing), else Delete.
func memberDeletionPolicy(obj client.Object) string {
	switch m := obj.(type) {
	case *kustomizev1.Kustomization:
		return m.Spec.DeletionPolicy
	case *helmv2.HelmRelease:
		if m.Spec.Suspend {
			return v1alpha1.DeletionPolicyOrphan
		}
	}
	return v1alpha1.DeletionPolicyDelete
}

// setDeletionPolicy makes deleting member ks do what policy says, unless it does already
// (memberDeletionPolicy): Flux's spec.deletionPolicy of a Kustomization, spec.suspend of a
// HelmRelease. A merge patch of that one field: the rest of what tidegate applied stays as it is.
func setDeletionPolicy(ctx context.Context, c client.Client, ks client.Object, policy string) error {
	if memberDeletionPolicy(ks) == policy {
		return nil
	}
	body := fmt.Sprintf(`{"spec":{"deletionPolicy":%q}}`, policy)
	var target client.Object = &kustomizev1.Kustomization{ObjectMeta: metav1.ObjectMeta{Namespace: ks.GetNamespace(), Name: ks.GetName()}}
	hr, chart := ks.(*helmv2.HelmRelease)
	if chart {
		body = fmt.Sprintf(`{"spec":{"suspend":%t}}`, policy == v1alpha1.DeletionPolicyOrphan)
		target = &helmv2.HelmRelease{ObjectMeta: metav1.ObjectMeta{Namespace: ks.GetNamespace(), Name: ks.GetName()}}
	}
	if err := c.Patch(ctx, target, client.RawPatch(types.MergePatchType, []byte(body)), client.FieldOwner(v1alpha1.FieldManager)); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		kind := kustomizev1.KustomizationKind
		if chart {
			kind = helmv2.HelmReleaseKind
		}
		return fmt.Errorf("setting deletionPolicy %s on %s %s/%s: %w", policy, strings.ToLower(kind), ks.GetNamespace(), ks.GetName(), err)
	}
	if chart {
		hr.Spec.Suspend = policy == v1alpha1.DeletionPolicyOrphan
	} else if k, ok := ks.(*kustomizev1.Kustomization); ok {
		k.Spec.DeletionPolicy = policy
	}
	return nil
}
