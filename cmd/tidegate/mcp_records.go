package main

import (
	"context"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidegate/tidegate/internal/attest"
	"github.com/tidegate/tidegate/internal/ops"
)

// Inputs of the tools that read what a rollout left behind: its events, its ledger, its receipts'
// digests and signatures.
type (
	verifyInput struct {
		Names     []string `json:"names,omitempty" jsonschema:"receipts to verify"`
		Rollout   string   `json:"rollout,omitempty" jsonschema:"verify every receipt of this FleetRollout instead; with keys or revision, its ledger"`
		Revision  string   `json:"revision,omitempty" jsonschema:"with rollout: verify the ledger of this revision (the candidate's when empty)"`
		Keys      []string `json:"keys,omitempty" jsonschema:"with rollout: PEM public keys (the text of each, -----BEGIN PUBLIC KEY----- included, not a path) to check the signatures with; give every key that signed"`
		Namespace string   `json:"namespace,omitempty" jsonschema:"namespace; the server's namespace when empty"`
	}
	ledgerInput struct {
		rolloutInput
		Revision string `json:"revision,omitempty" jsonschema:"the revision whose ledger to read, as status.candidate.revision shows it; the candidate's when empty (a deleted rollout's ledgers are read by revision)"`
	}
)

// recordTools adds the read tools get_fleet_rollout_events, get_fleet_rollout_ledger and
// verify_fleet_receipts: the reads of tidegate events, receipts export and receipts verify.
func (s *mcpServer) recordTools(server *mcp.Server) {
	tool(server, "get_fleet_rollout_events", "The Kubernetes events of a FleetRollout, of its per-cluster Kustomizations (HelmReleases for a rollout of a Helm chart) and of its pinned sources, oldest first (as tidegate events -o json): lastSeen, type, reason, the object's kind and name, message, count, the component that reported it. The API server keeps events for about an hour; the receipts and the ledger keep the decisions.",
		true, func(ctx context.Context, in rolloutInput) (any, error) {
			ns := s.namespace(in.Namespace)
			rows, err := rolloutEvents(ctx, s.c, ns, in.Name)
			if err != nil {
				return nil, mcpError(err, ops.RolloutRef(ns, in.Name))
			}
			return items[eventRow]{Items: rows}, nil
		})
	tool(server, "get_fleet_rollout_ledger", "The RolloutLedger of a revision of a FleetRollout (the candidate's when revision is empty), with the ledgers that continue it, as tidegate receipts export reads it: every entry in order (Receipt: the receipt a decision relied on, with its content digest, gate, wave and result; Approval: an approval it counted; Outcome: how the run ended), each chained to the one before by digest, and the id of the key that signed it (signedBy). verify_fleet_receipts with rollout and keys checks the chain and the signatures.",
		true, func(ctx context.Context, in ledgerInput) (any, error) {
			return ops.Ledger(ctx, s.c, s.namespace(in.Namespace), in.Name, in.Revision)
		})
	tool(server, "verify_fleet_receipts", "Verify receipts (as tidegate receipts verify). With names, or rollout alone: that each receipt still has the content it was named after (content digest, name, evidence digest, evidence parts); result verified and items. With rollout and keys (PEM public key text) or revision: the rollout's ledger of that revision (the candidate's when empty) and every receipt it lists, as tidegate receipts verify --rollout --key does: the receipts' digests, the ledger's chain, every signature against keys, and that a Completed outcome's gates passed; result rollout, candidate, verified, checks and signedBy (the key ids that verified). Without keys, signatures are not checked (checks say skipped).",
		true, s.verify)
}

// verify is verify_fleet_receipts: the receipts' digests, or with keys or a revision the
// ledger's bundle as if exported.
func (s *mcpServer) verify(ctx context.Context, in verifyInput) (any, error) {
	ns := s.namespace(in.Namespace)
	if (len(in.Names) == 0) == (in.Rollout == "") {
		return nil, ops.Errorf(ops.CodeInvalid, nil, "name the receipts to verify (names), or give rollout, not both")
	}
	if len(in.Keys) > 0 || in.Revision != "" {
		if in.Rollout == "" {
			return nil, ops.Errorf(ops.CodeInvalid, nil, "keys and revision verify the ledger of a rollout: give rollout instead of names")
		}
		keys, err := parseKeys(in.Keys)
		if err != nil {
			return nil, err
		}
		b, _, err := ops.ExportBundle(ctx, s.c, ns, in.Rollout, in.Revision)
		if err != nil {
			return nil, err
		}
		v := attest.Verify(b, keys)
		return struct {
			*attest.Verification
			SignedBy []string `json:"signedBy,omitempty"`
		}{v, signingKeys(v)}, nil
	}
	receipts, err := receiptsToVerify(ctx, s.c, ns, in.Names, in.Rollout)
	if err != nil {
		return nil, mcpError(err, ops.Ref{Kind: "gatereceipts", Namespace: ns})
	}
	results, ok, err := verifyReceipts(ctx, s.c, receipts)
	if err != nil {
		return nil, mcpError(err, ops.Ref{Kind: "gatereceipts", Namespace: ns})
	}
	return struct {
		Verified bool                  `json:"verified"`
		Items    []receiptVerification `json:"items"`
	}{ok, results}, nil
}

// parseKeys parses the PEM public keys of verify_fleet_receipts; a key that does not parse is
// Invalid, named by its place (its text is not repeated back).
func parseKeys(pems []string) (*attest.KeySet, error) {
	keys := make([]*attest.PublicKey, 0, len(pems))
	for i, p := range pems {
		k, err := attest.ParsePublicKey([]byte(p))
		if err != nil {
			return nil, ops.NewError(ops.CodeInvalid, nil, fmt.Sprintf("keys[%d]: %v", i, err), err)
		}
		keys = append(keys, k)
	}
	return attest.NewKeySet(keys...), nil
}
