package controllers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/engine"
	"github.com/tidegate/tidegate/evidence/collector"
	"github.com/tidegate/tidegate/verdict"
	"github.com/tidegate/tidegate/verdict/bounded"
)

// GateRequest is one gate to decide: the policy and the evidence the engine collected for it.
type GateRequest struct {
	Gate    string
	Rollout *v1alpha1.FleetRollout
	// Wave is the wave the decision is about.
	Wave *v1alpha1.WaveStatus
	// Policy decides; Evidence is the gate's evidence document (one of the verdict evidence types).
	Policy   *verdict.Policy
	Evidence any
}

// GateDecision is a gate's outcome with what it was based on (engine.GateDecision): the engine
// applies it to status, and a GateEvaluator returns it.
type GateDecision = engine.GateDecision

// GateEvaluator decides gates. The engine treats an error as a failed gate: gates fail closed.
type GateEvaluator interface {
	Evaluate(ctx context.Context, req GateRequest) (GateDecision, error)
}

// CUEGates decides a gate with the rollout's CUE policy over the collected evidence (cue.Evaluate).
type CUEGates struct {
	// Budget, when set, evaluates a rollout's own policy in a worker process under its budget; the
	// built-in policy, tidegate's own, is evaluated in-process. nil evaluates every policy
	// in-process.
	Budget *bounded.Evaluator
}

// Evaluate implements GateEvaluator. A policy that cannot decide (it does not compile or is not
// concrete) is an error wrapping *verdict.PolicyError: the engine stalls the rollout on it. An
// evaluation that passes its budget is Inconclusive, the reason naming the budget: the gate fails
// once it has been so for the policy's settings.inconclusiveAfter, like any Inconclusive gate.
func (g CUEGates) Evaluate(ctx context.Context, req GateRequest) (GateDecision, error) {
	var d verdict.Decision
	var err error
	if g.Budget != nil && req.Policy != nil && !req.Policy.Builtin() {
		d, err = g.Budget.Evaluate(ctx, req.Policy, req.Gate, req.Evidence)
	} else {
		d, err = verdict.Evaluate(req.Policy, req.Gate, req.Evidence)
	}
	if over := (*bounded.BudgetError)(nil); errors.As(err, &over) {
		return GateDecision{Result: v1alpha1.ResultInconclusive, Unobserved: []string{verdict.WholeGate}, Reasons: []string{err.Error()},
			Evidence: req.Evidence, PolicyDigest: req.Policy.Digest()}, nil
	}
	if err != nil {
		return GateDecision{}, err
	}
	out := GateDecision{Result: v1alpha1.ResultFail, Reasons: d.Reasons, Limits: d.Limits, Evidence: req.Evidence, PolicyDigest: d.PolicyDigest}
	switch {
	case d.Pass:
		out.Result = v1alpha1.ResultPass
	case d.Inconclusive:
		out.Result, out.Unobserved = v1alpha1.ResultInconclusive, d.Unobserved
	}
	return out, nil
}

func waveName(w *v1alpha1.WaveStatus) string {
	if w == nil {
		return ""
	}
	return w.Name
}

// decide collects the evidence of each gate for wave i, decides it with the policy and writes its
// receipt. Evidence that could not be collected makes the gate Inconclusive, and an evaluation that
// failed fails it: gates fail closed, and never pass on what they did not see. An Inconclusive gate
// that has been so for the policy's settings.inconclusiveAfter is decided Fail. An Inconclusive
// decision about the same unobserved targets as the one before it is the same decision: it keeps
// that receipt rather than writing one per sample interval. A policy that cannot decide returns a
// *verdict.PolicyError (wrapped) and nothing is decided.
func (r *FleetRolloutReconciler) decide(ctx context.Context, p *pass, i int, gates []string) ([]engine.DecidedGate, error) {
	fr := p.Rollout
	wv := &fr.Status.Waves[i]
	evaluator := r.Gates
	if evaluator == nil {
		evaluator = CUEGates{}
	}
	receipts, err := r.rolloutReceipts(ctx, fr)
	if err != nil {
		return nil, err
	}
	decided := make([]engine.DecidedGate, 0, len(gates))
	for _, gate := range gates {
		// A decision whose receipt was written but that status never recorded (the controller
		// stopped in between) is recorded as it was made, not made again.
		if prior, rc := r.unrecordedDecision(ctx, p, receipts, i, gate); prior != nil {
			p.receipts[rc.Name] = rc
			decided = append(decided, *prior)
			r.event(fr, corev1.EventTypeNormal, "DecisionRecorded", "%s %s for wave %s of %s: recorded from receipt %s, which an earlier reconcile wrote and did not record",
				gate, prior.Decision.Result, wv.Name, fr.Status.Candidate.Revision, prior.Receipt)
			continue
		}
		d, ev, err := r.collectAndEvaluate(ctx, p, i, gate, evaluator)
		if err != nil {
			return nil, err
		}
		prev := engine.GateOutcome(wv, gate)
		d = engine.InconclusiveUntil(gate, d, prev, p.Settings, p.Now)
		if d.Result == v1alpha1.ResultInconclusive && prev != nil && prev.Result == v1alpha1.ResultInconclusive &&
			prev.Receipt != "" && slices.Equal(prev.Unobserved, engine.CapUnobserved(d.Unobserved)) {
			// Still inconclusive about the same targets: the decision recorded stands.
			decided = append(decided, engine.DecidedGate{Gate: gate, Decision: d, Receipt: prev.Receipt, Evidence: ev.Evidence})
			continue
		}
		rc, err := BuildReceipt(fr, wv, wv.Clusters, gate, d, countedApprovals(fr, p.Settings, wv, gate, ev.Approvals), metav1.NewTime(p.Now))
		if err != nil {
			return nil, err
		}
		if err := r.hook("receipt:" + gate + ":" + wv.Name); err != nil {
			return nil, err
		}
		digestName := rc.Name
		if err := WriteReceipt(ctx, r.Client, rc, r.author()); err != nil {
			return nil, err
		}
		if rc.Name != digestName {
			r.event(fr, corev1.EventTypeWarning, "ReceiptNameTaken", "gatereceipt %s was not written by the controller: the %s decision for wave %s is recorded as %s (a cluster admin can delete %s)",
				digestName, gate, wv.Name, rc.Name, digestName)
		}
		domain().gateDecisions.WithLabelValues(fr.Namespace, fr.Name, gate, d.Result).Inc()
		if err := r.hook("decided:" + gate + ":" + wv.Name); err != nil {
			return nil, err
		}
		p.receipts[rc.Name] = rc.GateReceipt
		decided = append(decided, engine.DecidedGate{Gate: gate, Decision: d, Receipt: rc.Name, Evidence: ev.Evidence})
		eventType := corev1.EventTypeNormal
		if d.Result != v1alpha1.ResultPass {
			eventType = corev1.EventTypeWarning
		}
		_, reason := metav1ConditionFor(d.Result)
		r.event(fr, eventType, reason, "%s %s for wave %s of %s: %s", gate, d.Result, wv.Name, fr.Status.Candidate.Revision, summarize(d))
		log.FromContext(ctx).Info("gate decided", "gate", gate, "result", d.Result, "wave", wv.Name,
			"revision", fr.Status.Candidate.Revision, "receipt", rc.Name)
	}
	return decided, nil
}

// collectAndEvaluate collects gate's evidence for wave i and evaluates it with the rollout's
// policy. Evidence that could not be observed makes the gate Inconclusive; evidence that could not
// be collected otherwise, or an evaluation that failed, fails it. A policy that cannot decide is an
// error wrapping *verdict.PolicyError.
func (r *FleetRolloutReconciler) collectAndEvaluate(ctx context.Context, p *pass, i int, gate string, evaluator GateEvaluator) (GateDecision, collector.Collected, error) {
	fr, pol := p.Rollout, p.policy
	collectStart := time.Now()
	ev, err := r.Evidence.Collect(ctx, p.World, gate, i)
	domain().recordEvidence(gate, time.Since(collectStart), err)
	switch {
	case errors.Is(err, collector.ErrUnobserved):
		return GateDecision{Result: v1alpha1.ResultInconclusive, Unobserved: []string{verdict.WholeGate},
			Reasons:  []string{gate + ": inconclusive: collecting the evidence failed: " + err.Error()},
			Evidence: ev.Evidence, PolicyDigest: pol.Policy.Digest()}, ev, nil
	case err != nil:
		return GateDecision{Result: v1alpha1.ResultFail, Reasons: []string{gate + ": collecting the evidence failed: " + err.Error()},
			Evidence: ev.Evidence, PolicyDigest: pol.Policy.Digest()}, ev, nil
	}
	d, err := safeEvaluate(ctx, evaluator, GateRequest{Gate: gate, Rollout: fr, Wave: &fr.Status.Waves[i], Policy: pol.Policy, Evidence: ev.Evidence})
	var perr *verdict.PolicyError
	if errors.As(err, &perr) {
		return GateDecision{}, ev, fmt.Errorf("deciding %s with the policy from %s: %w", gate, pol.From, err)
	}
	if err != nil {
		d = GateDecision{Result: v1alpha1.ResultFail, Reasons: []string{gate + ": evaluation failed: " + err.Error()},
			Evidence: ev.Evidence, PolicyDigest: pol.Policy.Digest()}
	}
	return d, ev, nil
}

// countedApprovals are the approvals the receipt of gate for wave wv records: those its evidence
// counted (rollbackSafe's approval of irreversible changes), and, on deploySafe, the first gate a
// wave decides, the approval that let a wave needing one start. So every approval a decision rested
// on is in a receipt, and so in the revision's ledger.
func countedApprovals(fr *v1alpha1.FleetRollout, s verdict.Settings, wv *v1alpha1.WaveStatus, gate string, counted []v1alpha1.Approval) []v1alpha1.Approval {
	if gate != v1alpha1.GateDeploySafe || !engine.WaveNeedsApproval(fr, s, wv.Name) {
		return counted
	}
	a := fr.ApprovalOfCandidate(fr.Status.Candidate, wv.Name, false)
	if a == nil || slices.ContainsFunc(counted, func(c v1alpha1.Approval) bool { return equality.Semantic.DeepEqual(c, *a) }) {
		return counted
	}
	return append(slices.Clone(counted), *a)
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
