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
//   - Rolling back or rolled back: every managed cluster at the candidate goes to the known-good
//     (one that a wave held back at an older revision stays there: its preflight refused it).
//   - Members of a started wave run the candidate, except during the first leg of a rehearsal, when
//     they run the known-good, and except the members the wave held back (deploySafe's preflight
//     failed on them): they keep what they run, and are never switched.
//   - Other eligible clusters keep what they run while a candidate is in flight; one without a
//     Kustomization gets the known-good, so a cluster that joins the fleet runs what the rest of the
//     fleet ran last. Once the rollout rests (Completed, RolledBack), every eligible cluster is
//     brought to the known-good: one that was unreachable, suspended or joined late while the
//     candidate went out gets it when it is eligible again (trackLag lists it until then). Members
//     the completed candidate held back keep what they run: their preflight refused it.
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
			if !rolledBack(ks.Spec.SourceRef.Name, st) {
				continue
			}
			out[c] = target{Source: kg.Source, Revision: kg.Revision, Wave: ks.Labels[v1alpha1.WaveLabel]}
		}
		if st.Phase == v1alpha1.PhaseRolledBack {
			for _, c := range plan.Eligible {
				if existing[c] == nil {
					out[c] = target{Source: kg.Source, Revision: kg.Revision, Wave: plannedWave[c]}
				}
			}
		}
		return out
	}
	held := map[string]bool{}
	if st.Candidate != nil {
		for _, w := range st.Waves {
			for _, h := range w.HeldBack {
				held[h.Cluster] = true
			}
			if w.Phase == v1alpha1.WavePending || w.Phase == v1alpha1.WaveAwaiting || w.Phase == v1alpha1.WaveRolledBack {
				continue
			}
			to := st.Candidate
			if w.Phase == v1alpha1.WaveRehearsing && w.Rehearsal != nil && w.Rehearsal.Phase == v1alpha1.RehearsalRollingBack && kg != nil {
				to = kg // the rehearsal's first leg: the wave goes back to the known-good
			}
			for _, c := range w.Clusters {
				if !held[c] {
					out[c] = target{Source: to.Source, Revision: to.Revision, Wave: w.Name}
				}
			}
		}
	}
	if kg != nil {
		completed := st.Phase == v1alpha1.PhaseCompleted
		for _, c := range plan.Eligible {
			if _, ok := out[c]; ok || (held[c] && !inFlight(st)) {
				continue
			}
			ks := existing[c]
			switch {
			case ks == nil:
				out[c] = target{Source: kg.Source, Revision: kg.Revision, Wave: plannedWave[c]}
			case completed && ks.Spec.SourceRef.Name != kg.Source:
				// Lagging behind the completed candidate: it goes where the fleet is.
				out[c] = target{Source: kg.Source, Revision: kg.Revision, Wave: plannedWave[c]}
			}
		}
	}
	return out
}

// rolledBack tells whether a rollback sends a Kustomization pointing at source to the known-good:
// it points at the candidate or the known-good, or at no source tidegate knows of. One a wave held
// back at an older revision stays there: its preflight refused the candidate, and nothing says it
// would take the known-good.
func rolledBack(source string, st *v1alpha1.FleetRolloutStatus) bool {
	return source == "" || st.LastKnownGood == nil || source == st.LastKnownGood.Source ||
		(st.Candidate != nil && source == st.Candidate.Source)
}
