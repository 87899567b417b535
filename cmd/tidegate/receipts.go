package main

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// receiptDigestAnnotation is controllers.ReceiptDigestAnnotation: the content digest the controller
// named a receipt after. It is repeated here so that the command line does not link the controller
// (a test checks that the two are the same).
const receiptDigestAnnotation = "tidegate.dev/content-digest"

// Results of a verification check.
const (
	checkMatch    = "match"
	checkMismatch = "mismatch"
	checkSkipped  = "skipped"
)

type receiptCheck struct {
	Check    string `json:"check"`
	Result   string `json:"result"`
	Expected string `json:"expected,omitempty"`
	Actual   string `json:"actual,omitempty"`
	Detail   string `json:"detail,omitempty"`
}

type receiptVerification struct {
	Namespace string         `json:"namespace"`
	Name      string         `json:"name"`
	Verified  bool           `json:"verified"`
	Checks    []receiptCheck `json:"checks"`
}

func newReceiptsCommand(k *kubeOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "receipts",
		Short: "Work with gate receipts",
		Long:  `receipts works with GateReceipts; tidegate get receipts lists them.`,
		Args:  subcommandArgs,
		RunE:  subcommandRun,
	}
	cmd.AddCommand(newReceiptsVerifyCommand(k))
	return cmd
}

func newReceiptsVerifyCommand(k *kubeOptions) *cobra.Command {
	var (
		output  string
		rollout string
	)
	cmd := &cobra.Command{
		Use:   "verify [NAME...] [--rollout ROLLOUT]",
		Short: "Check that receipts still have the content they were named after",
		Long: `verify recomputes the content digest of each receipt (the sha256 of its spec without evaluatedAt,
with its evidence in canonical form) and checks it against:

  content-digest   the annotation tidegate.dev/content-digest the controller wrote
  name             the digest part of the receipt's name (<rollout>-<gate>-<12 hex characters>)
  evidence-digest  spec.evidenceDigest, recomputed over spec.evidence when the evidence is inline
                   (skipped when it was larger than 64 KiB and only its digest was kept)

It verifies the receipts named, or every receipt of --rollout.

Exit code: 0 when every check of every receipt matches, 1 when one does not, 2 on an API error.`,
		Example: `  tidegate receipts verify web-deploysafe-0c7e52a1f9d4
  tidegate receipts verify --rollout web -o json`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkKubeOutput(output); err != nil {
				return err
			}
			if (len(args) == 0) == (rollout == "") {
				return usageError("name the receipts to verify, or give --rollout, not both; usage: %s", cmd.UseLine())
			}
			c, ns, err := k.client()
			if err != nil {
				return err
			}
			receipts, err := receiptsToVerify(cmd.Context(), c, ns, args, rollout)
			if err != nil {
				return err
			}
			results := make([]receiptVerification, 0, len(receipts))
			ok := true
			for i := range receipts {
				v := verifyReceipt(&receipts[i])
				ok = ok && v.Verified
				results = append(results, v)
			}
			out := cmd.OutOrStdout()
			if output != outputTable {
				if err := writeData(out, output, items[receiptVerification]{Items: results}); err != nil {
					return err
				}
			} else {
				t := &table{header: []string{"RECEIPT", "CHECK", "RESULT", "DETAIL"}}
				mismatches := 0
				for _, v := range results {
					for _, ch := range v.Checks {
						detail := ch.Detail
						if detail == "" {
							detail = ch.Actual
							if ch.Result == checkMismatch {
								detail = fmt.Sprintf("recorded %s, recomputed %s", ch.Expected, ch.Actual)
							}
						}
						if ch.Result == checkMismatch {
							mismatches++
						}
						t.add(v.Name, ch.Check, ch.Result, detail)
					}
				}
				if err := t.write(out); err != nil {
					return err
				}
				if ok {
					fmt.Fprintf(out, "%s verified\n", plural(len(results), "receipt", "receipts"))
				} else {
					fmt.Fprintf(out, "NOT VERIFIED: %s\n", plural(mismatches, "mismatch", "mismatches"))
				}
			}
			if !ok {
				return &exitError{code: exitNo}
			}
			return nil
		},
	}
	addOutputFlag(cmd, &output)
	cmd.Flags().StringVar(&rollout, "rollout", "", "verify every receipt of this FleetRollout")
	return cmd
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

func receiptsToVerify(ctx context.Context, c client.Client, ns string, names []string, rollout string) ([]v1alpha1.GateReceipt, error) {
	if rollout != "" {
		var list v1alpha1.GateReceiptList
		if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return nil, apiError(err, "listing the gatereceipts of namespace "+ns)
		}
		var out []v1alpha1.GateReceipt
		for _, rc := range list.Items {
			if rc.Spec.Rollout == rollout {
				out = append(out, rc)
			}
		}
		if len(out) == 0 {
			return nil, &exitError{code: exitUsage, err: fmt.Errorf("no gatereceipts of fleetrollout %s found in namespace %s", rollout, ns)}
		}
		slices.SortFunc(out, func(a, b v1alpha1.GateReceipt) int {
			if c := a.Spec.EvaluatedAt.Compare(b.Spec.EvaluatedAt.Time); c != 0 {
				return c
			}
			return strings.Compare(a.Name, b.Name)
		})
		return out, nil
	}
	out := make([]v1alpha1.GateReceipt, 0, len(names))
	for _, n := range names {
		var rc v1alpha1.GateReceipt
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: n}, &rc); err != nil {
			return nil, apiError(err, fmt.Sprintf("gatereceipt %s/%s", ns, n))
		}
		out = append(out, rc)
	}
	return out, nil
}

// verifyReceipt recomputes what a receipt's name, annotation and evidenceDigest say of its content.
func verifyReceipt(rc *v1alpha1.GateReceipt) receiptVerification {
	v := receiptVerification{Namespace: rc.Namespace, Name: rc.Name, Verified: true}
	add := func(ch receiptCheck) {
		if ch.Result == checkMismatch {
			v.Verified = false
		}
		v.Checks = append(v.Checks, ch)
	}
	digest, err := rc.Spec.ContentDigest()
	if err != nil {
		add(receiptCheck{Check: "content-digest", Result: checkMismatch, Detail: "cannot recompute: " + err.Error()})
		return v
	}
	recorded, ok := rc.Annotations[receiptDigestAnnotation]
	switch {
	case !ok:
		add(receiptCheck{Check: "content-digest", Result: checkMismatch, Actual: digest, Detail: "no " + receiptDigestAnnotation + " annotation; recomputed " + digest})
	case recorded == digest:
		add(receiptCheck{Check: "content-digest", Result: checkMatch, Expected: recorded, Actual: digest})
	default:
		add(receiptCheck{Check: "content-digest", Result: checkMismatch, Expected: recorded, Actual: digest})
	}
	name := v1alpha1.ReceiptName(rc.Spec.Rollout, rc.Spec.Gate, digest)
	if name == rc.Name {
		add(receiptCheck{Check: "name", Result: checkMatch, Expected: rc.Name, Actual: name})
	} else {
		add(receiptCheck{Check: "name", Result: checkMismatch, Expected: rc.Name, Actual: name})
	}
	switch {
	case rc.Spec.Evidence == nil:
		add(receiptCheck{Check: "evidence-digest", Result: checkSkipped, Expected: rc.Spec.EvidenceDigest,
			Detail: "the evidence is not inline (larger than 64 KiB): only its digest was recorded"})
	default:
		ed, err := v1alpha1.EvidenceDigest(rc.Spec.Evidence.Raw)
		switch {
		case err != nil:
			add(receiptCheck{Check: "evidence-digest", Result: checkMismatch, Expected: rc.Spec.EvidenceDigest, Detail: "cannot recompute: " + err.Error()})
		case ed == rc.Spec.EvidenceDigest:
			add(receiptCheck{Check: "evidence-digest", Result: checkMatch, Expected: rc.Spec.EvidenceDigest, Actual: ed})
		default:
			add(receiptCheck{Check: "evidence-digest", Result: checkMismatch, Expected: rc.Spec.EvidenceDigest, Actual: ed})
		}
	}
	return v
}
