package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/internal/ops"
)

// statusView is what `status` shows of a rollout; -o json and -o yaml print it as it is.
type statusView struct {
	Namespace         string                      `json:"namespace"`
	Name              string                      `json:"name"`
	Phase             string                      `json:"phase"`
	CurrentWave       string                      `json:"currentWave"`
	Candidate         *v1alpha1.RevisionStatus    `json:"candidate,omitempty"`
	LastKnownGood     *v1alpha1.RevisionStatus    `json:"lastKnownGood,omitempty"`
	Ready             conditionView               `json:"ready"`
	Hold              *v1alpha1.Hold              `json:"hold,omitempty"`
	Suspended         bool                        `json:"suspended"`
	Skipped           []v1alpha1.SkippedCluster   `json:"skipped,omitempty"`
	SkippedCount      int32                       `json:"skippedCount,omitempty"`
	LateJoiners       []string                    `json:"lateJoiners,omitempty"`
	Rejected          []v1alpha1.RejectedRevision `json:"rejected,omitempty"`
	Rollback          *v1alpha1.RollbackStatus    `json:"rollback,omitempty"`
	Revert            *v1alpha1.RevertStatus      `json:"revert,omitempty"`
	History           []v1alpha1.HistoryEntry     `json:"history,omitempty"`
	Lagging           []v1alpha1.LaggingCluster   `json:"lagging,omitempty"`
	LaggingCount      int32                       `json:"laggingCount,omitempty"`
	WriteFailures     []v1alpha1.WriteFailure     `json:"writeFailures,omitempty"`
	WriteFailureCount int32                       `json:"writeFailureCount,omitempty"`
	Waves             []waveView                  `json:"waves"`
}

type conditionView struct {
	Status             string       `json:"status"`
	Reason             string       `json:"reason,omitempty"`
	Message            string       `json:"message,omitempty"`
	LastTransitionTime *metav1.Time `json:"lastTransitionTime,omitempty"`
}

type waveView struct {
	Name       string                     `json:"name"`
	Phase      string                     `json:"phase"`
	Clusters   []string                   `json:"clusters,omitempty"`
	Updated    int32                      `json:"updated"`
	Healthy    int32                      `json:"healthy"`
	Missing    []string                   `json:"missing,omitempty"`
	HeldBack   []v1alpha1.HeldBackCluster `json:"heldBack,omitempty"`
	StartedAt  *metav1.Time               `json:"startedAt,omitempty"`
	ReadyAt    *metav1.Time               `json:"readyAt,omitempty"`
	FinishedAt *metav1.Time               `json:"finishedAt,omitempty"`
	Gates      []v1alpha1.GateOutcome     `json:"gates,omitempty"`
	Waiting    *waiting                   `json:"waiting,omitempty"`
	Message    string                     `json:"message,omitempty"`
}

// waiting says what a wave waits for, since when and until when, when status tells.
type waiting struct {
	For   string       `json:"for"`
	Since *metav1.Time `json:"since,omitempty"`
	Until *metav1.Time `json:"until,omitempty"`
}

func newStatusCommand(k *kubeOptions) *cobra.Command {
	var (
		output string
		watch  bool
	)
	cmd := &cobra.Command{
		Use:   "status ROLLOUT",
		Short: "Show a rollout wave by wave, with its gates and what it waits for",
		Long: `status shows a FleetRollout: its phase, candidate and known-good revisions and its Ready
condition, then one row per wave: WAVE, PHASE, MEMBERS (how many clusters the wave holds),
UPDATED (members switched to the candidate), HEALTHY (members Ready at the candidate), one column
per gate (deploySafe, rollbackSafe, rollbackSucceeds, noDisruption) with the latest decision and its
receipt, and WAITING: what the wave waits for, since when and until when, as the controller recorded
it in status.waitingFor (an approval, a gate that blocks it, members becoming Ready, the soak of the
wave or of the policy, the rehearsal, a hold), or its turn after an earlier wave.

With --watch it shows the rollout again each time it changes, until it is Completed or RolledBack,
or until interrupted.

Exit code: 1 when the rollout's Ready condition is False (a wave is blocked by a gate, the rollout
is held or rolled back, the policy is invalid), else 0; with --watch, that of the last status shown.`,
		Example: `  tidegate status web -n fleet
  tidegate status web --watch
  tidegate status web -o json | jq '.waves[] | {name, waiting}'`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := k.clientFor(output, checkKubeOutput)
			if err != nil {
				return err
			}
			if watch {
				return watchStatus(cmd.Context(), k.env, c, ns, args[0], output, cmd.OutOrStdout())
			}
			fr, err := getRollout(cmd.Context(), c, ns, args[0])
			if err != nil {
				return err
			}
			if err := printStatus(cmd.OutOrStdout(), output, k.env.now(), fr); err != nil {
				return err
			}
			return statusExit(fr)
		},
	}
	addOutputFlag(cmd, &output)
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "show the rollout again on every change until it is Completed or RolledBack")
	return cmd
}

func getRollout(ctx context.Context, c client.Client, ns, name string) (*v1alpha1.FleetRollout, error) {
	fr := &v1alpha1.FleetRollout{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, fr); err != nil {
		return nil, apiError(err, fmt.Sprintf("fleetrollout %s/%s", ns, name))
	}
	return fr, nil
}

// statusExit is exit code 1 when the rollout's Ready condition is False.
func statusExit(fr *v1alpha1.FleetRollout) error {
	if ready, _, _ := readyOf(fr.Status.Conditions); ready == string(metav1.ConditionFalse) {
		return &exitError{code: exitNo}
	}
	return nil
}

// watchStatus prints the rollout each time its resourceVersion changes, until it is Completed or
// RolledBack or ctx ends.
func watchStatus(ctx context.Context, env *cliEnv, c client.Client, ns, name, output string, w io.Writer) error {
	seen := ""
	var last *v1alpha1.FleetRollout
	for {
		fr, err := getRollout(ctx, c, ns, name)
		if err != nil {
			if ctx.Err() != nil && last != nil {
				return statusExit(last)
			}
			return err
		}
		if fr.ResourceVersion != seen {
			var buf bytes.Buffer
			if err := printStatus(&buf, output, env.now(), fr); err != nil {
				return err
			}
			if seen != "" {
				if isTerminal(w) {
					fmt.Fprint(w, "\x1b[H\x1b[2J")
				} else if output == outputTable {
					fmt.Fprintln(w)
				} else if output == outputYAML {
					fmt.Fprintln(w, "---")
				}
			}
			if _, err := w.Write(buf.Bytes()); err != nil {
				return err
			}
			seen, last = fr.ResourceVersion, fr
		}
		if p := fr.Status.Phase; p == v1alpha1.PhaseCompleted || p == v1alpha1.PhaseRolledBack {
			return statusExit(fr)
		}
		select {
		case <-ctx.Done():
			return statusExit(last)
		case <-time.After(env.pollInterval):
		}
	}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func printStatus(w io.Writer, output string, now time.Time, fr *v1alpha1.FleetRollout) error {
	v := toStatusView(fr)
	if output != outputTable {
		return writeData(w, output, v)
	}
	fmt.Fprintf(w, "fleetrollout %s/%s\n", v.Namespace, v.Name)
	phase := v.Phase
	if phase == "" {
		phase = "-"
	}
	if v.CurrentWave != "" {
		phase += " (wave " + v.CurrentWave + ")"
	}
	lines := [][2]string{
		{"phase", phase},
		{"candidate", revisionLine(v.Candidate)},
		{"known-good", revisionLine(v.LastKnownGood)},
		{"ready", readyLine(v.Ready)},
	}
	if v.Hold != nil {
		lines = append(lines, [2]string{"held", v.Hold.Reason})
	}
	if v.Suspended {
		lines = append(lines, [2]string{"suspended", "true: tidegate writes nothing for this rollout"})
	}
	if len(v.Skipped) > 0 {
		var s []string
		for _, sk := range v.Skipped {
			s = append(s, fmt.Sprintf("%s (%s)", sk.Name, sk.Reason))
		}
		lines = append(lines, [2]string{"skipped", listOf(s, v.SkippedCount)})
	}
	if rb := v.Rollback; rb != nil {
		line := fmt.Sprintf("to %s: %d confirmed", rb.To, len(rb.Confirmed))
		if len(rb.Unconfirmed) > 0 {
			line += fmt.Sprintf(", %d unconfirmed: %s", len(rb.Unconfirmed), strings.Join(rb.Unconfirmed, ", "))
		}
		if rb.FinishedAt == nil && rb.Deadline != nil {
			line += ", at most until " + rb.Deadline.UTC().Format(time.RFC3339)
		}
		if c := ops.RollbackChecks(rb); c != "" {
			line += "; " + c
		}
		lines = append(lines, [2]string{"rollback", line})
	}
	if rv := v.Revert; rv != nil {
		lines = append(lines, [2]string{"rolling back", fmt.Sprintf("from %s to the previous known-good %s, through the gates", rv.From, revisionLine(&rv.To))})
	}
	for i, h := range v.History {
		key := "history"
		if i > 0 {
			key = ""
		}
		line := revisionLine(&h.RevisionStatus)
		if h.CompletedAt != nil {
			line += ", completed " + h.CompletedAt.UTC().Format(time.RFC3339)
		}
		lines = append(lines, [2]string{key, line})
	}
	if len(v.Lagging) > 0 {
		var s []string
		for _, l := range v.Lagging {
			s = append(s, fmt.Sprintf("%s (%s)", l.Cluster, l.Reason))
		}
		lines = append(lines, [2]string{"lagging", listOf(s, v.LaggingCount)})
	}
	if len(v.WriteFailures) > 0 {
		var s []string
		for _, f := range v.WriteFailures {
			s = append(s, fmt.Sprintf("%s (%s: %s)", f.Cluster, f.Reason, f.Message))
		}
		lines = append(lines, [2]string{"write failures", listOf(s, v.WriteFailureCount)})
	}
	if len(v.LateJoiners) > 0 {
		lines = append(lines, [2]string{"late joiners", strings.Join(v.LateJoiners, ", ")})
	}
	for _, r := range v.Rejected {
		line := r.Revision
		if !r.At.IsZero() {
			line += " at " + r.At.UTC().Format(time.RFC3339)
		}
		if r.Reason != "" {
			line += ": " + r.Reason
		}
		lines = append(lines, [2]string{"rejected", line})
	}
	width := 0
	for _, l := range lines {
		width = max(width, len(l[0]))
	}
	for _, l := range lines {
		key := l[0] + ":"
		if l[0] == "" {
			key = "" // one more line of the key above
		}
		fmt.Fprintf(w, "%-*s  %s\n", width+1, key, l[1])
	}
	fmt.Fprintln(w)
	if len(v.Waves) == 0 {
		fmt.Fprintln(w, "no waves yet: the rollout has no candidate")
		return nil
	}
	header := []string{"WAVE", "PHASE", "MEMBERS", "UPDATED", "HEALTHY"}
	for _, g := range v1alpha1.Gates {
		header = append(header, strings.ToUpper(g))
	}
	t := &table{header: append(header, "WAITING")}
	for _, wv := range v.Waves {
		cells := []string{wv.Name, wv.Phase, strconv.Itoa(len(wv.Clusters)), strconv.Itoa(int(wv.Updated)), strconv.Itoa(int(wv.Healthy))}
		for _, g := range v1alpha1.Gates {
			cells = append(cells, gateCell(wv.Gates, g))
		}
		cells = append(cells, waitingCell(now, wv.Waiting))
		t.add(cells...)
	}
	if err := t.write(w); err != nil {
		return err
	}
	for _, wv := range v.Waves {
		for _, h := range wv.HeldBack {
			fmt.Fprintf(w, "held back in wave %s: %s (%s)\n", wv.Name, h.Cluster, h.Reason)
		}
		if wv.Phase == v1alpha1.WaveSkipped {
			fmt.Fprintf(w, "wave %s skipped: %s\n", wv.Name, wv.Message)
		}
	}
	return nil
}

func revisionLine(r *v1alpha1.RevisionStatus) string {
	if r == nil || r.Revision == "" {
		return "-"
	}
	s := r.Revision
	if r.Source != "" {
		s += " (pinned source " + r.Source + ")"
	}
	return s
}

func readyLine(c conditionView) string {
	s := c.Status
	if c.Reason != "" {
		s += " (" + c.Reason + ")"
	}
	if c.Message != "" {
		s += ": " + oneLine(c.Message)
	}
	return s
}

func gateCell(gates []v1alpha1.GateOutcome, gate string) string {
	for _, g := range gates {
		if g.Gate == gate {
			if g.Receipt == "" {
				return g.Result
			}
			return g.Result + " " + g.Receipt
		}
	}
	return "-"
}

func waitingCell(now time.Time, w *waiting) string {
	if w == nil {
		return "-"
	}
	s := w.For
	if w.Since != nil {
		s += " since " + since(now, w.Since)
	}
	if w.Until != nil {
		s += ", until " + w.Until.UTC().Format(time.RFC3339)
		if left := w.Until.Sub(now); left >= 0 {
			s += " (" + duration.HumanDuration(left) + " left)"
		} else {
			s += " (" + duration.HumanDuration(-left) + " ago)"
		}
	}
	return s
}

// listOf joins items, and says how many of total are not listed.
func listOf(items []string, total int32) string {
	line := strings.Join(items, ", ")
	if n := int(total) - len(items); n > 0 {
		line += fmt.Sprintf(" and %d more", n)
	}
	return line
}

func toStatusView(fr *v1alpha1.FleetRollout) statusView {
	v := statusView{
		Namespace:         fr.Namespace,
		Name:              fr.Name,
		Phase:             fr.Status.Phase,
		CurrentWave:       fr.Status.CurrentWave,
		Candidate:         fr.Status.Candidate,
		LastKnownGood:     fr.Status.LastKnownGood,
		Ready:             conditionView{Status: string(metav1.ConditionUnknown)},
		Hold:              fr.Spec.Hold,
		Suspended:         fr.Spec.Suspend,
		Skipped:           fr.Status.Skipped,
		SkippedCount:      fr.Status.SkippedCount,
		LateJoiners:       fr.Status.LateJoiners,
		Rejected:          fr.Status.Rejected,
		Rollback:          fr.Status.Rollback,
		Revert:            fr.Status.Revert,
		History:           fr.Status.History,
		Lagging:           fr.Status.Lagging,
		LaggingCount:      fr.Status.LaggingCount,
		WriteFailures:     fr.Status.WriteFailures,
		WriteFailureCount: fr.Status.WriteFailureCount,
		Waves:             []waveView{},
	}
	if c := condition(fr.Status.Conditions, v1alpha1.ReadyCondition); c != nil {
		v.Ready = conditionView{Status: string(c.Status), Reason: c.Reason, Message: c.Message, LastTransitionTime: &c.LastTransitionTime}
	}
	for i, w := range fr.Status.Waves {
		wv := waveView{
			Name: w.Name, Phase: w.Phase, Clusters: w.Clusters, Updated: w.Updated, Healthy: w.Healthy,
			Missing: w.Missing, HeldBack: w.HeldBack, StartedAt: w.StartedAt, ReadyAt: w.ReadyAt, FinishedAt: w.FinishedAt,
			Waiting: waitingFor(fr, i), Message: w.Message,
		}
		for _, g := range v1alpha1.Gates {
			for _, o := range w.Gates {
				if o.Gate == g {
					wv.Gates = append(wv.Gates, o)
				}
			}
		}
		v.Waves = append(v.Waves, wv)
	}
	return v
}

// waitingFor says what wave i waits for: status.waitingFor, as the controller decided it, for the
// wave it names (every started wave while rolling back); a later pending wave waits for its turn.
func waitingFor(fr *v1alpha1.FleetRollout, i int) *waiting {
	st := &fr.Status
	w := &st.Waves[i]
	if wf := st.WaitingFor; wf != nil {
		rollingBack := wf.Wave == "" && st.Phase == v1alpha1.PhaseRollingBack && w.StartedAt != nil &&
			w.Phase != v1alpha1.WavePending && w.Phase != v1alpha1.WaveAwaiting
		if wf.Wave == w.Name || rollingBack {
			return &waiting{For: wf.Message, Since: wf.Since, Until: wf.Until}
		}
	}
	if st.Phase == v1alpha1.PhaseCompleted || st.Phase == v1alpha1.PhaseRolledBack || st.Phase == v1alpha1.PhaseRollingBack {
		return nil
	}
	if i > 0 && (w.Phase == v1alpha1.WavePending || w.Phase == v1alpha1.WaveAwaiting) && st.Waves[i-1].Phase != v1alpha1.WaveSucceeded {
		return &waiting{For: "its turn, after wave " + st.Waves[i-1].Name}
	}
	return nil
}
