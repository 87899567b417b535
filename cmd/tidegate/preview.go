package main

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/internal/ops"
)

// artifactTimeout bounds the download of an artifact by a preview.
const artifactTimeout = time.Minute

// artifactClient fetches artifacts from source-controller for the previews.
func artifactClient() *http.Client { return &http.Client{Timeout: artifactTimeout} }

func newPreviewCommand(k *kubeOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "preview",
		Short: "Try a change against an exact artifact or receipt before making it",
		Long: `preview checks a change before it is committed: install-time values against the install
schema of the artifact at an exact digest (preview values), or a policy edit against the evidence
a receipt recorded (preview policy). It writes nothing.`,
		Args: subcommandArgs,
		RunE: subcommandRun,
	}
	cmd.AddCommand(newPreviewValuesCommand(k), newPreviewPolicyCommand(k))
	return cmd
}

func newPreviewValuesCommand(k *kubeOptions) *cobra.Command {
	var output, rollout, digest string
	cmd := &cobra.Command{
		Use:   "values --rollout ROLLOUT [--digest DIGEST] [NAME=VALUE...]",
		Short: "Check install-time values against the install schema of the artifact at an exact digest",
		Long: `values checks install-time values (postBuild substitutions) as deploySafe would: the rollout's
spec.template.postBuild.substitute with the NAME=VALUE given over them, against the
tidegate/install.cue at the rollout's path in the artifact with --digest (the candidate's when
none is given). The digest must be one of the rollout's: its candidate's, its known-good's or what
its tracked source serves now.

The artifact is downloaded from source-controller's artifact URL (status.artifact.url of the
source that serves it) and checked against the digest, as the controller does. That URL is
usually reachable only inside the cluster: from elsewhere the preview fails with Unavailable and
says so; it never passes values it could not check.

It prints the keys the schema does not declare, the keys the package fixes at build time, the
values the schema rejects, and whether deploySafe would refuse a change with these values.

Exit code: 0 when the values would be allowed, 1 when they would be refused, 2 on an API error,
an artifact that cannot be fetched or a digest that is not the rollout's.`,
		Example: `  tidegate preview values --rollout web replicas=3 region=eu
  tidegate preview values --rollout web --digest sha256:4f2c0d9e... image=nginx -o json`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkKubeOutput(output); err != nil {
				return err
			}
			if rollout == "" {
				return usageError("--rollout is required; usage: %s", cmd.UseLine())
			}
			values := map[string]string{}
			for _, a := range args {
				name, value, ok := strings.Cut(a, "=")
				if !ok || name == "" {
					return usageError("%q: give values as NAME=VALUE", a)
				}
				values[name] = value
			}
			c, ns, err := k.client()
			if err != nil {
				return err
			}
			p, err := ops.PreviewValues(cmd.Context(), c, artifactClient(), ns, rollout, digest, values)
			if err != nil {
				return cliError(err)
			}
			return printAnswer(cmd, output, p, func(w io.Writer) error { printValuesPreview(w, p); return nil }, p.Refused)
		},
	}
	addOutputFlag(cmd, &output)
	cmd.Flags().StringVar(&rollout, "rollout", "", "the FleetRollout whose values change (required)")
	cmd.Flags().StringVar(&digest, "digest", "", "the artifact's digest, sha256:... (the candidate's when empty)")
	return cmd
}

func printValuesPreview(w io.Writer, p ops.ValuesPreview) {
	fmt.Fprintf(w, "artifact: %s (%s) from %s\n", p.Artifact.Revision, p.Artifact.Digest, p.Source)
	if !p.Schema {
		fmt.Fprintln(w, "the package ships no tidegate/install.cue: install-time values are not checked")
	}
	printList(w, "unknown keys", p.UnknownKeys)
	printList(w, "protected keys", p.ProtectedKeys)
	printList(w, "violations", p.Violations)
	if p.Refused {
		fmt.Fprintln(w, "refused: deploySafe would refuse a change with these values")
	} else {
		fmt.Fprintln(w, "allowed: deploySafe would accept these values")
	}
}

func newPreviewPolicyCommand(k *kubeOptions) *cobra.Command {
	var output, receipt, dir string
	cmd := &cobra.Command{
		Use:   "policy --receipt NAME --policy DIR",
		Short: "Decide a receipt's gate again with a policy edit, over the evidence it recorded",
		Long: `policy decides the gate of the GateReceipt --receipt again with the policy in DIR (the .cue files
of one package), over the evidence the receipt recorded, and prints that decision beside the one
the receipt records, and whether it changed. It is tidegate policy eval over one receipt's
evidence, read from the hub.

Exit code: 0 when the gate passes with the policy, 1 when it does not, 2 on an API error, a policy
that does not compile or cannot decide, or evidence that cannot be read.`,
		Example: `  tidegate preview policy --receipt web-nodisruption-5b1f0e8c22a7 --policy ./policy
  tidegate preview policy --receipt web-nodisruption-5b1f0e8c22a7 --policy ./policy -o json`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkKubeOutput(output); err != nil {
				return err
			}
			if receipt == "" || dir == "" {
				return usageError("--receipt and --policy are required; usage: %s", cmd.UseLine())
			}
			files, err := ops.ReadPolicyDir(dir)
			if err != nil {
				return &exitError{code: exitUsage, err: err}
			}
			c, ns, err := k.client()
			if err != nil {
				return err
			}
			p, err := ops.PreviewPolicy(cmd.Context(), c, ns, receipt, files)
			if err != nil {
				return cliError(err)
			}
			return printAnswer(cmd, output, p, func(w io.Writer) error { printPolicyPreview(w, p); return nil }, p.Decision.Result != v1alpha1.ResultPass)
		},
	}
	addOutputFlag(cmd, &output)
	cmd.Flags().StringVar(&receipt, "receipt", "", "the GateReceipt whose evidence to decide over (required)")
	cmd.Flags().StringVar(&dir, "policy", "", "the directory of the policy's .cue files (required)")
	return cmd
}

func printPolicyPreview(w io.Writer, p ops.PolicyPreview) {
	fmt.Fprintf(w, "gatereceipt %s/%s: %s, wave %s\n", p.Receipt.Namespace, p.Receipt.Name, p.Gate, ops.OrDash(p.Wave))
	fmt.Fprintf(w, "recorded: %s (policy %s)\n", p.Recorded.Result, p.Recorded.PolicyDigest)
	fmt.Fprintf(w, "preview:  %s (policy %s)\n", p.Decision.Result, p.Decision.PolicyDigest)
	printList(w, "reasons", p.Decision.Reasons)
	if p.Changed {
		fmt.Fprintln(w, "changed: the policy decides otherwise than the receipt records")
	} else {
		fmt.Fprintln(w, "unchanged: the policy decides as the receipt records")
	}
}
