package controllers

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
// that do not run the known-good, and why (status.lagging); act brings each to it as soon as it
// can be written to (desiredTargets), and a cluster leaves the list once it is Ready there. After a
// rollback, an unconfirmed cluster seen Ready at the known-good moves to status.rollback.confirmed.
// It is pure.
func trackLag(w *world) {
	fr := w.Rollout
	st := &fr.Status
	kg := st.LastKnownGood
	if kg == nil || (st.Phase != v1alpha1.PhaseCompleted && st.Phase != v1alpha1.PhaseRolledBack) {
		st.Lagging, st.LaggingCount = nil, 0
		return
	}
	if rb := st.Rollback; st.Phase == v1alpha1.PhaseRolledBack && rb != nil && rb.To == kg.Revision {
		confirmRollback(rb, w)
	}
	lag := laggingClusters(fr, w)
	st.LaggingCount = int32(len(lag))
	if len(lag) > maxLaggingInStatus {
		lag = lag[:maxLaggingInStatus]
	}
	st.Lagging = lag
}

// confirmRollback moves the unconfirmed clusters now Ready at the known-good to confirmed.
func confirmRollback(rb *v1alpha1.RollbackStatus, w *world) {
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
// the eligible ones, those skipped as unreachable or suspended, and those a rollback left
// unconfirmed. A cluster runs the known-good when its Kustomization points
// at the known-good's pinned source and is Ready at it, or still is (a periodic reconcile at the
// same revision is not a lag).
func laggingClusters(fr *v1alpha1.FleetRollout, w *world) []v1alpha1.LaggingCluster {
	st := &fr.Status
	kg := st.LastKnownGood
	skipped := map[string]string{}
	for _, s := range w.Plan.Skipped {
		if s.Cause == fleets.SkipUnreachable || s.Cause == fleets.SkipSuspended {
			skipped[s.Cluster] = s.Reason
		}
	}
	heldBy := map[string]string{}
	if st.Phase == v1alpha1.PhaseCompleted {
		for _, wv := range st.Waves {
			for _, h := range wv.HeldBack {
				heldBy[h.Cluster] = fmt.Sprintf("held back before wave %s: %s; the next revision preflights it again", wv.Name, h.Reason)
			}
		}
	}
	failed := map[string]string{}
	for _, f := range st.WriteFailures {
		failed[f.Cluster] = "its Kustomization could not be written (" + f.Reason + "): see status.writeFailures"
	}
	names := map[string]bool{}
	for _, c := range w.Plan.Eligible {
		names[c] = true
	}
	for c := range skipped {
		names[c] = true
	}
	if rb := st.Rollback; st.Phase == v1alpha1.PhaseRolledBack && rb != nil {
		for _, c := range rb.Unconfirmed {
			names[c] = true
		}
	}
	var out []v1alpha1.LaggingCluster
	for _, c := range slices.Sorted(maps.Keys(names)) {
		o := w.Kustomizations[c]
		if o.ReadyAt(kg.Source, kg.Revision) || o.StillAt(kg.Source, kg.Revision) {
			continue
		}
		var why string
		switch {
		case failed[c] != "":
			why = failed[c]
		case skipped[c] != "":
			why = skipped[c] + "; brought to " + kg.Revision + " when it is back"
		case heldBy[c] != "":
			why = heldBy[c]
		case !o.Exists:
			why = "no Kustomization yet: it is written next"
		case o.Source != kg.Source && st.Phase == v1alpha1.PhaseRolledBack && !rolledBack(o.Source, st):
			why = fmt.Sprintf("held back at pinned source %s by an earlier rollout; the next revision preflights it again", o.Source)
		case o.Source != kg.Source:
			why = fmt.Sprintf("its Kustomization points at %s: it is switched to %s next", o.Source, kg.Source)
		default:
			why = "not Ready at " + kg.Revision + " yet"
			if seen := o.Seen(); seen != "" {
				why += ": " + seen
			}
		}
		if len(why) > maxLagReason {
			why = why[:maxLagReason-3] + "..."
		}
		out = append(out, v1alpha1.LaggingCluster{Cluster: c, Reason: why})
	}
	return out
}
