package controllers

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/evidence/collector"
	"github.com/tidegate/tidegate/fleets"
	"github.com/tidegate/tidegate/verdict"
)

// maxRejected bounds status.rejected.
const maxRejected = 10

// world is everything one reconcile observed (collector.Scope): the step reads it and writes only
// the rollout's status.
type world = collector.Scope

// stepResult is what a step leaves for the reconciler to do or say.
type stepResult struct {
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
func (r *stepResult) waitFor(reason, wave string, since, until *metav1.Time, format string, args ...any) {
	r.Wait = &v1alpha1.WaitingFor{Reason: reason, Wave: wave, Message: fmt.Sprintf(format, args...), Since: since, Until: until}
}

// waitForSoak records that wave wv soaks, from its readyAt for soak.
func (r *stepResult) waitForSoak(wv *v1alpha1.WaveStatus, soak time.Duration) {
	r.waitFor(v1alpha1.WaitingForSoak, wv.Name, wv.ReadyAt, &metav1.Time{Time: wv.ReadyAt.Add(soak)}, "wave %s soaking for %s", wv.Name, soak)
}

// blocked tells whether a wave cannot start because a gate decided before it failed.
func (r stepResult) blocked() bool {
	return r.Wait != nil && r.Wait.Reason == v1alpha1.WaitingForGateBlocked
}

// waiting is the message of what the rollout waits for, "" when nothing.
func (r stepResult) waiting() string {
	if r.Wait == nil {
		return ""
	}
	return r.Wait.Message
}

// step moves the rollout's status one decision forward from what was recorded and what is observed.
// It is pure: the reconciler writes what the new status asks for on its next pass, so every write
// follows a recorded intent and a crash between the two repeats the write, never the decision.
func step(w *world) stepResult {
	res := stepOnce(w)
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

// stepOnce is step without the bookkeeping of what lags.
func stepOnce(w *world) stepResult {
	fr := w.Rollout
	st := &fr.Status
	res := stepResult{GateWave: -1, Decided: -1}
	now := metav1.NewTime(w.Now)
	adoptBuilds(fr)
	if fr.Spec.Retry != st.LastHandledRetry {
		st.LastHandledRetry = fr.Spec.Retry
		if fr.Spec.Retry != "" {
			retry(fr, w.Target, "", now)
		}
	}
	if fr.Spec.Rollback.Request != st.LastHandledRollbackRequest {
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
	if st.Phase == v1alpha1.PhaseRollingBack {
		return stepRollback(fr, w, now)
	}
	if st.Revert != nil {
		// Going back to an earlier known-good: it is the revision wanted, whatever the source says,
		// until it completes or is rolled back.
		w.Target = st.Revert.To.Revision
	}
	if u := st.Unchanged; u != nil && u.Revision == w.Target && st.LastKnownGood != nil && u.SameAs == st.LastKnownGood.Revision {
		// It builds what the known-good does: the known-good is what is wanted.
		w.Target = st.LastKnownGood.Revision
	}

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
	if !st.Candidate.IsCandidate(w.Target, buildHash) {
		wanted := candidateName(w.Target, buildHash, st)
		switch {
		case st.Candidate != nil && (st.Phase == v1alpha1.PhaseProgressing || (st.Phase == v1alpha1.PhaseHeld && fr.Spec.Hold != nil)) && anyStarted(st):
			// A rollout in progress finishes (or fails) before a newer candidate starts, so no cluster
			// is left between two candidates; the newer one is picked up right after. A hold keeps
			// the candidate too: nothing new starts while held.
			res.waitFor(v1alpha1.WaitingForRevision, "", nil, nil, "%s waits for %s to finish",
				wanted, candidateName(st.Candidate.Revision, st.Candidate.BuildHash, st))
		case st.LastKnownGood.IsCandidate(w.Target, buildHash) && !anyStarted(st):
			st.Phase = v1alpha1.PhaseCompleted
			return res
		case fr.IsRejectedBuild(w.Target, buildHash):
			res.waitFor(v1alpha1.WaitingForRetry, "", nil, nil, "%s was rejected; change spec.retry to roll it out again", wanted)
			return res
		case unchangedCandidate(fr, w) && w.TargetRender != "" && w.TargetRender == w.KnownGoodRender:
			at := metav1.NewTime(w.Now)
			st.Unchanged = &v1alpha1.UnchangedRevision{Revision: w.Target, SameAs: st.LastKnownGood.Revision, At: &at}
			res.Next = true
			res.Notes = append(res.Notes, fmt.Sprintf("revision %s builds, at %s, what the known-good %s does (render %s): no change to roll out; the clusters keep running %s",
				w.Target, fr.Spec.Path, st.LastKnownGood.Revision, w.TargetRender, st.LastKnownGood.Revision))
			return res
		default:
			newCandidate(fr, w, build, buildHash)
			res.Next, res.Notes = true, w.Plan.Notes
			if kg := st.LastKnownGood; kg != nil && kg.Revision == w.Target {
				res.Notes = append(res.Notes, fmt.Sprintf("the build changed (spec.path or the template's targetNamespace, patches, images or postBuild: build %s, was %s): revision %s with it is a new candidate, rolled out wave by wave through the gates",
					buildHash, kg.BuildHash, w.Target))
			}
			return res
		}
	}

	// A pinned source whose verification failed never serves the revision: its gates decide on
	// that (deploySafe's provenance) rather than wait for an artifact that will not come.
	if !w.Candidate.Exists || (!collector.SameRevision(w.Candidate.Revision, st.Candidate.Revision) && !w.Candidate.VerifyFailed) {
		msg := fmt.Sprintf("waiting for pinned source %s to fetch revision %s", st.Candidate.Source, st.Candidate.Revision)
		if w.Candidate.Message != "" {
			msg += ": " + w.Candidate.Message
		}
		res.waitFor(v1alpha1.WaitingForPinnedSource, "", nil, nil, "%s", msg)
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

// stepWaves walks the candidate's waves in order and moves the first unfinished one.
func stepWaves(fr *v1alpha1.FleetRollout, w *world, now metav1.Time, res stepResult) stepResult {
	st := &fr.Status
	for i := range st.Waves {
		wv := &st.Waves[i]
		spec := fr.WaveSpec(wv.Name)
		switch wv.Phase {
		case v1alpha1.WaveSucceeded, v1alpha1.WaveSkipped:
			continue
		case v1alpha1.WaveFailed:
			onFailure(fr, w)
			res.waitFor(v1alpha1.WaitingForFailedWave, wv.Name, wv.FinishedAt, nil, "wave %s failed", wv.Name)
			return res
		case v1alpha1.WavePending, v1alpha1.WaveAwaiting:
			if fr.Spec.Hold != nil {
				st.Phase = v1alpha1.PhaseHeld
				res.waitFor(v1alpha1.WaitingForHold, wv.Name, nil, nil, "held: %s", fr.Spec.Hold.Reason)
				return res
			}
			// A catch-up wave's members were chosen when it was made (startCatchUp).
			members, skip, vacuous := wv.Clusters, false, error(nil)
			if !wv.CatchUp {
				var err error
				members, err = fleets.Members(fleets.Input{Rollout: fr, Inventory: w.Inventory}, st.Waves[:i], wv.Name)
				if err != nil {
					st.Phase, st.CurrentWave = v1alpha1.PhaseProgressing, wv.Name
					res.waitFor(v1alpha1.WaitingForGates, wv.Name, nil, nil, "%s", err.Error())
					return res
				}
				members = excusedFrom(wv, members)
				// Decided before an approval is asked for: an empty wave of a small fleet needs none.
				skip, vacuous = vacuousWave(fr, w, i, members)
			}
			if skip {
				skipWaves(fr, i)
				continue
			}
			st.Phase = v1alpha1.PhaseProgressing
			st.CurrentWave = wv.Name
			if waveNeedsApproval(fr, w.Settings, wv.Name) && fr.ApprovalOfCandidate(st.Candidate, wv.Name, false) == nil {
				wv.Phase = v1alpha1.WaveAwaiting
				entry := fmt.Sprintf("{revision: %q, wave: %q}", st.Candidate.Revision, wv.Name)
				if fr.NeedsBuildApproval(st.Candidate) {
					entry = fmt.Sprintf("{revision: %q, buildHash: %q, wave: %q}", st.Candidate.Revision, st.Candidate.BuildHash, wv.Name)
				}
				res.waitFor(v1alpha1.WaitingForApproval, wv.Name, previousFinished(st, i), nil,
					"wave %s needs an approval: add %s to spec.approvals", wv.Name, entry)
				return res
			}
			wv.Phase = v1alpha1.WavePending
			wv.Clusters = members
			if err := vacuous; err != nil {
				// Held, not Progressing: a newer revision may replace the candidate, as after a
				// failed wave, rather than wait for one that cannot finish.
				st.Phase = v1alpha1.PhaseHeld
				res.waitFor(v1alpha1.WaitingForWavePlan, wv.Name, nil, nil, "wave %s does not start, and nothing of it is applied: %v", wv.Name, err)
				return res
			}
			return preWaveGates(fr, w, i, now, res)
		case v1alpha1.WaveProgressing, v1alpha1.WaveSoaking, v1alpha1.WaveRehearsing:
			if fr.Spec.Hold != nil {
				st.Phase = v1alpha1.PhaseHeld
			} else {
				st.Phase = v1alpha1.PhaseProgressing
			}
			st.CurrentWave = wv.Name
			if wv.Phase == v1alpha1.WaveRehearsing {
				return stepRehearsal(fr, w, i, now, res)
			}
			return stepActiveWave(fr, w, i, spec, now, res)
		}
	}
	if !reachedAny(fr, w) {
		st.Phase = v1alpha1.PhaseHeld
		res.waitFor(v1alpha1.WaitingForMembers, "", nil, nil,
			"every wave of %s passed or was skipped, but no cluster is Ready at it: it becomes the known-good once one is, and a newer revision replaces it", st.Candidate.Revision)
		return res
	}
	complete(fr, now)
	return res
}

// waveNeedsApproval tells whether the wave named wave waits for an approval of the candidate before
// it starts: its spec asks for one (requireApproval), or the policy's settings.approvals do, for the
// rollout's class or for the wave.
func waveNeedsApproval(fr *v1alpha1.FleetRollout, s verdict.Settings, wave string) bool {
	return fr.WaveSpec(wave).RequireApproval || s.Approvals.NeedsApproval(fr.Spec.Class, wave)
}

// soakRecordEvery is how often, at most, a soaking wave's samples are written to its status
// (status.waves[].soaked): every 15 seconds, or every sample interval when that is longer. A
// restart loses at most that much of the soak's samples, and the gap shows in the evidence.
func soakRecordEvery(s verdict.Settings) time.Duration {
	return max(15*time.Second, s.SampleInterval)
}

// soakRecordDue tells whether wave wv's samples are due to be written to status.
func soakRecordDue(wv *v1alpha1.WaveStatus, now time.Time, s verdict.Settings) bool {
	var last time.Time
	for _, e := range wv.Soaked {
		if e.Last.After(last) {
			last = e.Last.Time
		}
	}
	return last.IsZero() || now.Sub(last) >= soakRecordEvery(s)
}

// settleGrace bounds how long, after a wave's soak, its decision waits for members that
// kustomize-controller has between two outcomes (collector.Observation.Unsettled); then they are
// judged as seen.
const settleGrace = time.Minute

// stepActiveWave observes a switched wave: Ready at the candidate, then soaking, then the gate.
// Members held back before the wave count as failed; they are never switched.
func stepActiveWave(fr *v1alpha1.FleetRollout, w *world, i int, spec v1alpha1.Wave, now metav1.Time, res stepResult) stepResult {
	st := &fr.Status
	wv := &st.Waves[i]
	cand := st.Candidate
	wv.Missing = fleets.Missing(wv.Clusters, w.Inventory)
	held := heldBack(wv)
	refused := refusedWrites(st)
	var updated, healthy, failed, retrying, unavailable int32
	var unsettled, pending []string
	soaking := wv.Phase == v1alpha1.WaveSoaking
	for _, c := range wv.Clusters {
		if held[c] {
			failed++
			continue
		}
		if refused[c] && !w.Kustomizations[c].ReadyAt(cand.Source, cand.Revision) {
			// The hub refuses its Kustomization: it counts as failed until a write goes through.
			failed++
			continue
		}
		o := w.Kustomizations[c]
		if o.Exists && o.Source == cand.Source {
			updated++
		}
		switch {
		case slices.Contains(wv.Missing, c) || o.FailedAt(cand.Source, cand.Revision):
			failed++
		case o.ReadyAt(cand.Source, cand.Revision), soaking && o.StillAt(cand.Source, cand.Revision):
			healthy++
		case soaking && o.RetryingAt(cand.Source, cand.Revision):
			// A retried failure of the revision it had applied: not judged before the soak ends.
			retrying++
		case o.UnavailableAt(cand.Source):
			// Its API server did not take the apply: retried, and pending, unless the wave's budget
			// takes it as a failure (below).
			unavailable++
			pending = append(pending, c)
		default:
			pending = append(pending, c)
		}
		if soaking && o.Unsettled(cand.Source, cand.Revision) {
			unsettled = append(unsettled, c)
		}
	}
	wv.Updated, wv.Healthy = updated, healthy
	budget := int32(0)
	if spec.MaxFailures != nil {
		budget = *spec.MaxFailures
	}
	total := int32(len(wv.Clusters))
	soak := collector.WaveSoak(spec, w.Settings)
	res.Gates = []string{v1alpha1.GateNoDisruption}

	switch {
	case failed > budget:
		res.GateWave = i
	case wv.Phase == v1alpha1.WaveProgressing && (healthy+failed == total ||
		healthy+failed+unavailable == total && failed+unavailable <= budget):
		// Every member is Ready or failed; members whose API server did not take the apply count
		// as failed when the wave's budget takes them, so the others soak (a member that recovers
		// is Ready in the soak). A wave that cannot take them waits for their retry, to its deadline.
		wv.Phase = v1alpha1.WaveSoaking
		// The soak counts from readyAt as the API server keeps it (to the second), so the soak ends
		// when the status says it does, not up to a second after.
		readyAt := metav1.NewTime(w.Now.Truncate(time.Second))
		wv.ReadyAt = &readyAt
		res.RequeueAfter = readyAt.Add(soak).Sub(w.Now)
		res.waitForSoak(wv, soak)
	case wv.Phase == v1alpha1.WaveSoaking && healthy+failed+retrying < total && budget == 0:
		// A member lost readiness during the soak and the wave allows no failure: decide now, the
		// gate will say why. (With a failure budget the soak runs its course and the policy counts.)
		res.GateWave = i
	case wv.Phase == v1alpha1.WaveSoaking:
		soakEnd := wv.ReadyAt.Add(soak)
		switch left, over := soakEnd.Sub(w.Now), w.Now.Sub(soakEnd); {
		case left > 0:
			// Back before the soak's end to write its samples so far (status.waves[].soaked).
			res.RequeueAfter = min(left, soakRecordEvery(w.Settings))
			res.waitForSoak(wv, soak)
		case len(unsettled) > 0 && over < settleGrace:
			// Members kustomize-controller has between two outcomes are waited for, not judged.
			res.RequeueAfter = settleGrace - over
			res.waitFor(v1alpha1.WaitingForSettle, wv.Name, &metav1.Time{Time: soakEnd}, &metav1.Time{Time: soakEnd.Add(settleGrace)},
				"wave %s soaked; %s between two reconcile outcomes (%s): decided when they settle, or at the latest %s after the soak, as seen",
				wv.Name, plural(len(unsettled), "cluster is", "clusters are"), firstNames(unsettled, 3), settleGrace)
		default:
			res.GateWave = i
		}
	default:
		// A member's Kustomization suspended by someone else (flux suspend kustomization) is theirs
		// to resume: kustomize-controller applies nothing there meanwhile, so the wave waits, with
		// no deadline (no until), and says what to do. Once resumed, the deadline counts again from
		// then.
		prev, since := st.WaitingFor, wv.StartedAt
		resumed := prev != nil && prev.Reason == v1alpha1.WaitingForMembers && prev.Wave == wv.Name && prev.Until == nil
		if names := suspended(w, pending); len(names) > 0 {
			if resumed && prev.Since != nil {
				since = prev.Since
			} else {
				since = &now
			}
			res.waitFor(v1alpha1.WaitingForMembers, wv.Name, since, nil,
				"wave %s: %d/%d clusters Ready at %s; the Kustomization of %s is suspended (spec.suspend) and applies nothing: the wave waits until it is resumed (flux resume kustomization %s -n %s)",
				wv.Name, healthy, total, cand.Revision, strings.Join(names, ", "), v1alpha1.KustomizationName(fr.Name, names[0]), fr.Namespace)
			res.RequeueAfter = fr.GetRequeueAfter()
			return res
		}
		switch {
		case resumed:
			since = &now
		case prev != nil && prev.Reason == v1alpha1.WaitingForMembers && prev.Wave == wv.Name && prev.Since != nil && prev.Since.After(since.Time):
			since = prev.Since
		}
		deadline := waveDeadline(fr, wv)
		if w.Now.Sub(since.Time) > deadline {
			res.GateWave = i
		} else {
			res.waitFor(v1alpha1.WaitingForMembers, wv.Name, since, &metav1.Time{Time: since.Add(deadline)},
				"wave %s: %d/%d clusters Ready at %s", wv.Name, healthy, total, cand.Revision)
		}
	}
	if res.GateWave == i && awaitEvidence(fr, w, wv, v1alpha1.GateNoDisruption, &res) {
		res.GateWave = -1
	}
	return res
}

// suspended are the clusters whose Kustomization is suspended.
func suspended(w *world, clusters []string) []string {
	var out []string
	for _, c := range clusters {
		if ks := w.Objects[c]; ks != nil && ks.Spec.Suspend {
			out = append(out, c)
		}
	}
	return out
}

// preWaveGates are decided before a wave switches anything: deploySafe for every wave (its preflight
// is about the wave's own targets), rollbackSucceeds for every wave (the known-good must still be there
// to go back to), and rollbackSafe before the first. A pre-wave gate that fails blocks the wave with
// nothing of it applied; it is decided again when the rollout's spec changes (an approval is added)
// or after an interval (a cluster is fixed, a policy is relaxed). When every one passes, the wave starts.
func preWaveGates(fr *v1alpha1.FleetRollout, w *world, i int, now metav1.Time, res stepResult) stepResult {
	wv := &fr.Status.Waves[i]
	gates := []string{v1alpha1.GateDeploySafe, v1alpha1.GateRollbackSucceeds}
	if i == 0 {
		gates = []string{v1alpha1.GateDeploySafe, v1alpha1.GateRollbackSafe, v1alpha1.GateRollbackSucceeds}
	}
	var undecided, failed, inconclusive []string
	var recheck time.Duration
	var decided, since *metav1.Time
	for _, g := range gates {
		o := gateOutcome(wv, g)
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
func reachableSince(w *world, o *v1alpha1.GateOutcome) bool {
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
func awaitEvidence(fr *v1alpha1.FleetRollout, w *world, wv *v1alpha1.WaveStatus, gate string, res *stepResult) bool {
	o := gateOutcome(wv, gate)
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

// gateOutcome returns the wave's latest outcome of gate, or nil.
func gateOutcome(wv *v1alpha1.WaveStatus, gate string) *v1alpha1.GateOutcome {
	for i := range wv.Gates {
		if wv.Gates[i].Gate == gate {
			return &wv.Gates[i]
		}
	}
	return nil
}

// recordGate keeps the latest decision of each gate on the wave.
func recordGate(fr *v1alpha1.FleetRollout, wv *v1alpha1.WaveStatus, gate string, d GateDecision, receipt string, now time.Time) {
	t := metav1.NewTime(now)
	o := v1alpha1.GateOutcome{Gate: gate, Result: d.Result, Receipt: receipt, DecidedAt: &t, ObservedGeneration: fr.Generation}
	prev := gateOutcome(wv, gate)
	if d.Result == v1alpha1.ResultInconclusive {
		o.Unobserved = capUnobserved(d.Unobserved)
		o.InconclusiveSince = &t
		if prev != nil && prev.Result == v1alpha1.ResultInconclusive && prev.InconclusiveSince != nil {
			o.InconclusiveSince = prev.InconclusiveSince
		}
	}
	if prev != nil {
		*prev = o
		return
	}
	wv.Gates = append(wv.Gates, o)
}

// advance applies the gate decisions a step asked for to the status: each gate's outcome and
// condition on the wave, then the wave moves (applyGates). A pre-wave gate that failed says so at
// once, as the next pass would. It records what the rollout waits for; GateWave and Gates stay what
// the step asked for. It is pure, and the one transition both the controller and the narrative
// tests run.
func advance(w *world, res stepResult, decided []decidedGate) stepResult {
	fr := w.Rollout
	res.Decided = -1
	if i := res.GateWave; i >= 0 && len(decided) > 0 {
		wv := &fr.Status.Waves[i]
		for _, g := range decided {
			status, reason := metav1ConditionFor(g.Decision.Result)
			conditions.Set(fr, &metav1.Condition{Type: g.Gate, Status: status, Reason: reason,
				Message: capMessage(fmt.Sprintf("wave %s: %s (receipt %s)", wv.Name, summarize(g.Decision), g.Receipt))})
		}
		applyGates(fr, w, i, decided)
		switch wv.Phase {
		case v1alpha1.WavePending:
			res = preWaveGates(fr, w, i, metav1.NewTime(w.Now), res)
		case v1alpha1.WaveSucceeded, v1alpha1.WaveFailed:
			res.Decided = i
		case v1alpha1.WaveSoaking, v1alpha1.WaveProgressing:
			awaitEvidence(fr, w, wv, v1alpha1.GateNoDisruption, &res)
		case v1alpha1.WaveRehearsing:
			awaitEvidence(fr, w, wv, v1alpha1.GateRollbackSucceeds, &res)
		}
	}
	fr.Status.WaitingFor = res.Wait
	return res
}

// progressOf sums up where the rollout is: its phase, candidate and the phase of each wave and
// rehearsal. A step that changes it recorded an intent to act on.
func progressOf(st *v1alpha1.FleetRolloutStatus) string {
	var b strings.Builder
	b.WriteString(st.Phase)
	if st.Candidate != nil {
		b.WriteString(" " + st.Candidate.Key())
	}
	if st.LastKnownGood != nil {
		b.WriteString(" " + st.LastKnownGood.Key())
	}
	for _, wv := range st.Waves {
		b.WriteString(" " + wv.Name + "=" + wv.Phase)
		if wv.Rehearsal != nil {
			b.WriteString("/" + wv.Rehearsal.Phase)
		}
	}
	return b.String()
}

// applyGates records the decisions of the gates a step asked for on wave i and moves the wave: a
// pending wave starts when every pre-wave gate passed; a soaked wave passes noDisruption into a
// rehearsal (first wave, when the policy asks and there is a known-good) or success; a rehearsed wave
// passes rollbackSucceeds into success. A failed post-wave gate fails the wave.
func applyGates(fr *v1alpha1.FleetRollout, w *world, i int, decided []decidedGate) {
	wv := &fr.Status.Waves[i]
	now := metav1.NewTime(w.Now)
	pass, failed := true, false
	for _, g := range decided {
		recordGate(fr, wv, g.Gate, g.Decision, g.Receipt, w.Now)
		pass = pass && g.Decision.Result == v1alpha1.ResultPass
		failed = failed || g.Decision.Result == v1alpha1.ResultFail
		if g.Gate == v1alpha1.GateDeploySafe && (wv.Phase == v1alpha1.WavePending || wv.Phase == v1alpha1.WaveAwaiting) {
			// The targets whose preflight failed are held back when the gate passes (the policy
			// counted them against the wave's budget); a failed gate starts nothing.
			wv.HeldBack = nil
			if g.Decision.Result == v1alpha1.ResultPass {
				excuse(wv, excusedBy(wv, g.Decision), g.Receipt)
				wv.HeldBack = heldBackBy(wv, g.Evidence)
			}
		}
	}
	switch wv.Phase {
	case v1alpha1.WavePending, v1alpha1.WaveAwaiting:
		if pass {
			wv.Phase = v1alpha1.WaveProgressing
			wv.StartedAt = &now
		}
		return
	}
	if !pass && !failed {
		// Inconclusive: the wave stays as it is (soaking, or its rehearsal done) and is decided
		// again as the evidence comes in; nothing advances and nothing rolls back.
		return
	}
	switch wv.Phase {
	case v1alpha1.WaveSoaking, v1alpha1.WaveProgressing:
		if pass && i == 0 && !wv.CatchUp && w.Settings.Rehearsal && fr.Status.LastKnownGood != nil && wv.Rehearsal == nil {
			wv.Phase = v1alpha1.WaveRehearsing
			wv.Rehearsal = &v1alpha1.RehearsalStatus{Phase: v1alpha1.RehearsalRollingBack, BackStartedAt: &now}
			return
		}
	}
	wv.FinishedAt = &now
	if pass {
		wv.Phase = v1alpha1.WaveSucceeded
		return
	}
	wv.Phase = v1alpha1.WaveFailed
	onFailure(fr, w)
}

// decidedGate is one gate decision with the receipt that records it and the evidence collected for
// it (deploySafe's names the targets to hold back).
type decidedGate struct {
	Gate     string
	Decision GateDecision
	Receipt  string
	Evidence any
}

// stepRehearsal moves a rollback rehearsal of the wave: back to the known-good until every member is
// Ready there, then forward to the candidate until every member is Ready again; then rollbackSucceeds
// is decided over the timings. A leg that is not healthy within the wave deadline ends the rehearsal,
// and the gate fails on it.
func stepRehearsal(fr *v1alpha1.FleetRollout, w *world, i int, now metav1.Time, res stepResult) stepResult {
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

// onFailure holds or rolls back after a failed wave: spec.rollback.onFailure, else the policy's onFail.
func onFailure(fr *v1alpha1.FleetRollout, w *world) {
	if fr.Status.Phase == v1alpha1.PhaseRollingBack || fr.Status.Phase == v1alpha1.PhaseRolledBack {
		return
	}
	if catchingUp(&fr.Status) {
		// A catch-up brings clusters to the known-good itself: there is nothing to roll back to.
		// What it switched stays, and the rollout holds until a newer revision or spec.retry.
		fr.Status.Phase = v1alpha1.PhaseHeld
		return
	}
	if fr.OnFailure(w.Settings.OnFail) == v1alpha1.OnFailureRollback && fr.Status.LastKnownGood != nil {
		beginRollback(fr, w)
		return
	}
	fr.Status.Phase = v1alpha1.PhaseHeld
}

// stepRollback waits, until the rollback's deadline, for every cluster the rollout manages to be
// Ready at the known-good revision. At the deadline the rollout is RolledBack all the same, with the
// clusters not seen Ready there listed as unconfirmed: their Kustomizations point at the
// known-good, so Flux converges them when they answer again (trackLag confirms them then).
func stepRollback(fr *v1alpha1.FleetRollout, w *world, now metav1.Time) stepResult {
	st := &fr.Status
	res := stepResult{GateWave: -1, Decided: -1}
	kg := st.LastKnownGood
	present := map[string]bool{}
	for _, c := range w.Inventory {
		present[c.Name] = true
	}
	var confirmed, unconfirmed, gone []string
	for c, o := range w.Kustomizations {
		if !o.Exists {
			continue
		}
		if !rolledBack(o.Source, st) {
			continue // held back at an older revision by an earlier rollout: it stays there
		}
		if !present[c] {
			// Its FleetCluster is gone: it is sent back all the same, with the kubeconfig its
			// Kustomization has (clusterFor).
			gone = append(gone, c)
		}
		if o.ReadyAt(kg.Source, kg.Revision) {
			confirmed = append(confirmed, c)
		} else {
			unconfirmed = append(unconfirmed, c)
		}
	}
	rb := st.Rollback
	if rb == nil || rb.To != kg.Revision || rb.StartedAt == nil || rb.Deadline == nil {
		// A rollback recorded before its deadline was: it starts counting now.
		rb = newRollback(fr, w, len(confirmed)+len(unconfirmed))
	}
	if len(unconfirmed) > 0 && w.Now.Before(rb.Deadline.Time) {
		res.waitFor(v1alpha1.WaitingForRollback, "", rb.StartedAt, rb.Deadline, "rolling back: %d/%d clusters Ready at known-good %s, at most until %s",
			len(confirmed), len(confirmed)+len(unconfirmed), kg.Revision, rb.Deadline.UTC().Format(time.RFC3339))
		res.RequeueAfter = rb.Deadline.Sub(w.Now)
		return res
	}
	sort.Strings(gone)
	sort.Strings(confirmed)
	sort.Strings(unconfirmed)
	rb.Confirmed, rb.Unconfirmed, rb.Departed, rb.FinishedAt = confirmed, unconfirmed, gone, &now
	st.Phase = v1alpha1.PhaseRolledBack
	st.CurrentWave = ""
	for i := range st.Waves {
		if st.Waves[i].StartedAt != nil && st.Waves[i].Phase != v1alpha1.WavePending {
			st.Waves[i].Phase = v1alpha1.WaveRolledBack
		}
	}
	reject(fr, st.Candidate, "rolled back to "+kg.Revision, now)
	st.Revert = nil
	return res
}

// beginRollback sends the rollout back to its known-good revision; without one there is nothing to go
// back to, and it holds.
func beginRollback(fr *v1alpha1.FleetRollout, w *world) {
	if fr.Status.LastKnownGood == nil {
		fr.Status.Phase = v1alpha1.PhaseHeld
		return
	}
	fr.Status.Phase = v1alpha1.PhaseRollingBack
	n := 0
	for _, o := range w.Kustomizations {
		if o.Exists && rolledBack(o.Source, &fr.Status) {
			n++
		}
	}
	newRollback(fr, w, n)
}

// newRollback records a rollback starting now, with its deadline, for n clusters sent back.
func newRollback(fr *v1alpha1.FleetRollout, w *world, n int) *v1alpha1.RollbackStatus {
	// Kept to the second, as the API server keeps it, so the deadline is where status says it is.
	start := metav1.NewTime(w.Now.Truncate(time.Second))
	deadline := metav1.NewTime(start.Add(rollbackTimeout(fr, n)))
	fr.Status.Rollback = &v1alpha1.RollbackStatus{To: fr.Status.LastKnownGood.Revision, StartedAt: &start, Deadline: &deadline}
	return fr.Status.Rollback
}

// rollbackTimeout is spec.rollback.timeout, else the wave deadline over the n clusters sent back.
func rollbackTimeout(fr *v1alpha1.FleetRollout, n int) time.Duration {
	if t := fr.Spec.Rollback.Timeout; t != nil && t.Duration > 0 {
		return t.Duration
	}
	return deadlineFor(fr, n)
}

// refusedWrites are the clusters whose Kustomization the hub refuses (status.writeFailures that
// need a fix); transient failures are only retried.
func refusedWrites(st *v1alpha1.FleetRolloutStatus) map[string]bool {
	var out map[string]bool
	for _, f := range st.WriteFailures {
		if f.Reason == v1alpha1.WriteRefused || f.Reason == v1alpha1.WriteNameTaken {
			if out == nil {
				out = map[string]bool{}
			}
			out[f.Cluster] = true
		}
	}
	return out
}

// adoptBuilds gives the candidates status recorded before builds were (status.candidate and the
// others without one) the spec's build: the build their Kustomizations were written with.
func adoptBuilds(fr *v1alpha1.FleetRollout) {
	for _, r := range candidates(&fr.Status) {
		if r.Build == nil {
			r.Build = fr.SpecBuild().DeepCopy()
			r.BuildHash = v1alpha1.HashBuild(r.Build)
		}
	}
}

// candidateName names a candidate for people: its revision, and its build when the known-good, the
// candidate or status.history has the same revision with another build.
func candidateName(revision, buildHash string, st *v1alpha1.FleetRolloutStatus) string {
	for _, r := range candidates(st) {
		if r.Revision == revision && r.BuildHash != buildHash {
			return fmt.Sprintf("revision %s with build %s", revision, buildHash)
		}
	}
	return "revision " + revision
}

// candidates are the candidates status records: the candidate, the known-good, the revision a
// going back goes to, and status.history.
func candidates(st *v1alpha1.FleetRolloutStatus) []*v1alpha1.RevisionStatus {
	out := []*v1alpha1.RevisionStatus{}
	for _, r := range []*v1alpha1.RevisionStatus{st.Candidate, st.LastKnownGood} {
		if r != nil {
			out = append(out, r)
		}
	}
	if st.Revert != nil {
		out = append(out, &st.Revert.To)
	}
	for i := range st.History {
		out = append(out, &st.History[i].RevisionStatus)
	}
	return out
}

// newCandidate starts w.Target with build from its first wave. The gate conditions of the previous
// candidate go: they are about another candidate. Its pinned source is the one status already
// records for the same revision and build (a going back), else its own (CandidateSourceName).
func newCandidate(fr *v1alpha1.FleetRollout, w *world, build *v1alpha1.Build, buildHash string) {
	st := &fr.Status
	for _, g := range v1alpha1.Gates {
		conditions.Delete(fr, g)
	}
	recorded := candidates(st)
	source := v1alpha1.CandidateSourceName(fr.Name, w.Target, buildHash, func(name string) bool {
		return slices.ContainsFunc(recorded, func(r *v1alpha1.RevisionStatus) bool { return r.Source == name && r.BuildHash != buildHash })
	})
	for _, r := range recorded {
		if r.IsCandidate(w.Target, buildHash) && r.Source != "" {
			source = r.Source
			break
		}
	}
	st.Candidate = &v1alpha1.RevisionStatus{Revision: w.Target, Source: source, Build: build.DeepCopy(), BuildHash: buildHash}
	st.Phase = v1alpha1.PhaseProgressing
	st.CurrentWave = ""
	st.PlanHash = w.Plan.Hash
	st.Rollback = nil
	st.Waves = make([]v1alpha1.WaveStatus, 0, len(w.Plan.Waves))
	for _, pw := range w.Plan.Waves {
		st.Waves = append(st.Waves, v1alpha1.WaveStatus{Name: pw.Name, Phase: v1alpha1.WavePending})
	}
}

// complete makes the candidate the known-good: the first entry of status.history, which keeps
// spec.historyLimit earlier ones (a revision listed once, where it last completed).
func complete(fr *v1alpha1.FleetRollout, now metav1.Time) {
	st := &fr.Status
	st.Phase = v1alpha1.PhaseCompleted
	st.CurrentWave = ""
	kg := *st.Candidate
	st.LastKnownGood = &kg
	st.Revert = nil
	history := []v1alpha1.HistoryEntry{{RevisionStatus: kg, CompletedAt: &now}}
	for _, h := range st.History {
		if !h.IsCandidate(kg.Revision, kg.BuildHash) && len(history) <= fr.HistoryLimit() {
			history = append(history, h)
		}
	}
	st.History = history
}

// beginRevert starts the rollback of a completed rollout: the known-good is rejected (so the
// source, which still has it, does not bring it back) and the previous known-good becomes the
// candidate, rolled out through the gates wave by wave like any other, with the revision gone
// back from as the known-good to fall back to meanwhile. It returns why it cannot, when it cannot.
func beginRevert(fr *v1alpha1.FleetRollout, now metav1.Time) string {
	st := &fr.Status
	prev := st.PreviousKnownGood()
	if st.LastKnownGood == nil || prev == nil {
		return fmt.Sprintf("rollback requested, but status.history holds no known-good revision before %s to go back to (spec.historyLimit is %d)",
			revisionOrNone(st.LastKnownGood), fr.HistoryLimit())
	}
	from := st.LastKnownGood.Revision
	reject(fr, st.LastKnownGood, "rolled back from Completed by spec.rollback.request, to "+prev.Revision, now)
	retry(fr, prev.Revision, prev.BuildHash, now) // asked for by name: an earlier rejection of it does not stand
	st.Revert = &v1alpha1.RevertStatus{From: from, To: prev.RevisionStatus, RequestedAt: &now}
	return ""
}

func revisionOrNone(r *v1alpha1.RevisionStatus) string {
	if r == nil {
		return "none"
	}
	return r.Revision
}

// retry lets a rejected or failed candidate of revision target go again: it leaves status.rejected,
// and failed waves are observed afresh. buildHash "" is every build of the revision; else that
// build only (a going back to it), with the rejections that name no build.
func retry(fr *v1alpha1.FleetRollout, target, buildHash string, now metav1.Time) {
	st := &fr.Status
	kept := st.Rejected[:0]
	for _, r := range st.Rejected {
		if r.Revision != target || (buildHash != "" && r.BuildHash != "" && r.BuildHash != buildHash) {
			kept = append(kept, r)
		}
	}
	st.Rejected = kept
	if st.Candidate == nil || st.Candidate.Revision != target || (buildHash != "" && st.Candidate.BuildHash != buildHash) {
		return
	}
	if st.Phase == v1alpha1.PhaseRolledBack {
		// Start the candidate afresh, from its first wave.
		st.Candidate, st.Waves, st.Phase, st.Rollback = nil, nil, v1alpha1.PhaseIdle, nil
		return
	}
	if st.Phase != v1alpha1.PhaseHeld {
		return
	}
	for i := range st.Waves {
		if st.Waves[i].Phase == v1alpha1.WaveFailed {
			st.Waves[i].Phase = v1alpha1.WaveProgressing
			st.Waves[i].ReadyAt, st.Waves[i].FinishedAt, st.Waves[i].Soaked = nil, nil, nil
			st.Waves[i].StartedAt = &now
		}
	}
	st.Phase = v1alpha1.PhaseProgressing
}

// reject records candidate c in status.rejected: that revision with that build is not rolled out
// again until spec.retry changes.
func reject(fr *v1alpha1.FleetRollout, c *v1alpha1.RevisionStatus, reason string, now metav1.Time) {
	if fr.IsRejectedBuild(c.Revision, c.BuildHash) {
		return
	}
	fr.Status.Rejected = append(fr.Status.Rejected, v1alpha1.RejectedRevision{Revision: c.Revision, BuildHash: c.BuildHash, Reason: reason, At: now})
	if n := len(fr.Status.Rejected); n > maxRejected {
		fr.Status.Rejected = fr.Status.Rejected[n-maxRejected:]
	}
}

// inFlight tells whether a candidate is between its first switch and its end.
func inFlight(st *v1alpha1.FleetRolloutStatus) bool {
	return st.Candidate != nil && (st.Phase == v1alpha1.PhaseProgressing || st.Phase == v1alpha1.PhaseHeld)
}

// unchangedCandidate tells whether the tracked source serves a revision a completed rollout could
// leave unrolled when it builds what the known-good does: no spec.revision pin, at rest on a
// known-good, and a target that is neither the known-good, nor rejected, nor already found unchanged.
func unchangedCandidate(fr *v1alpha1.FleetRollout, w *world) bool {
	st := &fr.Status
	return fr.Spec.Revision == "" && st.Phase == v1alpha1.PhaseCompleted && st.Revert == nil && st.LastKnownGood != nil &&
		w.Target != "" && w.Target != st.LastKnownGood.Revision && w.TrackedState.Revision == w.Target && !fr.IsRejected(w.Target) &&
		(st.Unchanged == nil || st.Unchanged.Revision != w.Target)
}

// anyStarted tells whether a wave of the candidate in flight started switching clusters.
// During a catch-up only the catch-up wave counts: the waves before it rolled out the known-good
// itself, so a catch-up blocked before it started does not keep a newer revision waiting.
func anyStarted(st *v1alpha1.FleetRolloutStatus) bool {
	catchUp := catchingUp(st)
	for _, wv := range st.Waves {
		if catchUp && !wv.CatchUp {
			continue
		}
		if wv.StartedAt != nil && st.Phase != v1alpha1.PhaseCompleted && st.Phase != v1alpha1.PhaseRolledBack {
			return true
		}
	}
	return false
}

// fluxThroughput is how many of a wave's Kustomizations kustomize-controller is assumed to apply
// per second: about half of the 4 a second Flux measures at concurrency 20, for the periodic
// re-reconciles of the rest of the fleet and for packages slower than its benchmark's.
const fluxThroughput = 2

// waveDeadline bounds how long a wave (or a leg of its rehearsal) may take to become Ready before it
// fails: twice the Kustomization timeout, plus a minute for source fetching and scheduling, plus
// the time kustomize-controller needs to work through the wave's switched members at
// fluxThroughput (a 1,000-cluster wave: 8m20s more).
func waveDeadline(fr *v1alpha1.FleetRollout, wv *v1alpha1.WaveStatus) time.Duration {
	return deadlineFor(fr, len(wv.Clusters)-len(wv.HeldBack))
}

// deadlineFor is the time Flux is given to make n switched clusters Ready.
func deadlineFor(fr *v1alpha1.FleetRollout, n int) time.Duration {
	return 2*durationOr(fr.Spec.Template.Timeout, defaultKustomizationTimeout).Duration + time.Minute +
		time.Duration(max(n, 0))*time.Second/fluxThroughput
}

// heldBack is the set of wave members its deploySafe held back.
func heldBack(wv *v1alpha1.WaveStatus) map[string]bool {
	if len(wv.HeldBack) == 0 {
		return nil
	}
	out := make(map[string]bool, len(wv.HeldBack))
	for _, h := range wv.HeldBack {
		out[h.Cluster] = true
	}
	return out
}

// excuse takes the clusters names out of wave wv, which goes on without them: its deploySafe,
// recorded in receipt, could not observe them for the policy's inconclusiveAfter and the policy
// excuses them (inconclusiveUntil). They are never switched by the wave and are not counted in it;
// a catch-up wave brings them to the known-good once the rollout completes and they answer.
func excuse(wv *v1alpha1.WaveStatus, names []string, receipt string) {
	if len(names) == 0 {
		return
	}
	wv.Clusters = slices.DeleteFunc(wv.Clusters, func(c string) bool { return slices.Contains(names, c) })
	for _, c := range names {
		if !slices.ContainsFunc(wv.Excused, func(e v1alpha1.HeldBackCluster) bool { return e.Cluster == c }) {
			wv.Excused = append(wv.Excused, v1alpha1.HeldBackCluster{Cluster: c,
				Reason: "its preflight could not observe it for the policy's inconclusiveAfter; excused by receipt " + receipt})
		}
	}
}

// excusedFrom is members without the clusters wave wv excused.
func excusedFrom(wv *v1alpha1.WaveStatus, members []string) []string {
	if len(wv.Excused) == 0 {
		return members
	}
	return slices.DeleteFunc(members, func(c string) bool {
		return slices.ContainsFunc(wv.Excused, func(e v1alpha1.HeldBackCluster) bool { return e.Cluster == c })
	})
}

// maxHeldBackReason bounds a held-back member's reason in status; the receipt has the whole story.
const maxHeldBackReason = 256

// heldBackBy lists the members of wave wv whose preflight in deploySafe's evidence ev failed.
func heldBackBy(wv *v1alpha1.WaveStatus, ev any) []v1alpha1.HeldBackCluster {
	ds, ok := deploySafeOf(ev)
	if !ok {
		return nil
	}
	var out []v1alpha1.HeldBackCluster
	for _, c := range ds.Preflight.Clusters {
		if c.Failed() && slices.Contains(wv.Clusters, c.Name) {
			reason := c.Problem()
			if len(reason) > maxHeldBackReason {
				reason = reason[:maxHeldBackReason-3] + "..."
			}
			out = append(out, v1alpha1.HeldBackCluster{Cluster: c.Name, Reason: reason})
		}
	}
	return out
}

// firstNames lists the first n names, then how many more.
func firstNames(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return strings.Join(names[:n], ", ") + fmt.Sprintf(" and %d more", len(names)-n)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// previousFinished is when the wave before wave i finished, nil for the first.
func previousFinished(st *v1alpha1.FleetRolloutStatus, i int) *metav1.Time {
	if i == 0 {
		return nil
	}
	return st.Waves[i-1].FinishedAt
}
