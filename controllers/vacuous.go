package controllers

import (
	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/fleets"
)

// vacuousWave tells why wave i of the candidate, about to start with members, or a later wave not
// started yet, with the members the current plan gives it, could not be judged (fleets.Vacuous):
// no wave starts while one could not. The later waves are checked too because stopping before the
// first wave leaves the fleet on one revision, while stopping at the vacuous wave would leave it
// split between two.
func vacuousWave(fr *v1alpha1.FleetRollout, plan fleets.WavePlan, i int, members []string) error {
	st := &fr.Status
	if err := fleets.Vacuous(fr, st.Waves[i].Name, len(members)); err != nil {
		return err
	}
	planned := make(map[string]int, len(plan.Waves))
	for _, pw := range plan.Waves {
		planned[pw.Name] = len(pw.Clusters)
	}
	for _, wv := range st.Waves[i+1:] {
		n, ok := planned[wv.Name]
		if !ok || (wv.Phase != v1alpha1.WavePending && wv.Phase != v1alpha1.WaveAwaiting) {
			continue // a wave the current spec no longer has is reported when it is next
		}
		if err := fleets.Vacuous(fr, wv.Name, n); err != nil {
			return err
		}
	}
	return nil
}

// reachedAny tells whether the candidate reached a cluster: some member of its waves, not held
// back, is Ready at it. A candidate that reached none never becomes the known-good: a rollback
// to it would be a rollback to something no cluster ever ran.
func reachedAny(fr *v1alpha1.FleetRollout, w *world) bool {
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
