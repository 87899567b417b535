package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// mutation changes a rollout's spec or annotations in place and says what it changed; changed
// false means there is nothing to write.
type mutation func(fr *v1alpha1.FleetRollout) (msg string, changed bool, err error)

// patchRollout reads the rollout, applies m and writes what changed as a JSON merge patch of the
// rollout (never of its status) with field manager tidegate-cli. The patch carries the
// resourceVersion read, so a concurrent change makes it fail with a conflict; it is then read and
// applied again.
func patchRollout(ctx context.Context, c client.Client, ns, name string, m mutation) (*v1alpha1.FleetRollout, string, error) {
	what := fmt.Sprintf("fleetrollout %s/%s", ns, name)
	var (
		fr  *v1alpha1.FleetRollout
		msg string
	)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var err error
		if fr, err = getRollout(ctx, c, ns, name); err != nil {
			return err
		}
		before := fr.DeepCopy()
		var changed bool
		if msg, changed, err = m(fr); err != nil || !changed {
			return err
		}
		return c.Patch(ctx, fr, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}), client.FieldOwner(cliFieldManager))
	})
	if err != nil {
		var ee *exitError
		if errors.As(err, &ee) {
			return nil, "", err
		}
		if apierrors.IsInvalid(err) {
			return nil, "", &exitError{code: exitUsage, err: fmt.Errorf("%s: the API server refused the change: %w", what, err)}
		}
		return nil, "", apiError(err, what)
	}
	return fr, fmt.Sprintf("%s: %s", what, msg), nil
}

// writeCommand is a command that changes one rollout.
func writeCommand(k *kubeOptions, use, short, long, example string, m func(cmd *cobra.Command, fr *v1alpha1.FleetRollout) (string, bool, error)) *cobra.Command {
	return &cobra.Command{
		Use:     use,
		Short:   short,
		Long:    long,
		Example: example,
		Args:    exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := k.client()
			if err != nil {
				return err
			}
			_, msg, err := patchRollout(cmd.Context(), c, ns, args[0], func(fr *v1alpha1.FleetRollout) (string, bool, error) {
				return m(cmd, fr)
			})
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), msg)
			return nil
		},
	}
}

func newHoldCommand(k *kubeOptions) *cobra.Command {
	var reason string
	cmd := writeCommand(k, "hold ROLLOUT --reason REASON", "Hold a rollout where it is (spec.hold)",
		`hold sets spec.hold with a reason: no new wave starts and no pre-wave gate is decided; what is
applied stays applied, a wave already started completes and is judged, a rollback in progress
continues. tidegate resume clears it.`,
		`  tidegate hold web --reason "change freeze until Monday"`,
		func(cmd *cobra.Command, fr *v1alpha1.FleetRollout) (string, bool, error) {
			switch {
			case fr.Spec.Hold != nil && fr.Spec.Hold.Reason == reason:
				return fmt.Sprintf("spec.hold already set (reason: %s); nothing changed", reason), false, nil
			case fr.Spec.Hold != nil:
				old := fr.Spec.Hold.Reason
				fr.Spec.Hold.Reason = reason
				return fmt.Sprintf("spec.hold set (reason: %s; was: %s)", reason, old), true, nil
			}
			fr.Spec.Hold = &v1alpha1.Hold{Reason: reason}
			return fmt.Sprintf("spec.hold set (reason: %s)", reason), true, nil
		})
	pre := cmd.RunE
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if strings.TrimSpace(reason) == "" {
			return usageError("--reason is required: it tells whoever resumes the rollout why it was held")
		}
		return pre(cmd, args)
	}
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
		func(cmd *cobra.Command, fr *v1alpha1.FleetRollout) (string, bool, error) {
			var cleared []string
			if fr.Spec.Hold != nil {
				cleared = append(cleared, fmt.Sprintf("spec.hold cleared (was: %s)", fr.Spec.Hold.Reason))
				fr.Spec.Hold = nil
			}
			if fr.Spec.Suspend {
				cleared = append(cleared, "spec.suspend cleared")
				fr.Spec.Suspend = false
			}
			if len(cleared) == 0 {
				msg := "neither spec.hold nor spec.suspend is set; nothing changed"
				msg += heldWithoutHold(fr)
				return msg, false, nil
			}
			return strings.Join(cleared, ", "), true, nil
		})
}

func newSuspendCommand(k *kubeOptions) *cobra.Command {
	return writeCommand(k, "suspend ROLLOUT", "Suspend a rollout: tidegate writes nothing for it (spec.suspend)",
		`suspend sets spec.suspend: tidegate writes nothing at all for the rollout, not even its status;
kustomize-controller keeps the clusters at what their Kustomizations name. tidegate resume clears it.`,
		`  tidegate suspend web`,
		func(cmd *cobra.Command, fr *v1alpha1.FleetRollout) (string, bool, error) {
			if fr.Spec.Suspend {
				return "spec.suspend already true; nothing changed", false, nil
			}
			fr.Spec.Suspend = true
			return "spec.suspend set to true", true, nil
		})
}

func newApproveCommand(k *kubeOptions) *cobra.Command {
	var a v1alpha1.Approval
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
			c, ns, err := k.client()
			if err != nil {
				return err
			}
			if a.Revision == "" {
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
			var notes []string
			_, msg, err := patchRollout(cmd.Context(), c, ns, args[0], func(fr *v1alpha1.FleetRollout) (string, bool, error) {
				notes = nil
				entry := a
				if cand := fr.Status.Candidate; cand != nil && entry.Revision != cand.Revision {
					if expandsTo(entry.Revision, cand.Revision) {
						notes = append(notes, fmt.Sprintf("%s expanded to the candidate %s", entry.Revision, cand.Revision))
						entry.Revision = cand.Revision
					} else {
						notes = append(notes, fmt.Sprintf("warning: %s is not the candidate (%s): the approval applies only once it is", entry.Revision, cand.Revision))
					}
				}
				if entry.Wave != "" {
					waves := []string{"all"}
					if len(fr.Spec.Waves) > 0 {
						waves = nil
						for _, w := range fr.Spec.Waves {
							waves = append(waves, w.Name)
						}
					}
					if !slices.Contains(waves, entry.Wave) {
						return "", false, usageError("fleetrollout %s/%s has no wave %q; its waves are %s", ns, args[0], entry.Wave, strings.Join(waves, ", "))
					}
				}
				if slices.Contains(fr.Spec.Approvals, entry) {
					return "spec.approvals already has " + approvalString(entry) + "; nothing changed", false, nil
				}
				fr.Spec.Approvals = append(fr.Spec.Approvals, entry)
				return "spec.approvals += " + approvalString(entry), true, nil
			})
			if err != nil {
				return err
			}
			for _, n := range notes {
				fmt.Fprintln(cmd.ErrOrStderr(), n)
			}
			fmt.Fprintln(cmd.OutOrStdout(), msg)
			return nil
		},
	}
	cmd.Flags().StringVar(&a.Revision, "revision", "", "revision to approve, as status.candidate.revision shows it (required)")
	cmd.Flags().StringVar(&a.Wave, "wave", "", "wave to approve; every wave of the revision when empty")
	cmd.Flags().BoolVar(&a.Irreversible, "irreversible", false, "approve the changes the rollbackSafe gate flagged as irreversible")
	cmd.Flags().StringVar(&a.By, "by", "", "who approves (recorded in the rollout and on the rollbackSafe receipt)")
	cmd.Flags().StringVar(&a.Reason, "reason", "", "why")
	return cmd
}

// expandsTo tells whether short is the first 7 or more characters of the commit or digest of revision.
func expandsTo(short, revision string) bool {
	hex := revision[strings.LastIndex(revision, ":")+1:]
	return len(short) >= 7 && strings.HasPrefix(hex, short)
}

func approvalString(a v1alpha1.Approval) string {
	parts := []string{"revision: " + a.Revision}
	if a.Wave != "" {
		parts = append(parts, "wave: "+a.Wave)
	}
	if a.Irreversible {
		parts = append(parts, "irreversible: true")
	}
	if a.By != "" {
		parts = append(parts, "by: "+a.By)
	}
	if a.Reason != "" {
		parts = append(parts, "reason: "+strconv.Quote(a.Reason))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// requestValue is a new value for a request field: the time, unlike the current value and the
// last one the controller handled (or it would not act).
func requestValue(now time.Time, taken ...string) string {
	base := now.UTC().Format(time.RFC3339)
	v := base
	for i := 0; slices.Contains(taken, v); i++ {
		if i == 0 {
			v = now.UTC().Format(time.RFC3339Nano)
		} else {
			v = fmt.Sprintf("%s-%d", base, i)
		}
	}
	return v
}

func newRollbackCommand(k *kubeOptions) *cobra.Command {
	var warning string
	cmd := writeCommand(k, "rollback ROLLOUT", "Roll the candidate back to the known-good revision (spec.rollback.request)",
		`rollback sets spec.rollback.request to a new value (the current time): every Kustomization of the
rollout goes back to the known-good revision's pinned source, and the candidate is rejected until
tidegate retry. It acts while the rollout is Progressing or Held; without a known-good revision the
controller refuses it (a RequestRefused event).`,
		`  tidegate rollback web`,
		func(cmd *cobra.Command, fr *v1alpha1.FleetRollout) (string, bool, error) {
			warning = ""
			v := requestValue(k.env.now(), fr.Spec.Rollback.Request, fr.Status.LastHandledRollbackRequest)
			fr.Spec.Rollback.Request = v
			msg := "spec.rollback.request set to " + v
			switch {
			case fr.Status.LastKnownGood == nil:
				warning = "warning: there is no known-good revision to go back to; the controller will refuse the request"
			case fr.Status.Phase != v1alpha1.PhaseProgressing && fr.Status.Phase != v1alpha1.PhaseHeld:
				warning = fmt.Sprintf("warning: the rollout is %s; a rollback request acts only while it is Progressing or Held", orDash(fr.Status.Phase))
			default:
				msg += fmt.Sprintf(" (back from %s to %s)", revisionOf(fr.Status.Candidate), fr.Status.LastKnownGood.Revision)
			}
			return msg, true, nil
		})
	withWarning(cmd, &warning)
	return cmd
}

func newRetryCommand(k *kubeOptions) *cobra.Command {
	var warning string
	cmd := writeCommand(k, "retry ROLLOUT", "Let a rejected or failed candidate go again (spec.retry)",
		`retry sets spec.retry to a new value (the current time): a rolled-back candidate is no longer
rejected and is rolled out again from its first wave; a rollout held by a failed wave restarts the
failed waves.`,
		`  tidegate retry web`,
		func(cmd *cobra.Command, fr *v1alpha1.FleetRollout) (string, bool, error) {
			warning = ""
			v := requestValue(k.env.now(), fr.Spec.Retry, fr.Status.LastHandledRetry)
			fr.Spec.Retry = v
			if p := fr.Status.Phase; p != v1alpha1.PhaseHeld && p != v1alpha1.PhaseRolledBack {
				warning = fmt.Sprintf("warning: the rollout is %s; a retry acts only on a Held or RolledBack rollout", orDash(p))
			}
			return "spec.retry set to " + v, true, nil
		})
	withWarning(cmd, &warning)
	return cmd
}

// withWarning prints *warning on stderr after a successful write.
func withWarning(cmd *cobra.Command, warning *string) {
	run := cmd.RunE
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := run(cmd, args); err != nil {
			return err
		}
		if *warning != "" {
			fmt.Fprintln(cmd.ErrOrStderr(), *warning)
		}
		return nil
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newReconcileCommand(k *kubeOptions) *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "reconcile ROLLOUT",
		Short: "Ask the controller to reconcile a rollout now, and wait until it has",
		Long: `reconcile sets the annotation reconcile.fluxcd.io/requestedAt to the current time, as flux reconcile
does, and waits until the controller has handled it (status.lastHandledReconcileAt equals it).

Exit code: 0 when handled and the rollout's Ready is not False; 1 when handled and Ready is False,
or when --timeout passed first (is tidegate-controller running?); 2 when the rollout is suspended
(the controller writes nothing for it) or on an API error.`,
		Example: `  tidegate reconcile web --timeout 5m`,
		Args:    exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := k.client()
			if err != nil {
				return err
			}
			name := args[0]
			what := fmt.Sprintf("fleetrollout %s/%s", ns, name)
			value := k.env.now().UTC().Format(time.RFC3339Nano)
			fr, msg, err := patchRollout(cmd.Context(), c, ns, name, func(fr *v1alpha1.FleetRollout) (string, bool, error) {
				if fr.Spec.Suspend {
					return "", false, usageError("%s is suspended: the controller writes nothing for it; run tidegate resume %s first", what, name)
				}
				if fr.Annotations == nil {
					fr.Annotations = map[string]string{}
				}
				fr.Annotations[meta.ReconcileRequestAnnotation] = value
				return "annotation " + meta.ReconcileRequestAnnotation + " set to " + value, true, nil
			})
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintln(out, msg)
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
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
					if ctx.Err() != nil {
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
	cmd.Flags().DurationVar(&timeout, "timeout", 2*time.Minute, "how long to wait for the controller")
	return cmd
}

func printReconciled(w io.Writer, what string, fr *v1alpha1.FleetRollout) {
	ready, reason, message := readyOf(fr.Status.Conditions)
	fmt.Fprintf(w, "%s: reconciled: phase %s, Ready %s\n", what, orDash(fr.Status.Phase),
		readyLine(conditionView{Status: ready, Reason: reason, Message: message}))
}

// heldWithoutHold says, for resume, why a rollout is Held when spec.hold is not set ("" when it
// is not Held): Held's condition reason tells a failed wave from a wave that could not be judged.
func heldWithoutHold(fr *v1alpha1.FleetRollout) string {
	if fr.Status.Phase != v1alpha1.PhaseHeld {
		return ""
	}
	c := condition(fr.Status.Conditions, v1alpha1.HeldCondition)
	switch {
	case c == nil || c.Reason == v1alpha1.GateFailedReason:
		return " (the rollout is Held because a wave failed: see tidegate retry and tidegate rollback)"
	case c.Reason == v1alpha1.InvalidWaveReason:
		return " (the rollout is Held because a wave could not be judged; change what this names: " + oneLine(c.Message) + ")"
	}
	return " (the rollout is Held: " + oneLine(c.Message) + ")"
}
