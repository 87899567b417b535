package engine

import (
	"fmt"
	"slices"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/fleets"
)

// vacuousWave decides wave i of the candidate, about to start with members, against the waves
// after it, with the members the current plan gives them (the last wave: every eligible cluster no
// snapshot holds, as it will take them). When wave i and every later wave are empty after an
// earlier wave took clusters, the fleet is only smaller than the waves: skip is true, and they
// are skipped (skipWaves). Otherwise it tells why wave i, or a later wave up to the last one with
// members, could not be judged (fleets.Vacuous): no wave starts while one could not. The later
// waves are checked too because stopping before the first wave leaves the fleet on one revision,
// while stopping at the vacuous wave would leave it split between two. Empty waves after the last
// one with members are not refused: they are skipped when their turn comes.
func vacuousWave(fr *v1alpha1.FleetRollout, w *World, i int, members []string) (skip bool, err error) {
	st := &fr.Status
	sizes := make(map[string]int, len(w.Plan.Waves))
	for _, pw := range w.Plan.Waves {
		sizes[pw.Name] = len(pw.Clusters)
	}
	if n := len(st.Waves) - 1; n > i {
		// A cluster that joined since the plan of the earlier waves goes to the last wave.
		snapshots := slices.Clone(st.Waves[:n])
		snapshots[i].Clusters = members
		if m, err := fleets.Members(fleets.Input{Rollout: fr, Inventory: w.Inventory}, snapshots, st.Waves[n].Name); err == nil {
			sizes[st.Waves[n].Name] = len(m)
		}
	}
	last := -1 // the last wave from i on that has members; a wave the plan lacks counts as having some
	if len(members) > 0 {
		last = i
	}
	for j := i + 1; j < len(st.Waves); j++ {
		if n, ok := sizes[st.Waves[j].Name]; !ok || n > 0 {
			last = j
		}
	}
	if last < 0 && tookClusters(st.Waves[:i]) {
		return true, nil
	}
	if err := fleets.Vacuous(fr, st.Waves[i].Name, len(members)); err != nil {
		return false, err
	}
	for j := i + 1; j <= last; j++ {
		wv := st.Waves[j]
		n, ok := sizes[wv.Name]
		if !ok || (wv.Phase != v1alpha1.WavePending && wv.Phase != v1alpha1.WaveAwaiting) {
			continue // a wave the current spec no longer has is reported when it is next
		}
		if err := fleets.Vacuous(fr, wv.Name, n); err != nil {
			return false, err
		}
	}
	return false, nil
}

// tookClusters tells whether any of waves has members.
func tookClusters(waves []v1alpha1.WaveStatus) bool {
	for _, wv := range waves {
		if len(wv.Clusters) > 0 {
			return true
		}
	}
	return false
}

// skipWaves marks wave i and every later wave not started Skipped, with why: the earlier waves
// took every eligible cluster. The clusters the plan does not reach are counted, so that a
// skipped wave never hides one.
func skipWaves(fr *v1alpha1.FleetRollout, i int) {
	msg := "no cluster left for this wave: the earlier waves took every eligible cluster"
	if n := fr.Status.SkippedCount; n > 0 {
		msg += fmt.Sprintf("; %d not eligible (status.skipped)", n)
	}
	for j := i; j < len(fr.Status.Waves); j++ {
		wv := &fr.Status.Waves[j]
		if wv.Phase == v1alpha1.WavePending || wv.Phase == v1alpha1.WaveAwaiting {
			wv.Phase, wv.Message, wv.Clusters = v1alpha1.WaveSkipped, msg, nil
		}
	}
}

// reachedAny tells whether the candidate reached a cluster: some member of its waves, not held
// back, is Ready at it. A candidate that reached none never becomes the known-good: a rollback
// to it would be a rollback to something no cluster ever ran.
func reachedAny(fr *v1alpha1.FleetRollout, w *World) bool {
	cand := fr.Status.Candidate
	for i := range fr.Status.Waves {
		wv := &fr.Status.Waves[i]
		held := heldBack(wv)
		for _, c := range wv.Clusters {
			if !held[c] && w.Kustomizations[c].ReadyAt(cand.Source, cand.Revision) {
				return true
			}
		}
	}
	return false
}
