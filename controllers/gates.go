package controllers

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// GateRequest is everything a gate decision may look at. It is built from the rollout's recorded
// status and fresh observations; the evaluator adds whatever evidence it collects itself.
type GateRequest struct {
	Gate    string
	Rollout *v1alpha1.FleetRollout
	// Wave is the wave the decision is about.
	Wave *v1alpha1.WaveStatus
	// Clusters are the wave's members as the engine observed them now, by name. A member whose
	// FleetCluster or Kustomization is gone is present with Exists false.
	Clusters map[string]ClusterObservation
	// Soak is how long the wave had to stay healthy.
	Soak time.Duration
	// MaxFailures is how many members may fail before the wave fails.
	MaxFailures int
	Now         time.Time
}

// ClusterObservation is one wave member as the engine saw it.
type ClusterObservation struct {
	Exists       bool   `json:"exists"`
	Ready        bool   `json:"ready"`
	Revision     string `json:"revision"`
	Reason       string `json:"reason,omitempty"`
	Message      string `json:"message,omitempty"`
	AtCandidate  bool   `json:"atCandidate"`
	HealthySince string `json:"healthySince,omitempty"`
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

// BuiltinGates is the engine's own check, used until a policy engine is plugged in: the wave's
// every member Kustomization is Ready at the candidate revision and stayed so for the soak.
type BuiltinGates struct{}

// builtinPolicyDigest names the built-in check in receipts.
const builtinPolicyDigest = "builtin:ready-at-candidate-and-soaked/v1"

// Evaluate implements GateEvaluator.
func (BuiltinGates) Evaluate(_ context.Context, req GateRequest) (GateDecision, error) {
	d := GateDecision{
		Result:       v1alpha1.ResultPass,
		PolicyDigest: builtinPolicyDigest,
		Limits: []string{
			"health is the Kustomization's Ready condition at the candidate revision (kustomize-controller's health checks); workload availability is not sampled",
			"readiness is observed when the engine reconciles; a shorter outage between observations may be missed",
		},
	}
	if req.Gate != v1alpha1.GateNoDisruption {
		return GateDecision{}, fmt.Errorf("the built-in check decides only %s, not %s", v1alpha1.GateNoDisruption, req.Gate)
	}
	names := make([]string, 0, len(req.Clusters))
	for n := range req.Clusters {
		names = append(names, n)
	}
	sort.Strings(names)
	var bad []string
	for _, n := range names {
		c := req.Clusters[n]
		switch {
		case !c.Exists:
			bad = append(bad, fmt.Sprintf("cluster %s: gone (FleetCluster or Kustomization missing); it cannot count as healthy", n))
		case !c.AtCandidate:
			bad = append(bad, fmt.Sprintf("cluster %s: not Ready at the candidate revision (ready=%t, applied %q, %s: %s)", n, c.Ready, c.Revision, c.Reason, c.Message))
		}
	}
	if len(bad) > req.MaxFailures {
		d.Reasons = append(d.Reasons, bad...)
	} else if len(bad) > 0 {
		d.Limits = append(d.Limits, fmt.Sprintf("%d of %d clusters failed, within the wave's maxFailures of %d: %s", len(bad), len(names), req.MaxFailures, strings.Join(bad, "; ")))
	}
	if req.Wave == nil || req.Wave.ReadyAt == nil {
		d.Reasons = append(d.Reasons, "wave was never Ready at the candidate: no soak happened")
	} else if soaked := req.Now.Sub(req.Wave.ReadyAt.Time); soaked < req.Soak {
		d.Reasons = append(d.Reasons, fmt.Sprintf("soak not elapsed: %s of %s", soaked.Round(time.Second), req.Soak))
	}
	if len(d.Reasons) > 0 {
		d.Result = v1alpha1.ResultFail
	}
	d.Evidence = map[string]any{"clusters": req.Clusters, "soak": req.Soak.String(), "wave": waveName(req.Wave)}
	return d, nil
}

func waveName(w *v1alpha1.WaveStatus) string {
	if w == nil {
		return ""
	}
	return w.Name
}
