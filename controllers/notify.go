package controllers

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/engine"
	"github.com/tidegate/tidegate/internal/ops"
	"github.com/tidegate/tidegate/verdict"
)

// The reasons of the events that say where a rollout went: one each time it gets there, for
// notification-controller's Alerts (config/notifications) as much as for kubectl.
const (
	CompletedEventReason     = "Completed"
	RollingBackEventReason   = "RollingBack"
	RolledBackEventReason    = "RolledBack"
	HeldEventReason          = "Held"
	GateBlockedEventReason   = "GateBlocked"
	InconclusiveEventReason  = "Inconclusive"
	SourceRefusedEventReason = "SourceRefused"
	WaveSwitchedEventReason  = "WaveSwitched"
)

// The metadata keys of tidegate's events. notification-controller passes on only the keys prefixed
// with the involved object's API group (tidegate.dev/), without the prefix, as Flux's own
// controllers prefix theirs with their group: a Provider sees revision, wave, receipt, gate and
// clusters.
var (
	metaRevision = v1alpha1.GroupVersion.Group + "/revision"
	metaWave     = v1alpha1.GroupVersion.Group + "/wave"
	metaReceipt  = v1alpha1.GroupVersion.Group + "/receipt"
	metaGate     = v1alpha1.GroupVersion.Group + "/gate"
	metaClusters = v1alpha1.GroupVersion.Group + "/clusters"
)

// maxEventClusters bounds the clusters a WaveSwitched event names: a wave of a thousand clusters
// is one event, not a thousand, and its metadata stays small enough for any chat message.
const maxEventClusters = 50

// phaseEvent is an event about where a rollout went.
type phaseEvent struct {
	eventType, reason, message string
	metadata                   map[string]string
}

// phaseEvents are the events of the transitions from the status as a pass read it to the status it
// wrote: the rollout completed, started or finished rolling back, held, or started to wait on a
// blocking gate, an inconclusive one or a refused source. They are derived from the two statuses,
// not from what the pass did, so each transition gives its events once: a pass that changes nothing
// (a retry, a resync, a conflict whose next pass writes the same status) gives none. refused is the
// refusal the pass read from the tracked source (engine.World.TrackedRefused).
func phaseEvents(read, written *v1alpha1.FleetRolloutStatus, refused string) []phaseEvent {
	var out []phaseEvent
	revision := revisionOf(written)
	if read.Phase != written.Phase {
		if e, ok := phaseChanged(written, revision); ok {
			out = append(out, e)
		}
	}
	if w := written.WaitingFor; w != nil && !sameWait(read, written) {
		switch {
		case w.Reason == v1alpha1.WaitingForGateBlocked:
			out = append(out, waitEvent(written, corev1.EventTypeWarning, GateBlockedEventReason, revision, v1alpha1.ResultFail))
		case w.Reason == v1alpha1.WaitingForInconclusive:
			out = append(out, waitEvent(written, corev1.EventTypeNormal, InconclusiveEventReason, revision, v1alpha1.ResultInconclusive))
		case w.Reason == v1alpha1.WaitingForSource && refused != "" && w.Message == refused:
			out = append(out, phaseEvent{corev1.EventTypeWarning, SourceRefusedEventReason,
				fmt.Sprintf("%s: the next revision waits for one it can verify", refused),
				map[string]string{metaRevision: revision}})
		}
	}
	return out
}

// revisionOf is the revision a status is about: the candidate's, else the known-good's.
func revisionOf(st *v1alpha1.FleetRolloutStatus) string {
	switch {
	case st.Candidate != nil:
		return st.Candidate.Revision
	case st.LastKnownGood != nil:
		return st.LastKnownGood.Revision
	}
	return ""
}

// phaseChanged is the event of a rollout that reached its phase, when the phase has one.
func phaseChanged(st *v1alpha1.FleetRolloutStatus, revision string) (phaseEvent, bool) {
	knownGood := ""
	if st.LastKnownGood != nil {
		knownGood = st.LastKnownGood.Revision
	}
	// Completed names the last decision the candidate passed; the others the failure that led there.
	wave, gate := decidingGate(st, st.Phase != v1alpha1.PhaseCompleted)
	if w := st.WaitingFor; wave == "" && w != nil {
		wave = w.Wave
	}
	e := phaseEvent{metadata: map[string]string{metaRevision: revision}}
	because := ""
	if wave != "" {
		e.metadata[metaWave] = wave
	}
	if gate != nil {
		e.metadata[metaGate], e.metadata[metaReceipt] = gate.Gate, gate.Receipt
		because = fmt.Sprintf(": wave %s, %s %s (receipt %s)", wave, gate.Gate, gate.Result, gate.Receipt)
	}
	switch st.Phase {
	case v1alpha1.PhaseCompleted:
		e.eventType, e.reason = corev1.EventTypeNormal, CompletedEventReason
		e.message = fmt.Sprintf("%s rolled out to every wave and is the known-good%s", revision, because)
	case v1alpha1.PhaseRollingBack:
		e.eventType, e.reason = corev1.EventTypeWarning, RollingBackEventReason
		e.message = fmt.Sprintf("rolling %s back to %s%s", revision, knownGood, because)
	case v1alpha1.PhaseRolledBack:
		e.eventType, e.reason = corev1.EventTypeNormal, RolledBackEventReason
		e.message = fmt.Sprintf("rolled %s back to %s%s", revision, knownGood, because)
		if rb := st.Rollback; rb != nil && len(rb.Unconfirmed) > 0 {
			// The rollback's deadline passed with clusters not seen Ready at the known-good.
			e.eventType = corev1.EventTypeWarning
			e.message += fmt.Sprintf("; not confirmed Ready at %s: %s", knownGood, engine.FirstNames(rb.Unconfirmed, 10))
		}
		if c := ops.RollbackChecks(st.Rollback); c != "" {
			e.message += "; " + c
			if len(st.Rollback.Unchecked) > 0 || slices.ContainsFunc(st.Rollback.Checks, func(r v1alpha1.CheckRun) bool { return r.Result == verdict.CheckFailed }) {
				// The known-good runs again, but it does not pass its own checks.
				e.eventType = corev1.EventTypeWarning
			}
		}
	case v1alpha1.PhaseHeld:
		e.eventType, e.reason = corev1.EventTypeWarning, HeldEventReason
		e.message = fmt.Sprintf("holding %s%s", revision, because)
		if w := st.WaitingFor; w != nil && w.Message != "" {
			e.message += "; " + w.Message
		}
	default:
		return phaseEvent{}, false
	}
	return e, true
}

// waitEvent is the event of a rollout that started to wait on a gate of the wave it waits in: the
// latest of them decided with result.
func waitEvent(st *v1alpha1.FleetRolloutStatus, eventType, reason, revision, result string) phaseEvent {
	w := st.WaitingFor
	e := phaseEvent{eventType: eventType, reason: reason, metadata: map[string]string{metaRevision: revision, metaWave: w.Wave}}
	for i := range st.Waves {
		if st.Waves[i].Name != w.Wave {
			continue
		}
		if g := latestGate(&st.Waves[i], func(o *v1alpha1.GateOutcome) bool { return o.Result == result }); g != nil {
			e.metadata[metaGate], e.metadata[metaReceipt] = g.Gate, g.Receipt
		}
	}
	e.message = fmt.Sprintf("%s: %s", revision, w.Message)
	if r := e.metadata[metaReceipt]; r != "" && !strings.Contains(w.Message, r) {
		e.message += fmt.Sprintf(" (receipt %s)", r)
	}
	return e
}

// sameWait tells whether two statuses wait for the same thing in the same wave of the same
// candidate: a wait decided again (a blocking gate re-decided, an inconclusive one sampled again)
// is the same wait.
func sameWait(a, b *v1alpha1.FleetRolloutStatus) bool {
	if a.WaitingFor == nil || b.WaitingFor == nil {
		return false
	}
	key := func(st *v1alpha1.FleetRolloutStatus) string {
		c := ""
		if st.Candidate != nil {
			c = st.Candidate.Key()
		}
		w := st.WaitingFor
		if w.Reason == v1alpha1.WaitingForSource {
			return w.Reason + "\x00" + w.Message // a refusal of another artifact is another wait
		}
		return w.Reason + "\x00" + w.Wave + "\x00" + c
	}
	return key(a) == key(b)
}

// decidingGate returns the gate outcome decided last of every wave, of those not passed when
// failed is set, and its wave.
func decidingGate(st *v1alpha1.FleetRolloutStatus, failed bool) (string, *v1alpha1.GateOutcome) {
	var (
		wave string
		best *v1alpha1.GateOutcome
	)
	for i := range st.Waves {
		g := latestGate(&st.Waves[i], func(o *v1alpha1.GateOutcome) bool { return !failed || o.Result != v1alpha1.ResultPass })
		if g != nil && (best == nil || best.DecidedAt.Before(g.DecidedAt)) {
			wave, best = st.Waves[i].Name, g
		}
	}
	return wave, best
}

// latestGate returns the outcome of wv decided last among those that match, nil when none does.
func latestGate(wv *v1alpha1.WaveStatus, match func(*v1alpha1.GateOutcome) bool) *v1alpha1.GateOutcome {
	var best *v1alpha1.GateOutcome
	for j := range wv.Gates {
		o := &wv.Gates[j]
		if o.DecidedAt == nil || o.Receipt == "" || !match(o) {
			continue
		}
		if best == nil || best.DecidedAt.Before(o.DecidedAt) {
			best = o
		}
	}
	return best
}

// announce emits the events, and logs the lines, of the transitions from read to the status fr now
// has: called once that status is written, so a pass whose write failed announces nothing and the
// pass that writes it announces it. A crash between the write and the event loses the event rather
// than repeating it; the Ready condition and the ledger still record the transition.
func (r *FleetRolloutReconciler) announce(log logr.Logger, fr *v1alpha1.FleetRollout, read *v1alpha1.FleetRolloutStatus, refused string) {
	logTransitions(log, read, &fr.Status)
	for _, e := range phaseEvents(read, &fr.Status, refused) {
		r.annotatedEvent(fr, e.metadata, e.eventType, e.reason, "%s", capMessage(e.message))
	}
}

// waveRevision is a wave and the revision its clusters were switched to.
type waveRevision struct{ Wave, Revision string }

// announceSwitched emits one WaveSwitched event, and logs one line, for the clusters of each wave a
// pass switched to a revision, naming at most maxEventClusters of them in its message and metadata.
func (r *FleetRolloutReconciler) announceSwitched(log logr.Logger, fr *v1alpha1.FleetRollout, switched map[waveRevision][]string) {
	for _, t := range slices.SortedFunc(maps.Keys(switched), func(a, b waveRevision) int {
		return cmp.Or(cmp.Compare(a.Wave, b.Wave), cmp.Compare(a.Revision, b.Revision))
	}) {
		clusters := switched[t]
		names := engine.FirstNames(clusters, maxEventClusters)
		log.Info("wave switched", "wave", t.Wave, "revision", t.Revision, "clusters", len(clusters))
		r.annotatedEvent(fr, map[string]string{metaRevision: t.Revision, metaWave: t.Wave, metaClusters: names},
			corev1.EventTypeNormal, WaveSwitchedEventReason, "switched %s of wave %s to revision %s: %s",
			engine.Plural(len(clusters), "cluster", "clusters"), t.Wave, t.Revision, names)
	}
}

// logTransitions writes, at info, one structured line for each transition from read to written: the
// rollout's phase (Progressing, Held, RollingBack, RolledBack, Completed, ...) and each wave's (a
// wave started, soaked, its soak ended, it succeeded or failed). Like the events, they come from the
// two statuses, so a pass that changes nothing logs nothing.
func logTransitions(log logr.Logger, read, written *v1alpha1.FleetRolloutStatus) {
	revision := revisionOf(written)
	if read.Phase != written.Phase {
		kv := []any{"from", read.Phase, "to", written.Phase, "revision", revision}
		if w := written.WaitingFor; w != nil && w.Message != "" {
			kv = append(kv, "reason", w.Reason, "message", w.Message)
		}
		log.Info("rollout phase changed", kv...)
	}
	// The waves of another candidate are new waves, not the old ones moved on.
	was := map[string]string{}
	if (read.Candidate == nil && written.Candidate == nil) ||
		(read.Candidate != nil && written.Candidate != nil && sameCandidate(read.Candidate, written.Candidate)) {
		for _, wv := range read.Waves {
			was[wv.Name] = wv.Phase
		}
	}
	for _, wv := range written.Waves {
		if from := was[wv.Name]; from != wv.Phase {
			log.Info("wave phase changed", "wave", wv.Name, "from", from, "to", wv.Phase, "revision", revision,
				"clusters", len(wv.Clusters))
		}
	}
}
