package engine

import (
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/fleets"
	"github.com/tidegate/tidegate/verdict"
)

// stepWaves walks the candidate's waves in order and moves the first unfinished one.
func stepWaves(fr *v1alpha1.FleetRollout, w *World, now metav1.Time, res StepResult) StepResult {
	st := &fr.Status
	for i := range st.Waves {
		wv := &st.Waves[i]
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
			if skipped := stepPendingWave(fr, w, i, now, &res); !skipped {
				return res
			}
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
			return stepActiveWave(fr, w, i, fr.WaveSpec(wv.Name), now, res)
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

// stepPendingWave moves wave i, not started: it snapshots its members, skips it (and every later
// wave) when the earlier waves took every cluster, waits for its approval, refuses a wave plan that
// cannot be judged, or decides its pre-wave gates. It returns true when the wave was skipped and
// the next one is up.
func stepPendingWave(fr *v1alpha1.FleetRollout, w *World, i int, now metav1.Time, res *StepResult) (skipped bool) {
	st := &fr.Status
	wv := &st.Waves[i]
	// A catch-up wave's members were chosen when it was made (startCatchUp).
	members, skip, vacuous := wv.Clusters, false, error(nil)
	if !wv.CatchUp {
		var err error
		members, err = fleets.Members(fleets.Input{Rollout: fr, Inventory: w.Inventory}, st.Waves[:i], wv.Name)
		if err != nil {
			st.Phase, st.CurrentWave = v1alpha1.PhaseProgressing, wv.Name
			res.waitFor(v1alpha1.WaitingForGates, wv.Name, nil, nil, "%s", err.Error())
			return false
		}
		members = excusedFrom(wv, members)
		// Decided before an approval is asked for: an empty wave of a small fleet needs none.
		skip, vacuous = vacuousWave(fr, w, i, members)
	}
	if skip {
		skipWaves(fr, i)
		return true
	}
	st.Phase = v1alpha1.PhaseProgressing
	st.CurrentWave = wv.Name
	if WaveNeedsApproval(fr, w.Settings, wv.Name) && fr.ApprovalOfCandidate(st.Candidate, wv.Name, false) == nil {
		wv.Phase = v1alpha1.WaveAwaiting
		entry := fmt.Sprintf("{revision: %q, wave: %q}", st.Candidate.Revision, wv.Name)
		if fr.NeedsBuildApproval(st.Candidate) {
			entry = fmt.Sprintf("{revision: %q, buildHash: %q, wave: %q}", st.Candidate.Revision, st.Candidate.BuildHash, wv.Name)
		}
		res.waitFor(v1alpha1.WaitingForApproval, wv.Name, previousFinished(st, i), nil,
			"wave %s needs an approval: add %s to spec.approvals", wv.Name, entry)
		return false
	}
	wv.Phase = v1alpha1.WavePending
	wv.Clusters = members
	if err := vacuous; err != nil {
		// Held, not Progressing: a newer revision may replace the candidate, as after a
		// failed wave, rather than wait for one that cannot finish.
		st.Phase = v1alpha1.PhaseHeld
		res.waitFor(v1alpha1.WaitingForWavePlan, wv.Name, nil, nil, "wave %s does not start, and nothing of it is applied: %v", wv.Name, err)
		return false
	}
	*res = stepPreWave(fr, w, i, now, *res)
	return false
}

// WaveNeedsApproval tells whether the wave named wave waits for an approval of the candidate before
// it starts: its spec asks for one (requireApproval), or the policy's settings.approvals do, for the
// rollout's class or for the wave.
func WaveNeedsApproval(fr *v1alpha1.FleetRollout, s verdict.Settings, wave string) bool {
	return fr.WaveSpec(wave).RequireApproval || s.Approvals.NeedsApproval(fr.Spec.Class, wave)
}

// previousFinished is when the wave before wave i finished, nil for the first.
func previousFinished(st *v1alpha1.FleetRolloutStatus, i int) *metav1.Time {
	if i == 0 {
		return nil
	}
	return st.Waves[i-1].FinishedAt
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
