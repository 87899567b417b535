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

	tgcue "github.com/tidegate/tidegate/cue"
)

func newPolicyCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Check and try out CUE gate policies",
		Long: `A policy is a CUE package (the .cue files of one directory) with one field per gate
(deploySafe, noDisruption, rollbackSafe, rollbackSucceeds) and optional settings. tidegate adds
the evidence schemas (#DeploySafeEvidence, ...) to the package. See docs/policy.md.`,
	}
	cmd.AddCommand(newPolicyVetCommand(), newPolicyEvalCommand())
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
			files, err := readPolicyDir(dir)
			if err != nil {
				return &exitError{code: exitUsage, err: err}
			}
			p, err := tgcue.LoadPolicy(files)
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
			if !slices.Contains(tgcue.Gates, gate) {
				return usageError("--gate %q: the gates are %s", gate, strings.Join(tgcue.Gates, ", "))
			}
			if evidence == "" {
				return usageError("--evidence FILE is required (\"-\" reads stdin)")
			}
			files, err := readPolicyDir(args[0])
			if err != nil {
				return &exitError{code: exitUsage, err: err}
			}
			data, err := readEvidence(cmd.InOrStdin(), evidence)
			if err != nil {
				return &exitError{code: exitUsage, err: err}
			}
			p, err := tgcue.LoadPolicy(files)
			if err != nil {
				return &exitError{code: exitUsage, err: fmt.Errorf("%s: %w", args[0], err)}
			}
			d, err := tgcue.Evaluate(p, gate, data)
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
	cmd.Flags().StringVar(&gate, "gate", "", "gate to decide: "+strings.Join(tgcue.Gates, ", "))
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

// readPolicyDir reads the .cue files of dir (not its subdirectories) by base name.
func readPolicyDir(dir string) (map[string][]byte, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading the policy: %w", err)
	}
	files := map[string][]byte{}
	for _, e := range entries {
		if e.IsDir() || filepath.Ext(e.Name()) != ".cue" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("reading the policy: %w", err)
		}
		files[e.Name()] = b
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("reading the policy: %s has no .cue files", dir)
	}
	return files, nil
}

func readEvidence(stdin io.Reader, name string) ([]byte, error) {
	var (
		b   []byte
		err error
	)
	// One byte past the bound is enough to tell that the evidence is too large.
	if name == "-" {
		b, err = io.ReadAll(io.LimitReader(stdin, tgcue.MaxEvidenceBytes+1))
	} else {
		var f *os.File
		if f, err = os.Open(name); err == nil {
			b, err = io.ReadAll(io.LimitReader(f, tgcue.MaxEvidenceBytes+1))
			f.Close()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("reading the evidence: %w", err)
	}
	return b, nil
}

type vetResult struct {
	Dir      string          `json:"dir"`
	Valid    bool            `json:"valid"`
	Digest   string          `json:"digest,omitempty"`
	Settings *tgcue.Settings `json:"settings,omitempty"`
	Problems []string        `json:"problems,omitempty"`
}

func printVet(w io.Writer, output, dir string, p *tgcue.Policy, loadErr error) error {
	r := vetResult{Dir: dir, Valid: loadErr == nil}
	if loadErr != nil {
		var pe *tgcue.PolicyError
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

func printDecision(w io.Writer, output string, d tgcue.Decision) error {
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

func printList(w io.Writer, title string, items []string) {
	if len(items) == 0 {
		return
	}
	fmt.Fprintf(w, "%s:\n", title)
	for _, it := range items {
		fmt.Fprintf(w, "  - %s\n", it)
	}
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
