package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/internal/attest"
)

// Results of a verification check. missing, like mismatch, fails the verification.
const (
	checkMatch    = "match"
	checkMismatch = "mismatch"
	checkMissing  = "missing"
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
	cmd.AddCommand(newReceiptsVerifyCommand(k), newReceiptsExportCommand(k), newReceiptsEvidenceCommand(k), newReceiptsExplainCommand(k))
	return cmd
}

func newReceiptsVerifyCommand(k *kubeOptions) *cobra.Command {
	var (
		output   string
		rollout  string
		revision string
		bundle   string
		keyFiles []string
	)
	cmd := &cobra.Command{
		Use:   "verify [NAME...] [--rollout ROLLOUT [--key PUB]...] | --bundle FILE [--key PUB]...",
		Short: "Check receipts, ledgers and bundles: digests, the ledger's chain and signatures",
		Long: `verify reads each receipt's evidence from where the receipt keeps it (spec.evidence,
spec.evidenceGzip, or the ConfigMaps spec.evidenceParts names), recomputes the receipt's content
digest (the sha256 of its spec without evaluatedAt, with its evidence in canonical form) and checks:

  content-digest   against the annotation tidegate.dev/content-digest the controller wrote
  name             against the digest part of the receipt's name (<rollout>-<gate>-<12 hex characters>)
  evidence-digest  spec.evidenceDigest, recomputed over the evidence; missing when the receipt keeps
                   no evidence (receipts of older versions kept only the digest of evidence over 64 KiB)
  evidence-part    for evidence kept in parts, one check per part: the ConfigMap is there and its
                   bytes have the digest the receipt records

It verifies the receipts named, or every receipt of --rollout. Reading parts needs permission to get
ConfigMaps in the receipts' namespace.

With --bundle it verifies a bundle tidegate receipts export wrote, with no cluster at all; with
--rollout and --key (or --revision) it verifies the ledger of the rollout's candidate (or of
--revision) on the hub the same way, as if exported. Those checks, each named in the output:

  content-digest, name, evidence-digest   each receipt, as above, over the evidence in the bundle
  signature         each receipt's DSSE envelope verifies with one of the --key public keys (the one
                    whose key id it names), and its in-toto statement is about the receipt's
                    candidate artifact and holds the receipt's content
  ledger-index, ledger-chain, ledger-digest
                    each ledger entry is in its place, names the digest of the entry before it, and
                    digests to what it records: a reordered, removed or changed entry fails here
  ledger-signature  each entry's envelope, as for receipts
  ledger-receipt    each receipt the ledger lists is in the bundle with that content digest, gate,
                    wave and result: a dropped receipt fails here
  candidate         each receipt is about the ledger's rollout and candidate
  outcome-gates     a Completed outcome's gates each have a passing receipt listed before it

Give every key that signed (after a rotation, the old key and the new; each --key is a PEM public
key). Without --key signatures are not checked, and the output says so. --key goes with --rollout or
--bundle: receipt names alone are checked for their content, not their signatures.

Exit code: 0 when every check of every receipt matches, 1 when one does not, 2 on an API error.`,
		Example: `  tidegate receipts verify web-deploysafe-0c7e52a1f9d4
  tidegate receipts verify --rollout web -o json
  tidegate receipts verify --bundle web.bundle.json --key tidegate.pub
  tidegate receipts verify --rollout web --key tidegate.pub --key tidegate-2025.pub`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkKubeOutput(output); err != nil {
				return err
			}
			keys, err := readKeys(keyFiles)
			if err != nil {
				return err
			}
			if bundle != "" || (rollout != "" && (len(keyFiles) > 0 || revision != "")) {
				if len(args) > 0 || (bundle != "") == (rollout != "") {
					return usageError("give --bundle, or --rollout with --key or --revision, and no receipt names; usage: %s", cmd.UseLine())
				}
				var b *attest.Bundle
				if bundle != "" {
					if b, err = readBundle(bundle, cmd.InOrStdin()); err != nil {
						return err
					}
				} else {
					c, ns, err := k.client()
					if err != nil {
						return err
					}
					if b, _, err = exportBundle(cmd.Context(), c, ns, rollout, revision); err != nil {
						return err
					}
				}
				v := attest.Verify(b, keys)
				if err := writeBundleVerification(cmd.OutOrStdout(), output, b, v, keys); err != nil {
					return err
				}
				if !v.Verified {
					return &exitError{code: exitNo}
				}
				return nil
			}
			if (len(args) == 0) == (rollout == "") {
				return usageError("name the receipts to verify, or give --rollout, not both; usage: %s", cmd.UseLine())
			}
			if len(keyFiles) > 0 {
				// Signatures are checked on a rollout's record, the ledger with every receipt it
				// lists: a key given with receipt names would check nothing and say it had.
				return usageError("--key checks the signatures of a rollout's record (its ledger and every receipt it lists): give --rollout ROLLOUT --key PUB instead of receipt names, or --bundle FILE --key PUB")
			}
			c, ns, err := k.client()
			if err != nil {
				return err
			}
			receipts, err := receiptsToVerify(cmd.Context(), c, ns, args, rollout)
			if err != nil {
				return err
			}
			results, ok, err := verifyReceipts(cmd.Context(), c, receipts)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if output != outputTable {
				if err := writeData(out, output, items[receiptVerification]{Items: results}); err != nil {
					return err
				}
			} else {
				t := &table{header: []string{"RECEIPT", "CHECK", "RESULT", "DETAIL"}}
				mismatches, missing := 0, 0
				for _, v := range results {
					for _, ch := range v.Checks {
						detail := ch.Detail
						if detail == "" {
							detail = ch.Actual
							if ch.Result == checkMismatch {
								detail = fmt.Sprintf("recorded %s, recomputed %s", ch.Expected, ch.Actual)
							}
						}
						switch ch.Result {
						case checkMismatch:
							mismatches++
						case checkMissing:
							missing++
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
					var problems []string
					if mismatches > 0 {
						problems = append(problems, plural(mismatches, "mismatch", "mismatches"))
					}
					if missing > 0 {
						problems = append(problems, fmt.Sprintf("%d missing", missing))
					}
					fmt.Fprintf(out, "NOT VERIFIED: %s\n", strings.Join(problems, ", "))
				}
			}
			if !ok {
				return &exitError{code: exitNo}
			}
			return nil
		},
	}
	addOutputFlag(cmd, &output)
	cmd.Flags().StringVar(&rollout, "rollout", "", "verify every receipt of this FleetRollout (with --key or --revision: its ledger)")
	cmd.Flags().StringVar(&revision, "revision", "", "with --rollout: verify the ledger of this revision (default: the candidate's)")
	cmd.Flags().StringVar(&bundle, "bundle", "", "verify the bundle in this file (tidegate receipts export), offline; - reads stdin")
	cmd.Flags().StringArrayVar(&keyFiles, "key", nil, "a PEM public key signatures are checked with; repeat for several")
	return cmd
}

// verifyReceipts verifies each receipt against the evidence it keeps; ok is whether all did.
func verifyReceipts(ctx context.Context, c client.Client, receipts []v1alpha1.GateReceipt) (results []receiptVerification, ok bool, err error) {
	results = make([]receiptVerification, 0, len(receipts))
	ok = true
	for i := range receipts {
		se, err := loadEvidence(ctx, c, &receipts[i])
		if err != nil {
			return nil, false, err
		}
		v := verifyReceipt(&receipts[i], se)
		ok = ok && v.Verified
		results = append(results, v)
	}
	return results, ok, nil
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

// storedEvidence is a receipt's evidence as read from where the receipt keeps it.
type storedEvidence struct {
	// raw is the evidence's JSON; nil when the receipt keeps none or it could not be read (err).
	raw []byte
	err error
	// form says where it was kept, for the evidence-digest check's detail ("" for spec.evidence).
	form string
	// parts are the checks of the parts, one each.
	parts []receiptCheck
}

// loadEvidence reads the receipt's evidence, and each of its parts with a check of it. A part that
// is not found is a failed check; any other API error is returned.
func loadEvidence(ctx context.Context, c client.Client, rc *v1alpha1.GateReceipt) (storedEvidence, error) {
	var se storedEvidence
	data := map[string][]byte{}
	for i, p := range rc.Spec.EvidenceParts {
		var cm corev1.ConfigMap
		err := c.Get(ctx, client.ObjectKey{Namespace: rc.Namespace, Name: p.Name}, &cm)
		if apierrors.IsNotFound(err) {
			se.parts = append(se.parts, receiptCheck{Check: "evidence-part", Result: checkMissing, Expected: p.Digest,
				Detail: fmt.Sprintf("part %d: configmap %s not found", i, p.Name)})
			continue
		}
		if err != nil {
			return se, apiError(err, fmt.Sprintf("configmap %s/%s, part %d of the evidence of gatereceipt %s", rc.Namespace, p.Name, i, rc.Name))
		}
		b := cm.BinaryData[v1alpha1.EvidencePartKey]
		data[p.Name] = b
		ch := receiptCheck{Check: "evidence-part", Result: checkMatch, Expected: p.Digest, Actual: v1alpha1.EvidencePartDigest(b),
			Detail: fmt.Sprintf("part %d: configmap %s, %d bytes", i, p.Name, len(b))}
		if ch.Actual != ch.Expected {
			ch.Result = checkMismatch
			ch.Detail = fmt.Sprintf("part %d: configmap %s: recorded %s, recomputed %s", i, p.Name, ch.Expected, ch.Actual)
		}
		se.parts = append(se.parts, ch)
	}
	switch {
	case rc.Spec.EvidenceGzip != "":
		se.form = "compressed in the receipt"
	case len(rc.Spec.EvidenceParts) > 0:
		se.form = "compressed in " + plural(len(rc.Spec.EvidenceParts), "part", "parts")
	}
	se.raw, se.err = rc.Spec.StoredEvidence(func(p v1alpha1.EvidencePart) ([]byte, error) {
		b, ok := data[p.Name]
		if !ok {
			return nil, fmt.Errorf("not found")
		}
		return b, nil
	})
	return se, nil
}

// verifyReceipt checks a receipt against the evidence read from where it is kept
// (attest.CheckReceipt), and each of its parts.
func verifyReceipt(rc *v1alpha1.GateReceipt, se storedEvidence) receiptVerification {
	v := receiptVerification{Namespace: rc.Namespace, Name: rc.Name, Verified: true}
	for _, ch := range attest.CheckReceipt(rc, se.raw, se.err) {
		v.Checks = append(v.Checks, receiptCheckOf(ch, se))
	}
	v.Checks = append(v.Checks, se.parts...)
	for _, ch := range v.Checks {
		if ch.Result == checkMismatch || ch.Result == checkMissing {
			v.Verified = false
		}
	}
	return v
}

// receiptCheckOf is a check of attest.CheckReceipt as receipts verify prints it: what the receipt
// records (expected) beside what was recomputed (actual), and a detail where that is not all.
func receiptCheckOf(ch attest.ReceiptCheck, se storedEvidence) receiptCheck {
	out := receiptCheck{Check: ch.Check, Result: checkMatch, Expected: ch.Recorded, Actual: ch.Recomputed}
	switch {
	case ch.Result == attest.CheckMissing:
		out.Result = checkMissing
		out.Detail = "the receipt keeps no evidence, only its digest: it cannot be checked (older versions did not keep evidence over 64 KiB)"
	case ch.Cause != nil:
		out.Result, out.Detail = checkMismatch, "cannot recompute: "+ch.Cause.Error()
	case ch.Result == attest.CheckFail && ch.Check == attest.CheckContentDigest && ch.Recorded == "":
		out.Result, out.Detail = checkMismatch, "no "+v1alpha1.ContentDigestAnnotation+" annotation; recomputed "+ch.Recomputed
	case ch.Result == attest.CheckFail:
		out.Result = checkMismatch
	case ch.Check == attest.CheckEvidenceDigest && se.form != "":
		out.Detail = fmt.Sprintf("%s over %d bytes of evidence, %s", ch.Recomputed, len(se.raw), se.form)
	}
	return out
}

func newReceiptsEvidenceCommand(k *kubeOptions) *cobra.Command {
	output := outputJSON
	cmd := &cobra.Command{
		Use:   "evidence NAME",
		Short: "Print the evidence a receipt's decision was made over",
		Long: `evidence prints the evidence document of a GateReceipt as JSON (-o yaml for YAML), read from
where the receipt keeps it: spec.evidence, spec.evidenceGzip (decompressed), or the ConfigMaps
spec.evidenceParts names, each checked against the digest the receipt records, joined and
decompressed. tidegate policy eval --evidence takes the document as it is printed.

It does not check the receipt's digests: tidegate receipts verify does.

Exit code: 0 when the evidence was printed, 1 when the receipt keeps none or a part is missing or
does not have its recorded digest, 2 on an API error.`,
		Example: `  tidegate receipts evidence web-nodisruption-5b1f0e8c22a7
  tidegate receipts evidence web-nodisruption-5b1f0e8c22a7 | tidegate policy eval ./policy --gate noDisruption --evidence -`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if output != outputJSON && output != outputYAML {
				return usageError("-o %q: the formats are json and yaml", output)
			}
			c, ns, err := k.client()
			if err != nil {
				return err
			}
			var rc v1alpha1.GateReceipt
			if err := c.Get(cmd.Context(), client.ObjectKey{Namespace: ns, Name: args[0]}, &rc); err != nil {
				return apiError(err, fmt.Sprintf("gatereceipt %s/%s", ns, args[0]))
			}
			se, err := loadEvidence(cmd.Context(), c, &rc)
			if err != nil {
				return err
			}
			switch {
			case se.err != nil:
				return &exitError{code: exitNo, err: fmt.Errorf("the evidence of gatereceipt %s/%s cannot be read: %w", ns, rc.Name, se.err)}
			case se.raw == nil:
				return &exitError{code: exitNo, err: fmt.Errorf("gatereceipt %s/%s keeps no evidence, only its digest %s", ns, rc.Name, rc.Spec.EvidenceDigest)}
			}
			out := se.raw
			if output == outputYAML {
				if out, err = yaml.JSONToYAML(se.raw); err != nil {
					return fmt.Errorf("the evidence of gatereceipt %s/%s: %w", ns, rc.Name, err)
				}
			} else {
				var b bytes.Buffer
				if err := json.Indent(&b, se.raw, "", "  "); err != nil {
					return fmt.Errorf("the evidence of gatereceipt %s/%s is not JSON: %w", ns, rc.Name, err)
				}
				out = append(b.Bytes(), '\n')
			}
			_, err = cmd.OutOrStdout().Write(out)
			return err
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", outputJSON, "output format: json or yaml")
	return cmd
}
