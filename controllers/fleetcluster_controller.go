package controllers

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	"github.com/fluxcd/pkg/runtime/jitter"
	"github.com/fluxcd/pkg/runtime/predicates"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/engine"
	"github.com/tidegate/tidegate/internal/member"
)

// DefaultProbeTimeout bounds one reachability check of a member API server, the kubeconfig
// Secret's read included.
const DefaultProbeTimeout = 10 * time.Second

// DefaultClusterConcurrency is how many FleetClusters are probed at once. A probe of a member that
// does not answer holds its worker for the probe timeout: 20 workers probe 1,000 clusters every
// minute (the default interval) with up to about 100 of them down.
const DefaultClusterConcurrency = 20

// fleetClusterKustomizationIndex indexes Kustomizations by the FleetCluster named in their
// tidegate.dev/cluster label, so a FleetCluster's reconcile reads only its own Kustomizations.
const fleetClusterKustomizationIndex = "fleetcluster.tidegate.dev/kustomizations"

// FleetClusterReconciler keeps a FleetCluster's status current: whether its API server answers
// through the kubeconfig (Reachable, Ready, serverVersion, lastObservedTime) and, per rollout, the
// revision its Kustomization should run and the one it runs. Status is written only when one of
// these changed: a probe that sees what status already says writes nothing.
type FleetClusterReconciler struct {
	client.Client
	// EventRecorder emits Kubernetes events (fluxcd/pkg/runtime/events in the manager, as for
	// FleetRollouts); may be nil in tests.
	EventRecorder events.EventRecorder
	// HubConfig reaches the hub API server; FleetClusters without spec.kubeConfig are probed with it.
	HubConfig *rest.Config
	// Members reaches member API servers; SetupWithManager makes one (member.Clients over the
	// manager's API reader and cache) when nil. The FleetRollout controller's collector shares it.
	Members *member.Clients
	// ProbeTimeout bounds one reachability check; defaults to DefaultProbeTimeout.
	ProbeTimeout time.Duration
	// MaxConcurrentReconciles is how many FleetClusters are reconciled at once; defaults to
	// DefaultClusterConcurrency.
	MaxConcurrentReconciles int
	// SkipNameValidation lets several managers in one process (tests) register this controller.
	SkipNameValidation bool
	// RateLimiter spaces the retries of a failing reconcile; nil is controller-runtime's default.
	RateLimiter workqueue.TypedRateLimiter[reconcile.Request]
	// Shard, when set, is the only FleetClusters this reconciler probes and writes: those whose
	// labels match it. Every shard of the controller caches every FleetCluster, which its rollouts
	// may select, but one probes each: the main shard, whose selector excludes the others' keys,
	// probes the FleetClusters without a ShardLabel. Nil: every FleetCluster.
	Shard labels.Selector

	// indexed is true when Kustomizations can be listed through fleetClusterKustomizationIndex.
	indexed bool
	// helmReleases is true when the hub serves HelmReleases, chart rollouts' members
	// (helmReleasesServed): they are indexed, watched and listed as Kustomizations are.
	helmReleases bool

	// nextProbe is when each FleetCluster is due for its next probe. Reconciles triggered by a
	// Kustomization change in between refresh status.rollouts only; probing on each of them would
	// ask the member more often than spec.interval asks. Memory only: after a restart every
	// cluster is probed once, which is what a restart should do anyway.
	mu        sync.Mutex
	nextProbe map[types.NamespacedName]time.Time
}

// SetupWithManager registers the reconciler: FleetClusters on spec change or reconcile request, and the
// FleetCluster named in a Kustomization's tidegate.dev/cluster label when its rollout view changes.
func (r *FleetClusterReconciler) SetupWithManager(mgr ctrl.Manager) error {
	served, err := helmReleasesServed(mgr.GetRESTMapper())
	if err != nil {
		return err
	}
	members := []client.Object{&kustomizev1.Kustomization{}}
	if served {
		members = append(members, &helmv2.HelmRelease{})
	}
	for _, m := range members {
		if err := mgr.GetFieldIndexer().IndexField(context.Background(), m, fleetClusterKustomizationIndex,
			func(o client.Object) []string {
				if name := o.GetLabels()[v1alpha1.ClusterLabel]; name != "" {
					return []string{name}
				}
				return nil
			}); err != nil {
			return fmt.Errorf("indexing %T by %s label: %w", m, v1alpha1.ClusterLabel, err)
		}
	}
	r.indexed, r.helmReleases = true, served
	if r.Members == nil {
		r.Members = NewMemberClients(mgr, r.HubConfig, MemberOptions{})
	}
	concurrency := r.MaxConcurrentReconciles
	if concurrency <= 0 {
		concurrency = DefaultClusterConcurrency
	}
	b := ctrl.NewControllerManagedBy(mgr)
	if served {
		b = b.Watches(&helmv2.HelmRelease{}, handler.EnqueueRequestsFromMapFunc(fleetClusterForKustomization),
			builder.WithPredicates(clusterRolloutViewChanged{}))
	}
	return b.
		For(&v1alpha1.FleetCluster{}, builder.WithPredicates(
			// A FleetCluster relabelled into this shard is probed at once.
			predicate.Or(predicate.GenerationChangedPredicate{}, predicates.ReconcileRequestedPredicate{}, predicate.LabelChangedPredicate{}),
		)).
		Watches(&kustomizev1.Kustomization{},
			handler.EnqueueRequestsFromMapFunc(fleetClusterForKustomization),
			builder.WithPredicates(clusterRolloutViewChanged{}),
		).
		WithOptions(controllerOptions(concurrency, r.SkipNameValidation, r.RateLimiter)).
		Complete(r)
}

// Reconcile probes a FleetCluster's API server when it is due and records what tidegate sees of it.
func (r *FleetClusterReconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, retErr error) {
	log := ctrl.LoggerFrom(ctx)

	obj := &v1alpha1.FleetCluster{}
	if err := r.Get(ctx, req.NamespacedName, obj); err != nil {
		if apierrors.IsNotFound(err) {
			r.forgetProbe(req.NamespacedName)
			domain().forgetCluster(req.Namespace, req.Name)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("fleetcluster %s: reading it: %w", req.NamespacedName, err)
	}

	// Another shard's FleetCluster is that shard's to probe and write.
	if !inShard(r.Shard, obj) {
		r.forgetProbe(req.NamespacedName)
		domain().forgetCluster(req.Namespace, req.Name)
		return ctrl.Result{}, nil
	}

	// Suspended means left exactly as it is: no probe and no write, not even lastHandledReconcileAt,
	// so this check comes before the patcher (kustomize-controller's comes after it).
	if obj.Spec.Suspend {
		log.V(1).Info("reconciliation is suspended")
		r.forgetProbe(req.NamespacedName)
		return ctrl.Result{}, nil
	}
	// No finalizer: nothing outside the object is ours to clean up.
	if !obj.DeletionTimestamp.IsZero() {
		r.forgetProbe(req.NamespacedName)
		return ctrl.Result{}, nil
	}

	patcher := newStatusPatch(obj)
	before := conditions.Get(obj, v1alpha1.ReadyCondition).DeepCopy()
	observed := false
	defer func() {
		if err := r.finalizeStatus(ctx, obj, patcher, observed); err != nil {
			retErr = errors.Join(retErr, err)
			return
		}
		domain().recordCluster(obj)
		r.recordTransition(ctx, obj, before)
	}()

	rollouts, err := r.observeRollouts(ctx, obj)
	if err != nil {
		return ctrl.Result{}, err
	}
	obj.Status.Rollouts = rollouts

	now := time.Now()
	if wait, due := r.probeDue(obj, now); !due {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	if err := r.probe(ctx, obj, now); err != nil {
		// Not a verdict on the member: the hub could not be read. Retry with backoff.
		r.forgetProbe(req.NamespacedName)
		return ctrl.Result{}, err
	}
	observed = true
	interval := jitter.JitteredIntervalDuration(obj.GetRequeueAfter())
	r.scheduleProbe(req.NamespacedName, now.Add(interval))
	return ctrl.Result{RequeueAfter: interval}, nil
}

// probe checks the member API server and sets Reachable and Ready, serverVersion and, when what it
// saw differs from what status says, lastObservedTime. It returns an error only when the hub failed
// to give the kubeconfig; a bad kubeconfig or an unreachable member is a verdict, written to the
// conditions. The whole probe, the kubeconfig Secret's read included, ends within the probe timeout.
func (r *FleetClusterReconciler) probe(ctx context.Context, obj *v1alpha1.FleetCluster, now time.Time) error {
	timeout := r.ProbeTimeout
	if timeout <= 0 {
		timeout = DefaultProbeTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	dc, cfg, err := r.Members.Discovery(ctx, obj)
	switch {
	case member.IsKubeConfigError(err):
		markReachable(obj, metav1.ConditionFalse, v1alpha1.KubeConfigErrorReason, err.Error())
		return nil
	case err != nil:
		markReachable(obj, metav1.ConditionFalse, v1alpha1.KubeConfigErrorReason, err.Error())
		return err
	}
	info, err := dc.ServerVersionWithContext(ctx)
	switch {
	case apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err):
		// The server answered but refused the credentials: only new credentials fix that.
		markReachable(obj, metav1.ConditionFalse, v1alpha1.KubeConfigErrorReason,
			fmt.Sprintf("fleetcluster %s/%s: API server %s refused the credentials of %s: %s: renew them",
				obj.Namespace, obj.Name, cfg.Host, member.CredentialSource(obj), member.Redact(err.Error(), cfg)))
		return nil
	case err != nil:
		markReachable(obj, metav1.ConditionFalse, v1alpha1.UnreachableReason,
			fmt.Sprintf("fleetcluster %s/%s: API server %s did not answer: %s", obj.Namespace, obj.Name, cfg.Host, member.Redact(err.Error(), cfg)))
		return nil
	}
	seen := conditions.IsTrue(obj, v1alpha1.ReachableCondition) && obj.Status.ServerVersion == info.GitVersion && obj.Status.LastObservedTime != nil
	obj.Status.ServerVersion = info.GitVersion
	if !seen {
		obj.Status.LastObservedTime = &metav1.Time{Time: now}
	}
	markReachable(obj, metav1.ConditionTrue, v1alpha1.ReachableReason, fmt.Sprintf("API server %s answered", info.GitVersion))
	return nil
}

// markReachable sets Reachable and derives Ready from it: reachability is the only thing a
// FleetCluster's readiness depends on.
func markReachable(obj *v1alpha1.FleetCluster, status metav1.ConditionStatus, reason, message string) {
	conditions.Set(obj, &metav1.Condition{Type: v1alpha1.ReachableCondition, Status: status, Reason: reason, Message: message})
	conditions.SetSummary(obj, v1alpha1.ReadyCondition, conditions.WithConditions(v1alpha1.ReachableCondition))
}

// finalizeStatus is the one place status bookkeeping happens, then the one patch of the reconcile.
// The patch sends only what changed, so a reconcile that changed nothing writes nothing.
func (r *FleetClusterReconciler) finalizeStatus(ctx context.Context, obj *v1alpha1.FleetCluster, patcher *statusPatch, observed bool) error {
	if v, ok := meta.ReconcileAnnotationValue(obj.GetAnnotations()); ok {
		obj.Status.SetLastHandledReconcileRequest(v)
	}
	// A verdict (reachable, unreachable or a kubeconfig the user must fix) is an observation of this
	// generation; a failure to read the hub is not.
	if observed {
		obj.Status.ObservedGeneration = obj.Generation
	}
	if err := patcher.Patch(ctx, r.Client, obj); err != nil {
		if !obj.DeletionTimestamp.IsZero() || apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("fleetcluster %s/%s: patching status: %w", obj.Namespace, obj.Name, err)
	}
	return nil
}

// recordTransition logs and emits an event when Ready changed status or reason, and only then, so
// a cluster that stays down does not flood the event stream once per interval.
func (r *FleetClusterReconciler) recordTransition(ctx context.Context, obj *v1alpha1.FleetCluster, before *metav1.Condition) {
	after := conditions.Get(obj, v1alpha1.ReadyCondition)
	if after == nil || (before != nil && before.Status == after.Status && before.Reason == after.Reason) {
		return
	}
	eventType := corev1.EventTypeNormal
	if after.Status != metav1.ConditionTrue {
		eventType = corev1.EventTypeWarning
	}
	ctrl.LoggerFrom(ctx).Info("cluster readiness changed", "ready", after.Status, "reason", after.Reason, "message", after.Message)
	if r.EventRecorder != nil {
		r.EventRecorder.Eventf(obj, nil, eventType, after.Reason, after.Reason, "%s", after.Message)
	}
}

// probeDue tells whether the cluster should be probed now, and if not, how long until it should.
// A spec change, a reconcile request or a missing verdict always probes.
func (r *FleetClusterReconciler) probeDue(obj *v1alpha1.FleetCluster, now time.Time) (time.Duration, bool) {
	if obj.Status.ObservedGeneration != obj.Generation || !conditions.Has(obj, v1alpha1.ReachableCondition) {
		return 0, true
	}
	if v, ok := meta.ReconcileAnnotationValue(obj.GetAnnotations()); ok && v != obj.Status.GetLastHandledReconcileRequest() {
		return 0, true
	}
	r.mu.Lock()
	next, ok := r.nextProbe[client.ObjectKeyFromObject(obj)]
	r.mu.Unlock()
	if !ok || !now.Before(next) {
		return 0, true
	}
	return next.Sub(now), false
}

func (r *FleetClusterReconciler) scheduleProbe(key types.NamespacedName, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.nextProbe == nil {
		r.nextProbe = map[types.NamespacedName]time.Time{}
	}
	r.nextProbe[key] = at
}

func (r *FleetClusterReconciler) forgetProbe(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.nextProbe, key)
}

// observeRollouts lists the cluster's Kustomizations and returns, per rollout, the revision it should
// run and the one it last applied, sorted by rollout name.
func (r *FleetClusterReconciler) observeRollouts(ctx context.Context, obj *v1alpha1.FleetCluster) ([]v1alpha1.ClusterRolloutStatus, error) {
	opts := []client.ListOption{client.InNamespace(obj.Namespace)}
	if r.indexed {
		opts = append(opts, client.MatchingFields{fleetClusterKustomizationIndex: obj.Name})
	} else {
		opts = append(opts, client.MatchingLabels{v1alpha1.ClusterLabel: obj.Name})
	}
	var list kustomizev1.KustomizationList
	if err := r.List(ctx, &list, opts...); err != nil {
		return nil, fmt.Errorf("fleetcluster %s/%s: listing its kustomizations: %w", obj.Namespace, obj.Name, err)
	}
	out := clusterRollouts(list.Items)
	if r.helmReleases {
		var hrs helmv2.HelmReleaseList
		if err := r.List(ctx, &hrs, opts...); err != nil {
			return nil, fmt.Errorf("fleetcluster %s/%s: listing its helmreleases: %w", obj.Namespace, obj.Name, err)
		}
		// A rollout's members are of one kind: the two lists name different rollouts.
		out = append(out, clusterRollouts(hrs.Items)...)
		sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	}
	return out, nil
}

// clusterRollouts turns a cluster's members (Kustomizations, or HelmReleases) into status.rollouts.
// Members without a rollout label are not tidegate's and are skipped; should two name the same
// rollout, the one whose name sorts first counts, so the result does not flip between reconciles.
func clusterRollouts[T any, PT interface {
	*T
	client.Object
}](items []T) []v1alpha1.ClusterRolloutStatus {
	sort.Slice(items, func(i, j int) bool { return PT(&items[i]).GetName() < PT(&items[j]).GetName() })
	seen := map[string]bool{}
	var out []v1alpha1.ClusterRolloutStatus
	for i := range items {
		v := viewOf(PT(&items[i]))
		if v.rollout == "" || seen[v.rollout] {
			continue
		}
		seen[v.rollout] = true
		out = append(out, v1alpha1.ClusterRolloutStatus{
			Name:            v.rollout,
			DesiredRevision: v.desired,
			LiveRevision:    v.live,
			Drift:           v.desired != "" && v.live != "" && v.desired != v.live,
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// clusterRolloutView is what a FleetCluster's status reads from a Kustomization.
type clusterRolloutView struct {
	cluster, rollout, desired, live string
}

func viewOf(obj client.Object) clusterRolloutView {
	v := clusterRolloutView{
		cluster: obj.GetLabels()[v1alpha1.ClusterLabel],
		rollout: obj.GetLabels()[v1alpha1.RolloutLabel],
		desired: obj.GetAnnotations()[v1alpha1.RevisionAnnotation],
	}
	switch m := obj.(type) {
	case *kustomizev1.Kustomization:
		v.live = m.Status.LastAppliedRevision
	case *helmv2.HelmRelease:
		v.live = engine.Observe(m).LastApplied
	}
	return v
}

// clusterRolloutViewChanged passes Kustomization events that change a FleetCluster's status.rollouts:
// Kustomizations carrying the cluster label, and updates that change the label, the rollout label,
// the desired revision or the applied revision. kustomize-controller rewrites status on every
// reconcile; the rest of those writes are of no interest here.
type clusterRolloutViewChanged struct {
	predicate.Funcs
}

func (clusterRolloutViewChanged) Create(e event.CreateEvent) bool {
	return viewOf(e.Object).cluster != ""
}

func (clusterRolloutViewChanged) Delete(e event.DeleteEvent) bool {
	return viewOf(e.Object).cluster != ""
}

func (clusterRolloutViewChanged) Generic(e event.GenericEvent) bool {
	return viewOf(e.Object).cluster != ""
}

func (clusterRolloutViewChanged) Update(e event.UpdateEvent) bool {
	return viewChanged[clusterRolloutView]{view: viewOf}.Update(e)
}

// fleetClusterForKustomization maps a Kustomization to the FleetCluster in its cluster label. On an
// update controller-runtime maps the old and the new object, so a relabelled Kustomization refreshes both.
func fleetClusterForKustomization(_ context.Context, obj client.Object) []reconcile.Request {
	name := obj.GetLabels()[v1alpha1.ClusterLabel]
	if name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: name}}}
}
