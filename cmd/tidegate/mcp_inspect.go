package main

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidegate/tidegate/internal/ops"
)

// Inputs of the tools that look into one cluster, receipt or change: the same functions as
// tidegate revision, receipts explain and preview.
type (
	clusterRevisionInput struct {
		Cluster   string `json:"cluster" jsonschema:"the FleetCluster's name"`
		Rollout   string `json:"rollout,omitempty" jsonschema:"only this FleetRollout; every rollout that targets the cluster when empty"`
		Namespace string `json:"namespace,omitempty" jsonschema:"namespace; the server's namespace when empty"`
	}
	explainInput struct {
		Name      string `json:"name,omitempty" jsonschema:"the GateReceipt's name"`
		Rollout   string `json:"rollout,omitempty" jsonschema:"instead of name: the FleetRollout whose decisive receipt of gate to explain"`
		Gate      string `json:"gate,omitempty" jsonschema:"with rollout: deploySafe, rollbackSafe, rollbackSucceeds or noDisruption"`
		Wave      string `json:"wave,omitempty" jsonschema:"with rollout: the wave; the latest wave that decided the gate when empty"`
		Namespace string `json:"namespace,omitempty" jsonschema:"namespace; the server's namespace when empty"`
	}
	previewInput struct {
		Mode      string            `json:"mode" jsonschema:"values (install-time values against an artifact's tidegate/install.cue) or policy (a policy over a receipt's recorded evidence)"`
		Rollout   string            `json:"rollout,omitempty" jsonschema:"mode values: the FleetRollout whose values change"`
		Digest    string            `json:"digest,omitempty" jsonschema:"mode values: the artifact's digest (sha256:...); the rollout's candidate when empty; it must be one of the rollout's"`
		Values    map[string]string `json:"values,omitempty" jsonschema:"mode values: install-time values, set over the rollout's spec.template.postBuild.substitute"`
		Receipt   string            `json:"receipt,omitempty" jsonschema:"mode policy: the GateReceipt whose evidence to decide over"`
		Policy    map[string]string `json:"policy,omitempty" jsonschema:"mode policy: the policy's .cue files, by file name"`
		Namespace string            `json:"namespace,omitempty" jsonschema:"namespace; the server's namespace when empty"`
	}
)

// inspectTools adds the read tools get_fleet_cluster_revision, explain_fleet_gate and
// preview_fleet_change.
func (s *mcpServer) inspectTools(server *mcp.Server) {
	tool(server, "get_fleet_cluster_revision", "A cluster's desired revision (what tidegate asks Flux to apply: its per-cluster Kustomization's, or a chart rollout's HelmRelease's, pinned source and digest) and live revision (what kustomize-controller or helm-controller last applied, Ready, since when), whether they agree, and its wave, per rollout that targets it (as tidegate revision).",
		true, func(ctx context.Context, in clusterRevisionInput) (any, error) {
			return ops.RevisionsOf(ctx, s.c, s.namespace(in.Namespace), in.Cluster, in.Rollout)
		})
	tool(server, "explain_fleet_gate", "Explain a gate decision from its receipt (by name, or rollout + gate + wave for the decisive one): result, each reason with the evidence path and recorded value it refers to, the policy digest and settings, and what would let it pass (as tidegate receipts explain).",
		true, func(ctx context.Context, in explainInput) (any, error) {
			return ops.Explain(ctx, s.c, s.namespace(in.Namespace), ops.ReceiptSelector{Name: in.Name, Rollout: in.Rollout, Gate: in.Gate, Wave: in.Wave})
		})
	tool(server, "preview_fleet_change", "Preview a change without making it: mode values checks install-time values against the tidegate/install.cue of the rollout's artifact at an exact digest (unknown and protected keys, violations, whether deploySafe would refuse them); mode policy decides a receipt's gate with a policy over its recorded evidence (as tidegate preview values and preview policy).",
		true, func(ctx context.Context, in previewInput) (any, error) {
			ns := s.namespace(in.Namespace)
			switch in.Mode {
			case "values":
				return ops.PreviewValues(ctx, s.c, artifactClient(), ns, in.Rollout, in.Digest, in.Values)
			case "policy":
				files := make(map[string][]byte, len(in.Policy))
				for name, src := range in.Policy {
					files[name] = []byte(src)
				}
				return ops.PreviewPolicy(ctx, s.c, ns, in.Receipt, files)
			}
			return nil, ops.Errorf(ops.CodeInvalid, nil, "mode %q: the modes are values and policy", in.Mode)
		})
}
