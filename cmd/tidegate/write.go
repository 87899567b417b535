package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	"github.com/spf13/cobra"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/internal/ops"
)

// cliError turns an *ops.Error into the command line's exit code: 1 for a wait that timed out
// (the answer is no: not settled in time), 2 for everything else (the question could not be asked).
func cliError(err error) error {
	var oe *ops.Error
	if !errors.As(err, &oe) {
		return err
	}
	code := exitUsage
	if oe.Code == ops.CodeTimeout {
		code = exitNo
	}
	return &exitError{code: code, err: err}
}

// writeOptions are the flags every write has: -o, --wait and --timeout.
type writeOptions struct {
	output  string
	wait    bool
	timeout time.Duration
}

func (o *writeOptions) addFlags(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&o.output, "output", "o", "", "output format: json prints the change and the job handle (and, with --wait, where the job ended)")
	cmd.Flags().BoolVar(&o.wait, "wait", false, "wait until the controller has acted on the change and the rollout settled (or paused for an approval), printing a line as it moves")
	cmd.Flags().DurationVar(&o.timeout, "timeout", 5*time.Minute, "how long --wait waits")
}

// writeResult is what a write prints with -o json.
type writeResult struct {
	Change ops.Change     `json:"change"`
	Job    ops.Job        `json:"job"`
	Status *ops.JobStatus `json:"status,omitempty"`
	// Error says why --wait ended before the job was done (a Timeout).
	Error *ops.Error `json:"error,omitempty"`
}

// applyWrite applies m to rollout args[0], prints what it changed (stderr: its notes and warning),
// and with --wait follows the job until it is done.
func (o *writeOptions) applyWrite(cmd *cobra.Command, k *kubeOptions, name string, m ops.Mutation) error {
	if o.output != "" && o.output != "json" {
		return usageError("unknown output format %q: use json", o.output)
	}
	c, ns, err := k.client()
	if err != nil {
		return err
	}
	_, ch, job, err := ops.Apply(cmd.Context(), c, ns, name, m)
	if err != nil {
		return cliError(err)
	}
	out, errOut := cmd.OutOrStdout(), cmd.ErrOrStderr()
	for _, n := range ch.Notes {
		fmt.Fprintln(errOut, n)
	}
	if o.output == "" {
		fmt.Fprintf(out, "%s: %s\n", job.Rollout, ch.Message)
	}
	if ch.Warning != "" {
		fmt.Fprintln(errOut, ch.Warning)
	}
	res := writeResult{Change: ch, Job: job}
	if o.wait {
		ctx, cancel := context.WithTimeout(cmd.Context(), o.timeout)
		defer cancel()
		st, err := ops.Follow(ctx, c, job, k.env.pollInterval, func(s ops.JobStatus) {
			if o.output == "" {
				fmt.Fprintln(errOut, progressLine(s))
			}
		})
		res.Status = &st
		if err != nil {
			if o.output != "json" {
				return cliError(err)
			}
			res.Error = ops.AsError(err, job.Rollout)
			_ = writeJSON(out, res)
			err = cliError(err)
			var ee *exitError
			if errors.As(err, &ee) {
				ee.inOutput = true
			}
			return err
		}
	}
	if o.output == "json" {
		return writeJSON(out, res)
	}
	return nil
}

// progressLine is one line of a job's progress, as --wait prints it.
func progressLine(s ops.JobStatus) string {
	line := fmt.Sprintf("◎ %s: %s", s.Job.Rollout, s.State)
	if s.Phase != "" {
		line += ", phase " + s.Phase
	}
	if w := s.WaitingFor; w != nil {
		line += ", waiting for " + w.Reason
		if w.Wave != "" {
			line += " (wave " + w.Wave + ")"
		}
	}
	if s.Ready.Message != "" {
		line += ": " + ops.OneLine(s.Ready.Message)
	}
	return line
}

// writeCommand is a command that changes one rollout with the mutation m builds.
func writeCommand(k *kubeOptions, use, short, long, example string, m func() (ops.Mutation, error)) *cobra.Command {
	var o writeOptions
	cmd := &cobra.Command{
		Use:     use,
		Short:   short,
		Long:    long,
		Example: example,
		Args:    exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			mut, err := m()
			if err != nil {
				return err
			}
			return o.applyWrite(cmd, k, args[0], mut)
		},
	}
	o.addFlags(cmd)
	return cmd
}

func newHoldCommand(k *kubeOptions) *cobra.Command {
	var reason string
	cmd := writeCommand(k, "hold ROLLOUT --reason REASON", "Hold a rollout where it is (spec.hold)",
		`hold sets spec.hold with a reason: no new wave starts and no pre-wave gate is decided; what is
applied stays applied, a wave already started completes and is judged, a rollback in progress
continues. tidegate resume clears it.`,
		`  tidegate hold web --reason "change freeze until Monday"`,
		func() (ops.Mutation, error) {
			if strings.TrimSpace(reason) == "" {
				return nil, usageError("--reason is required: it tells whoever resumes the rollout why it was held")
			}
			return ops.Hold(reason), nil
		})
	cmd.Flags().StringVar(&reason, "reason", "", "why the rollout is held (required)")
	return cmd
}

func newResumeCommand(k *kubeOptions) *cobra.Command {
	return writeCommand(k, "resume ROLLOUT", "Resume a held or suspended rollout (clears spec.hold and spec.suspend)",
		`resume clears spec.hold and spec.suspend, whichever are set, and says which it cleared. A rollout
in phase Held without spec.hold is not resumed this way: after a failed wave, roll out a new
revision, retry (tidegate retry) or roll back (tidegate rollback); before a wave that could not be
judged (Ready reason InvalidWave), change what Ready's message names in the spec or the fleet; with
every wave passed but no cluster Ready at the candidate, it completes once one is.`,
		`  tidegate resume web`,
		func() (ops.Mutation, error) { return ops.Resume(), nil })
}

func newSuspendCommand(k *kubeOptions) *cobra.Command {
	return writeCommand(k, "suspend ROLLOUT", "Suspend a rollout: tidegate writes nothing for it (spec.suspend)",
		`suspend sets spec.suspend: tidegate writes nothing at all for the rollout, not even its status;
kustomize-controller keeps the clusters at what their Kustomizations name. tidegate resume clears it.`,
		`  tidegate suspend web`,
		func() (ops.Mutation, error) { return ops.Suspend(), nil })
}

func newApproveCommand(k *kubeOptions) *cobra.Command {
	var (
		a v1alpha1.Approval
		o writeOptions
	)
	cmd := &cobra.Command{
		Use:   "approve ROLLOUT --revision REVISION",
		Short: "Approve a revision for a wave, or its irreversible changes (spec.approvals)",
		Long: `approve appends an entry to spec.approvals. --revision is required and must be the revision
exactly as status.candidate.revision shows it (tidegate status ROLLOUT), so that nothing is approved
by accident; the first 7 or more characters of the candidate's commit or digest are expanded to it.
--wave approves one wave (without it, every wave of the revision); --irreversible approves the
changes the rollbackSafe gate flagged as irreversible. An identical entry is not added twice.`,
		Example: `  tidegate approve web --revision main@sha1:4f2c0d9e81aa... --wave everyone --by alice
  tidegate approve web --revision 4f2c0d9e81aa --irreversible --by alice --reason "migration reviewed"`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if a.Revision == "" {
				c, ns, err := k.client()
				if err != nil {
					return err
				}
				fr, err := getRollout(cmd.Context(), c, ns, args[0])
				if err != nil {
					return err
				}
				hint := "fleetrollout " + ns + "/" + args[0] + " has no candidate yet"
				if fr.Status.Candidate != nil {
					hint = "the candidate of fleetrollout " + ns + "/" + args[0] + " is " + fr.Status.Candidate.Revision
				}
				return usageError("--revision is required, as status.candidate.revision shows it (%s)", hint)
			}
			c, _, err := k.client()
			if err != nil {
				return err
			}
			return o.applyWrite(cmd, k, args[0], ops.ApproveAs(cmd.Context(), c, a))
		},
	}
	cmd.Flags().StringVar(&a.Revision, "revision", "", "revision to approve, as status.candidate.revision shows it (required)")
	cmd.Flags().StringVar(&a.Wave, "wave", "", "wave to approve; every wave of the revision when empty")
	cmd.Flags().BoolVar(&a.Irreversible, "irreversible", false, "approve the changes the rollbackSafe gate flagged as irreversible")
	cmd.Flags().StringVar(&a.By, "by", "", "who approves (recorded in the rollout and on the rollbackSafe receipt, beside the user the API server authenticates this command as)")
	cmd.Flags().StringVar(&a.Reason, "reason", "", "why")
	o.addFlags(cmd)
	return cmd
}

func newRollbackCommand(k *kubeOptions) *cobra.Command {
	return writeCommand(k, "rollback ROLLOUT", "Roll back to the known-good revision, or a completed rollout to the previous one (spec.rollback.request)",
		`rollback sets spec.rollback.request to a new value (the current time).

While a candidate is in flight (Progressing or Held), every Kustomization of the rollout goes back
at once to the known-good revision's pinned source, and the candidate is rejected until tidegate
retry; without a known-good revision the controller refuses it (a RequestRefused event).

Once the rollout is Completed, the previous known-good of status.history (tidegate status shows
it) is rolled out again as the candidate, through the gates wave by wave, from the pinned source
kept for it; the revision gone back from is rejected until tidegate retry, so the source, which
still has it, does not bring it back. With no earlier revision in status.history the controller
refuses it.`,
		`  tidegate rollback web
  tidegate rollback web --wait --timeout 30m`,
		func() (ops.Mutation, error) { return ops.Rollback(k.env.now()), nil })
}

func newRetryCommand(k *kubeOptions) *cobra.Command {
	return writeCommand(k, "retry ROLLOUT", "Let a rejected or failed candidate go again (spec.retry)",
		`retry sets spec.retry to a new value (the current time): a rolled-back candidate (or the revision
a completed rollout was rolled back from) is no longer rejected and is rolled out again from its
first wave; a rollout held by a failed wave restarts the failed waves.`,
		`  tidegate retry web`,
		func() (ops.Mutation, error) { return ops.Retry(k.env.now()), nil })
}

func newReconcileCommand(k *kubeOptions) *cobra.Command {
	var (
		timeout    time.Duration
		withSource bool
	)
	cmd := &cobra.Command{
		Use:   "reconcile ROLLOUT",
		Short: "Ask the controller to reconcile a rollout now, and wait until it has",
		Long: `reconcile sets the annotation reconcile.fluxcd.io/requestedAt to the current time, as flux reconcile
does, and waits until the controller has handled it (status.lastHandledReconcileAt equals it).
With --with-source it first sets the same annotation on the GitRepository or OCIRepository the
rollout tracks and waits until source-controller has handled it, as flux reconcile ks --with-source.

Exit code: 0 when handled and the rollout's Ready is not False; 1 when handled and Ready is False,
or when --timeout passed first (is tidegate-controller running?); 2 when the rollout is suspended
(the controller writes nothing for it) or on an API error.`,
		Example: `  tidegate reconcile web --timeout 5m
  tidegate reconcile web --with-source`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := k.client()
			if err != nil {
				return err
			}
			name := args[0]
			what := fmt.Sprintf("fleetrollout %s/%s", ns, name)
			value := k.env.now().UTC().Format(time.RFC3339Nano)
			out := cmd.OutOrStdout()
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			if withSource {
				fr, err := getRollout(ctx, c, ns, name)
				if err != nil {
					return err
				}
				fmt.Fprintf(out, "%s %s/%s: annotation %s set to %s\n", strings.ToLower(fr.Spec.SourceRef.Kind), ns, fr.Spec.SourceRef.Name, meta.ReconcileRequestAnnotation, value)
				f, err := ops.ReconcileSource(ctx, c, fr, value, k.env.pollInterval)
				if err != nil {
					return cliError(err)
				}
				fmt.Fprintf(out, "%s %s/%s: fetched revision %s, Ready %s\n", strings.ToLower(f.Source.Kind), f.Source.Namespace, f.Source.Name, ops.OrDash(f.Revision), f.Ready)
			}
			fr, ch, _, err := ops.Apply(cmd.Context(), c, ns, name, ops.RequestReconcile(value))
			if err != nil {
				return cliError(err)
			}
			fmt.Fprintf(out, "%s: %s\n", what, ch.Message)
			for fr.Status.LastHandledReconcileAt != value {
				select {
				case <-ctx.Done():
					if cmd.Context().Err() != nil {
						return &exitError{code: exitNo, err: fmt.Errorf("interrupted while waiting for %s to handle the reconcile request", what)}
					}
					return &exitError{code: exitNo, err: fmt.Errorf("timed out after %s waiting for %s to handle the reconcile request %s (status.lastHandledReconcileAt is %q): is tidegate-controller running?",
						timeout, what, value, fr.Status.LastHandledReconcileAt)}
				case <-time.After(k.env.pollInterval):
				}
				next, err := getRollout(ctx, c, ns, name)
				if err != nil {
					if ops.PastDeadline(ctx, err) {
						continue
					}
					return err
				}
				fr = next
			}
			printReconciled(out, what, fr)
			return statusExit(fr)
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 2*time.Minute, "how long to wait for the controller (and, with --with-source, for source-controller first)")
	cmd.Flags().BoolVar(&withSource, "with-source", false, "ask the tracked source to fetch first and wait until it has, as flux reconcile ks --with-source does")
	return cmd
}

func printReconciled(w io.Writer, what string, fr *v1alpha1.FleetRollout) {
	ready, reason, message := readyOf(fr.Status.Conditions)
	fmt.Fprintf(w, "%s: reconciled: phase %s, Ready %s\n", what, ops.OrDash(fr.Status.Phase),
		readyLine(conditionView{Status: ready, Reason: reason, Message: message}))
}
