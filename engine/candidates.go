package engine

import (
	"fmt"
	"slices"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

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

// CandidateName names a candidate for people: its revision, and its build when the known-good, the
// candidate or status.history has the same revision with another build.
func CandidateName(revision, buildHash string, st *v1alpha1.FleetRolloutStatus) string {
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
func newCandidate(fr *v1alpha1.FleetRollout, w *World, build *v1alpha1.Build, buildHash string) {
	st := &fr.Status
	for _, g := range v1alpha1.Gates {
		apimeta.RemoveStatusCondition(&fr.Status.Conditions, g)
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

// UnchangedCandidate tells whether the tracked source serves a revision a completed rollout could
// leave unrolled when it builds what the known-good does: no spec.revision pin, at rest on a
// known-good, and a target that is neither the known-good, nor rejected, nor already found unchanged.
func UnchangedCandidate(fr *v1alpha1.FleetRollout, w *World) bool {
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
