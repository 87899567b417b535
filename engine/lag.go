package engine

import (
	"fmt"
	"maps"
	"slices"
	"sort"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/fleets"
)

// maxLaggingInStatus bounds status.lagging; status.laggingCount has the total.
const maxLaggingInStatus = 100

// maxLagReason bounds a lagging cluster's reason in status.
const maxLagReason = 256

// trackLag records, while the rollout rests (Completed or RolledBack), the clusters of the rollout
// that do not run the known-good, and why (status.lagging), and how many do (status.runningCount);
// a catch-up wave brings the lagging ones there (startCatchUp), and a cluster leaves the list once
// it is Ready there. After a rollback, an unconfirmed cluster seen Ready at the known-good moves to
// status.rollback.confirmed. It is pure.
func trackLag(w *World) {
	fr := w.Rollout
	st := &fr.Status
	kg := st.LastKnownGood
	if kg == nil || (st.Phase != v1alpha1.PhaseCompleted && st.Phase != v1alpha1.PhaseRolledBack) {
		st.Lagging, st.LaggingCount, st.RunningCount = nil, 0, 0
		return
	}
	if rb := st.Rollback; st.Phase == v1alpha1.PhaseRolledBack && rb != nil && rb.To == kg.Revision {
		confirmRollback(rb, w)
	}
	lag := laggingClusters(fr, w)
	st.LaggingCount = int32(len(lag))
	st.RunningCount = runningKnownGood(w)
	if len(lag) > maxLaggingInStatus {
		lag = lag[:maxLaggingInStatus]
	}
	st.Lagging = lag
}

// confirmRollback moves the unconfirmed clusters now Ready at the known-good to confirmed.
func confirmRollback(rb *v1alpha1.RollbackStatus, w *World) {
	kg := w.Rollout.Status.LastKnownGood
	var still []string
	for _, c := range rb.Unconfirmed {
		if w.Kustomizations[c].ReadyAt(kg.Source, kg.Revision) {
			rb.Confirmed = append(rb.Confirmed, c)
			continue
		}
		still = append(still, c)
	}
	if len(still) == len(rb.Unconfirmed) {
		return
	}
	sort.Strings(rb.Confirmed)
	rb.Unconfirmed = still
}

// laggingClusters lists, sorted by name, the clusters of the rollout that do not run the known-good:
// the eligible ones, those skipped as suspended, and those a rollback left unconfirmed. A cluster
// runs the known-good when its Kustomization points at the known-good's pinned source, has the
// spec tidegate gives it there, and is Ready at it, or still is (a periodic reconcile at the same
// revision is not a lag). Once Completed, a catch-up wave brings each to it (catchUpMembers) when it
// can; after a rollback, the next revision's waves do.
func laggingClusters(fr *v1alpha1.FleetRollout, w *World) []v1alpha1.LaggingCluster {
	st := &fr.Status
	kg := st.LastKnownGood
	completed := st.Phase == v1alpha1.PhaseCompleted
	causes := lagCausesOf(fr, w)
	names := map[string]bool{}
	for _, c := range w.Plan.Eligible {
		names[c] = true
	}
	for c := range causes.skipped {
		names[c] = true
	}
	if rb := st.Rollback; st.Phase == v1alpha1.PhaseRolledBack && rb != nil {
		for _, c := range rb.Unconfirmed {
			names[c] = true
		}
	}
	labels := clusterWaveLabels(st, w.Plan)
	var out []v1alpha1.LaggingCluster
	for _, c := range slices.Sorted(maps.Keys(names)) {
		o := w.Kustomizations[c]
		at := o.ReadyAt(kg.Source, kg.Revision) || o.StillAt(kg.Source, kg.Revision)
		changed := completed && at && specChanged(fr, w, c, labels[c])
		if at && !changed {
			continue
		}
		why := causes.why(st, c, o, changed)
		if len(why) > maxLagReason {
			why = why[:maxLagReason-3] + "..."
		}
		out = append(out, v1alpha1.LaggingCluster{Cluster: c, Reason: why})
	}
	return out
}

// lagCauses are what may keep a cluster from the known-good, by cluster, and what brings it there
// (then).
type lagCauses struct {
	skipped, heldBy, failed map[string]string
	unreachable             map[string]bool
	then                    string
}

// lagCausesOf gathers the causes of lag of the rollout's clusters: skipped as suspended, not
// answering, held back by the known-good's waves, their Kustomization not written.
func lagCausesOf(fr *v1alpha1.FleetRollout, w *World) lagCauses {
	st := &fr.Status
	completed := st.Phase == v1alpha1.PhaseCompleted
	l := lagCauses{skipped: map[string]string{}, heldBy: map[string]string{}, failed: map[string]string{}, unreachable: map[string]bool{},
		then: "the next revision's waves bring it to " + st.LastKnownGood.Revision}
	if completed {
		l.then = "a catch-up wave brings it to " + st.LastKnownGood.Revision
	}
	for _, s := range w.Plan.Skipped {
		if s.Cause == fleets.SkipSuspended {
			l.skipped[s.Cluster] = s.Reason
		}
	}
	for _, c := range w.Inventory {
		if c.Reachability == fleets.Unreachable {
			l.unreachable[c.Name] = true
		}
	}
	if completed {
		for _, wv := range st.Waves {
			for _, h := range wv.HeldBack {
				l.heldBy[h.Cluster] = fmt.Sprintf("held back before wave %s: %s; the next revision preflights it again", wv.Name, h.Reason)
			}
		}
	}
	for _, f := range st.WriteFailures {
		l.failed[f.Cluster] = "its Kustomization could not be written (" + f.Reason + "): see status.writeFailures"
	}
	return l
}

// why says why cluster c, whose Kustomization says o, does not run the known-good; changed: it
// runs it with a spec tidegate would not write today.
func (l lagCauses) why(st *v1alpha1.FleetRolloutStatus, c string, o Observation, changed bool) string {
	kg, then := st.LastKnownGood, l.then
	switch {
	case l.failed[c] != "":
		return l.failed[c]
	case l.skipped[c] != "":
		return l.skipped[c] + "; " + then + " when it is not"
	case l.heldBy[c] != "":
		return l.heldBy[c]
	case l.unreachable[c] && (changed || o.Source != kg.Source):
		return "it does not answer (Reachable=False); " + then + " once it does"
	case changed:
		return "its values or credentials changed since it was switched; " + then
	case !o.Exists:
		return "no Kustomization yet; " + then
	case o.Source != kg.Source && st.Phase == v1alpha1.PhaseRolledBack && !rolledBack(o.Source, st):
		return fmt.Sprintf("held back at pinned source %s by an earlier rollout; the next revision preflights it again", o.Source)
	case o.Source != kg.Source:
		return fmt.Sprintf("its Kustomization points at %s; %s", o.Source, then)
	}
	why := "not Ready at " + kg.Revision + " yet"
	if seen := o.Seen(); seen != "" {
		why += ": " + seen
	}
	return why
}

// specChanged tells whether cluster c's Kustomization is not the one tidegate would write at the
// known-good today (with the known-good's build), labelled with wave: its FleetCluster's values or
// credentials changed since it was written.
func specChanged(fr *v1alpha1.FleetRollout, w *World, c, wave string) bool {
	fc, m := w.Clusters[c], w.Objects[c]
	kg := fr.Status.LastKnownGood
	if fc == nil || absent(m) || kg == nil {
		return false
	}
	return !sameBuildAt(fr, fc, runs(kg, wave), m)
}

// runningKnownGood counts the clusters whose Kustomization points at the known-good and is Ready
// at it, or still is.
func runningKnownGood(w *World) int32 {
	kg := w.Rollout.Status.LastKnownGood
	var n int32
	for _, o := range w.Kustomizations {
		if o.ReadyAt(kg.Source, kg.Revision) || o.StillAt(kg.Source, kg.Revision) {
			n++
		}
	}
	return n
}
