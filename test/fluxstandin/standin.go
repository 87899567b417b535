package fluxstandin

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	"github.com/fluxcd/pkg/runtime/jitter"
	"github.com/fluxcd/pkg/runtime/patch"
	"github.com/fluxcd/pkg/runtime/predicates"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/flowcontrol"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// FieldManager owns the status writes, as kustomize-controller's status manager does.
const FieldManager = "kustomize-controller"

// Defaults of Options.
const (
	DefaultWorkers           = 20
	DefaultApplyLatency      = 2 * time.Second
	DefaultFailAfter         = 10 * time.Second
	DefaultJitter            = 0.05
	DefaultRequeueDependency = 2 * time.Second
)

// Options say how fast the stand-in is and what it reports.
type Options struct {
	// Workers is how many Kustomizations are reconciled at once (kustomize-controller's --concurrent).
	Workers int
	// Pace is the initial pace; SetPace changes it while running.
	Pace Pace
	// FailAfter is how long a health check that fails runs before it is reported failed (at most the
	// Kustomization's spec.timeout, as kustomize-controller waits until then).
	FailAfter time.Duration
	// NoRefresh turns off the periodic re-reconcile every spec.interval.
	NoRefresh bool
	// Jitter is the fraction by which each requeue interval is varied at random (kustomize-controller's
	// --interval-jitter-percentage); 0 means DefaultJitter, a negative value none.
	Jitter float64
	// RequeueDependency is when a Kustomization whose source has no artifact is tried again
	// (kustomize-controller's --requeue-dependency).
	RequeueDependency time.Duration
	// Inventory, when set, returns the status.inventory entries of the package a Kustomization applied:
	// what tidegate samples the availability of.
	Inventory func(ks *kustomizev1.Kustomization) []kustomizev1.ResourceRef
	// SkipNameValidation lets several stand-ins run in one process (tests).
	SkipNameValidation bool
}

// Pace is how long applies take and how many start per second.
type Pace struct {
	// ApplyLatency is how long applying a new revision or generation takes, health checks included.
	ApplyLatency time.Duration
	// RefreshLatency is how long a periodic re-reconcile of what is already applied keeps Ready and
	// Healthy Unknown; zero means ApplyLatency.
	RefreshLatency time.Duration
	// Rate caps the applies and re-reconciles started per second, all workers together; zero leaves
	// only Workers and the latencies to bound the throughput.
	Rate float64
}

// Stats count what the stand-in did.
type Stats struct {
	// Applies are reconciles of a new revision or generation that succeeded; Refreshes the periodic
	// re-reconciles of an applied one; Failed the injected health-check failures; Canceled the health
	// checks cut short by a new generation.
	Applies, Refreshes, Failed, Canceled int64
}

// StandIn reconciles tidegate's Kustomizations as kustomize-controller would, without applying.
type StandIn struct {
	opts   Options
	client client.Client
	jitter jitter.Duration

	mu      sync.Mutex
	pace    Pace
	limiter flowcontrol.RateLimiter
	failing []failure

	applies, refreshes, failed, canceled atomic.Int64
	paused                               atomic.Bool
	// kick carries the Kustomizations ReconcileAll asks to reconcile now.
	kick chan event.GenericEvent
}

// failure makes the health checks of revision fail on clusters (every cluster when empty).
type failure struct {
	revision string
	clusters map[string]bool
}

// New returns a stand-in with opts, defaults filled in.
func New(opts Options) *StandIn {
	if opts.Workers <= 0 {
		opts.Workers = DefaultWorkers
	}
	if opts.Pace.ApplyLatency <= 0 {
		opts.Pace.ApplyLatency = DefaultApplyLatency
	}
	if opts.FailAfter <= 0 {
		opts.FailAfter = DefaultFailAfter
	}
	if opts.Jitter == 0 {
		opts.Jitter = DefaultJitter
	}
	if opts.RequeueDependency <= 0 {
		opts.RequeueDependency = DefaultRequeueDependency
	}
	s := &StandIn{opts: opts, jitter: jitter.Percent(opts.Jitter, nil), kick: make(chan event.GenericEvent, 1024)}
	s.SetPace(opts.Pace)
	return s
}

// SetPace changes how fast the stand-in applies, from the next reconcile on.
func (s *StandIn) SetPace(p Pace) {
	if p.ApplyLatency <= 0 {
		p.ApplyLatency = DefaultApplyLatency
	}
	if p.RefreshLatency <= 0 {
		p.RefreshLatency = p.ApplyLatency
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pace = p
	s.limiter = nil
	if p.Rate > 0 {
		s.limiter = flowcontrol.NewTokenBucketRateLimiter(float32(p.Rate), 1)
	}
}

// Pace returns the pace in force.
func (s *StandIn) Pace() Pace {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pace
}

// PauseRefresh pauses (or resumes) the re-reconciles of what is applied: while paused, a Kustomization
// Ready at its source's revision and generation is left as it is and looked at again an interval
// later, so the re-reconciles resume on their own schedule. New revisions and generations are
// applied as ever.
func (s *StandIn) PauseRefresh(paused bool) { s.paused.Store(paused) }

// Workers is the number of Kustomizations reconciled at once.
func (s *StandIn) Workers() int { return s.opts.Workers }

// FailHealthChecks makes the health checks of revision (compared by the commit or digest it names)
// fail on the named clusters (tidegate.dev/cluster label), or everywhere when none is named.
func (s *StandIn) FailHealthChecks(revision string, clusters ...string) {
	f := failure{revision: revision, clusters: map[string]bool{}}
	for _, c := range clusters {
		f.clusters[c] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failing = append(s.failing, f)
}

// ClearFailures removes every injected failure.
func (s *StandIn) ClearFailures() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failing = nil
}

// Stats returns the counts so far.
func (s *StandIn) Stats() Stats {
	return Stats{Applies: s.applies.Load(), Refreshes: s.refreshes.Load(), Failed: s.failed.Load(), Canceled: s.canceled.Load()}
}

func (s *StandIn) fails(revision, cluster string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range s.failing {
		if sameRevision(f.revision, revision) && (len(f.clusters) == 0 || f.clusters[cluster]) {
			return true
		}
	}
	return false
}

func (s *StandIn) current() (Pace, flowcontrol.RateLimiter) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pace, s.limiter
}

// SetupWithManager registers the stand-in with mgr. It reconciles the Kustomizations labelled
// tidegate.dev/rollout when they are created, when their generation changes and on a reconcile
// request, and each spec.interval.
func (s *StandIn) SetupWithManager(mgr ctrl.Manager) error {
	s.client = mgr.GetClient()
	opts := controller.Options{MaxConcurrentReconciles: s.opts.Workers}
	if s.opts.SkipNameValidation {
		skip := true
		opts.SkipNameValidation = &skip
	}
	tidegates := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetLabels()[v1alpha1.RolloutLabel] != "" })
	return ctrl.NewControllerManagedBy(mgr).
		Named("fluxstandin").
		For(&kustomizev1.Kustomization{}, builder.WithPredicates(tidegates,
			predicate.Or(predicate.GenerationChangedPredicate{}, predicates.ReconcileRequestedPredicate{}))).
		WatchesRawSource(source.Channel(s.kick, &handler.EnqueueRequestForObject{})).
		WithOptions(opts).
		Complete(s)
}

// ReconcileAll reconciles every Kustomization of namespace now, as `flux reconcile kustomization`
// would each: what is applied is re-reconciled (Ready and Healthy Unknown, then True), as each
// does every spec.interval anyway.
func (s *StandIn) ReconcileAll(ctx context.Context, namespace string) (int, error) {
	var list kustomizev1.KustomizationList
	if err := s.client.List(ctx, &list, client.InNamespace(namespace), client.HasLabels{v1alpha1.RolloutLabel}); err != nil {
		return 0, err
	}
	for i := range list.Items {
		select {
		case s.kick <- event.GenericEvent{Object: &list.Items[i]}:
		case <-ctx.Done():
			return i, ctx.Err()
		}
	}
	return len(list.Items), nil
}

// Reconcile plays one reconcile of kustomize-controller's: the same conditions in the same order,
// with the apply replaced by a wait.
func (s *StandIn) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	ks := &kustomizev1.Kustomization{}
	if err := s.client.Get(ctx, req.NamespacedName, ks); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	patcher := patch.NewSerialPatcher(ks, s.client)
	if !ks.DeletionTimestamp.IsZero() {
		if controllerutil.RemoveFinalizer(ks, kustomizev1.KustomizationFinalizer) {
			return ctrl.Result{}, client.IgnoreNotFound(s.patch(ctx, ks, patcher))
		}
		return ctrl.Result{}, nil
	}
	if controllerutil.AddFinalizer(ks, kustomizev1.KustomizationFinalizer) {
		return ctrl.Result{Requeue: true}, s.patch(ctx, ks, patcher)
	}
	if ks.Spec.Suspend {
		return ctrl.Result{}, nil
	}

	revision, why, err := s.artifactRevision(ctx, ks)
	if err != nil {
		return ctrl.Result{}, err
	}
	if revision == "" {
		conditions.MarkFalse(ks, meta.ReadyCondition, meta.ArtifactFailedReason, "%s", why)
		return ctrl.Result{RequeueAfter: s.opts.RequeueDependency}, s.finalize(ctx, ks, patcher)
	}

	fresh := ks.Status.ObservedGeneration != ks.Generation || !sameRevision(ks.Status.LastAppliedRevision, revision)
	if !fresh && s.paused.Load() && conditions.IsReady(ks) {
		return ctrl.Result{RequeueAfter: s.jitter(ks.GetRequeueAfter())}, nil
	}
	pace, limiter := s.current()
	if limiter != nil {
		if err := limiter.Wait(ctx); err != nil {
			return ctrl.Result{}, err
		}
	}
	latency := pace.ApplyLatency
	if !fresh {
		latency = pace.RefreshLatency
	}
	timeout := ks.GetTimeout()
	conditions.MarkUnknown(ks, meta.ReadyCondition, meta.ProgressingReason, "%s", "Reconciliation in progress")
	conditions.MarkReconciling(ks, meta.ProgressingReason, "Fetching manifests for revision %s with a timeout of %s", revision, timeout)
	if err := s.patch(ctx, ks, patcher); err != nil {
		return ctrl.Result{}, err
	}

	ks.Status.LastAttemptedRevision = revision
	if s.opts.Inventory != nil {
		ks.Status.Inventory = &kustomizev1.ResourceInventory{Entries: s.opts.Inventory(ks)}
	}
	health := ks.Spec.Wait || len(ks.Spec.HealthChecks) > 0
	if health {
		msg := fmt.Sprintf("Running health checks for revision %s with a timeout of %s", revision, timeout)
		conditions.MarkReconciling(ks, meta.ProgressingReason, "%s", msg)
		conditions.MarkUnknown(ks, meta.HealthyCondition, meta.ProgressingReason, "%s", msg)
	} else {
		conditions.Delete(ks, meta.HealthyCondition)
	}
	if err := s.patch(ctx, ks, patcher); err != nil {
		return ctrl.Result{}, err
	}

	fail := s.fails(revision, ks.Labels[v1alpha1.ClusterLabel])
	wait := latency
	if fail {
		wait = min(s.opts.FailAfter, timeout)
	}
	start := time.Now()
	if canceled := s.sleep(ctx, ks, wait); canceled {
		s.canceled.Add(1)
		conditions.MarkFalse(ks, meta.ReadyCondition, meta.HealthCheckCanceledReason,
			"New reconciliation triggered by %s/%s/%s", kustomizev1.KustomizationKind, ks.Namespace, ks.Name)
		return ctrl.Result{Requeue: true}, s.finalize(ctx, ks, patcher)
	}
	if ctx.Err() != nil {
		return ctrl.Result{}, ctx.Err()
	}
	if fail {
		s.failed.Add(1)
		record(ks, revision, start, meta.HealthCheckFailedReason)
		if health {
			msg := fmt.Sprintf("health check failed after %s: timeout waiting for: [Deployment status: 'InProgress']", time.Since(start).Round(time.Millisecond))
			conditions.MarkFalse(ks, meta.ReadyCondition, meta.HealthCheckFailedReason, "%s", msg)
			conditions.MarkFalse(ks, meta.HealthyCondition, meta.HealthCheckFailedReason, "%s", msg)
		} else {
			conditions.MarkFalse(ks, meta.ReadyCondition, meta.ReconciliationFailedReason, "apply of revision %s failed", revision)
		}
		return ctrl.Result{RequeueAfter: ks.GetRetryInterval()}, s.finalize(ctx, ks, patcher)
	}
	if health {
		conditions.MarkTrue(ks, meta.HealthyCondition, meta.SucceededReason, "Health check passed in %s", time.Since(start).Round(time.Millisecond))
	}
	ks.Status.LastAppliedRevision = revision
	conditions.MarkTrue(ks, meta.ReadyCondition, meta.ReconciliationSucceededReason, "Applied revision: %s", revision)
	record(ks, revision, start, meta.ReconciliationSucceededReason)
	if fresh {
		s.applies.Add(1)
	} else {
		s.refreshes.Add(1)
	}
	if err := s.finalize(ctx, ks, patcher); err != nil {
		return ctrl.Result{}, err
	}
	if s.opts.NoRefresh {
		return ctrl.Result{}, nil
	}
	return ctrl.Result{RequeueAfter: s.jitter(ks.GetRequeueAfter())}, nil
}

// record notes a finished reconcile in status.history as kustomize-controller does: the latest
// snapshot, with its outcome and the revision in its metadata, is what tidegate judges a member by
// while it reconciles again.
func record(ks *kustomizev1.Kustomization, revision string, start time.Time, reason string) {
	_, digest, _ := strings.Cut(revision, "@")
	ks.Status.History.Upsert(digest, time.Now(), time.Since(start), reason, map[string]string{"revision": revision})
}

// artifactRevision is the revision the Kustomization's source serves, or "" and why it has none.
func (s *StandIn) artifactRevision(ctx context.Context, ks *kustomizev1.Kustomization) (string, string, error) {
	ref := ks.Spec.SourceRef
	ns := ref.Namespace
	if ns == "" {
		ns = ks.Namespace
	}
	key := types.NamespacedName{Namespace: ns, Name: ref.Name}
	var src sourcev1.Source
	switch ref.Kind {
	case sourcev1.GitRepositoryKind:
		src = &sourcev1.GitRepository{}
	case sourcev1.OCIRepositoryKind:
		src = &sourcev1.OCIRepository{}
	default:
		return "", fmt.Sprintf("source kind %q is not played by the stand-in", ref.Kind), nil
	}
	if err := s.client.Get(ctx, key, src.(client.Object)); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return "", fmt.Sprintf("Source '%s' not found", ref.String()), nil
		}
		return "", "", err
	}
	a := src.GetArtifact()
	if a == nil {
		return "", fmt.Sprintf("Source artifact not found, retrying in %s", s.opts.RequeueDependency), nil
	}
	return a.Revision, "", nil
}

// sleep waits d, or until the Kustomization's generation changes (a new spec interrupts its health
// checks, as in kustomize-controller). It reports whether it was interrupted.
func (s *StandIn) sleep(ctx context.Context, ks *kustomizev1.Kustomization, d time.Duration) bool {
	deadline := time.Now().Add(d)
	tick := 250 * time.Millisecond
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(min(left, tick)):
		}
		var now kustomizev1.Kustomization
		if err := s.client.Get(ctx, client.ObjectKeyFromObject(ks), &now); err == nil && now.Generation != ks.Generation {
			return true
		}
	}
}

// finalize is kustomize-controller's finalizeStatus: Ready True clears Reconciling and records the
// generation; Ready False leaves Reconciling as ProgressingWithRetry.
func (s *StandIn) finalize(ctx context.Context, ks *kustomizev1.Kustomization, patcher *patch.SerialPatcher) error {
	if v, ok := meta.ReconcileAnnotationValue(ks.GetAnnotations()); ok {
		ks.Status.LastHandledReconcileAt = v
	}
	if conditions.IsTrue(ks, meta.ReadyCondition) {
		conditions.Delete(ks, meta.ReconcilingCondition)
		ks.Status.ObservedGeneration = ks.Generation
	}
	if conditions.IsFalse(ks, meta.ReadyCondition) && conditions.Has(ks, meta.ReconcilingCondition) {
		rc := conditions.Get(ks, meta.ReconcilingCondition)
		rc.Reason = meta.ProgressingWithRetryReason
		conditions.Set(ks, rc)
	}
	return s.patch(ctx, ks, patcher)
}

func (s *StandIn) patch(ctx context.Context, ks *kustomizev1.Kustomization, patcher *patch.SerialPatcher) error {
	return patcher.Patch(ctx, ks,
		patch.WithOwnedConditions{Conditions: []string{meta.HealthyCondition, meta.ReadyCondition, meta.ReconcilingCondition, meta.StalledCondition}},
		patch.WithForceOverwriteConditions{},
		patch.WithFieldOwner(FieldManager))
}

// sameRevision compares two Flux revisions by the commit or digest they name ("main@sha1:<sha>" and
// "sha1:<sha>" are the same).
func sameRevision(a, b string) bool {
	digest := func(r string) string {
		if i := strings.LastIndex(r, "@"); i >= 0 {
			return r[i+1:]
		}
		return r
	}
	return a == b || (a != "" && b != "" && digest(a) == digest(b))
}

// WorkloadEntry is the status.inventory entry kustomize-controller writes for an apps/v1 object.
func WorkloadEntry(kind, namespace, name string) kustomizev1.ResourceRef {
	return kustomizev1.ResourceRef{ID: namespace + "_" + name + "_apps_" + kind, Version: "v1"}
}
