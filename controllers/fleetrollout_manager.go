package controllers

import (
	"context"
	"fmt"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/runtime/predicates"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// sourceIndexKey indexes FleetRollouts by "<kind>/<name>" of spec.sourceRef and spec.policy.sourceRef.
const sourceIndexKey = ".spec.sourceRef"

// FleetRolloutOptions tune the controller.
type FleetRolloutOptions struct {
	// MaxConcurrentReconciles is how many rollouts are reconciled at once. Defaults to 4.
	MaxConcurrentReconciles int
	// SkipNameValidation lets several managers in one process (tests) register this controller.
	SkipNameValidation bool
	// RateLimiter spaces the retries of a failing rollout; nil is controller-runtime's default.
	RateLimiter workqueue.TypedRateLimiter[reconcile.Request]
}

// SetupWithManager registers the controller: FleetRollouts on spec change or reconcile request;
// their Kustomizations when their spec, applied revision, Ready or Healthy changes, not on
// kustomize-controller's periodic reconciles that end where they started (kustomizationChanges); tracked, pinned and policy sources when their artifact or Ready changes
// (sourceChanged); FleetClusters of the namespace when their spec, labels or reachability change
// (fleetClusterChanged). Status writes that change none of these trigger nothing.
func (r *FleetRolloutReconciler) SetupWithManager(mgr ctrl.Manager, opts FleetRolloutOptions) error {
	ctx := context.Background()
	if err := mgr.GetFieldIndexer().IndexField(ctx, &v1alpha1.FleetRollout{}, sourceIndexKey, func(o client.Object) []string {
		fr := o.(*v1alpha1.FleetRollout)
		keys := []string{fr.Spec.SourceRef.Kind + "/" + fr.Spec.SourceRef.Name}
		if p := fr.Spec.Policy; p != nil {
			keys = append(keys, p.SourceRef.Kind+"/"+p.SourceRef.Name)
		}
		return keys
	}); err != nil {
		return fmt.Errorf("indexing fleetrollouts by source: %w", err)
	}
	if opts.MaxConcurrentReconciles == 0 {
		opts.MaxConcurrentReconciles = 4
	}
	served, err := helmReleasesServed(mgr.GetRESTMapper())
	if err != nil {
		return err
	}
	r.HelmReleases = served
	b := ctrl.NewControllerManagedBy(mgr)
	if served {
		// A chart rollout's members, watched as Kustomizations are.
		b = b.Owns(&helmv2.HelmRelease{}, builder.WithPredicates(newKustomizationChanges()))
	}
	return b.
		For(&v1alpha1.FleetRollout{}, builder.WithPredicates(predicate.Or(
			predicate.GenerationChangedPredicate{}, predicates.ReconcileRequestedPredicate{}))).
		Owns(&kustomizev1.Kustomization{}, builder.WithPredicates(newKustomizationChanges())).
		Watches(&sourcev1.GitRepository{}, handler.EnqueueRequestsFromMapFunc(r.rolloutsForSource(sourcev1.GitRepositoryKind)),
			builder.WithPredicates(sourceChanged)).
		Watches(&sourcev1.OCIRepository{}, handler.EnqueueRequestsFromMapFunc(r.rolloutsForSource(sourcev1.OCIRepositoryKind)),
			builder.WithPredicates(sourceChanged)).
		Watches(&sourcev1.HelmChart{}, handler.EnqueueRequestsFromMapFunc(r.rolloutsForSource(sourcev1.HelmChartKind)),
			builder.WithPredicates(sourceChanged)).
		Watches(&v1alpha1.FleetCluster{}, handler.EnqueueRequestsFromMapFunc(r.rolloutsInNamespace),
			builder.WithPredicates(fleetClusterChanged)).
		WithOptions(controllerOptions(opts.MaxConcurrentReconciles, opts.SkipNameValidation, opts.RateLimiter)).
		Complete(r)
}

// helmReleasesServed tells whether the hub serves HelmReleases (helm-controller's CRD is installed),
// as the manager's RESTMapper says when the manager is made. A hub without helm-controller runs Kustomization
// rollouts all the same; a chart rollout there waits, saying to install it (helmControllerMissing).
func helmReleasesServed(mapper apimeta.RESTMapper) (bool, error) {
	gvk := helmv2.GroupVersion.WithKind(helmv2.HelmReleaseKind)
	_, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	switch {
	case err == nil:
		return true, nil
	case apimeta.IsNoMatchError(err):
		return false, nil
	}
	return false, fmt.Errorf("looking up %s on the hub: %w", gvk, err)
}

// rolloutsForSource maps a source to the rollout that pinned it (its controller) and the rollouts that track it.
func (r *FleetRolloutReconciler) rolloutsForSource(kind string) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		var reqs []reconcile.Request
		if ref := metav1.GetControllerOf(o); ref != nil && ref.Kind == v1alpha1.FleetRolloutKind {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: ref.Name}})
		}
		var list v1alpha1.FleetRolloutList
		if err := r.List(ctx, &list, client.InNamespace(o.GetNamespace()), client.MatchingFields{sourceIndexKey: kind + "/" + o.GetName()}); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "listing fleetrollouts of a source", "source", kind+"/"+o.GetName())
			return reqs
		}
		for _, fr := range list.Items {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: fr.Namespace, Name: fr.Name}})
		}
		return reqs
	}
}

// rolloutsInNamespace maps a FleetCluster to every rollout beside it: any of them may select it.
func (r *FleetRolloutReconciler) rolloutsInNamespace(ctx context.Context, o client.Object) []reconcile.Request {
	var list v1alpha1.FleetRolloutList
	if err := r.List(ctx, &list, client.InNamespace(o.GetNamespace())); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing fleetrollouts for a fleetcluster", "fleetcluster", o.GetName())
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, fr := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: fr.Namespace, Name: fr.Name}})
	}
	return reqs
}
