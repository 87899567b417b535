package engine

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/fleets"
)

// stepRehearsal moves a rollback rehearsal of the wave: back to the known-good until every member is
// Ready there, then forward to the candidate until every member is Ready again; then rollbackSucceeds
// is decided over the timings. A leg that is not healthy within the wave deadline ends the rehearsal,
// and the gate fails on it.
func stepRehearsal(fr *v1alpha1.FleetRollout, w *World, i int, now metav1.Time, res StepResult) StepResult {
	st := &fr.Status
	wv := &st.Waves[i]
	rh := wv.Rehearsal
	if rh == nil || st.LastKnownGood == nil {
		wv.Phase = v1alpha1.WaveSucceeded
		wv.FinishedAt = &now
		return res
	}
	wv.Missing = fleets.Missing(wv.Clusters, w.Inventory)
	held := heldBack(wv)
	at := func(rev *v1alpha1.RevisionStatus) int {
		n := 0
		for _, c := range wv.Clusters {
			if !held[c] && w.Kustomizations[c].ReadyAt(rev.Source, rev.Revision) {
				n++
			}
		}
		return n
	}
	total := len(wv.Clusters) - len(held)
	deadline := waveDeadline(fr, wv)
	// leg observes one leg: every member Ready at rev (ready), or the deadline passed (over, with why),
	// or what the rollout waits for.
	leg := func(doing, what string, rev *v1alpha1.RevisionStatus, started *metav1.Time) (ready, over bool, msg string) {
		n := at(rev)
		switch {
		case n == total:
			return true, true, ""
		case w.Now.Sub(started.Time) > deadline:
			return false, true, fmt.Sprintf("%s: only %d/%d clusters Ready at %s %s after %s", doing, n, total, what, rev.Revision, deadline)
		}
		return false, false, fmt.Sprintf("rehearsal of wave %s: %s, %d/%d clusters Ready at %s %s", wv.Name, doing, n, total, what, rev.Revision)
	}
	switch rh.Phase {
	case v1alpha1.RehearsalRollingBack:
		ready, over, msg := leg("rolling back", "known-good", st.LastKnownGood, rh.BackStartedAt)
		switch {
		case ready:
			if rh.BackReadyAt == nil {
				rh.BackReadyAt = &now
			}
			if waitForBackChecks(w, wv, st.LastKnownGood, deadline, &res) {
				return res
			}
			if rh.Phase == v1alpha1.RehearsalDone {
				break
			}
			if fr.Spec.Hold != nil {
				res.waitFor(v1alpha1.WaitingForHold, wv.Name, rh.BackReadyAt, nil, "held: %s", fr.Spec.Hold.Reason)
				return res
			}
			rh.Phase, rh.ForwardStartedAt = v1alpha1.RehearsalRollingForward, &now
			res.Next = true
		case over:
			rh.Phase, rh.Message = v1alpha1.RehearsalDone, msg
		default:
			res.waitFor(v1alpha1.WaitingForRehearsal, wv.Name, rh.BackStartedAt, nil, "%s", msg)
			return res
		}
	case v1alpha1.RehearsalRollingForward:
		ready, over, msg := leg("rolling forward", "candidate", st.Candidate, rh.ForwardStartedAt)
		switch {
		case ready:
			rh.Phase, rh.ForwardReadyAt = v1alpha1.RehearsalDone, &now
		case over:
			rh.Phase, rh.Message = v1alpha1.RehearsalDone, msg
		default:
			res.waitFor(v1alpha1.WaitingForRehearsal, wv.Name, rh.ForwardStartedAt, nil, "%s", msg)
			return res
		}
	}
	if rh.Phase == v1alpha1.RehearsalDone && !awaitEvidence(fr, w, wv, v1alpha1.GateRollbackSucceeds, &res) {
		res.GateWave, res.Gates = i, []string{v1alpha1.GateRollbackSucceeds}
	}
	return res
}

// waitForBackChecks follows the policy's functional checks on a rehearsal's way back, once the wave
// is Ready at the known-good kg (World.KnownGoodChecks): it waits while some have not finished,
// ends the rehearsal when they did not finish by the deadline, and records them when they all did.
func waitForBackChecks(w *World, wv *v1alpha1.WaveStatus, kg *v1alpha1.RevisionStatus, deadline time.Duration, res *StepResult) (wait bool) {
	rc, rh := w.KnownGoodChecks, wv.Rehearsal
	switch {
	case rc == nil:
	case len(rc.Pending) == 0:
		rh.BackChecks = rc.Runs
	case w.Now.Sub(rh.BackStartedAt.Time) > deadline:
		rh.Phase, rh.Message = v1alpha1.RehearsalDone, fmt.Sprintf("rolling back: the checks at the known-good did not finish within %s: %s", deadline, FirstNames(rc.Pending, 3))
	default:
		res.waitFor(v1alpha1.WaitingForRehearsal, wv.Name, rh.BackReadyAt, nil, "rehearsal of wave %s: checks at the known-good %s: %s",
			wv.Name, kg.Revision, FirstNames(rc.Pending, 3))
		return true
	}
	return false
}
