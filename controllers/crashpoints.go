package controllers

import "github.com/tidegate/tidegate/api/v1alpha1"

// The crash points of the state machine (FleetRolloutReconciler.TestHook lists them). Only the
// status patch needs more than a name at its call: which of its changes it records.

// progressMarks is what the status points compare: the candidate, the rollout's phase and the phase
// of each wave and rehearsal, by wave name.
type progressMarks struct {
	candidate, phase string
	waves            map[string]string
	rehearsals       map[string]string
}

// statusMarks snapshots the status's marks when a test hook is set; nil otherwise.
func (r *FleetRolloutReconciler) statusMarks(fr *v1alpha1.FleetRollout) *progressMarks {
	if r.TestHook == nil {
		return nil
	}
	st := &fr.Status
	m := &progressMarks{phase: st.Phase, waves: map[string]string{}, rehearsals: map[string]string{}}
	if st.Candidate != nil {
		m.candidate = st.Candidate.Key()
	}
	for _, wv := range st.Waves {
		m.waves[wv.Name] = wv.Phase
		if wv.Rehearsal != nil {
			m.rehearsals[wv.Name] = wv.Rehearsal.Phase
		}
	}
	return m
}

// statusPoints names what the status patch of a pass records beyond before, then "status"; nil
// when before is (no test hook).
func statusPoints(before *progressMarks, fr *v1alpha1.FleetRollout) []string {
	if before == nil {
		return nil
	}
	var out []string
	st := &fr.Status
	if st.Candidate != nil && st.Candidate.Key() != before.candidate {
		out = append(out, "status:candidate")
		// A new candidate's waves are all new: their phases are not changes to name.
		before = &progressMarks{candidate: st.Candidate.Key(), phase: before.phase}
	}
	if st.Phase != before.phase {
		out = append(out, "status:phase:"+st.Phase)
	}
	for _, wv := range st.Waves {
		if was, ok := before.waves[wv.Name]; ok && was != wv.Phase {
			out = append(out, "status:wave:"+wv.Name+":"+wv.Phase)
		}
		if wv.Rehearsal != nil && before.rehearsals[wv.Name] != wv.Rehearsal.Phase {
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
