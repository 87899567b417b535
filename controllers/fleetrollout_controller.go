package controllers

import (
	"context"
	"errors"
	"fmt"
	"sort"
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
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/tidegate/tidegate/api/v1alpha1"
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
	// Gates decides gates; nil means BuiltinGates.
	Gates GateEvaluator
	// Now returns the time; nil means time.Now.
	Now func() time.Time
	// TestHook, when set, is called before each write with its name ("pin:<revision>",
	// "switch:<cluster>", "rollback:<cluster>"); an error aborts the reconcile there, as a crash would.
	TestHook func(point string) error
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
	if res.GateWave >= 0 {
		if err := r.decideGate(ctx, fr, w, res.GateWave); err != nil {
			return reconcile.Result{}, err
		}
	}
	setRolloutConditions(fr, res.Waiting)

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
	if res.Waiting != "" && after > 5*time.Second {
		// Waiting on Flux: Kustomization and source changes trigger a reconcile through the watches;
		// the short requeue only bounds a missed event.
		after = 5 * time.Second
	}
	return reconcile.Result{RequeueAfter: after}, nil
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

// decideGate evaluates the wave's gate, writes its receipt, then records the outcome in status.
func (r *FleetRolloutReconciler) decideGate(ctx context.Context, fr *v1alpha1.FleetRollout, w *world, i int) error {
	wv := &fr.Status.Waves[i]
	spec := waveSpec(fr, wv.Name)
	req := GateRequest{Gate: v1alpha1.GateNoDisruption, Rollout: fr, Wave: wv, Clusters: map[string]ClusterObservation{}, Now: w.Now, Soak: defaultSoak}
	if spec.Soak != nil {
		req.Soak = spec.Soak.Duration
	}
	if spec.MaxFailures != nil {
		req.MaxFailures = int(*spec.MaxFailures)
	}
	for _, c := range wv.Clusters {
		o, ok := w.Kustomizations[c]
		obs := ClusterObservation{Exists: ok && o.Exists && !contains(wv.Missing, c)}
		if obs.Exists {
			obs.Ready = o.Ready == "True"
			obs.Revision = o.LastApplied
			obs.Reason, obs.Message = o.Reason, o.Message
			obs.AtCandidate = o.readyAt(fr.Status.Candidate.Source, fr.Status.Candidate.Revision) ||
				(wv.Phase == v1alpha1.WaveSoaking && o.stillAt(fr.Status.Candidate.Source, fr.Status.Candidate.Revision))
		}
		req.Clusters[c] = obs
	}
	gates := r.Gates
	if gates == nil {
		gates = BuiltinGates{}
	}
	d, err := safeEvaluate(ctx, gates, req)
	if err != nil {
		// Fail closed: an evaluator error is a failed gate, with the error as its reason.
		d = GateDecision{Result: v1alpha1.ResultFail, Reasons: []string{"gate evaluation failed: " + err.Error()}, Evidence: req.Clusters}
	}
	rc, err := buildReceipt(fr, wv, wv.Clusters, req.Gate, d, metav1.NewTime(w.Now))
	if err != nil {
		return err
	}
	if err := writeReceipt(ctx, r.Client, fr, rc); err != nil {
		return err
	}
	applyGate(fr, i, req.Gate, d, rc.Name, w.Now)
	status, reason := metav1ConditionFor(d.Result)
	conditions.Set(fr, &metav1.Condition{Type: req.Gate, Status: status, Reason: reason,
		Message: fmt.Sprintf("wave %s: %s (receipt %s)", wv.Name, summarize(d), rc.Name)})
	eventType := corev1.EventTypeNormal
	if d.Result != v1alpha1.ResultPass {
		eventType = corev1.EventTypeWarning
	}
	r.event(fr, eventType, reason, "%s %s for wave %s of %s: %s", req.Gate, d.Result, wv.Name, fr.Status.Candidate.Revision, summarize(d))
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
