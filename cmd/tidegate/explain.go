package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/internal/ops"
)

func newReceiptsExplainCommand(k *kubeOptions) *cobra.Command {
	var (
		output string
		sel    ops.ReceiptSelector
	)
	cmd := &cobra.Command{
		Use:   "explain NAME | --rollout ROLLOUT --gate GATE [--wave WAVE]",
		Short: "Explain a gate decision from its receipt: reasons, the evidence they refer to, what would let it pass",
		Long: `explain takes a GateReceipt's decision apart: the gate, wave and result, each reason with the CUE
path of the constraint that failed and the value the receipt's evidence recorded there (and which
cluster or object it is about), the policy digest and, for the built-in policy, the settings a
constraint compares with, and what would let the gate pass: the approval a reason asks for, a
retry of a rejected candidate, waiting for an inconclusive gate to be decided again, a fix in the
package, or a policy edit to try with tidegate preview policy.

With --rollout and --gate instead of NAME it explains the decisive receipt of that gate: the one
the rollout's status records for --wave (the latest wave when none is given), else the latest.

Exit code: 0 when the receipt's result is Pass, 1 when it is Fail or Inconclusive, 2 on an API
error or evidence that cannot be read.`,
		Example: `  tidegate receipts explain api-deploysafe-0c7e52a1f9d4
  tidegate receipts explain --rollout web --gate noDisruption --wave canary -o json`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkKubeOutput(output); err != nil {
				return err
			}
			if len(args) > 1 {
				return usageError("explain takes one receipt; usage: %s", cmd.UseLine())
			}
			if len(args) == 1 {
				sel.Name = args[0]
			}
			c, ns, err := k.client()
			if err != nil {
				return err
			}
			e, err := ops.Explain(cmd.Context(), c, ns, sel)
			if err != nil {
				return cliError(err)
			}
			return printAnswer(cmd, output, e, func(w io.Writer) error { printExplanation(w, e); return nil }, e.Result != v1alpha1.ResultPass)
		},
	}
	addOutputFlag(cmd, &output)
	cmd.Flags().StringVar(&sel.Rollout, "rollout", "", "explain the decisive receipt of this FleetRollout's --gate")
	cmd.Flags().StringVar(&sel.Gate, "gate", "", "the gate, with --rollout: deploySafe, rollbackSafe, rollbackSucceeds or noDisruption")
	cmd.Flags().StringVar(&sel.Wave, "wave", "", "the wave, with --rollout (the latest wave that decided the gate when empty)")
	return cmd
}

func printExplanation(w io.Writer, e ops.Explanation) {
	fmt.Fprintf(w, "gatereceipt %s/%s\n", e.Receipt.Namespace, e.Receipt.Name)
	wave := e.Wave
	if wave == "" {
		wave = "(before the waves)"
	}
	fmt.Fprintf(w, "gate:      %s, wave %s, of fleetrollout %s\n", e.Gate, wave, e.Rollout)
	fmt.Fprintf(w, "result:    %s at %s\n", e.Result, e.EvaluatedAt.UTC().Format("2006-01-02T15:04:05Z"))
	fmt.Fprintf(w, "candidate: %s (%s)\n", e.Candidate.Revision, ops.OrDash(e.Candidate.Digest))
	fmt.Fprintf(w, "policy:    %s (%s)\n", ops.OrDash(e.PolicyDigest), e.Policy)
	if e.Evidence != "" {
		fmt.Fprintf(w, "evidence:  %s\n", e.Evidence)
	}
	if !e.Current {
		fmt.Fprintln(w, "note:      the rollout has moved on to another candidate (or is gone): this receipt is history")
	}
	if len(e.Reasons) > 0 {
		fmt.Fprintln(w, "reasons:")
		for _, r := range e.Reasons {
			fmt.Fprintf(w, "  - %s\n", r.Reason)
			if r.Path != "" && len(r.Value) > 0 {
				fmt.Fprintf(w, "    evidence %s = %s\n", r.Path, r.Value)
			}
			if r.Setting != "" {
				if r.SettingValue != nil {
					fmt.Fprintf(w, "    setting  %s = %v\n", r.Setting, r.SettingValue)
				} else {
					fmt.Fprintf(w, "    setting  %s\n", r.Setting)
				}
			}
		}
	}
	printList(w, "limits", e.Limits)
	if len(e.ToPass) > 0 {
		fmt.Fprintln(w, "to pass:")
		for _, r := range e.ToPass {
			fmt.Fprintf(w, "  - %s: %s\n", r.Action, r.Message)
			if r.Command != "" {
				fmt.Fprintf(w, "    %s\n", r.Command)
			}
		}
	}
}
