package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/internal/ops"
	"github.com/tidegate/tidegate/verdict"
)

func newPolicyCommand(k *kubeOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Check and try out CUE gate policies",
		Long: `A policy is a CUE package (the .cue files of one directory) with one field per gate
(deploySafe, noDisruption, rollbackSafe, rollbackSucceeds) and optional settings. tidegate adds
the evidence schemas (#DeploySafeEvidence, ...) to the package. See docs/policy.md.`,
	}
	cmd.AddCommand(newPolicyVetCommand(), newPolicyEvalCommand(), newPolicyTestCommand(), newPolicyReplayCommand(k))
	return cmd
}

func newPolicyVetCommand() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "vet DIR",
		Short: "Check that a policy compiles and fits the evidence schemas",
		Long: `vet loads the .cue files of DIR as a policy the way the controller does: it compiles them
with the evidence schemas, checks that every gate is there and constrains only what its evidence
has, that every constraint can be decided, and that the settings are concrete.

Exit code: 0 valid, 1 invalid, 2 usage or unreadable DIR.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			dir := args[0]
			files, err := ops.ReadPolicyDir(dir)
			if err != nil {
				return &exitError{code: exitUsage, err: err}
			}
			p, err := verdict.LoadPolicy(files)
			return printVet(cmd.OutOrStdout(), output, dir, p, err)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table or json")
	return cmd
}

func newPolicyEvalCommand() *cobra.Command {
	var output, gate, evidence string
	cmd := &cobra.Command{
		Use:   "eval DIR --gate GATE --evidence FILE",
		Short: "Decide one gate over an evidence file with a policy",
		Long: `eval decides GATE with the policy in DIR over the evidence in FILE (JSON, "-" for stdin)
and prints the decision with its reasons, as a receipt would record it.

Exit code: 0 the gate passes, 1 it fails, 2 usage, unreadable input, or a policy that cannot
decide (it does not compile, or is not concrete).`,
		Example: `  tidegate policy eval ./policy --gate noDisruption --evidence wave.json
  tidegate policy eval ./policy --gate rollbackSafe --evidence - -o json < diff.json`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			if !slices.Contains(verdict.Gates, gate) {
				return usageError("--gate %q: the gates are %s", gate, strings.Join(verdict.Gates, ", "))
			}
			if evidence == "" {
				return usageError("--evidence FILE is required (\"-\" reads stdin)")
			}
			files, err := ops.ReadPolicyDir(args[0])
			if err != nil {
				return &exitError{code: exitUsage, err: err}
			}
			data, err := readEvidence(cmd.InOrStdin(), evidence)
			if err != nil {
				return &exitError{code: exitUsage, err: err}
			}
			p, err := verdict.LoadPolicy(files)
			if err != nil {
				return &exitError{code: exitUsage, err: fmt.Errorf("%s: %w", args[0], err)}
			}
			d, err := verdict.Evaluate(p, gate, data)
			if err != nil {
				return &exitError{code: exitUsage, err: err}
			}
			if err := printDecision(cmd.OutOrStdout(), output, d); err != nil {
				return err
			}
			if !d.Pass {
				return &exitError{code: exitNo}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&gate, "gate", "", "gate to decide: "+strings.Join(verdict.Gates, ", "))
	cmd.Flags().StringVar(&evidence, "evidence", "", `evidence file (JSON); "-" reads stdin`)
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table or json")
	return cmd
}

// exactArgs is cobra.ExactArgs with the usage exit code.
func exactArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := cobra.ExactArgs(n)(cmd, args); err != nil {
			return usageError("%v; usage: %s", err, cmd.UseLine())
		}
		return nil
	}
}

func checkOutput(o string) error {
	if o != "table" && o != "json" {
		return usageError("-o %q: the formats are table and json", o)
	}
	return nil
}

func readEvidence(stdin io.Reader, name string) ([]byte, error) {
	var (
		b   []byte
		err error
	)
	// One byte past the bound is enough to tell that the evidence is too large.
	if name == "-" {
		b, err = io.ReadAll(io.LimitReader(stdin, verdict.MaxEvidenceBytes+1))
	} else {
		var f *os.File
		if f, err = os.Open(name); err == nil {
			b, err = io.ReadAll(io.LimitReader(f, verdict.MaxEvidenceBytes+1))
			f.Close()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("reading the evidence: %w", err)
	}
	return b, nil
}

type vetResult struct {
	Dir      string            `json:"dir"`
	Valid    bool              `json:"valid"`
	Digest   string            `json:"digest,omitempty"`
	Settings *verdict.Settings `json:"settings,omitempty"`
	Problems []string          `json:"problems,omitempty"`
}

func printVet(w io.Writer, output, dir string, p *verdict.Policy, loadErr error) error {
	r := vetResult{Dir: dir, Valid: loadErr == nil}
	if loadErr != nil {
		var pe *verdict.PolicyError
		if !errors.As(loadErr, &pe) {
			return &exitError{code: exitUsage, err: loadErr}
		}
		r.Digest, r.Problems = pe.Digest, pe.Problems
	} else {
		s, err := p.Settings()
		if err != nil {
			return &exitError{code: exitUsage, err: err}
		}
		r.Digest, r.Settings = p.Digest(), &s
	}
	if output == "json" {
		if err := writeJSON(w, r); err != nil {
			return err
		}
	} else {
		if r.Valid {
			fmt.Fprintf(w, "%s: valid policy\n", dir)
		} else {
			fmt.Fprintf(w, "%s: invalid policy\n", dir)
		}
		if r.Digest != "" {
			fmt.Fprintf(w, "digest: %s\n", r.Digest)
		}
		if s := r.Settings; s != nil {
			fmt.Fprintf(w, "settings:\n  soak: %s\n  sampleInterval: %s\n  onFail: %s\n  rehearsal: %t\n  inconclusiveAfter: %s\n", s.Soak, s.SampleInterval, s.OnFail, s.Rehearsal, s.InconclusiveAfter)
			fmt.Fprintf(w, "  approvals: waves [%s], classes [%s]\n", strings.Join(s.Approvals.Waves, ", "), strings.Join(s.Approvals.Classes, ", "))
			fmt.Fprintf(w, "  tolerances: minAvailableRatio %g, maxUnavailableSeconds %g, maxRehearsalSeconds %g, minSampleCoverage %g\n",
				s.Tolerances.MinAvailableRatio, s.Tolerances.MaxUnavailableSeconds, s.Tolerances.MaxRehearsalSeconds, s.Tolerances.MinSampleCoverage)
		}
		printList(w, "problems", r.Problems)
	}
	if !r.Valid {
		return &exitError{code: exitNo}
	}
	return nil
}

func printDecision(w io.Writer, output string, d verdict.Decision) error {
	if output == "json" {
		return writeJSON(w, d)
	}
	result := "Fail"
	if d.Pass {
		result = "Pass"
	}
	fmt.Fprintf(w, "gate: %s\nresult: %s\npolicy: %s\n", d.Gate, result, d.PolicyDigest)
	printList(w, "reasons", d.Reasons)
	printList(w, "limits", d.Limits)
	return nil
}

func printList(w io.Writer, title string, items []string) { printIndented(w, "", title, items) }

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func newPolicyTestCommand() *cobra.Command {
	var output, fixtures string
	cmd := &cobra.Command{
		Use:   "test DIR [--fixtures FIXDIR]",
		Short: "Decide a directory of evidence fixtures with a policy and check the outcomes they expect",
		Long: `test decides every fixture of FIXDIR (DIR/tests unless --fixtures says otherwise) with the
policy in DIR and checks each decision against the fixture's expectation: its result, and reasons
that must each be part of one of the decision's reasons. A fixture is a YAML or JSON file:

  gate: noDisruption
  evidenceFile: evidence/ring-1.json    # relative to the fixture; or the document inline as evidence
  expect:
    result: Fail                        # Pass, Fail or Inconclusive
    reasons:
      - "minAvailableRatio: invalid value 0.5"

Only the .yaml, .yml and .json files of FIXDIR are fixtures; keep evidence files in a subdirectory.
tidegate receipts evidence prints a receipt's evidence as a fixture takes it.

Exit code: 0 every fixture has the outcome it expects, 1 one does not, 2 usage, an unreadable
or malformed fixture, a policy that does not compile, or a fixture no decision can be made over.`,
		Example: `  tidegate policy test ./policies/web
  tidegate policy test ./policies/web --fixtures ./policies/fixtures -o json`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			dir := args[0]
			p, err := ops.ProposedPolicy(dir, nil)
			if err != nil {
				return &exitError{code: exitUsage, err: err}
			}
			if fixtures == "" {
				fixtures = filepath.Join(dir, "tests")
			}
			fx, err := ops.ReadFixtures(fixtures)
			if err != nil {
				return &exitError{code: exitUsage, err: err}
			}
			res := ops.TestPolicy(p, fx)
			if err := printPolicyTest(cmd.OutOrStdout(), output, res); err != nil {
				return err
			}
			switch {
			case res.Errors > 0:
				return &exitError{code: exitUsage, inOutput: true, err: fmt.Errorf("%s could not be decided by the policy in %s", plural(res.Errors, "fixture", "fixtures"), dir)}
			case res.Failed > 0:
				return &exitError{code: exitNo}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&fixtures, "fixtures", "", "directory of fixtures (default DIR/tests)")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table or json")
	return cmd
}

func printPolicyTest(w io.Writer, output string, res ops.PolicyTest) error {
	if output == "json" {
		return writeJSON(w, res)
	}
	t := &table{header: []string{"FIXTURE", "GATE", "EXPECTED", "GOT", "OK"}}
	for _, r := range res.Items {
		ok := "ok"
		if !r.OK {
			ok = "FAIL"
		}
		t.add(r.Fixture, r.Gate, r.Expected, r.Got, ok)
	}
	if err := t.write(w); err != nil {
		return err
	}
	for _, r := range res.Items {
		if r.OK {
			continue
		}
		fmt.Fprintf(w, "\n%s: expected %s, got %s\n", r.Fixture, r.Expected, r.Got)
		if r.Error != "" {
			fmt.Fprintf(w, "  error: %s\n", r.Error)
		}
		printIndented(w, "  ", "missing reasons", r.Missing)
		printIndented(w, "  ", "reasons", r.Reasons)
	}
	fmt.Fprintf(w, "\n%s\n", res)
	return nil
}

func newPolicyReplayCommand(k *kubeOptions) *cobra.Command {
	var output, rollout, policy string
	cmd := &cobra.Command{
		Use:   "replay --rollout ROLLOUT --policy DIR",
		Short: "Decide a rollout's recorded gate decisions again with a proposed policy",
		Long: `replay reads every GateReceipt of ROLLOUT from the hub, decides the evidence each one recorded
again with the policy in DIR, as the controller would, and lists every decision whose result would
change: the receipt, its gate, wave and revision, the old and the new result and their reasons.
Evidence is read from where the receipt keeps it (spec.evidence, spec.evidenceGzip, or the
ConfigMaps spec.evidenceParts names, each checked against its digest); a receipt whose evidence
cannot be read is listed as unreadable and fails the replay. Nothing is written.

Exit code: 0 no decision would change, 1 one would or a receipt's evidence cannot be read, 2 usage,
an unreadable or invalid policy, an unknown rollout, or an API error.`,
		Example: `  tidegate policy replay --rollout web --policy ./policies/web
  tidegate policy replay --rollout web --policy ./policies/web -n fleet -o json`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			if rollout == "" || policy == "" {
				return usageError("--rollout ROLLOUT and --policy DIR are required; usage: %s", cmd.UseLine())
			}
			p, err := ops.ProposedPolicy(policy, nil)
			if err != nil {
				return &exitError{code: exitUsage, err: err}
			}
			c, ns, err := k.client()
			if err != nil {
				return err
			}
			r, err := ops.ReplayPolicy(cmd.Context(), c, ns, rollout, p)
			if err != nil {
				return &exitError{code: exitUsage, err: err}
			}
			if err := printReplay(cmd.OutOrStdout(), output, r); err != nil {
				return err
			}
			if !r.OK() {
				return &exitError{code: exitNo}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&rollout, "rollout", "", "the FleetRollout whose receipts to replay")
	cmd.Flags().StringVar(&policy, "policy", "", "directory of the proposed policy's .cue files")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table or json")
	return cmd
}

func printReplay(w io.Writer, output string, r *ops.Replay) error {
	if output == "json" {
		return writeJSON(w, r)
	}
	if len(r.Changes) > 0 {
		t := &table{header: []string{"RECEIPT", "GATE", "WAVE", "REVISION", "OLD", "NEW"}}
		for _, ch := range r.Changes {
			result := "unreadable"
			if ch.New != nil {
				result = ch.New.Result
			}
			t.add(ch.Receipt, ch.Gate, ch.Wave, v1alpha1.ShortRevision(ch.Revision), ch.Old.Result, result)
		}
		if err := t.write(w); err != nil {
			return err
		}
		for _, ch := range r.Changes {
			if ch.New == nil {
				fmt.Fprintf(w, "\n%s: %s, unreadable: %s\n", ch.Receipt, ch.Old.Result, ch.Unreadable)
				continue
			}
			fmt.Fprintf(w, "\n%s: %s -> %s\n", ch.Receipt, ch.Old.Result, ch.New.Result)
			printIndented(w, "  ", "old reasons", ch.Old.Reasons)
			printIndented(w, "  ", "new reasons", ch.New.Reasons)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "%s of %s replayed with %s: %d changed, %d unreadable\n",
		plural(r.Replayed, "receipt", "receipts"), r.Rollout, r.PolicyDigest, r.Changed, r.Unreadable)
	return nil
}

// printIndented prints a titled list, indented by indent; nothing for no items.
func printIndented(w io.Writer, indent, title string, items []string) {
	if len(items) == 0 {
		return
	}
	fmt.Fprintf(w, "%s%s:\n", indent, title)
	for _, it := range items {
		fmt.Fprintf(w, "%s  - %s\n", indent, it)
	}
}
