package controllers

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	runtimectrl "github.com/fluxcd/pkg/runtime/controller"
	"github.com/fluxcd/pkg/runtime/patch"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/tidegate/tidegate/api/v1alpha1"
	tgcue "github.com/tidegate/tidegate/cue"
	"github.com/tidegate/tidegate/evidence/availability"
	"github.com/tidegate/tidegate/fleets"
)

// intentRequeue is how soon the engine comes back after recording an intent, to act on it.
const intentRequeue = 500 * time.Millisecond

// FleetRolloutReconciler moves FleetRollouts wave by wave.
type FleetRolloutReconciler struct {
	client.Client
	// APIReader reads the FleetRollout itself uncached: the engine acts on its recorded status, which
	// must be the latest written, never a stale cache copy.
	APIReader client.Reader
	// EventRecorder emits Kubernetes events (fluxcd/pkg/runtime/events in the manager).
	EventRecorder events.EventRecorder
	// Metrics records Flux-style reconcile metrics; optional.
	Metrics *runtimectrl.Metrics
	// HubConfig is the hub's REST config, the base for member clients built from kubeconfig Secrets.
	HubConfig *rest.Config
	// HTTPClient fetches artifacts from source-controller; nil means http.DefaultClient.
	HTTPClient *http.Client
	// Gates decides gates; nil means CUEGates, the rollout's CUE policy.
	Gates GateEvaluator
	// Now returns the time; nil means time.Now.
	Now func() time.Time
	// TestHook, when set, is called before each write with its name ("pin:<revision>",
	// "switch:<cluster>", "rollback:<cluster>"); an error aborts the reconcile there, as a crash would.
	TestHook func(point string) error

	policies   digestCache[*rolloutPolicy]
	renders    digestCache[*renderedPackage]
	members    memberClients
	samplersMu sync.Mutex
	samplers   map[time.Duration]*availability.Sampler
}

// samples returns the availability sampler for a sample interval (policies may differ), made on
// first use. Samples are keyed by rollout and cluster (sampleKey).
func (r *FleetRolloutReconciler) samples(interval time.Duration) *availability.Sampler {
	r.samplersMu.Lock()
	defer r.samplersMu.Unlock()
	if r.samplers == nil {
		r.samplers = map[time.Duration]*availability.Sampler{}
	}
	s := r.samplers[interval]
	if s == nil {
		s = availability.New(availability.Options{Interval: interval})
		r.samplers[interval] = s
	}
	return s
}

// Reconcile reads as the decision list of a Flux controller: get, suspend, patcher and deferred
// status, source, inventory, act on the recorded intent, observe, step, decide gates.
func (r *FleetRolloutReconciler) Reconcile(ctx context.Context, req reconcile.Request) (result reconcile.Result, retErr error) {
	start := time.Now()
	fr := &v1alpha1.FleetRollout{}
	if err := r.APIReader.Get(ctx, req.NamespacedName, fr); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if r.Metrics != nil {
		r.Metrics.RecordSuspend(ctx, fr, fr.Spec.Suspend)
	}
	// A suspended rollout is left exactly as it is: no status write, no Kustomization write.
	if fr.Spec.Suspend {
		log.FromContext(ctx).Info("reconciliation is suspended for this object")
		return reconcile.Result{}, nil
	}

	patcher := patch.NewSerialPatcher(fr, r.Client)
	before := fr.Status.DeepCopy()
	defer func() {
		if err := r.finalizeStatus(ctx, fr, patcher); err != nil {
			retErr = errors.Join(retErr, err)
		}
		if !equality.Semantic.DeepEqual(before.Waves, fr.Status.Waves) || before.Phase != fr.Status.Phase ||
			!equality.Semantic.DeepEqual(before.Candidate, fr.Status.Candidate) {
			// A new intent was recorded: come back at once to act on it.
			if retErr == nil && (result.RequeueAfter == 0 || result.RequeueAfter > intentRequeue) {
				result.RequeueAfter = intentRequeue
			}
		}
		if r.Metrics != nil {
			r.Metrics.RecordDuration(ctx, fr, start)
		}
	}()
	return r.reconcile(ctx, fr)
}

func (r *FleetRolloutReconciler) reconcile(ctx context.Context, fr *v1alpha1.FleetRollout) (reconcile.Result, error) {
	now := r.now()
	conditions.MarkReconciling(fr, v1alpha1.ProgressingReason, "reconciliation in progress")
	// Stalled is re-derived on every pass: a fixed spec un-stalls the rollout.
	conditions.Delete(fr, meta.StalledCondition)

	// The tracked source says which revision is wanted.
	trackedKind, trackedName := fr.Spec.SourceRef.Kind, fr.Spec.SourceRef.Name
	tracked, trackedState, err := getSource(ctx, r.Client, fr.Namespace, trackedKind, trackedName)
	if err != nil {
		if apierrors.IsNotFound(err) {
			conditions.MarkFalse(fr, meta.ReadyCondition, v1alpha1.SourceNotFoundReason,
				"%s %s/%s not found: create it or fix spec.sourceRef", trackedKind, fr.Namespace, trackedName)
			return reconcile.Result{RequeueAfter: fr.GetRequeueAfter()}, nil
		}
		return reconcile.Result{}, fmt.Errorf("reading source of fleetrollout %s/%s: %w", fr.Namespace, fr.Name, err)
	}
	w := &world{Now: now, Kustomizations: map[string]ksObservation{}}
	if fr.Spec.Revision != "" {
		if _, _, err := splitRevision(fr.Spec.Revision); err != nil {
			err = fmt.Errorf("spec.revision of fleetrollout %s/%s: %w", fr.Namespace, fr.Name, err)
			conditions.MarkStalled(fr, v1alpha1.InvalidSpecReason, "%s", err)
			conditions.MarkFalse(fr, meta.ReadyCondition, v1alpha1.InvalidSpecReason, "%s", err)
			return reconcile.Result{}, reconcile.TerminalError(err)
		}
	}
	switch {
	case fr.Spec.Revision != "":
		w.Target = fr.Spec.Revision
	case trackedState.Revision != "":
		w.Target = trackedState.Revision
	default:
		w.TargetWhy = fmt.Sprintf("%s %s has no artifact yet: %s", trackedKind, trackedName, trackedState.Message)
	}

	// The inventory and the plan over it.
	var clusterList v1alpha1.FleetClusterList
	if err := r.List(ctx, &clusterList, client.InNamespace(fr.Namespace)); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing fleetclusters in %s: %w", fr.Namespace, err)
	}
	clusters := map[string]*v1alpha1.FleetCluster{}
	for i := range clusterList.Items {
		clusters[clusterList.Items[i].Name] = &clusterList.Items[i]
	}
	w.Inventory = fleets.InventoryFrom(clusterList.Items)
	w.Plan, err = fleets.Plan(fleets.Input{Rollout: fr, Inventory: w.Inventory})
	if err != nil {
		var specErr *fleets.SpecError
		if errors.As(err, &specErr) {
			conditions.MarkStalled(fr, v1alpha1.InvalidSpecReason, "%s", err)
			conditions.MarkFalse(fr, meta.ReadyCondition, v1alpha1.InvalidSpecReason, "%s", err)
			return reconcile.Result{}, reconcile.TerminalError(err)
		}
		return reconcile.Result{}, err
	}
	setSkipped(fr, w.Plan)
	if len(w.Plan.Eligible) == 0 && fr.Status.Candidate == nil {
		conditions.MarkFalse(fr, meta.ReadyCondition, v1alpha1.NoClustersSelectedReason,
			"spec.clusterSelector selects no eligible FleetCluster in namespace %s (%d skipped): add FleetClusters or fix the selector",
			fr.Namespace, len(w.Plan.Skipped))
		return reconcile.Result{RequeueAfter: fr.GetRequeueAfter()}, nil
	}

	// The policy that decides the gates. One that cannot decide stalls the rollout: no gate is
	// decided, so no wave starts or passes; what needs no gate (a rollback, a hold) still happens.
	pol, polErr := r.loadPolicy(ctx, fr)
	if polErr == nil {
		w.Settings = pol.Settings
	} else if def, err := builtinPolicy(); err == nil {
		w.Settings = def.Settings
	}

	// Act on what the recorded status asks for.
	existing, err := r.listKustomizations(ctx, fr)
	if err != nil {
		return reconcile.Result{}, err
	}
	if err := r.act(ctx, fr, tracked, clusters, w.Plan, existing); err != nil {
		return reconcile.Result{}, err
	}

	// Observe, then step.
	for c, ks := range existing {
		w.Kustomizations[c] = observe(ks)
	}
	if c := fr.Status.Candidate; c != nil {
		if _, s, err := getSource(ctx, r.Client, fr.Namespace, trackedKind, c.Source); err == nil {
			w.Candidate = s
		}
	}
	if kg := fr.Status.LastKnownGood; kg != nil {
		if _, s, err := getSource(ctx, r.Client, fr.Namespace, trackedKind, kg.Source); err == nil {
			w.KnownGood = s
		}
	}
	res := step(fr, w)
	setLateJoiners(fr, w.Plan)
	if res.Refused != "" {
		r.event(fr, corev1.EventTypeWarning, "RequestRefused", "%s", res.Refused)
	}
	soaking := soakingWave(fr)
	if soaking != nil {
		// Availability is sampled on every pass while a wave soaks, at least every sample interval.
		r.sampleWave(ctx, fr, soaking, clusters, existing, w.Settings.SampleInterval, w.Now)
	}
	if i := res.GateWave; i >= 0 && polErr == nil {
		if err := r.decideGates(ctx, fr, w, pol, i, res.Gates, clusters); err != nil {
			var perr *tgcue.PolicyError
			if errors.As(err, &perr) {
				return r.policyNotReady(fr, err)
			}
			return reconcile.Result{}, err
		}
		switch wv := &fr.Status.Waves[i]; wv.Phase {
		case v1alpha1.WavePending:
			// A gate decided before the wave failed: say so now, as the next pass would.
			res = preWaveGates(fr, w, i, metav1.NewTime(w.Now), stepResult{GateWave: -1})
		case v1alpha1.WaveSucceeded, v1alpha1.WaveFailed:
			for _, c := range wv.Clusters {
				r.samples(w.Settings.SampleInterval).Forget(sampleKey(fr, c))
			}
		}
	}
	setRolloutConditions(fr, res.Waiting, w.Settings.OnFail)
	if res.Blocked && fr.Status.Phase == v1alpha1.PhaseProgressing {
		// A failed gate stops the rollout until something changes: not Ready, with the gates' reasons.
		msg := res.Waiting
		for _, wv := range fr.Status.Waves {
			if wv.Name != fr.Status.CurrentWave {
				continue
			}
			for _, o := range wv.Gates {
				if c := conditions.Get(fr, o.Gate); o.Result == v1alpha1.ResultFail && c != nil {
					msg += "; " + o.Gate + ": " + c.Message
				}
			}
		}
		conditions.MarkFalse(fr, meta.ReadyCondition, v1alpha1.GateFailedReason, "%s", capMessage(msg))
	}
	if polErr != nil {
		return r.policyNotReady(fr, polErr)
	}

	if fr.Status.Phase == v1alpha1.PhaseCompleted || fr.Status.Phase == v1alpha1.PhaseRolledBack {
		inUse := map[string]bool{}
		for _, ks := range existing {
			inUse[ks.Spec.SourceRef.Name] = true
		}
		if err := prunePinnedSources(ctx, r.Client, fr, trackedKind, inUse); err != nil {
			return reconcile.Result{}, err
		}
		if err := pruneReceipts(ctx, r.Client, fr); err != nil {
			return reconcile.Result{}, err
		}
	}
	after := fr.GetRequeueAfter()
	if res.RequeueAfter > 0 && res.RequeueAfter < after {
		after = res.RequeueAfter
	}
	if soaking != nil && w.Settings.SampleInterval > 0 && w.Settings.SampleInterval < after {
		after = w.Settings.SampleInterval
	}
	if res.Waiting != "" && after > 5*time.Second {
		// Waiting on Flux: Kustomization and source changes trigger a reconcile through the watches;
		// the short requeue only bounds a missed event.
		after = 5 * time.Second
	}
	return reconcile.Result{RequeueAfter: after}, nil
}

// policyNotReady reports a policy that cannot decide: stalled with the CUE error for a policy that
// does not compile or is not concrete (a new commit un-stalls it: the policy source is watched), else
// not ready while its source has no artifact or cannot be fetched.
func (r *FleetRolloutReconciler) policyNotReady(fr *v1alpha1.FleetRollout, err error) (reconcile.Result, error) {
	var perr *tgcue.PolicyError
	if errors.As(err, &perr) {
		msg := capMessage(fmt.Sprintf("fleetrollout %s/%s: %s; nothing advances until the policy is fixed", fr.Namespace, fr.Name, err))
		conditions.MarkStalled(fr, v1alpha1.InvalidPolicyReason, "%s", msg)
		conditions.MarkFalse(fr, meta.ReadyCondition, v1alpha1.InvalidPolicyReason, "%s", msg)
		r.event(fr, corev1.EventTypeWarning, v1alpha1.InvalidPolicyReason, "%s", msg)
		return reconcile.Result{RequeueAfter: fr.GetRequeueAfter()}, nil
	}
	conditions.MarkFalse(fr, meta.ReadyCondition, v1alpha1.PolicyNotReadyReason, "%s", capMessage("policy: "+err.Error()))
	after := fr.GetRequeueAfter()
	if after > 5*time.Second {
		after = 5 * time.Second
	}
	return reconcile.Result{RequeueAfter: after}, nil
}

// soakingWave returns the wave that soaks now, or nil.
func soakingWave(fr *v1alpha1.FleetRollout) *v1alpha1.WaveStatus {
	for i := range fr.Status.Waves {
		if fr.Status.Waves[i].Phase == v1alpha1.WaveSoaking {
			return &fr.Status.Waves[i]
		}
	}
	return nil
}

// act makes the Flux objects match the recorded status: the candidate's and the known-good's pinned
// sources exist, and every cluster's Kustomization points at the revision the status gives it.
func (r *FleetRolloutReconciler) act(ctx context.Context, fr *v1alpha1.FleetRollout, tracked client.Object,
	clusters map[string]*v1alpha1.FleetCluster, plan fleets.WavePlan, existing map[string]*kustomizev1.Kustomization) error {
	st := &fr.Status
	for _, rev := range []*v1alpha1.RevisionStatus{st.Candidate, st.LastKnownGood} {
		if rev == nil {
			continue
		}
		if err := r.hook("pin:" + rev.Revision); err != nil {
			return err
		}
		if err := ensurePinnedSource(ctx, r.Client, fr, tracked, rev.Revision); err != nil {
			return err
		}
	}
	targets := desiredTargets(fr, plan, existing)
	names := make([]string, 0, len(targets))
	for c := range targets {
		names = append(names, c)
	}
	sort.Strings(names)
	for _, c := range names {
		t := targets[c]
		fc := clusters[c]
		if fc == nil {
			continue // the FleetCluster is gone: its kubeconfig is unknown, its wave reports it missing
		}
		desired := desiredKustomization(fr, fc, t.Source, t.Revision, t.Wave)
		point := "switch:"
		if st.Phase == v1alpha1.PhaseRollingBack || st.Phase == v1alpha1.PhaseRolledBack {
			point = "rollback:"
		}
		wrote, err := applyKustomization(ctx, r.Client, fr, desired, existing[c], func() error { return r.hook(point + c) })
		if err != nil {
			return err
		}
		if wrote {
			r.event(fr, corev1.EventTypeNormal, "Switched", "cluster %s switched to %s (wave %s)", c, t.Revision, t.Wave)
			// The cached copy is older than the write: observe what was written, with no status yet,
			// so this pass counts the cluster as switched and not yet healthy.
			existing[c] = desired
		}
	}
	return nil
}

// decideGates collects the evidence of each gate the step asked for, decides it with the policy,
// writes its receipt, sets its condition, then records the outcomes in status. A policy that cannot
// decide returns a *tgcue.PolicyError (wrapped) and records nothing: the rollout stalls on it.
func (r *FleetRolloutReconciler) decideGates(ctx context.Context, fr *v1alpha1.FleetRollout, w *world, pol *rolloutPolicy, i int, gates []string,
	clusters map[string]*v1alpha1.FleetCluster) error {
	wv := &fr.Status.Waves[i]
	spec := waveSpec(fr, wv.Name)
	decided := make([]decidedGate, 0, len(gates))
	for _, gate := range gates {
		cctx, cancel := context.WithTimeout(ctx, collectTimeout)
		var (
			ev        any
			approvals []v1alpha1.Approval
			err       error
		)
		switch gate {
		case v1alpha1.GateDeploySafe:
			ev = r.collectDeploySafe(cctx, fr, w, wv, clusters)
		case v1alpha1.GateRollbackSafe:
			ev, approvals, err = r.collectRollbackSafe(cctx, fr, w, wv)
		case v1alpha1.GateRollbackSucceeds:
			ev = r.collectRollbackSucceeds(cctx, fr, w, wv, w.Settings.Rehearsal)
		case v1alpha1.GateNoDisruption:
			maxFailures := 0
			if spec.MaxFailures != nil {
				maxFailures = int(*spec.MaxFailures)
			}
			ev = r.collectNoDisruption(fr, w, wv, waveSoak(spec, w.Settings), maxFailures)
		}
		if err == nil && cctx.Err() != nil {
			err = fmt.Errorf("collecting the evidence took longer than %s", collectTimeout)
		}
		cancel()
		var d GateDecision
		if err != nil {
			// Fail closed: evidence that could not be collected fails the gate.
			d = GateDecision{Result: v1alpha1.ResultFail, Reasons: []string{gate + ": collecting the evidence failed: " + err.Error()},
				Evidence: ev, PolicyDigest: pol.Policy.Digest()}
		} else {
			gates := r.Gates
			if gates == nil {
				gates = CUEGates{}
			}
			d, err = safeEvaluate(ctx, gates, GateRequest{Gate: gate, Rollout: fr, Wave: wv, Policy: pol.Policy, Evidence: ev})
			var perr *tgcue.PolicyError
			if errors.As(err, &perr) {
				return fmt.Errorf("deciding %s with the policy from %s: %w", gate, pol.From, err)
			}
			if err != nil {
				d = GateDecision{Result: v1alpha1.ResultFail, Reasons: []string{gate + ": evaluation failed: " + err.Error()},
					Evidence: ev, PolicyDigest: pol.Policy.Digest()}
			}
		}
		rc, err := buildReceipt(fr, wv, wv.Clusters, gate, d, approvals, metav1.NewTime(w.Now))
		if err != nil {
			return err
		}
		if err := writeReceipt(ctx, r.Client, fr, rc); err != nil {
			return err
		}
		decided = append(decided, decidedGate{Gate: gate, Decision: d, Receipt: rc.Name})
		status, reason := metav1ConditionFor(d.Result)
		conditions.Set(fr, &metav1.Condition{Type: gate, Status: status, Reason: reason,
			Message: capMessage(fmt.Sprintf("wave %s: %s (receipt %s)", wv.Name, summarize(d), rc.Name))})
		eventType := corev1.EventTypeNormal
		if d.Result != v1alpha1.ResultPass {
			eventType = corev1.EventTypeWarning
		}
		r.event(fr, eventType, reason, "%s %s for wave %s of %s: %s", gate, d.Result, wv.Name, fr.Status.Candidate.Revision, summarize(d))
	}
	applyGates(fr, w, i, decided)
	return nil
}

// safeEvaluate runs an evaluator and turns a panic into an error, so a broken evaluator fails the gate
// instead of the controller.
func safeEvaluate(ctx context.Context, g GateEvaluator, req GateRequest) (d GateDecision, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("gate evaluator panicked: %v", p)
		}
	}()
	return g.Evaluate(ctx, req)
}

func (r *FleetRolloutReconciler) listKustomizations(ctx context.Context, fr *v1alpha1.FleetRollout) (map[string]*kustomizev1.Kustomization, error) {
	var list kustomizev1.KustomizationList
	if err := r.List(ctx, &list, client.InNamespace(fr.Namespace), client.MatchingLabels{v1alpha1.RolloutLabel: fr.Name}); err != nil {
		return nil, fmt.Errorf("listing kustomizations of fleetrollout %s/%s: %w", fr.Namespace, fr.Name, err)
	}
	out := make(map[string]*kustomizev1.Kustomization, len(list.Items))
	for i := range list.Items {
		ks := &list.Items[i]
		if c := ks.Labels[v1alpha1.ClusterLabel]; c != "" && metav1.IsControlledBy(ks, fr) {
			out[c] = ks
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
