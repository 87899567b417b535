package controllers

import (
	"fmt"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
	tgcue "github.com/tidegate/tidegate/cue"
	"github.com/tidegate/tidegate/fleets"
)

// maxRejected bounds status.rejected.
const maxRejected = 10

// world is everything one reconcile observed, read before the step and never written by it.
type world struct {
	// Target is the revision to roll out: spec.revision, else the tracked source's artifact revision.
	Target string
	// TargetWhy says why Target is empty.
	TargetWhy string
	// Inventory is the FleetClusters of the rollout's namespace.
	Inventory fleets.Inventory
	// Plan is the wave plan over today's inventory.
	Plan fleets.WavePlan
	// Candidate and KnownGood are the states of the pinned sources named in status.
	Candidate sourceState
	KnownGood sourceState
	// Kustomizations are the rollout's per-cluster Kustomizations, by cluster name.
	Kustomizations map[string]ksObservation
	// Settings are the rollout policy's settings: soak, sample interval, onFail, rehearsal, approvals.
	Settings tgcue.Settings
	Now      time.Time
}

// stepResult is what a step leaves for the reconciler to do or say.
type stepResult struct {
	// GateWave is the index of the wave whose gates must be decided now, or -1.
	GateWave int
	// Gates are the gates to decide for GateWave, in order.
	Gates []string
	// Waiting says what the rollout waits for, for the Ready condition; empty when nothing.
	Waiting string
	// RequeueAfter asks to be called again then (a soak ending, a deadline); zero means the interval.
	RequeueAfter time.Duration
	// Refused says why a request in the spec could not be carried out; the reconciler reports it as an event.
	Refused string
	// Blocked is true when a wave cannot start because a gate decided before it failed.
	Blocked bool
}

// step moves the rollout's status one decision forward from what was recorded and what is observed.
// It is pure: the reconciler writes what the new status asks for on its next pass, so every write
// follows a recorded intent and a crash between the two repeats the write, never the decision.
func step(fr *v1alpha1.FleetRollout, w *world) stepResult {
	st := &fr.Status
	res := stepResult{GateWave: -1}
	now := metav1.NewTime(w.Now)
	if fr.Spec.Retry != st.LastHandledRetry {
		st.LastHandledRetry = fr.Spec.Retry
		if fr.Spec.Retry != "" {
			retry(fr, w.Target, now)
		}
	}
	if fr.Spec.Rollback.Request != st.LastHandledRollbackRequest {
		st.LastHandledRollbackRequest = fr.Spec.Rollback.Request
		if fr.Spec.Rollback.Request != "" && inFlight(st) {
			if st.LastKnownGood == nil {
				res.Refused = "rollback requested, but there is no known-good revision to go back to: set spec.hold to stop, or spec.revision to pin another revision"
			} else {
				beginRollback(fr)
			}
		}
	}
	if st.Phase == v1alpha1.PhaseRollingBack {
		return stepRollback(fr, w, now)
	}

	if w.Target == "" {
		res.Waiting = w.TargetWhy
		return res
	}
	if st.Candidate == nil || st.Candidate.Revision != w.Target {
		switch {
		case st.Candidate != nil && (st.Phase == v1alpha1.PhaseProgressing || (st.Phase == v1alpha1.PhaseHeld && fr.Spec.Hold != nil)) && anyStarted(st):
			// A rollout in progress finishes (or fails) before a newer revision starts, so no cluster
			// is left between two candidates; the newer one is picked up right after. A hold keeps
			// the candidate too: nothing new starts while held.
			res.Waiting = fmt.Sprintf("revision %s waits for %s to finish", w.Target, st.Candidate.Revision)
		case st.LastKnownGood != nil && st.LastKnownGood.Revision == w.Target && !anyStarted(st):
			st.Phase = v1alpha1.PhaseCompleted
			return res
		case fr.IsRejected(w.Target):
			res.Waiting = fmt.Sprintf("revision %s was rejected; change spec.retry to roll it out again", w.Target)
			return res
		default:
			newCandidate(fr, w)
			return res
		}
	}

	if !w.Candidate.Exists || !sameRevision(w.Candidate.Revision, st.Candidate.Revision) {
		res.Waiting = fmt.Sprintf("waiting for pinned source %s to fetch revision %s", st.Candidate.Source, st.Candidate.Revision)
		if w.Candidate.Message != "" {
			res.Waiting += ": " + w.Candidate.Message
		}
		return res
	}
	st.Candidate.Digest = w.Candidate.Digest

	switch st.Phase {
	case v1alpha1.PhaseCompleted, v1alpha1.PhaseRolledBack:
		return res
	}
	return stepWaves(fr, w, now, res)
}

// stepWaves walks the candidate's waves in order and moves the first unfinished one.
func stepWaves(fr *v1alpha1.FleetRollout, w *world, now metav1.Time, res stepResult) stepResult {
	st := &fr.Status
	for i := range st.Waves {
		wv := &st.Waves[i]
		spec := waveSpec(fr, wv.Name)
		switch wv.Phase {
		case v1alpha1.WaveSucceeded:
			continue
		case v1alpha1.WaveFailed:
			onFailure(fr, w)
			res.Waiting = fmt.Sprintf("wave %s failed", wv.Name)
			return res
		case v1alpha1.WavePending, v1alpha1.WaveAwaiting:
			if fr.Spec.Hold != nil {
				st.Phase = v1alpha1.PhaseHeld
				res.Waiting = "held: " + fr.Spec.Hold.Reason
				return res
			}
			st.Phase = v1alpha1.PhaseProgressing
			st.CurrentWave = wv.Name
			needsApproval := spec.RequireApproval || w.Settings.Approvals.NeedsApproval(fr.Spec.Class, wv.Name)
			if needsApproval && !fr.Approved(st.Candidate.Revision, wv.Name) {
				wv.Phase = v1alpha1.WaveAwaiting
				res.Waiting = fmt.Sprintf("wave %s needs an approval: add {revision: %q, wave: %q} to spec.approvals",
					wv.Name, st.Candidate.Revision, wv.Name)
				return res
			}
			wv.Phase = v1alpha1.WavePending
			members, err := fleets.Members(fleets.Input{Rollout: fr, Inventory: w.Inventory}, st.Waves[:i], wv.Name)
			if err != nil {
				res.Waiting = err.Error()
				return res
			}
			wv.Clusters = members
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
	complete(fr)
	return res
}

// stepActiveWave observes a switched wave: Ready at the candidate, then soaking, then the gate.
func stepActiveWave(fr *v1alpha1.FleetRollout, w *world, i int, spec v1alpha1.Wave, now metav1.Time, res stepResult) stepResult {
	st := &fr.Status
	wv := &st.Waves[i]
	cand := st.Candidate
	wv.Missing = fleets.Missing(wv.Clusters, w.Inventory)
	var updated, healthy, failed int32
	soaking := wv.Phase == v1alpha1.WaveSoaking
	for _, c := range wv.Clusters {
		o := w.Kustomizations[c]
		if o.Exists && o.Source == cand.Source {
			updated++
		}
		switch {
		case contains(wv.Missing, c) || o.failedAt(cand.Source):
			failed++
		case o.readyAt(cand.Source, cand.Revision), soaking && o.stillAt(cand.Source, cand.Revision):
			healthy++
		}
	}
	wv.Updated, wv.Healthy = updated, healthy
	budget := int32(0)
	if spec.MaxFailures != nil {
		budget = *spec.MaxFailures
	}
	total := int32(len(wv.Clusters))
	soak := waveSoak(spec, w.Settings)
	res.Gates = []string{v1alpha1.GateNoDisruption}

	switch {
	case failed > budget:
		res.GateWave = i
	case wv.Phase == v1alpha1.WaveProgressing && healthy+failed == total:
		wv.Phase = v1alpha1.WaveSoaking
		wv.ReadyAt = &now
		res.RequeueAfter = soak
	case wv.Phase == v1alpha1.WaveSoaking && healthy+failed < total && budget == 0:
		// A member lost readiness during the soak and the wave allows no failure: decide now, the
		// gate will say why. (With a failure budget the soak runs its course and the policy counts.)
		res.GateWave = i
	case wv.Phase == v1alpha1.WaveSoaking:
		if left := soak - w.Now.Sub(wv.ReadyAt.Time); left > 0 {
			res.RequeueAfter = left
			res.Waiting = fmt.Sprintf("wave %s soaking, %s left", wv.Name, left.Round(time.Second))
		} else {
			res.GateWave = i
		}
	default:
		deadline := waveDeadline(fr)
		if w.Now.Sub(wv.StartedAt.Time) > deadline {
			res.GateWave = i
		} else {
			res.Waiting = fmt.Sprintf("wave %s: %d/%d clusters Ready at %s", wv.Name, healthy, total, cand.Revision)
		}
	}
	return res
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
	var undecided, failed []string
	var recheck time.Duration
	for _, g := range gates {
		o := gateOutcome(wv, g)
		switch {
		case o == nil || o.DecidedAt == nil || o.ObservedGeneration != fr.Generation:
			undecided = append(undecided, g)
		case o.Result == v1alpha1.ResultPass:
		default:
			failed = append(failed, fmt.Sprintf("%s (receipt %s)", g, o.Receipt))
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
		res.Waiting = fmt.Sprintf("wave %s is blocked before it starts by %s; nothing of it is applied; decided again in %s or when the spec changes",
			wv.Name, strings.Join(failed, ", "), recheck.Round(time.Second))
		res.RequeueAfter = recheck
		res.Blocked = true
	default:
		wv.Phase = v1alpha1.WaveProgressing
		wv.StartedAt = &now
	}
	return res
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
	if prev := gateOutcome(wv, gate); prev != nil {
		*prev = o
		return
	}
	wv.Gates = append(wv.Gates, o)
}

// applyGates records the decisions of the gates a step asked for on wave i and moves the wave: a
// pending wave starts when every pre-wave gate passed; a soaked wave passes noDisruption into a
// rehearsal (first wave, when the policy asks and there is a known-good) or success; a rehearsed wave
// passes rollbackSucceeds into success. A failed post-wave gate fails the wave.
func applyGates(fr *v1alpha1.FleetRollout, w *world, i int, decided []decidedGate) {
	wv := &fr.Status.Waves[i]
	now := metav1.NewTime(w.Now)
	pass := true
	for _, g := range decided {
		recordGate(fr, wv, g.Gate, g.Decision, g.Receipt, w.Now)
		pass = pass && g.Decision.Result == v1alpha1.ResultPass
	}
	switch wv.Phase {
	case v1alpha1.WavePending, v1alpha1.WaveAwaiting:
		if pass {
			wv.Phase = v1alpha1.WaveProgressing
			wv.StartedAt = &now
		}
		return
	case v1alpha1.WaveSoaking, v1alpha1.WaveProgressing:
		if pass && i == 0 && w.Settings.Rehearsal && fr.Status.LastKnownGood != nil && wv.Rehearsal == nil {
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

// decidedGate is one gate decision with the receipt that records it.
type decidedGate struct {
	Gate     string
	Decision GateDecision
	Receipt  string
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
	at := func(rev *v1alpha1.RevisionStatus) int {
		n := 0
		for _, c := range wv.Clusters {
			if w.Kustomizations[c].readyAt(rev.Source, rev.Revision) {
				n++
			}
		}
		return n
	}
	total := len(wv.Clusters)
	deadline := waveDeadline(fr)
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
				res.Waiting = "held: " + fr.Spec.Hold.Reason
				return res
			}
			rh.Phase, rh.ForwardStartedAt = v1alpha1.RehearsalRollingForward, &now
		case over:
			rh.Phase, rh.Message = v1alpha1.RehearsalDone, msg
		default:
			res.Waiting = msg
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
			res.Waiting = msg
			return res
		}
	}
	if rh.Phase == v1alpha1.RehearsalDone {
		res.GateWave, res.Gates = i, []string{v1alpha1.GateRollbackSucceeds}
	}
	return res
}

// waveSoak is the wave's soak: its spec's, else the policy's.
func waveSoak(spec v1alpha1.Wave, s tgcue.Settings) time.Duration {
	if spec.Soak != nil {
		return spec.Soak.Duration
	}
	if s.Soak > 0 {
		return s.Soak
	}
	return time.Minute
}

// onFailure holds or rolls back after a failed wave: spec.rollback.onFailure, else the policy's onFail.
func onFailure(fr *v1alpha1.FleetRollout, w *world) {
	if fr.Status.Phase == v1alpha1.PhaseRollingBack || fr.Status.Phase == v1alpha1.PhaseRolledBack {
		return
	}
	if fr.OnFailure(w.Settings.OnFail) == v1alpha1.OnFailureRollback && fr.Status.LastKnownGood != nil {
		beginRollback(fr)
		return
	}
	fr.Status.Phase = v1alpha1.PhaseHeld
}

// stepRollback waits for every cluster the rollout manages to be Ready at the known-good revision.
func stepRollback(fr *v1alpha1.FleetRollout, w *world, now metav1.Time) stepResult {
	st := &fr.Status
	res := stepResult{GateWave: -1}
	kg := st.LastKnownGood
	present := map[string]bool{}
	for _, c := range w.Inventory {
		present[c.Name] = true
	}
	back, total := 0, 0
	var gone []string
	for c, o := range w.Kustomizations {
		if !o.Exists {
			continue
		}
		if !present[c] {
			// Its FleetCluster is gone, so its kubeconfig is unknown: it cannot be switched back.
			gone = append(gone, c)
			continue
		}
		total++
		if o.readyAt(kg.Source, kg.Revision) {
			back++
		}
	}
	if back < total {
		res.Waiting = fmt.Sprintf("rolling back: %d/%d clusters Ready at known-good %s", back, total, kg.Revision)
		return res
	}
	if len(gone) > 0 {
		sort.Strings(gone)
		res.Refused = fmt.Sprintf("rolled back every cluster but %v, whose FleetCluster is gone", gone)
	}
	st.Phase = v1alpha1.PhaseRolledBack
	st.CurrentWave = ""
	for i := range st.Waves {
		if st.Waves[i].StartedAt != nil && st.Waves[i].Phase != v1alpha1.WavePending {
			st.Waves[i].Phase = v1alpha1.WaveRolledBack
		}
	}
	reject(fr, st.Candidate.Revision, "rolled back to "+kg.Revision, now)
	return res
}

// beginRollback sends the rollout back to its known-good revision; without one there is nothing to go
// back to, and it holds.
func beginRollback(fr *v1alpha1.FleetRollout) {
	if fr.Status.LastKnownGood == nil {
		fr.Status.Phase = v1alpha1.PhaseHeld
		return
	}
	fr.Status.Phase = v1alpha1.PhaseRollingBack
}

func newCandidate(fr *v1alpha1.FleetRollout, w *world) {
	st := &fr.Status
	st.Candidate = &v1alpha1.RevisionStatus{Revision: w.Target, Source: v1alpha1.PinnedSourceName(fr.Name, w.Target)}
	st.Phase = v1alpha1.PhaseProgressing
	st.CurrentWave = ""
	st.PlanHash = w.Plan.Hash
	st.Waves = make([]v1alpha1.WaveStatus, 0, len(w.Plan.Waves))
	for _, pw := range w.Plan.Waves {
		st.Waves = append(st.Waves, v1alpha1.WaveStatus{Name: pw.Name, Phase: v1alpha1.WavePending})
	}
}

func complete(fr *v1alpha1.FleetRollout) {
	st := &fr.Status
	st.Phase = v1alpha1.PhaseCompleted
	st.CurrentWave = ""
	kg := *st.Candidate
	st.LastKnownGood = &kg
}

// retry lets a rejected or failed candidate go again: it leaves status.rejected, and failed waves are
// observed afresh.
func retry(fr *v1alpha1.FleetRollout, target string, now metav1.Time) {
	st := &fr.Status
	kept := st.Rejected[:0]
	for _, r := range st.Rejected {
		if r.Revision != target {
			kept = append(kept, r)
		}
	}
	st.Rejected = kept
	if st.Candidate == nil || st.Candidate.Revision != target {
		return
	}
	if st.Phase == v1alpha1.PhaseRolledBack {
		// Start the candidate afresh, from its first wave.
		st.Candidate, st.Waves, st.Phase = nil, nil, v1alpha1.PhaseIdle
		return
	}
	if st.Phase != v1alpha1.PhaseHeld {
		return
	}
	for i := range st.Waves {
		if st.Waves[i].Phase == v1alpha1.WaveFailed {
			st.Waves[i].Phase = v1alpha1.WaveProgressing
			st.Waves[i].ReadyAt, st.Waves[i].FinishedAt = nil, nil
			st.Waves[i].StartedAt = &now
		}
	}
	st.Phase = v1alpha1.PhaseProgressing
}

func reject(fr *v1alpha1.FleetRollout, revision, reason string, now metav1.Time) {
	if fr.IsRejected(revision) {
		return
	}
	fr.Status.Rejected = append(fr.Status.Rejected, v1alpha1.RejectedRevision{Revision: revision, Reason: reason, At: now})
	if n := len(fr.Status.Rejected); n > maxRejected {
		fr.Status.Rejected = fr.Status.Rejected[n-maxRejected:]
	}
}

// inFlight tells whether a candidate is between its first switch and its end.
func inFlight(st *v1alpha1.FleetRolloutStatus) bool {
	return st.Candidate != nil && (st.Phase == v1alpha1.PhaseProgressing || st.Phase == v1alpha1.PhaseHeld)
}

func anyStarted(st *v1alpha1.FleetRolloutStatus) bool {
	for _, wv := range st.Waves {
		if wv.StartedAt != nil && st.Phase != v1alpha1.PhaseCompleted && st.Phase != v1alpha1.PhaseRolledBack {
			return true
		}
	}
	return false
}

// waveDeadline bounds how long a wave may take to become Ready before it fails: twice the
// Kustomization timeout, plus a minute for source fetching and scheduling.
func waveDeadline(fr *v1alpha1.FleetRollout) time.Duration {
	return 2*durationOr(fr.Spec.Template.Timeout, defaultKustomizationTimeout).Duration + time.Minute
}

func waveSpec(fr *v1alpha1.FleetRollout, name string) v1alpha1.Wave {
	for _, w := range fr.Spec.Waves {
		if w.Name == name {
			return w
		}
	}
	return v1alpha1.Wave{Name: name}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
