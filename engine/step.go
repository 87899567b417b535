package engine

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// maxRejected bounds status.rejected.
const maxRejected = 10

// StepResult is what a step leaves for the reconciler to do or say.
type StepResult struct {
	// GateWave is the index of the wave whose gates must be decided now, or -1.
	GateWave int
	// Gates are the gates to decide for GateWave, in order.
	Gates []string
	// Wait is what the rollout waits for (status.waitingFor); nil when nothing.
	Wait *v1alpha1.WaitingFor
	// RequeueAfter asks to be called again then (a soak ending, a deadline); zero means the interval.
	RequeueAfter time.Duration
	// Refused says why a request in the spec could not be carried out; the reconciler reports it as an event.
	Refused string
	// Decided is the index of the wave whose noDisruption or rehearsal was decided (its samples can
	// go), or -1.
	Decided int
	// Next is true when the step recorded an intent (a phase moved, a candidate was chosen): the
	// status is written, then the next pass acts on it at once.
	Next bool
	// Notes explain a new candidate's plan or a change of it to people; the reconciler emits them
	// as events.
	Notes []string
}

// waitFor records what the rollout waits for.
func (r *StepResult) waitFor(reason, wave string, since, until *metav1.Time, format string, args ...any) {
	r.Wait = &v1alpha1.WaitingFor{Reason: reason, Wave: wave, Message: fmt.Sprintf(format, args...), Since: since, Until: until}
}

// waitForSoak records that wave wv soaks, from its readyAt for soak.
func (r *StepResult) waitForSoak(wv *v1alpha1.WaveStatus, soak time.Duration) {
	r.waitFor(v1alpha1.WaitingForSoak, wv.Name, wv.ReadyAt, &metav1.Time{Time: wv.ReadyAt.Add(soak)}, "wave %s soaking for %s", wv.Name, soak)
}

// blocked tells whether a wave cannot start because a gate decided before it failed.
func (r StepResult) blocked() bool {
	return r.Wait != nil && r.Wait.Reason == v1alpha1.WaitingForGateBlocked
}

// waiting is the message of what the rollout waits for, "" when nothing.
func (r StepResult) waiting() string {
	if r.Wait == nil {
		return ""
	}
	return r.Wait.Message
}

// Step moves the rollout's status one decision forward from what was recorded and what is observed.
// It is pure: the reconciler writes what the new status asks for on its next pass, so every write
// follows a recorded intent and a crash between the two repeats the write, never the decision.
func Step(w *World) StepResult {
	res := stepOnce(w)
	setLateJoiners(w.Rollout, w.Plan)
	trackLag(w)
	if noteOrphans(w) {
		res.Next = true // recorded before act orphans them (orphanDeparted)
	}
	if st := &w.Rollout.Status; res.Wait == nil && w.TrackedRefused != "" && st.Revert == nil &&
		(st.Phase == v1alpha1.PhaseCompleted || st.Phase == v1alpha1.PhaseRolledBack) {
		// At rest on what the tracked source serves, while it refuses what it was asked for: the
		// next rollout waits for a release it can verify.
		res.waitFor(v1alpha1.WaitingForSource, "", nil, nil, "%s", w.TrackedRefused)
	}
	return res
}

// stepOnce is Step without the bookkeeping of what lags: the requests of the spec, then the
// candidate wanted, its pinned source, and its waves.
func stepOnce(w *World) StepResult {
	fr := w.Rollout
	st := &fr.Status
	res := StepResult{GateWave: -1, Decided: -1}
	now := metav1.NewTime(w.Now)
	adoptBuilds(fr)
	handleRequests(fr, w, now, &res)
	if st.Phase == v1alpha1.PhaseRollingBack {
		return stepRollback(fr, w, now)
	}
	wantedTarget(w)
	if w.Target == "" {
		res.waitFor(v1alpha1.WaitingForSource, "", nil, nil, "%s", w.TargetWhy)
		return res
	}
	// The candidate wanted is the target revision with the build the spec asks for (a going back,
	// with the build it ran with): a template edit is a candidate like a new revision.
	build := fr.SpecBuild()
	if st.Revert != nil && st.Revert.To.Build != nil {
		build = st.Revert.To.Build
	}
	buildHash := v1alpha1.HashBuild(build)
	if !st.Candidate.IsCandidate(w.Target, buildHash) && chooseCandidate(fr, w, build, buildHash, &res) {
		return res
	}
	if waitForPinnedSource(w, &res) {
		return res
	}
	st.Candidate.Digest = w.Candidate.Digest

	switch st.Phase {
	case v1alpha1.PhaseCompleted:
		return startCatchUp(fr, w, res)
	case v1alpha1.PhaseRolledBack:
		return res
	}
	if st.PlanHash != w.Plan.Hash {
		res.Notes = append(res.Notes, fmt.Sprintf("the waves of spec changed during the rollout of %s: started waves keep their members, waves not started yet are planned from the new spec", st.Candidate.Revision))
		st.PlanHash = w.Plan.Hash
	}
	return stepWaves(fr, w, now, res)
}

// handleRequests takes up what the spec asks for once: a retry (spec.retry) and a rollback
// (spec.rollback.request), refused, with why, when it cannot be carried out.
func handleRequests(fr *v1alpha1.FleetRollout, w *World, now metav1.Time, res *StepResult) {
	st := &fr.Status
	if fr.Spec.Retry != st.LastHandledRetry {
		st.LastHandledRetry = fr.Spec.Retry
		if fr.Spec.Retry != "" {
			retry(fr, w.Target, "", now)
		}
	}
	if fr.Spec.Rollback.Request == st.LastHandledRollbackRequest {
		return
	}
	st.LastHandledRollbackRequest = fr.Spec.Rollback.Request
	switch {
	case fr.Spec.Rollback.Request == "":
	case inFlight(st) && st.LastKnownGood == nil:
		res.Refused = "rollback requested, but there is no known-good revision to go back to: set spec.hold to stop, or spec.revision to pin another revision"
	case inFlight(st) && catchingUp(st):
		res.Refused = "rollback requested, but a catch-up wave is bringing lagging clusters to the known-good " + st.LastKnownGood.Revision +
			" and there is nothing older to go back to: set spec.hold to stop it"
	case inFlight(st):
		beginRollback(fr, w)
	case st.Phase == v1alpha1.PhaseCompleted:
		res.Refused = beginRevert(fr, now)
	}
}

// wantedTarget sets the revision wanted, when it is not what the source serves: the revision a
// going back goes to, or the known-good when the target builds what it does.
func wantedTarget(w *World) {
	st := &w.Rollout.Status
	if st.Revert != nil {
		// Going back to an earlier known-good: it is the revision wanted, whatever the source says,
		// until it completes or is rolled back.
		w.Target = st.Revert.To.Revision
	}
	if u := st.Unchanged; u != nil && u.Revision == w.Target && st.LastKnownGood != nil && u.SameAs == st.LastKnownGood.Revision {
		// It builds what the known-good does: the known-good is what is wanted.
		w.Target = st.LastKnownGood.Revision
	}
}

// chooseCandidate decides what to do about a candidate wanted (w.Target with build) that is not
// status's: wait for the one in flight, complete at once on the known-good, refuse a rejected one,
// record that it changes nothing, or start it. It returns true when the step ends there.
func chooseCandidate(fr *v1alpha1.FleetRollout, w *World, build *v1alpha1.Build, buildHash string, res *StepResult) bool {
	st := &fr.Status
	wanted := CandidateName(w.Target, buildHash, st)
	switch {
	case st.Candidate != nil && (st.Phase == v1alpha1.PhaseProgressing || (st.Phase == v1alpha1.PhaseHeld && fr.Spec.Hold != nil)) && anyStarted(st):
		// A rollout in progress finishes (or fails) before a newer candidate starts, so no cluster
		// is left between two candidates; the newer one is picked up right after. A hold keeps
		// the candidate too: nothing new starts while held.
		res.waitFor(v1alpha1.WaitingForRevision, "", nil, nil, "%s waits for %s to finish",
			wanted, CandidateName(st.Candidate.Revision, st.Candidate.BuildHash, st))
		return false
	case st.LastKnownGood.IsCandidate(w.Target, buildHash) && !anyStarted(st):
		st.Phase = v1alpha1.PhaseCompleted
	case fr.IsRejectedBuild(w.Target, buildHash):
		res.waitFor(v1alpha1.WaitingForRetry, "", nil, nil, "%s was rejected; change spec.retry to roll it out again", wanted)
	case UnchangedCandidate(fr, w) && w.TargetRender != "" && w.TargetRender == w.KnownGoodRender:
		at := metav1.NewTime(w.Now)
		st.Unchanged = &v1alpha1.UnchangedRevision{Revision: w.Target, SameAs: st.LastKnownGood.Revision, At: &at}
		res.Next = true
		res.Notes = append(res.Notes, fmt.Sprintf("revision %s builds, at %s, what the known-good %s does (render %s): no change to roll out; the clusters keep running %s",
			w.Target, fr.Spec.Path, st.LastKnownGood.Revision, w.TargetRender, st.LastKnownGood.Revision))
	default:
		newCandidate(fr, w, build, buildHash)
		res.Next, res.Notes = true, w.Plan.Notes
		if kg := st.LastKnownGood; kg != nil && kg.Revision == w.Target {
			res.Notes = append(res.Notes, fmt.Sprintf("the build changed (spec.path or the template's targetNamespace, patches, images or postBuild: build %s, was %s): revision %s with it is a new candidate, rolled out wave by wave through the gates",
				buildHash, kg.BuildHash, w.Target))
		}
	}
	return true
}

// waitForPinnedSource tells, and says, when the candidate's pinned source does not serve its
// revision yet. A pinned source whose verification failed never serves the revision: its gates
// decide on that (deploySafe's provenance) rather than wait for an artifact that will not come.
func waitForPinnedSource(w *World, res *StepResult) bool {
	st := &w.Rollout.Status
	if w.Candidate.Exists && (SameRevision(w.Candidate.Revision, st.Candidate.Revision) || w.Candidate.VerifyFailed) {
		return false
	}
	msg := fmt.Sprintf("waiting for pinned source %s to fetch revision %s", st.Candidate.Source, st.Candidate.Revision)
	if w.Candidate.ReadError != "" {
		msg += ": reading it failed: " + w.Candidate.ReadError
	} else if w.Candidate.Message != "" {
		msg += ": " + w.Candidate.Message
	}
	res.waitFor(v1alpha1.WaitingForPinnedSource, "", nil, nil, "%s", msg)
	return true
}
