package sandbox

import (
	"fmt"
	"io"
	"strings"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// watcher prints one line per change it sees in a rollout's status: a new candidate, the phase, a
// wave's phase, a gate's decision, the reason the rollout is not Ready. Each line starts with the
// time since the watcher was reset and the candidate's release name.
type watcher struct {
	out   io.Writer
	label func(revision string) string
	now   func() time.Time
	start time.Time

	candidate string
	phase     string
	ready     string
	waves     map[string]string // wave → phase
	gates     map[string]string // wave/gate → result and receipt
}

func newWatcher(out io.Writer, label func(string) string) *watcher {
	w := &watcher{out: out, label: label, now: time.Now, waves: map[string]string{}, gates: map[string]string{}}
	w.start = w.now()
	return w
}

// reset starts the clock of the lines again, for the next step of a story, and returns the time.
func (w *watcher) reset() time.Time {
	w.start = w.now()
	return w.start
}

// readyReasons are the reasons of a Ready=False condition worth a line: they say why the rollout
// waits, or that it needs someone.
var readyReasons = map[string]bool{
	v1alpha1.GateFailedReason:          true,
	v1alpha1.InvalidPolicyReason:       true,
	v1alpha1.PolicyNotReadyReason:      true,
	v1alpha1.SourceNotFoundReason:      true,
	v1alpha1.ArtifactUnavailableReason: true,
	v1alpha1.NoClustersSelectedReason:  true,
	v1alpha1.InvalidSpecReason:         true,
	v1alpha1.AwaitingApprovalReason:    true,
	v1alpha1.HeldReason:                true,
	v1alpha1.InvalidWaveReason:         true,
}

// observe prints what changed since the last observation.
func (w *watcher) observe(fr *v1alpha1.FleetRollout) {
	st := fr.Status
	cand := candidateOf(fr)
	if cand != w.candidate {
		w.candidate = cand
		w.waves, w.gates, w.phase = map[string]string{}, map[string]string{}, ""
		if cand != "" {
			kg := "none (a first rollout)"
			if k := knownGoodOf(fr); k != "" {
				kg = w.label(k)
			}
			name := w.label(cand)
			if short := shortRevision(cand); short != name {
				name += " (" + short + ")"
			}
			w.line("candidate %s, known-good %s", name, kg)
		}
	}
	if st.Phase != w.phase {
		w.phase = st.Phase
		if st.Phase != "" {
			msg := "rollout " + st.Phase
			if st.Phase == v1alpha1.PhaseRolledBack {
				msg += fmt.Sprintf(": every cluster is back at %s, and %s is rejected", w.label(knownGoodOf(fr)), w.label(cand))
			}
			if st.Phase == v1alpha1.PhaseCompleted {
				msg += fmt.Sprintf(": %s runs on every cluster and is the known-good", w.label(cand))
			}
			w.line("%s", msg)
		}
	}
	for _, wave := range st.Waves {
		for _, g := range wave.Gates {
			key, val := wave.Name+"/"+g.Gate, g.Result+" "+g.Receipt
			if w.gates[key] != val {
				w.gates[key] = val
				w.line("wave %-7s %-17s %-5s receipt %s", wave.Name, g.Gate, g.Result, g.Receipt)
			}
		}
		if wave.Phase != w.waves[wave.Name] {
			w.waves[wave.Name] = wave.Phase
			w.line("wave %-7s %s%s", wave.Name, wave.Phase, waveDetail(wave))
		}
	}
	ready := apimeta.FindStatusCondition(st.Conditions, v1alpha1.ReadyCondition)
	key := ""
	if ready != nil && ready.Status == metav1.ConditionFalse && readyReasons[ready.Reason] {
		key = ready.Reason
	}
	if key != w.ready {
		w.ready = key
		if key != "" {
			w.line("Ready=False %s: %s", ready.Reason, clip(ready.Message, 240))
		}
	}
}

func waveDetail(w v1alpha1.WaveStatus) string {
	switch w.Phase {
	case v1alpha1.WaveProgressing, v1alpha1.WaveSoaking, v1alpha1.WaveSucceeded, v1alpha1.WaveFailed, v1alpha1.WaveRolledBack:
		return fmt.Sprintf(" on %s (%d updated, %d healthy)", strings.Join(w.Clusters, ", "), w.Updated, w.Healthy)
	case v1alpha1.WaveSkipped:
		return ": " + w.Message
	}
	return ""
}

func (w *watcher) line(format string, args ...any) {
	el := w.now().Sub(w.start).Round(time.Second)
	rel := ""
	if w.candidate != "" {
		rel = w.label(w.candidate)
	}
	fmt.Fprintf(w.out, "    %2d:%02d  %-4s %s\n", int(el.Minutes()), int(el.Seconds())%60, rel, fmt.Sprintf(format, args...))
}

// describeRollout is one line about a rollout, for errors.
func describeRollout(fr *v1alpha1.FleetRollout, label func(string) string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "FleetRollout %s/%s phase=%s", fr.Namespace, fr.Name, fr.Status.Phase)
	if c := candidateOf(fr); c != "" {
		fmt.Fprintf(&b, " candidate=%s", label(c))
	}
	if fr.Status.CurrentWave != "" {
		fmt.Fprintf(&b, " wave=%s", fr.Status.CurrentWave)
	}
	for _, w := range fr.Status.Waves {
		fmt.Fprintf(&b, " [%s %s %d/%d/%d]", w.Name, w.Phase, len(w.Clusters), w.Updated, w.Healthy)
	}
	if c := apimeta.FindStatusCondition(fr.Status.Conditions, v1alpha1.ReadyCondition); c != nil {
		fmt.Fprintf(&b, "; Ready=%s", conditionText(c))
	}
	return b.String()
}

// conditionText is "Status (Reason): message" of a condition, or "no condition".
func conditionText(c *metav1.Condition) string {
	if c == nil {
		return "no condition yet"
	}
	return fmt.Sprintf("%s (%s): %s", c.Status, c.Reason, clip(c.Message, 400))
}

func clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
