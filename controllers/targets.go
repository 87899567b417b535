package controllers

import (
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/fleets"
)

// target is the revision one cluster's Kustomization should run, and the pinned source that holds it.
type target struct {
	Source   string
	Revision string
	Wave     string
}

// desiredTargets derives, from the recorded status alone, what each cluster's Kustomization should
// point at. Clusters without an entry are left as they are.
//   - Rolling back or rolled back: every managed cluster goes to the known-good.
//   - Members of a started wave run the candidate, except during the first leg of a rehearsal, when
//     they run the known-good.
//   - Other eligible clusters keep what they run; one without a Kustomization gets the known-good,
//     so a cluster that joins the fleet runs what the rest of the fleet ran last.
func desiredTargets(fr *v1alpha1.FleetRollout, plan fleets.WavePlan, existing map[string]*kustomizev1.Kustomization) map[string]target {
	st := &fr.Status
	out := map[string]target{}
	kg := st.LastKnownGood
	plannedWave := map[string]string{}
	for _, w := range plan.Waves {
		for _, c := range w.Clusters {
			plannedWave[c] = w.Name
		}
	}
	if st.Phase == v1alpha1.PhaseRollingBack || st.Phase == v1alpha1.PhaseRolledBack {
		if kg == nil {
			return out
		}
		for c, ks := range existing {
			out[c] = target{Source: kg.Source, Revision: kg.Revision, Wave: ks.Labels[v1alpha1.WaveLabel]}
		}
		return out
	}
	if st.Candidate != nil {
		for _, w := range st.Waves {
			if w.Phase == v1alpha1.WavePending || w.Phase == v1alpha1.WaveAwaiting || w.Phase == v1alpha1.WaveRolledBack {
				continue
			}
			to := st.Candidate
			if w.Phase == v1alpha1.WaveRehearsing && w.Rehearsal != nil && w.Rehearsal.Phase == v1alpha1.RehearsalRollingBack && kg != nil {
				to = kg // the rehearsal's first leg: the wave goes back to the known-good
			}
			for _, c := range w.Clusters {
				out[c] = target{Source: to.Source, Revision: to.Revision, Wave: w.Name}
			}
		}
	}
	if kg != nil {
		for _, c := range plan.Eligible {
			if _, ok := out[c]; ok || existing[c] != nil {
				continue
			}
			out[c] = target{Source: kg.Source, Revision: kg.Revision, Wave: plannedWave[c]}
		}
	}
	return out
}
