package controllers

import (
	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/engine"
)

// The crash points of the state machine (FleetRolloutReconciler.TestHook lists them). Only the
// status patch needs more than a name at its call: which of its changes it records.

// statusPoints names what the status patch of a pass records beyond the progress before it
// (engine.Progress), then "status"; nil when no test hook is set.
func (r *FleetRolloutReconciler) statusPoints(before engine.Progress, st *v1alpha1.FleetRolloutStatus) []string {
	if r.TestHook == nil {
		return nil
	}
	var out []string
	now := engine.ProgressOf(st)
	if now.Candidate != "" && now.Candidate != before.Candidate {
		out = append(out, "status:candidate")
		// A new candidate's waves are all new: their phases are not changes to name.
		before = engine.Progress{Candidate: now.Candidate, Phase: before.Phase}
	}
	if now.Phase != before.Phase {
		out = append(out, "status:phase:"+now.Phase)
	}
	for _, wv := range st.Waves {
		if was, ok := before.Waves[wv.Name]; ok && was != wv.Phase {
			out = append(out, "status:wave:"+wv.Name+":"+wv.Phase)
		}
		if wv.Rehearsal != nil && before.Rehearsals[wv.Name] != wv.Rehearsal.Phase {
			out = append(out, "status:rehearsal:"+wv.Name+":"+wv.Rehearsal.Phase)
		}
	}
	return append(out, "status")
}

// hooks calls the test hook at each point in turn, up to the first error.
func (r *FleetRolloutReconciler) hooks(points []string) error {
	for _, p := range points {
		if err := r.hook(p); err != nil {
			return err
		}
	}
	return nil
}
