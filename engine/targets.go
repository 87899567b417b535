package engine

import (
	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/fleets"
)

// Target is the revision one cluster's Kustomization should run, and the pinned source that holds it.
type Target struct {
	Source   string
	Revision string
	Wave     string
	// Build is the candidate's or the known-good's build (v1alpha1.RevisionStatus.Build).
	Build *v1alpha1.Build
}

// runs is the target of cluster c running candidate r, labelled with wave.
func runs(r *v1alpha1.RevisionStatus, wave string) Target {
	return Target{Source: r.Source, Revision: r.Revision, Wave: wave, Build: r.Build}
}

// candidateOfSource is the candidate status records with the pinned source named source (the
// candidate, the known-good, or one of status.history), nil when none.
func candidateOfSource(st *v1alpha1.FleetRolloutStatus, source string) *v1alpha1.RevisionStatus {
	for _, r := range candidates(st) {
		if r.Source == source {
			return r
		}
	}
	return nil
}

// BuildOfSource is the build status records for the pinned source named source, nil when none: the
// spec's.
func BuildOfSource(st *v1alpha1.FleetRolloutStatus, source string) *v1alpha1.Build {
	if r := candidateOfSource(st, source); r != nil {
		return r.Build
	}
	return nil
}

// Targets derives, from the recorded status alone, what each cluster's Kustomization should
// point at. Clusters without an entry are left as they are: nothing reaches a cluster except through
// a wave of the candidate or a rollback.
//   - Rolling back or rolled back: every managed cluster at the candidate goes to the known-good
//     (one that a wave held back at an older revision stays there: its preflight refused it).
//   - Members of a started wave run the candidate, except during the first leg of a rehearsal, when
//     they run the known-good, and except the members the wave held back (deploySafe's preflight
//     failed on them) or excused: they keep what they run, and are never switched.
//   - Every other cluster keeps what it runs. A cluster that joined the fleet, was excused or away
//     when its wave went out, or whose values or credentials changed, is brought to the known-good
//     by a catch-up wave once the rollout completes (startCatchUp), gated like any other wave; a
//     catch-up wave's members keep the wave label they had (clusterWaveLabels).
func Targets(fr *v1alpha1.FleetRollout, plan fleets.WavePlan, existing map[string]Object) map[string]Target {
	st := &fr.Status
	out := map[string]Target{}
	kg := st.LastKnownGood
	if st.Phase == v1alpha1.PhaseRollingBack || st.Phase == v1alpha1.PhaseRolledBack {
		if kg == nil {
			return out
		}
		for c, m := range existing {
			if absent(m) || !rolledBack(MemberSource(m), st) {
				continue
			}
			out[c] = runs(kg, m.GetLabels()[v1alpha1.WaveLabel])
		}
		return out
	}
	if st.Candidate == nil {
		return out
	}
	var labels map[string]string
	held := map[string]bool{}
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
		if w.CatchUp && labels == nil {
			labels = clusterWaveLabels(st, plan)
		}
		for _, c := range w.Clusters {
			if held[c] {
				continue
			}
			label := w.Name
			if w.CatchUp {
				label = labels[c]
			}
			out[c] = runs(to, label)
		}
	}
	return out
}

// Moving are the clusters whose Kustomization a write may change now: the members of the waves
// being switched, soaked or rehearsed, and, in a rollback, every cluster sent back. Any other
// cluster's Kustomization is written only to put back what tidegate wrote before (someone else
// changed it), never with a spec of another build, values or credentials: those reach it
// through a wave (act).
func Moving(st *v1alpha1.FleetRolloutStatus) func(cluster string) bool {
	if st.Phase == v1alpha1.PhaseRollingBack || st.Phase == v1alpha1.PhaseRolledBack {
		return func(string) bool { return true }
	}
	active := map[string]bool{}
	for _, w := range st.Waves {
		switch w.Phase {
		case v1alpha1.WaveProgressing, v1alpha1.WaveSoaking, v1alpha1.WaveRehearsing:
			for _, c := range w.Clusters {
				active[c] = true
			}
		}
	}
	return func(c string) bool { return active[c] }
}

// rolledBack tells whether a rollback sends a Kustomization pointing at source to the known-good:
// it points at the candidate or the known-good, or at no source tidegate knows of. One a wave held
// back at an older revision stays there: its preflight refused the candidate, and nothing says it
// would take the known-good.
func rolledBack(source string, st *v1alpha1.FleetRolloutStatus) bool {
	return source == "" || st.LastKnownGood == nil || source == st.LastKnownGood.Source ||
		(st.Candidate != nil && source == st.Candidate.Source)
}

// MayWrite tells whether act may write desired over cluster c's existing Kustomization: c is
// moving, or desired changes nothing of what Flux applies there (sameBuild): a write then only
// puts back what someone else changed, or changes how Flux applies it (an interval, a timeout).
func MayWrite(isMoving func(string) bool, c string, desired, existing Object) bool {
	return isMoving(c) || sameBuild(desired, existing)
}

// sameBuild tells whether desired would make Flux apply to the cluster what existing, written by
// tidegate, does: the same build hash (BuildHashAnnotation). A Kustomization written before that
// annotation existed is judged on its spec hash: desired is exactly what was written.
func sameBuild(desired, existing Object) bool {
	if absent(desired) || absent(existing) {
		return false
	}
	if have, ok := existing.GetAnnotations()[BuildHashAnnotation]; ok {
		want, err := buildHash(desired)
		return err == nil && have == want
	}
	hash, err := SpecHash(desired)
	return err == nil && existing.GetAnnotations()[SpecHashAnnotation] == hash
}

// sameBuildAt tells whether cluster c's member existing is what tidegate would write for fc at t
// (sameBuild); a member that cannot be made (DesiredMember failed: the cluster's values do not
// fit the chart's) is not.
func sameBuildAt(fr *v1alpha1.FleetRollout, fc *v1alpha1.FleetCluster, t Target, existing Object) bool {
	desired, err := DesiredMember(fr, fc, t)
	return err == nil && sameBuild(desired, existing)
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
