package engine

import (
	"maps"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// maxOrphaned bounds status.orphaned; the latest are kept.
const maxOrphaned = 20

// ClusterFor is the FleetCluster act writes cluster c's member for, or nil when it writes
// none. A cluster whose FleetCluster was deleted still has its member, with the kubeconfig
// and values it was given: a rollback sends it back to the known-good with those (departed), so no
// member is left behind on a rejected revision. Nothing else is written to it.
func ClusterFor(clusters map[string]*v1alpha1.FleetCluster, st *v1alpha1.FleetRolloutStatus, c string, existing Object) *v1alpha1.FleetCluster {
	if fc := clusters[c]; fc != nil {
		return fc
	}
	if absent(existing) || (st.Phase != v1alpha1.PhaseRollingBack && st.Phase != v1alpha1.PhaseRolledBack) {
		return nil
	}
	return departed(c, existing)
}

// departed is a stand-in for the deleted FleetCluster c, from its member: the kubeconfig it had,
// and the values it was written with (memberValues: a Kustomization's substitutions, merged over
// the template's, give back what it had; a HelmRelease records the cluster's own).
func departed(c string, obj Object) *v1alpha1.FleetCluster {
	fc := &v1alpha1.FleetCluster{ObjectMeta: metav1.ObjectMeta{Name: c, Namespace: obj.GetNamespace()}}
	if kc := memberKubeConfig(obj); kc != nil {
		fc.Spec.KubeConfig = kc.DeepCopy()
	}
	if values := memberValues(obj); len(values) > 0 {
		fc.Spec.Values = maps.Clone(values)
	}
	return fc
}

// noteOrphans records in status.orphaned, while the rollout rests, each cluster whose FleetCluster
// is gone and whose Kustomization runs the revision it points at (Ready there, or still): the
// known-good, or an earlier one (its FleetCluster went before its wave switched it), never a
// rejected one (a rollback sends that back first). act then orphans it (orphanDeparted), so the
// record comes before the act. A cluster whose FleetCluster is back before that leaves the list.
// It reports whether it recorded something. It is pure.
func noteOrphans(w *World) bool {
	st := &w.Rollout.Status
	kg := st.LastKnownGood
	if kg == nil || (st.Phase != v1alpha1.PhaseCompleted && st.Phase != v1alpha1.PhaseRolledBack) || w.Clusters == nil {
		return false
	}
	changed := false
	st.Orphaned = slices.DeleteFunc(st.Orphaned, func(o v1alpha1.OrphanedCluster) bool {
		back := w.Clusters[o.Cluster] != nil && !absent(w.Objects[o.Cluster])
		changed = changed || back
		return back
	})
	for _, c := range slices.Sorted(maps.Keys(w.Objects)) {
		m, o := w.Objects[c], w.Kustomizations[c]
		if absent(m) {
			continue
		}
		rev, source := m.GetAnnotations()[v1alpha1.RevisionAnnotation], MemberSource(m)
		if w.Clusters[c] != nil || rev == "" || runsRejected(w.Rollout, source, rev) ||
			slices.ContainsFunc(st.Orphaned, func(e v1alpha1.OrphanedCluster) bool { return e.Cluster == c }) ||
			!(o.ReadyAt(source, rev) || o.StillAt(source, rev)) {
			continue
		}
		now := metav1.NewTime(w.Now)
		st.Orphaned = append(st.Orphaned, v1alpha1.OrphanedCluster{Cluster: c, Revision: rev, At: &now})
		changed = true
	}
	if n := len(st.Orphaned); n > maxOrphaned {
		st.Orphaned = st.Orphaned[n-maxOrphaned:]
	}
	return changed
}

// runsRejected tells whether a Kustomization at revision from the pinned source named source runs
// a rejected candidate: that revision with the build status records for the source, or, when
// status records none, any build of it.
func runsRejected(fr *v1alpha1.FleetRollout, source, revision string) bool {
	if r := candidateOfSource(&fr.Status, source); r != nil && r.Revision == revision {
		return fr.IsRejectedBuild(revision, r.BuildHash)
	}
	return fr.IsRejected(revision)
}
