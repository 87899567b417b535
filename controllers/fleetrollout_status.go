package controllers

import (
	"context"
	"fmt"
	"strings"

	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/engine"
	"github.com/tidegate/tidegate/internal/ops"
)

// maxConditionMessage caps condition messages; receipts hold the whole story.
const maxConditionMessage = 1024

// finalizeStatus is the one place status bookkeeping happens, as in Flux controllers:
// lastHandledReconcileAt, observedGeneration unless the pass failed, Reconciling cleared when
// Ready; then one status patch of only what changed (statusPatch: all of it or none).
//
// A rollout moves for hours through soaks and approvals, each pass acting on the spec and ending
// in a wait (Reconciling=True says it is still in progress, as kstatus reads it), so
// observedGeneration moves at the end of every pass that acted on the spec, not only once Ready
// as in a Flux controller whose reconcile finishes: a write's job (internal/ops) is observed when
// it is, and an approval pause is then a state of the job, not a job still pending. A pass that
// failed (ReconciliationFailed) has not acted on the spec and leaves it.
func (r *FleetRolloutReconciler) finalizeStatus(ctx context.Context, fr *v1alpha1.FleetRollout, patcher *statusPatch) error {
	if v, ok := meta.ReconcileAnnotationValue(fr.GetAnnotations()); ok {
		fr.Status.SetLastHandledReconcileRequest(v)
	}
	if !conditions.IsFalse(fr, meta.ReadyCondition) || conditions.GetReason(fr, meta.ReadyCondition) != v1alpha1.ReconciliationFailedReason {
		fr.Status.ObservedGeneration = fr.Generation
	}
	if conditions.IsReady(fr) || conditions.IsStalled(fr) {
		conditions.Delete(fr, meta.ReconcilingCondition)
	}
	fr.Status.Short = shortRevisions(&fr.Status)
	if r.Metrics != nil {
		r.Metrics.RecordReadiness(ctx, fr)
		r.Metrics.RecordReconciling(ctx, fr)
		r.Metrics.RecordStalled(ctx, fr)
	}
	return patcher.Patch(ctx, r.Client, fr)
}

// setConditions derives Ready, Reconciling, Stalled, Held and RollingOut, the one place that sets
// them, from what the pass ended on and from status: the phase, what the rollout waits for and the
// gate conditions the decisions set; policyOnFail is the policy's settings.onFail. It is pure.
func setConditions(fr *v1alpha1.FleetRollout, out outcome, policyOnFail string) {
	setHeld(fr)
	setRollingOut(fr)
	conditions.Delete(fr, meta.StalledCondition)
	switch out.kind {
	case stalling:
		conditions.MarkStalled(fr, out.reason, "%s", out.message)
		conditions.MarkFalse(fr, meta.ReadyCondition, out.reason, "%s", out.message)
		conditions.Delete(fr, meta.ReconcilingCondition)
		return
	case generic:
		msg := capMessage(out.err.Error())
		conditions.MarkFalse(fr, meta.ReadyCondition, v1alpha1.ReconciliationFailedReason, "%s", msg)
		conditions.MarkReconciling(fr, v1alpha1.ProgressingWithRetryReason, "%s", msg)
		return
	case waiting:
		conditions.MarkFalse(fr, meta.ReadyCondition, out.reason, "%s", out.message)
		conditions.MarkReconciling(fr, v1alpha1.ProgressingReason, "%s", out.message)
		return
	}
	setReadyByPhase(fr, policyOnFail)
}

// setReadyByPhase derives Ready and Reconciling of a pass that ran through, from the phase and what
// the rollout waits for.
func setReadyByPhase(fr *v1alpha1.FleetRollout, policyOnFail string) {
	st := &fr.Status
	waiting := ""
	if st.WaitingFor != nil {
		waiting = st.WaitingFor.Message
	}
	if wf := writeFailuresMessage(st); wf != "" {
		if waiting != "" {
			waiting += "; "
		}
		waiting += wf
	}
	switch st.Phase {
	case v1alpha1.PhaseCompleted:
		msg := fmt.Sprintf("revision %s runs on %s", st.LastKnownGood.Revision, engine.Plural(int(st.RunningCount), "cluster", "clusters"))
		if st.LaggingCount > 0 {
			msg += "; " + laggingMessage(st)
		}
		if waiting != "" {
			// Completed, but something newer waits (a rejected revision, a source without artifact).
			msg += "; " + waiting
		}
		conditions.MarkTrue(fr, meta.ReadyCondition, v1alpha1.SucceededReason, "%s", capMessage(msg))
		conditions.Delete(fr, meta.ReconcilingCondition)
	case v1alpha1.PhaseRolledBack:
		msg := fmt.Sprintf("revision %s was rolled back to %s", st.Candidate.Revision, st.LastKnownGood.Revision)
		if rb := st.Rollback; rb != nil && rb.To == st.LastKnownGood.Revision {
			msg += ": " + rollbackMessage(rb)
		}
		if reasons := failedWaveMessage(fr); reasons != "" {
			msg += ": " + reasons
		}
		if waiting != "" {
			msg += "; " + waiting
		}
		conditions.MarkFalse(fr, meta.ReadyCondition, v1alpha1.RolledBackReason, "%s", capMessage(msg))
		conditions.Delete(fr, meta.ReconcilingCondition)
	case v1alpha1.PhaseRollingBack:
		conditions.MarkFalse(fr, meta.ReadyCondition, v1alpha1.RollingBackReason, "%s", capMessage(waiting))
		conditions.MarkReconciling(fr, v1alpha1.RollingBackReason, "%s", capMessage(waiting))
	case v1alpha1.PhaseHeld:
		msg, reason := waiting, v1alpha1.HeldReason
		if fr.Spec.Hold != nil {
			msg = "held: " + fr.Spec.Hold.Reason
		} else if m := failedWaveMessage(fr); m != "" {
			msg = m
			if fr.OnFailure(policyOnFail) == v1alpha1.OnFailureRollback && st.LastKnownGood == nil {
				msg += "; no known-good revision to roll back to"
			}
		} else if st.WaitingFor != nil && st.WaitingFor.Reason == v1alpha1.WaitingForWavePlan {
			reason = v1alpha1.InvalidWaveReason // a wave that could not be judged: the message has the fix
		}
		conditions.MarkFalse(fr, meta.ReadyCondition, reason, "%s", capMessage(msg))
		conditions.Delete(fr, meta.ReconcilingCondition)
	default:
		if st.WaitingFor != nil && st.WaitingFor.Reason == v1alpha1.WaitingForGateBlocked && st.Phase == v1alpha1.PhaseProgressing {
			// A failed gate stops the rollout until something changes: not Ready, with the gates' reasons.
			conditions.MarkFalse(fr, meta.ReadyCondition, v1alpha1.GateFailedReason, "%s", capMessage(waiting+blockingGates(fr)))
			conditions.MarkReconciling(fr, v1alpha1.ProgressingReason, "%s", capMessage(waiting))
			return
		}
		if st.WaitingFor != nil && st.WaitingFor.Reason == v1alpha1.WaitingForInconclusive && st.Phase == v1alpha1.PhaseProgressing {
			// Evidence could not be collected in full: not Ready, waiting for it, nothing torn down.
			conditions.MarkFalse(fr, meta.ReadyCondition, v1alpha1.GateInconclusiveReason, "%s", capMessage(waiting))
			conditions.MarkReconciling(fr, v1alpha1.ProgressingReason, "%s", capMessage(waiting))
			return
		}
		if waiting == "" {
			waiting = "rolling out"
			if st.Candidate != nil {
				waiting = "rolling out " + strings.TrimPrefix(engine.CandidateName(st.Candidate.Revision, st.Candidate.BuildHash, st), "revision ")
			}
		}
		conditions.MarkUnknown(fr, meta.ReadyCondition, v1alpha1.ProgressingReason, "%s", capMessage(waiting))
		conditions.MarkReconciling(fr, v1alpha1.ProgressingReason, "%s", capMessage(waiting))
	}
}

// rollbackMessage sums up a rollback: "5 confirmed, 1 unconfirmed: member-3 (...)".
func rollbackMessage(rb *v1alpha1.RollbackStatus) string {
	msg := fmt.Sprintf("%d confirmed", len(rb.Confirmed))
	if n := len(rb.Unconfirmed); n > 0 {
		msg += fmt.Sprintf(", %d unconfirmed: %s (%s at %s: Flux converges %s when %s back)", n, engine.FirstNames(rb.Unconfirmed, 5),
			engine.Plural(n, "Kustomization points", "Kustomizations point"), rb.To, pick(n, "it", "them"), pick(n, "it is", "they are"))
	}
	if c := ops.RollbackChecks(rb); c != "" {
		msg += "; " + c
	}
	return msg
}

// laggingMessage names the clusters that do not run the known-good yet.
func laggingMessage(st *v1alpha1.FleetRolloutStatus) string {
	const shown = 3
	names := make([]string, 0, shown)
	for _, l := range st.Lagging {
		if len(names) < shown {
			names = append(names, l.Cluster)
		}
	}
	list := strings.Join(names, ", ")
	if more := int(st.LaggingCount) - len(names); more > 0 {
		list += fmt.Sprintf(" and %d more", more)
	}
	return fmt.Sprintf("%s behind %s: %s (status.lagging)", engine.Plural(int(st.LaggingCount), "cluster lags", "clusters lag"), st.LastKnownGood.Revision, list)
}

// writeFailuresMessage names the clusters whose Kustomization could not be written.
func writeFailuresMessage(st *v1alpha1.FleetRolloutStatus) string {
	if st.WriteFailureCount == 0 {
		return ""
	}
	names := make([]string, 0, len(st.WriteFailures))
	for _, f := range st.WriteFailures {
		names = append(names, f.Cluster)
	}
	return fmt.Sprintf("%s could not be written, retried with backoff: %s (status.writeFailures)",
		engine.Plural(int(st.WriteFailureCount), "cluster's Kustomization", "clusters' Kustomizations"), engine.FirstNames(names, 3))
}

func pick(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// setHeld says whether spec.hold or a failed gate holds the rollout.
func setHeld(fr *v1alpha1.FleetRollout) {
	switch {
	case fr.Spec.Hold != nil:
		conditions.MarkTrue(fr, v1alpha1.HeldCondition, v1alpha1.HeldReason, "%s", capMessage("spec.hold: "+fr.Spec.Hold.Reason))
	case fr.Status.Phase == v1alpha1.PhaseHeld && failedWaveMessage(fr) == "" && fr.Status.WaitingFor != nil:
		// Held with no failed gate: a wave that could not be judged, or a candidate that passed
		// every wave but reached no cluster.
		reason := v1alpha1.HeldReason
		if fr.Status.WaitingFor.Reason == v1alpha1.WaitingForWavePlan {
			reason = v1alpha1.InvalidWaveReason
		}
		conditions.MarkTrue(fr, v1alpha1.HeldCondition, reason, "%s", capMessage(fr.Status.WaitingFor.Message))
	case fr.Status.Phase == v1alpha1.PhaseHeld:
		conditions.MarkTrue(fr, v1alpha1.HeldCondition, v1alpha1.GateFailedReason, "%s", capMessage(failedWaveMessage(fr)))
	default:
		conditions.Delete(fr, v1alpha1.HeldCondition)
	}
}

// setRollingOut is the lifecycle condition: True while a candidate is in flight (going forward,
// held, or going back), False once the rollout rests.
func setRollingOut(fr *v1alpha1.FleetRollout) {
	st := &fr.Status
	switch {
	case st.Candidate != nil && st.Phase == v1alpha1.PhaseRollingBack:
		conditions.MarkTrue(fr, v1alpha1.RollingOutCondition, v1alpha1.RollingBackReason, "rolling %s back to %s", st.Candidate.Revision, st.LastKnownGood.Revision)
	case st.Candidate != nil && (st.Phase == v1alpha1.PhaseProgressing || st.Phase == v1alpha1.PhaseHeld):
		msg := "rolling out " + strings.TrimPrefix(engine.CandidateName(st.Candidate.Revision, st.Candidate.BuildHash, st), "revision ")
		if st.CurrentWave != "" {
			msg += " in wave " + st.CurrentWave
		}
		conditions.MarkTrue(fr, v1alpha1.RollingOutCondition, st.Phase, "%s", msg)
	default:
		conditions.MarkFalse(fr, v1alpha1.RollingOutCondition, v1alpha1.NotRollingOutReason, "no candidate in flight")
	}
}

// blockingGates lists the current wave's failed gates with their conditions' messages.
func blockingGates(fr *v1alpha1.FleetRollout) string {
	var msg string
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
	return msg
}

// failedWaveMessage names the failed wave, its gate and receipt, with the gate's reasons.
func failedWaveMessage(fr *v1alpha1.FleetRollout) string {
	for _, w := range fr.Status.Waves {
		for _, g := range w.Gates {
			if g.Result != v1alpha1.ResultFail {
				continue
			}
			if c := conditions.Get(fr, g.Gate); c != nil && c.Status == metav1.ConditionFalse {
				return fmt.Sprintf("gate %s failed: %s", g.Gate, c.Message)
			}
			return fmt.Sprintf("gate %s failed for wave %s (receipt %s)", g.Gate, w.Name, g.Receipt)
		}
	}
	return ""
}

// setGateConditions sets the condition of each gate decided for wave i, before the engine applies
// the decisions to status (engine.Advance): the condition says the gate's latest decision, its
// summary and its receipt.
func setGateConditions(fr *v1alpha1.FleetRollout, i int, decided []engine.DecidedGate) {
	if i < 0 || len(decided) == 0 {
		return
	}
	wv := &fr.Status.Waves[i]
	for _, g := range decided {
		status, reason := metav1ConditionFor(g.Decision.Result)
		conditions.Set(fr, &metav1.Condition{Type: g.Gate, Status: status, Reason: reason,
			Message: capMessage(fmt.Sprintf("wave %s: %s (receipt %s)", wv.Name, summarize(g.Decision), g.Receipt))})
	}
}

func metav1ConditionFor(result string) (metav1.ConditionStatus, string) {
	switch result {
	case v1alpha1.ResultPass:
		return metav1.ConditionTrue, v1alpha1.GatePassedReason
	case v1alpha1.ResultInconclusive:
		return metav1.ConditionUnknown, v1alpha1.GateInconclusiveReason
	}
	return metav1.ConditionFalse, v1alpha1.GateFailedReason
}

// summarize says a decision in one line: its first reasons, or that it passed.
func summarize(d GateDecision) string {
	if len(d.Reasons) == 0 {
		return d.Result
	}
	reasons := sortedUnique(d.Reasons)
	const shown = 3
	if len(reasons) > shown {
		return strings.Join(reasons[:shown], "; ") + fmt.Sprintf("; and %d more", len(reasons)-shown)
	}
	return strings.Join(reasons, "; ")
}

func capMessage(s string) string {
	if len(s) <= maxConditionMessage {
		return s
	}
	return s[:maxConditionMessage-3] + "..."
}

// shortRevisions are the candidate's and the known-good's revisions as `flux get` prints them, for
// kubectl's columns; nil when the rollout has neither.
func shortRevisions(st *v1alpha1.FleetRolloutStatus) *v1alpha1.ShortRevisions {
	var s v1alpha1.ShortRevisions
	if st.Candidate != nil {
		s.Candidate = v1alpha1.FluxShortRevision(st.Candidate.Revision)
	}
	if st.LastKnownGood != nil {
		s.KnownGood = v1alpha1.FluxShortRevision(st.LastKnownGood.Revision)
	}
	if s == (v1alpha1.ShortRevisions{}) {
		return nil
	}
	return &s
}
