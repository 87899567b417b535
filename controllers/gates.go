package controllers

import (
	"context"

	"github.com/tidegate/tidegate/api/v1alpha1"
	tgcue "github.com/tidegate/tidegate/cue"
)

// GateRequest is one gate to decide: the policy and the evidence the engine collected for it.
type GateRequest struct {
	Gate    string
	Rollout *v1alpha1.FleetRollout
	// Wave is the wave the decision is about.
	Wave *v1alpha1.WaveStatus
	// Policy decides; Evidence is the gate's evidence document (one of the tgcue evidence types).
	Policy   *tgcue.Policy
	Evidence any
}

// GateDecision is a gate's outcome with what it was based on.
type GateDecision struct {
	// Result is v1alpha1.ResultPass or v1alpha1.ResultFail.
	Result string
	// Reasons explain the result; sorted and de-duplicated by the engine.
	Reasons []string
	// Limits say what the evidence does not establish.
	Limits []string
	// Evidence is the evidence document the decision was made over (JSON-encodable).
	Evidence any
	// PolicyDigest identifies the policy that decided.
	PolicyDigest string
}

// GateEvaluator decides gates. The engine treats an error as a failed gate: gates fail closed.
type GateEvaluator interface {
	Evaluate(ctx context.Context, req GateRequest) (GateDecision, error)
}

// CUEGates decides a gate with the rollout's CUE policy over the collected evidence (cue.Evaluate).
type CUEGates struct{}

// Evaluate implements GateEvaluator. A policy that cannot decide (it does not compile or is not
// concrete) is an error wrapping *tgcue.PolicyError: the engine stalls the rollout on it.
func (CUEGates) Evaluate(_ context.Context, req GateRequest) (GateDecision, error) {
	d, err := tgcue.Evaluate(req.Policy, req.Gate, req.Evidence)
	if err != nil {
		return GateDecision{}, err
	}
	out := GateDecision{Result: v1alpha1.ResultFail, Reasons: d.Reasons, Limits: d.Limits, Evidence: req.Evidence, PolicyDigest: d.PolicyDigest}
	if d.Pass {
		out.Result = v1alpha1.ResultPass
	}
	return out, nil
}

func waveName(w *v1alpha1.WaveStatus) string {
	if w == nil {
		return ""
	}
	return w.Name
}
