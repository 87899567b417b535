package main

import (
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/internal/ops"
)

func newRevisionCommand(k *kubeOptions) *cobra.Command {
	var output, rollout string
	cmd := &cobra.Command{
		Use:   "revision CLUSTER [--rollout ROLLOUT]",
		Short: "Show the revision a cluster should run and the one it runs, per rollout",
		Long: `revision shows, for each FleetRollout that targets the FleetCluster CLUSTER (or for --rollout
alone), the desired revision (what tidegate asks Flux to apply there: the revision the per-cluster
Kustomization <rollout>-<cluster> was switched to, the pinned source it points at and that
source's artifact digest) beside the live revision (what kustomize-controller last applied:
status.lastAppliedRevision and lastAttemptedRevision, and its Ready condition), whether they
agree, and the wave the cluster is in. For a rollout of a Helm chart (spec.chart) the member is
the HelmRelease <rollout>-<cluster>, and its live revision the OCI digest of the chart its latest
release installed (status.history) and the one helm-controller last attempted.

They agree when the member last applied the revision it points at and is Ready for its current
spec. A rollout whose wave has not reached the cluster has no member there yet.

Exit code: 0 when every rollout's live revision is its desired one, 1 when one is not, 2 on an
API error or a cluster nothing refers to.`,
		Example: `  tidegate revision eu-1 -n fleet
  tidegate revision eu-1 --rollout web -o json`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := k.clientFor(output, checkKubeOutput)
			if err != nil {
				return err
			}
			revs, err := ops.RevisionsOf(cmd.Context(), c, ns, args[0], rollout)
			if err != nil {
				return cliError(err)
			}
			disagree := slices.ContainsFunc(revs.Rollouts, func(r ops.ClusterRevision) bool { return !r.Agree })
			return printAnswer(cmd, output, revs, func(w io.Writer) error { return printRevisions(w, k.env.now(), revs) }, disagree)
		},
	}
	addOutputFlag(cmd, &output)
	cmd.Flags().StringVar(&rollout, "rollout", "", "only this FleetRollout")
	return cmd
}

func printRevisions(w io.Writer, now time.Time, revs ops.ClusterRevisions) error {
	fmt.Fprintf(w, "fleetcluster %s/%s\n", revs.Cluster.Namespace, revs.Cluster.Name)
	if len(revs.Rollouts) == 0 {
		fmt.Fprintln(w, "no rollout targets this cluster")
		return nil
	}
	t := &table{header: []string{"ROLLOUT", "WAVE", "DESIRED", "DIGEST", "LIVE", "READY", "SINCE", "AGREE"}}
	var notes []string
	for _, r := range revs.Rollouts {
		desired, digest, live, ready, when := "", "", "", "", "-"
		if d := r.Desired; d != nil {
			desired, digest = short(d.Revision), short(d.Digest)
			if d.Role != "" {
				desired += " (" + d.Role + ")"
			}
		}
		if l := r.Live; l != nil {
			live, ready, when = short(l.LastAppliedRevision), l.Ready.Status, age(now, l.Since)
		}
		agree := "yes"
		if !r.Agree {
			agree = "no"
			notes = append(notes, r.Rollout+": "+r.Message)
		}
		t.add(r.Rollout, r.Wave, desired, digest, live, ready, when, agree)
	}
	if err := t.write(w); err != nil {
		return err
	}
	for _, n := range notes {
		fmt.Fprintln(w, n)
	}
	return nil
}

// short is the 12-character commit or digest of a revision or digest, "" for none.
func short(revision string) string {
	if revision == "" {
		return ""
	}
	return v1alpha1.ShortRevision(revision)
}

// printAnswer prints what a read of ops answered: as a table by printTable, else as -o asks; no
// makes the exit code 1 (the answer is no: they disagree, the gate failed, it would be refused).
func printAnswer(cmd *cobra.Command, output string, v any, printTable func(io.Writer) error, no bool) error {
	var err error
	if output != outputTable {
		err = writeData(cmd.OutOrStdout(), output, v)
	} else {
		err = printTable(cmd.OutOrStdout())
	}
	if err != nil {
		return err
	}
	if no {
		return &exitError{code: exitNo}
	}
	return nil
}
