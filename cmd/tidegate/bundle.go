package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/internal/attest"
	"github.com/tidegate/tidegate/internal/ops"
)

func newReceiptsExportCommand(k *kubeOptions) *cobra.Command {
	var rollout, revision, file string
	cmd := &cobra.Command{
		Use:   "export --rollout ROLLOUT [--revision REVISION] [-f FILE]",
		Short: "Write a revision's ledger and its receipts to a bundle that verifies offline",
		Long: `export writes the bundle of one revision's rollout: its RolloutLedger and every GateReceipt the
ledger lists, each with its evidence (read from where the receipt keeps it, parts included), as
JSON to FILE or stdout. tidegate receipts verify --bundle checks it with no cluster at all.

The revision is --revision, or the rollout's candidate. A build of a revision of its own (an edit of
the template or of a cluster's values) keeps a ledger apart: without --revision the candidate's
ledger is exported, and --revision exports the revision's own ledger, else its one build's (with
several, the error names them). Receipts and ledgers outlive their rollout, so a deleted rollout's
ledgers export too (give --revision). Reading parts needs permission to get ConfigMaps in the
namespace.

Exit code: 0 when the bundle was written whole, 1 when a receipt the ledger lists is gone (the
bundle is written without it, and does not verify), 2 on a usage or API error.`,
		Example: `  tidegate receipts export --rollout podinfo -f podinfo.bundle.json
  tidegate receipts export --rollout podinfo --revision 'main@sha1:4f2a...' -f before.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if rollout == "" {
				return usageError("give --rollout; usage: %s", cmd.UseLine())
			}
			c, ns, err := k.client()
			if err != nil {
				return err
			}
			b, missing, err := exportBundle(cmd.Context(), c, ns, rollout, revision)
			if err != nil {
				return err
			}
			enc, err := json.MarshalIndent(b, "", "  ")
			if err != nil {
				return err
			}
			enc = append(enc, '\n')
			if file == "" || file == "-" {
				_, err = cmd.OutOrStdout().Write(enc)
			} else {
				err = os.WriteFile(file, enc, 0o644)
			}
			if err != nil {
				return err
			}
			where := "stdout"
			if file != "" && file != "-" {
				where = file
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "exported rolloutledger %s/%s (%s, %s) and %s to %s\n", ns, b.Ledger.Name,
				b.Ledger.Spec.Candidate.Revision, plural(len(b.Ledger.Spec.Entries), "entry", "entries"), plural(len(b.Receipts), "receipt", "receipts"), where)
			if len(missing) > 0 {
				return &exitError{code: exitNo, err: fmt.Errorf("the ledger lists %s that no longer exist: %s", plural(len(missing), "receipt", "receipts"), strings.Join(missing, ", "))}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&rollout, "rollout", "", "the FleetRollout")
	cmd.Flags().StringVar(&revision, "revision", "", "the revision whose ledger to export (default: the rollout's candidate)")
	cmd.Flags().StringVarP(&file, "file", "f", "", "write the bundle to this file (default: stdout)")
	return cmd
}

// exportBundle is ops.ExportBundle, its errors as the command line reports them.
func exportBundle(ctx context.Context, c client.Client, ns, rollout, revision string) (*attest.Bundle, []string, error) {
	b, missing, err := ops.ExportBundle(ctx, c, ns, rollout, revision)
	if err != nil {
		code := exitUsage
		if ops.CodeOf(err) == ops.CodeUnmet {
			code = exitNo
		}
		return nil, nil, &exitError{code: code, err: err}
	}
	return b, missing, nil
}

// readKeys reads the PEM public keys of --key.
func readKeys(files []string) (*attest.KeySet, error) {
	var keys []*attest.PublicKey
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, usageError("--key %s: %v", f, err)
		}
		k, err := attest.ParsePublicKey(b)
		if err != nil {
			return nil, usageError("--key %s: %v", f, err)
		}
		keys = append(keys, k)
	}
	return attest.NewKeySet(keys...), nil
}

// readBundle reads a bundle file ("-" for stdin).
func readBundle(file string, stdin io.Reader) (*attest.Bundle, error) {
	var data []byte
	var err error
	if file == "-" {
		data, err = io.ReadAll(stdin)
	} else {
		data, err = os.ReadFile(file)
	}
	if err != nil {
		return nil, usageError("--bundle %s: %v", file, err)
	}
	var b attest.Bundle
	if err := json.Unmarshal(data, &b); err != nil {
		return nil, usageError("--bundle %s is not a bundle tidegate receipts export wrote: %v", file, err)
	}
	return &b, nil
}

// writeBundleVerification prints v: its checks as a table (failures, and the signature checks'
// keys) and a summary line, or the document for -o json|yaml|jsonpath.
func writeBundleVerification(w io.Writer, output string, b *attest.Bundle, v *attest.Verification, keys *attest.KeySet) error {
	if output != outputTable {
		return writeData(w, output, v)
	}
	t := &table{header: []string{"RECORD", "CHECK", "RESULT", "DETAIL"}}
	for _, ch := range v.Checks {
		t.add(ch.Record, ch.Check, ch.Result, ch.Detail)
	}
	if err := t.write(w); err != nil {
		return err
	}
	entries := 0
	if b.Ledger != nil {
		entries = len(b.Ledger.Spec.Entries)
	}
	what := fmt.Sprintf("%s of %s: %s, %s", orDash(v.Candidate), orDash(v.Rollout), plural(entries, "ledger entry", "ledger entries"), plural(len(b.Receipts), "receipt", "receipts"))
	switch {
	case !v.Verified:
		fmt.Fprintf(w, "NOT VERIFIED: %s failed (%s)\n", plural(len(v.Failures()), "check", "checks"), what)
	case keys.Len() == 0:
		fmt.Fprintf(w, "verified without signatures (no --key given): %s\n", what)
	default:
		fmt.Fprintf(w, "verified, signed by %s: %s\n", strings.Join(signingKeys(v), ", "), what)
	}
	return nil
}

// signingKeys are the key ids the verification's signature checks accepted.
func signingKeys(v *attest.Verification) []string {
	var ids []string
	for _, ch := range v.Checks {
		if ch.KeyID != "" && !slices.Contains(ids, ch.KeyID) {
			ids = append(ids, ch.KeyID)
		}
	}
	slices.Sort(ids)
	return ids
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
