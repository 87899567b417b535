package controllers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	runtimectrl "github.com/fluxcd/pkg/runtime/controller"
	fluxevents "github.com/fluxcd/pkg/runtime/events"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/engine"
	"github.com/tidegate/tidegate/evidence/collector"
	"github.com/tidegate/tidegate/fleets"
	"github.com/tidegate/tidegate/internal/attest"
	"github.com/tidegate/tidegate/verdict"
)

// waitingRequeue bounds the requeue while the rollout waits on Flux: Kustomization and source
// changes trigger a reconcile through the watches; the short requeue only bounds a missed event.
const waitingRequeue = 5 * time.Second

// FleetRolloutReconciler moves FleetRollouts wave by wave.
type FleetRolloutReconciler struct {
	client.Client
	// APIReader reads the FleetRollout itself uncached: the engine acts on its recorded status, which
	// must be the latest written, never a stale cache copy.
	APIReader client.Reader
	// Shard, when set, is the only FleetRollouts this reconciler acts on: those whose labels match
	// it (--watch-label-selector). The cache holds no other, but a Kustomization of another shard's
	// rollout still enqueues its owner, which is read uncached. Nil: every FleetRollout.
	Shard labels.Selector
	// Receipts lists GateReceipts' metadata (metav1.PartialObjectMetadata) from the manager's
	// cache, which holds nothing else of a receipt: a receipt is read whole from the API server,
	// and only when a pass needs it. nil: Client.
	Receipts client.Reader
	// EventRecorder emits Kubernetes events and, given --events-addr, posts them to
	// notification-controller (fluxcd/pkg/runtime/events in the manager).
	EventRecorder fluxevents.Recorder
	// Metrics records Flux-style reconcile metrics; optional.
	Metrics *runtimectrl.Metrics
	// Evidence collects the gates' evidence and loads policies.
	Evidence *collector.Collector
	// Gates decides gates; nil means CUEGates, the rollout's CUE policy.
	Gates GateEvaluator
	// Now returns the time; nil means time.Now.
	Now func() time.Time
	// TestHook, when set, is called with the name of each point of the state machine where a crash
	// would leave the hub half-written; an error aborts the reconcile there, as a crash would (the
	// write it precedes and every write after it in the pass are not made). The points:
	//
	//   - "finalizer:add", "finalizer:remove": before the finalizer is added to a new rollout, and
	//     before it is removed from a deleted one; "finalize:<cluster>": before a deleted rollout's
	//     Kustomization of cluster is set to its deletion policy (or deleted, for Delete).
	//   - "pin:<revision>": before the pinned source of the candidate or the known-good is created.
	//   - "switch:<cluster>", "rollback:<cluster>": before cluster's Kustomization is written,
	//     forward (or in a rehearsal) or in a rollback.
	//   - "receipt:<gate>:<wave>": before a gate's receipt is created; "decided:<gate>:<wave>":
	//     after it was created, before status records the decision.
	//   - "status:candidate", "status:phase:<phase>", "status:wave:<wave>:<phase>",
	//     "status:rehearsal:<wave>:<phase>", then "status": before the status patch that records a new
	//     candidate, a phase of the rollout, of a wave (Progressing is its start, Soaking its
	//     soak's start, AwaitingApproval its wait for an approval) or of a rehearsal; "status" comes
	//     before every status patch.
	//   - "ledger:<revision>": after entries were appended to the ledger of revision, before the
	//     status patch that records what they list.
	//   - "prune:<name>": before an unused pinned source or an old receipt is deleted.
	//   - "orphan:<cluster>": before the Kustomization of a cluster whose FleetCluster is gone, listed
	//     in status.orphaned, is set to Flux's deletionPolicy Orphan and deleted.
	TestHook func(point string) error

	// Signer signs receipts and ledger entries; nil leaves them unsigned.
	Signer *attest.Signer

	// Export, when set, exports each receipt pruning deletes, first.
	Export *ReceiptExport

	// HelmReleases tells whether the hub serves HelmReleases, a chart rollout's members
	// (helmReleasesServed): SetupWithManager sets it.
	HelmReleases bool

	// writes keeps the backoff of the Kustomization writes that failed.
	writes writeBackoff
}

// pass is one reconcile of one rollout: the scope it read and what its sub-steps leave for the next.
type pass struct {
	*engine.World
	// tracked is the source spec.sourceRef names, as read; pinned sources are copies of it.
	tracked   client.Object
	policy    *collector.RolloutPolicy
	policyErr error
	res       engine.StepResult
	// progress is the rollout's progress before the step (engine.Progress): a pass that moves it
	// recorded an intent.
	progress engine.Progress
	// retryWritesAfter is when a Kustomization write that failed is due again; zero when none is.
	retryWritesAfter time.Duration
	// afterStatus runs once the status this pass leaves is written, and only then: what may be
	// dropped only when the decision that ends its use is recorded (a decided wave's samples).
	afterStatus []func()
	// receipts are the receipts this pass decided by, written or taken up, by name: the ledger
	// lists them before status records them.
	receipts map[string]*v1alpha1.GateReceipt
}

// Reconcile reads as the decision list of a Flux controller: get, deletion, finalizer, suspend,
// patcher and deferred status (Ready derived once from the outcome), then the pipeline.
func (r *FleetRolloutReconciler) Reconcile(ctx context.Context, req reconcile.Request) (result reconcile.Result, retErr error) {
	start := time.Now()
	fr := &v1alpha1.FleetRollout{}
	if err := r.APIReader.Get(ctx, req.NamespacedName, fr); err != nil {
		if apierrors.IsNotFound(err) {
			domain().forgetRollout(req.Namespace, req.Name)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !inShard(r.Shard, fr) {
		domain().forgetRollout(req.Namespace, req.Name) // another shard's to reconcile and report
		return reconcile.Result{}, nil
	}
	if !fr.DeletionTimestamp.IsZero() {
		// Being deleted: what spec.deletionPolicy asks of its Kustomizations, then the finalizer
		// goes (finalize.go); nothing else is written, not even status.
		return r.finalize(ctx, fr)
	}
	if err := r.ensureFinalizer(ctx, fr); err != nil {
		return reconcile.Result{}, err
	}
	if r.Metrics != nil {
		r.Metrics.RecordSuspend(ctx, fr, fr.Spec.Suspend)
	}
	// A suspended rollout is left exactly as it is: no status write, no Kustomization write.
	if fr.Spec.Suspend {
		log.FromContext(ctx).Info("reconciliation is suspended for this object")
		return reconcile.Result{}, nil
	}

	patcher := newStatusPatch(fr)
	var (
		out outcome
		p   *pass
	)
	// The status as read: what the pass's writes are measured against (crash points, ledgers).
	read := fr.Status.DeepCopy()
	defer func() {
		setConditions(fr, out, p.Settings.OnFail)
		result, retErr = out.result()
		if err := r.writePass(ctx, fr, patcher, read, p.TrackedState, p.receipts); err != nil {
			retErr = errors.Join(retErr, err)
		} else {
			for _, f := range p.afterStatus {
				f()
			}
			domain().recordRollout(fr, read.Phase)
			r.announce(log.FromContext(ctx), fr, read, p.TrackedRefused)
		}
		if r.Metrics != nil {
			r.Metrics.RecordDuration(ctx, fr, start)
		}
	}()
	out, p = r.reconcile(ctx, fr)
	return result, retErr
}

// writePass writes what a pass leaves, in this order: the status crash points (statusPoints, from
// the marks before the pass read), the ledger of an unchanged revision, the ledgers (recordLedger:
// what status is about to record, and a superseded candidate's outcome), then the status patch.
// The first error stops it: nothing after it is written.
func (r *FleetRolloutReconciler) writePass(ctx context.Context, fr *v1alpha1.FleetRollout, patcher *statusPatch, read *v1alpha1.FleetRolloutStatus,
	tracked engine.SourceState, receipts map[string]*v1alpha1.GateReceipt) error {
	if err := r.hooks(r.statusPoints(engine.ProgressOf(read), &fr.Status)); err != nil {
		return err
	}
	if err := r.recordUnchanged(ctx, fr, read.Unchanged, tracked); err != nil {
		r.event(fr, corev1.EventTypeWarning, v1alpha1.LedgerFailedReason, "%s", capMessage(err.Error()))
		return err
	}
	if err := r.recordLedger(ctx, fr, read.Candidate, receipts); err != nil {
		// The ledger lists a decision before status records it: a pass that could not append
		// its entries does not record its decisions, and the next one takes them up.
		r.event(fr, corev1.EventTypeWarning, v1alpha1.LedgerFailedReason, "%s", capMessage(err.Error()))
		return err
	}
	return r.finalizeStatus(ctx, fr, patcher)
}

// reconcile runs the pipeline: each sub-step reads what the ones before it left in the pass and
// returns an outcome; any outcome but proceeding ends the pass.
// It also returns the pass: the policy's settings (onFail, which Ready's message mentions), what
// to do once the status is written (afterStatus) and the receipts to list in the ledger first.
func (r *FleetRolloutReconciler) reconcile(ctx context.Context, fr *v1alpha1.FleetRollout) (outcome, *pass) {
	p := &pass{World: &engine.World{Rollout: fr, Now: r.now()}, receipts: map[string]*v1alpha1.GateReceipt{}}
	for _, sub := range []func(context.Context, *pass) outcome{
		r.resolveTarget,
		r.plan,
		r.loadPolicy,
		r.act,
		r.observe,
		r.step,
		r.sample,
		r.decideGates,
		r.prune,
	} {
		if o := sub(ctx, p); o.kind != proceed {
			return o, p
		}
	}
	return r.settle(p), p
}

// HelmControllerMissingReason is Ready's reason for a chart rollout on a hub that does not serve
// HelmReleases.
const HelmControllerMissingReason = "HelmControllerMissing"

// resolveTarget reads the tracked source: the revision wanted is spec.revision, else its artifact's.
// A chart rollout that cannot have HelmReleases (its chart from a GitRepository, or a hub without
// helm-controller), or whose tracked source cannot be pinned (a HelmChart of a GitRepository:
// unpinnable), goes no further.
func (r *FleetRolloutReconciler) resolveTarget(ctx context.Context, p *pass) outcome {
	fr := p.Rollout
	if why := engine.ChartSourceRefused(fr); why != "" {
		return stalled(v1alpha1.InvalidSpecReason, errors.New(why), 0)
	}
	if fr.IsChart() && !r.HelmReleases {
		return stalled(HelmControllerMissingReason, fmt.Errorf("fleetrollout %s/%s is a Helm chart (spec.chart), whose members are HelmReleases, "+
			"and the hub does not serve HelmReleases (helm.toolkit.fluxcd.io/v2): install helm-controller on the hub, then restart tidegate", fr.Namespace, fr.Name), fr.GetRequeueAfter())
	}
	kind, name := fr.Spec.SourceRef.Kind, fr.Spec.SourceRef.Name
	tracked, state, err := collector.GetSource(ctx, r.Client, fr.Namespace, kind, name)
	switch {
	case apierrors.IsNotFound(err):
		return waitingOn(v1alpha1.SourceNotFoundReason,
			fmt.Sprintf("%s %s/%s not found: create it or fix spec.sourceRef", kind, fr.Namespace, name), fr.GetRequeueAfter())
	case err != nil:
		return retryable(fmt.Errorf("reading source of fleetrollout %s/%s: %w", fr.Namespace, fr.Name, err))
	}
	if why := unpinnable(fr, tracked); why != "" {
		return stalled(v1alpha1.InvalidSpecReason, errors.New(why), 0)
	}
	p.tracked, p.TrackedState = tracked, state
	switch {
	case fr.Spec.Revision != "":
		if _, _, err := engine.SplitRevision(fr.Spec.Revision); err != nil {
			return stalled(v1alpha1.InvalidSpecReason, fmt.Errorf("spec.revision of fleetrollout %s/%s: %w", fr.Namespace, fr.Name, err), 0)
		}
		p.Target = fr.Spec.Revision
	case state.Revision != "":
		p.Target = state.Revision
		if state.VerifyFailed {
			p.TrackedRefused = fmt.Sprintf("%s %s refused the newest artifact of its reference and serves %s, the last it verified: %s",
				kind, name, state.Revision, state.VerifyMessage)
		}
	default:
		p.TargetWhy = fmt.Sprintf("%s %s has no artifact yet: %s", kind, name, state.Message)
	}
	return proceeding()
}

// plan reads the FleetClusters of the namespace and plans the waves over them.
func (r *FleetRolloutReconciler) plan(ctx context.Context, p *pass) outcome {
	fr := p.Rollout
	var list v1alpha1.FleetClusterList
	if err := r.List(ctx, &list, client.InNamespace(fr.Namespace)); err != nil {
		return retryable(fmt.Errorf("listing fleetclusters in %s: %w", fr.Namespace, err))
	}
	p.Clusters = make(map[string]*v1alpha1.FleetCluster, len(list.Items))
	for i := range list.Items {
		p.Clusters[list.Items[i].Name] = &list.Items[i]
	}
	p.Inventory = fleets.InventoryFrom(list.Items)
	plan, err := fleets.Plan(fleets.Input{Rollout: fr, Inventory: p.Inventory})
	if err != nil {
		var specErr *fleets.SpecError
		if errors.As(err, &specErr) {
			return stalled(v1alpha1.InvalidSpecReason, err, 0)
		}
		return retryable(err)
	}
	p.Plan = plan
	engine.SetSkipped(fr, plan)
	if len(plan.Eligible) == 0 && fr.Status.Candidate == nil {
		return waitingOn(v1alpha1.NoClustersSelectedReason, fmt.Sprintf(
			"spec.clusterSelector selects no eligible FleetCluster in namespace %s (%d skipped): add FleetClusters or fix the selector",
			fr.Namespace, len(plan.Skipped)), fr.GetRequeueAfter())
	}
	return proceeding()
}

// loadPolicy loads the policy that decides the gates. One that cannot decide does not end the
// pass: no gate is decided, so no wave starts or passes, but what needs no gate (a rollback, a
// hold) still happens; settle reports it.
func (r *FleetRolloutReconciler) loadPolicy(ctx context.Context, p *pass) outcome {
	p.policy, p.policyErr = r.Evidence.Policy(ctx, p.Rollout)
	if p.policyErr == nil {
		p.Settings = p.policy.Settings
	} else if def, err := collector.BuiltinPolicy(); err == nil {
		p.Settings = def.Settings
	}
	return proceeding()
}

// step moves the status one decision forward (pure), and says what it asked for.
func (r *FleetRolloutReconciler) step(_ context.Context, p *pass) outcome {
	fr := p.Rollout
	p.progress = engine.ProgressOf(&fr.Status)
	p.res = engine.Step(p.World)
	if p.res.Refused != "" {
		r.event(fr, corev1.EventTypeWarning, "RequestRefused", "%s", p.res.Refused)
	}
	for _, n := range p.res.Notes {
		r.event(fr, corev1.EventTypeNormal, "Planned", "%s", n)
	}
	return proceeding()
}

// sample keeps the collector's background work in step with the status the step left: a soaking
// wave's members are sampled on the collector's own ticker, every sample interval, and the next
// wave's pre-wave evidence is gathered ahead while it soaks. The pass itself samples nothing.
func (r *FleetRolloutReconciler) sample(_ context.Context, p *pass) outcome {
	r.Evidence.Follow(p.World, engine.PreWaveGates)
	st := &p.Rollout.Status
	for i := range st.Waves {
		if wv := &st.Waves[i]; wv.Phase == v1alpha1.WaveSoaking && engine.SoakRecordDue(wv, p.Now, p.Settings) {
			wv.Soaked = engine.KeepLongerSoaks(wv.Soaked, r.Evidence.Soaked(p.World, i))
		}
	}
	return proceeding()
}

// decideGates decides the gates the step asked for (collect, evaluate, write the receipt) and
// advances the status by the decisions. A policy that cannot decide records nothing.
func (r *FleetRolloutReconciler) decideGates(ctx context.Context, p *pass) outcome {
	var decided []engine.DecidedGate
	if i := p.res.GateWave; i >= 0 && p.policyErr == nil {
		var err error
		if decided, err = r.decide(ctx, p, i, p.res.Gates); err != nil {
			var perr *verdict.PolicyError
			if errors.As(err, &perr) {
				p.policyErr = err
				decided = nil
			} else {
				return retryable(err)
			}
		}
	}
	if i := p.res.GateWave; i >= 0 && p.policyErr != nil {
		// What could not be decided is recorded too: a receipt per gate that says why.
		if err := r.recordUndecided(ctx, p, i, p.res.Gates, p.policyErr); err != nil {
			return retryable(err)
		}
	}
	setGateConditions(p.Rollout, p.res.GateWave, decided)
	p.res = engine.Advance(p.World, p.res, decided)
	p.res.Next = p.res.Next || p.progress.Moved(engine.ProgressOf(&p.Rollout.Status))
	if i := p.res.Decided; i >= 0 {
		// The wave's samples go once the decision is recorded: a status write that fails (a
		// conflict, an unavailable hub) leaves the wave soaking, and the next pass decides it again
		// over the same samples, not over none. Its soak record goes with the decision.
		w := p.World
		p.afterStatus = append(p.afterStatus, func() { r.Evidence.Forget(w, i) })
		p.Rollout.Status.Waves[i].Soaked = nil
	}
	return proceeding()
}

// prune deletes the pinned sources and receipts nothing needs, and the approvals of past revisions
// (staleApprovals), once the rollout rests. A pass that just came to rest prunes nothing: what it
// lets go (the old known-good's pin) goes on the next pass, once status recorded the rest, as every
// write follows a recorded intent.
func (r *FleetRolloutReconciler) prune(ctx context.Context, p *pass) outcome {
	fr := p.Rollout
	if fr.Status.Phase != v1alpha1.PhaseCompleted && fr.Status.Phase != v1alpha1.PhaseRolledBack || p.res.Next {
		return proceeding()
	}
	inUse := map[string]bool{}
	for _, m := range p.Objects {
		inUse[engine.MemberSource(m)] = true
	}
	prune := func(name string) error { return r.hook("prune:" + name) }
	if err := prunePinnedSources(ctx, r.Client, fr, fr.Spec.SourceRef.Kind, inUse, prune); err != nil {
		return retryable(err)
	}
	receipts, err := r.rolloutReceipts(ctx, fr)
	if err != nil {
		return retryable(err)
	}
	if err := pruneReceipts(ctx, r.Client, receipts, fr, r.Export, prune); err != nil {
		return retryable(err)
	}
	if stale := staleApprovals(fr, p.Target); len(stale) > 0 {
		// After the status write, which carries the resourceVersion this pass read: a spec write
		// before it would fail it. An approval list that changed since it was read is pruned on a
		// later pass.
		p.afterStatus = append(p.afterStatus, func() {
			if err := r.pruneApprovals(ctx, fr, stale); err != nil {
				r.event(fr, corev1.EventTypeWarning, "ApprovalsNotPruned", "%s", capMessage(err.Error()))
			}
		})
	}
	return proceeding()
}

// settle ends a pass that ran every sub-step: a policy that cannot decide stalls (or waits for its
// source), a recorded intent is acted on next, else come back when the step asked (a soak's end), at
// the latest after the interval. A soak needs no pass in between: the collector samples it.
func (r *FleetRolloutReconciler) settle(p *pass) outcome {
	fr := p.Rollout
	if err := p.policyErr; err != nil {
		var perr *verdict.PolicyError
		if errors.As(err, &perr) {
			err = fmt.Errorf("fleetrollout %s/%s: %w; nothing advances until the policy is fixed", fr.Namespace, fr.Name, err)
			r.event(fr, corev1.EventTypeWarning, v1alpha1.InvalidPolicyReason, "%s", capMessage(err.Error()))
			return stalled(v1alpha1.InvalidPolicyReason, err, fr.GetRequeueAfter())
		}
		return waitingOn(v1alpha1.PolicyNotReadyReason, "policy: "+err.Error(), min(fr.GetRequeueAfter(), waitingRequeue))
	}
	if p.res.Next {
		return actNext()
	}
	after := fr.GetRequeueAfter()
	if d := p.res.RequeueAfter; d > 0 {
		after = min(after, d)
	}
	if p.res.Wait != nil {
		after = min(after, waitingRequeue)
	}
	if d := p.retryWritesAfter; d > 0 {
		after = min(after, d)
	}
	return doneAfter(after)
}

// listMembers lists the rollout's members by cluster, from the cache: its Kustomizations, or its
// HelmReleases for a chart.
func (r *FleetRolloutReconciler) listMembers(ctx context.Context, fr *v1alpha1.FleetRollout) (map[string]engine.Object, error) {
	list := engine.NewMemberList(fr)
	if err := r.List(ctx, list, client.InNamespace(fr.Namespace), client.MatchingLabels{v1alpha1.RolloutLabel: fr.Name}); err != nil {
		return nil, fmt.Errorf("listing %ss of fleetrollout %s/%s: %w", strings.ToLower(engine.MemberKind(fr)), fr.Namespace, fr.Name, err)
	}
	items := engine.MemberItems(list)
	out := make(map[string]engine.Object, len(items))
	for _, m := range items {
		if c := m.GetLabels()[v1alpha1.ClusterLabel]; c != "" && metav1.IsControlledBy(m, fr) {
			out[c] = m
		}
	}
	return out, nil
}

func (r *FleetRolloutReconciler) hook(point string) error {
	if r.TestHook == nil {
		return nil
	}
	return r.TestHook(point)
}

func (r *FleetRolloutReconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func (r *FleetRolloutReconciler) event(fr *v1alpha1.FleetRollout, eventType, reason, format string, args ...any) {
	if r.EventRecorder == nil {
		return
	}
	r.EventRecorder.Eventf(fr, nil, eventType, reason, reason, format, args...)
}

// annotatedEvent is event with metadata, which notification-controller passes on to its providers
// (the keys of notify.go).
func (r *FleetRolloutReconciler) annotatedEvent(fr *v1alpha1.FleetRollout, metadata map[string]string, eventType, reason, format string, args ...any) {
	if r.EventRecorder == nil {
		return
	}
	r.EventRecorder.AnnotatedEventf(fr, nil, metadata, eventType, reason, reason, format, args...)
}
