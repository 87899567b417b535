package engine

import (
	"fmt"
	"strings"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/verdict"
)

// stepPreWave decides the gates decided before a wave switches anything: deploySafe for every wave (its preflight
// is about the wave's own targets), rollbackSucceeds for every wave (the known-good must still be there
// to go back to), and rollbackSafe before the first. A pre-wave gate that fails blocks the wave with
// nothing of it applied; it is decided again when the rollout's spec changes (an approval is added)
// or after an interval (a cluster is fixed, a policy is relaxed). When every one passes, the wave starts.
func stepPreWave(fr *v1alpha1.FleetRollout, w *World, i int, now metav1.Time, res StepResult) StepResult {
	wv := &fr.Status.Waves[i]
	gates := PreWaveGates(i)
	var undecided, failed, inconclusive []string
	var recheck time.Duration
	var decided, since *metav1.Time
	for _, g := range gates {
		o := GateOutcome(wv, g)
		switch {
		case o == nil || o.DecidedAt == nil || o.ObservedGeneration != fr.Generation:
			undecided = append(undecided, g)
		case o.Result == v1alpha1.ResultPass:
		case o.Result == v1alpha1.ResultInconclusive:
			// Decided again with backoff, or as soon as a cluster it could not observe answers.
			inconclusive = append(inconclusive, fmt.Sprintf("%s (receipt %s; not observed: %s)", g, o.Receipt, strings.Join(o.Unobserved, ", ")))
			if since == nil || (o.InconclusiveSince != nil && o.InconclusiveSince.Before(since)) {
				since = o.InconclusiveSince
			}
			if left := inconclusiveBackoff(o, w.Settings) - w.Now.Sub(o.DecidedAt.Time); left > 0 && !reachableSince(w, o) {
				if recheck == 0 || left < recheck {
					recheck = left
				}
			} else {
				undecided = append(undecided, g)
			}
		default:
			failed = append(failed, fmt.Sprintf("%s (receipt %s)", g, o.Receipt))
			if decided == nil || o.DecidedAt.Before(decided) {
				decided = o.DecidedAt
			}
			if left := fr.GetRequeueAfter() - w.Now.Sub(o.DecidedAt.Time); left > 0 {
				if recheck == 0 || left < recheck {
					recheck = left
				}
			} else {
				undecided = append(undecided, g)
			}
		}
	}
	switch {
	case len(undecided) > 0:
		res.GateWave, res.Gates = i, gates
	case len(failed) > 0:
		// The time of the next decision, not the time left: the message stays the same from pass to
		// pass, so status is not rewritten for it.
		again := metav1.NewTime(w.Now.Add(recheck).UTC().Truncate(time.Second))
		res.waitFor(v1alpha1.WaitingForGateBlocked, wv.Name, decided, &again,
			"wave %s is blocked before it starts by %s; nothing of it is applied; decided again at %s or when the spec changes",
			wv.Name, strings.Join(failed, ", "), again.Format(time.RFC3339))
		res.RequeueAfter = recheck
	case len(inconclusive) > 0:
		again := metav1.NewTime(w.Now.Add(recheck).UTC().Truncate(time.Second))
		res.waitFor(v1alpha1.WaitingForInconclusive, wv.Name, since, inconclusiveDeadline(since, w.Settings.InconclusiveAfter),
			"wave %s waits before it starts: %s inconclusive; nothing of it is applied; decided again at %s, or when a cluster not observed becomes reachable (the wait doubles while it stays inconclusive, from %s to at most %s), failed after %s",
			wv.Name, strings.Join(inconclusive, ", "), again.Format(time.RFC3339), w.Settings.SampleInterval, maxInconclusiveBackoff, w.Settings.InconclusiveAfter)
		res.RequeueAfter = recheck
	default:
		wv.Phase = v1alpha1.WaveProgressing
		wv.StartedAt = &now
		res.Next = true
	}
	return res
}

// maxInconclusiveBackoff bounds the wait between two decisions of an Inconclusive pre-wave gate.
const maxInconclusiveBackoff = 2 * time.Minute

// inconclusiveBackoff is how long after its decision o, an Inconclusive pre-wave gate, is decided
// again: a sample interval at first, then as long as the gate has been Inconclusive, so that the
// wait doubles from one decision to the next (each decision asks the fleet's API servers again),
// at most maxInconclusiveBackoff, and never past the moment the run turns into a Fail
// (settings.inconclusiveAfter).
func inconclusiveBackoff(o *v1alpha1.GateOutcome, s verdict.Settings) time.Duration {
	d := s.SampleInterval
	if o.InconclusiveSince == nil {
		return d
	}
	d = min(max(d, o.DecidedAt.Sub(o.InconclusiveSince.Time)), maxInconclusiveBackoff)
	if s.InconclusiveAfter > 0 {
		if left := o.InconclusiveSince.Add(s.InconclusiveAfter).Sub(o.DecidedAt.Time); left > 0 {
			d = min(d, left)
		}
	}
	return d
}

// reachableSince tells whether a cluster the Inconclusive decision o could not observe has become
// reachable since (its FleetCluster's Reachable condition turned True after the decision): the gate
// is then decided again at once, not at the end of its backoff.
func reachableSince(w *World, o *v1alpha1.GateOutcome) bool {
	for _, name := range o.Unobserved {
		fc := w.Clusters[name]
		if fc == nil {
			continue
		}
		if c := apimeta.FindStatusCondition(fc.Status.Conditions, v1alpha1.ReachableCondition); c != nil &&
			c.Status == metav1.ConditionTrue && c.LastTransitionTime.After(o.DecidedAt.Time) {
			return true
		}
	}
	return false
}

// inconclusiveDeadline is when a run of Inconclusive decisions since `since` turns into a Fail.
func inconclusiveDeadline(since *metav1.Time, after time.Duration) *metav1.Time {
	if since == nil || after <= 0 {
		return nil
	}
	return &metav1.Time{Time: since.Add(after)}
}

// awaitEvidence keeps a wave whose post-wave gate was Inconclusive from being decided again before
// a sample interval has passed since that decision: it says so and when. It returns false when the
// gate is due (or was not Inconclusive).
func awaitEvidence(fr *v1alpha1.FleetRollout, w *World, wv *v1alpha1.WaveStatus, gate string, res *StepResult) bool {
	o := GateOutcome(wv, gate)
	if o == nil || o.Result != v1alpha1.ResultInconclusive || o.DecidedAt == nil || o.ObservedGeneration != fr.Generation {
		return false
	}
	left := w.Settings.SampleInterval - w.Now.Sub(o.DecidedAt.Time)
	if left <= 0 {
		return false
	}
	res.RequeueAfter = left
	res.waitFor(v1alpha1.WaitingForInconclusive, wv.Name, o.InconclusiveSince, inconclusiveDeadline(o.InconclusiveSince, w.Settings.InconclusiveAfter),
		"wave %s: %s inconclusive (receipt %s; not observed: %s); decided again every %s until the evidence is in, failed after %s",
		wv.Name, gate, o.Receipt, strings.Join(o.Unobserved, ", "), w.Settings.SampleInterval, w.Settings.InconclusiveAfter)
	return true
}

// awaitAnyEvidence is awaitEvidence for the first of gates that awaits its evidence.
func awaitAnyEvidence(fr *v1alpha1.FleetRollout, w *World, wv *v1alpha1.WaveStatus, gates []string, res *StepResult) bool {
	for _, g := range gates {
		if awaitEvidence(fr, w, wv, g, res) {
			return true
		}
	}
	return false
}

// GateOutcome returns the wave's latest outcome of gate, or nil.
func GateOutcome(wv *v1alpha1.WaveStatus, gate string) *v1alpha1.GateOutcome {
	for i := range wv.Gates {
		if wv.Gates[i].Gate == gate {
			return &wv.Gates[i]
		}
	}
	return nil
}

// PreWaveGates lists the gates decided before wave i switches anything, as stepPreWave decides
// them: the collector gathers their evidence ahead while the wave before i soaks.
// They are the registry's (v1alpha1.GatePhaseOf) gates decided before a wave, and before the
// first wave those decided before the first wave only, in the registry's order.
func PreWaveGates(i int) []string {
	return gatesWhen(func(p v1alpha1.GatePhase) bool {
		return p == v1alpha1.GateBeforeWave || (i == 0 && p == v1alpha1.GateBeforeFirstWave)
	})
}

// postSoakGates are the gates decided once a wave has soaked (v1alpha1.GateAfterSoak).
func postSoakGates() []string {
	return gatesWhen(func(p v1alpha1.GatePhase) bool { return p == v1alpha1.GateAfterSoak })
}

// gatesWhen lists, in the registry's order, the gates whose phase is one of those asked for.
func gatesWhen(phase func(v1alpha1.GatePhase) bool) []string {
	var out []string
	for _, g := range v1alpha1.Gates {
		if phase(v1alpha1.GatePhaseOf[g]) {
			out = append(out, g)
		}
	}
	return out
}
