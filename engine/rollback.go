package engine

import (
	"sort"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/verdict"
)

// onFailure holds or rolls back after a failed wave: spec.rollback.onFailure, else the policy's onFail.
func onFailure(fr *v1alpha1.FleetRollout, w *World) {
	if fr.Status.Phase == v1alpha1.PhaseRollingBack || fr.Status.Phase == v1alpha1.PhaseRolledBack {
		return
	}
	if catchingUp(&fr.Status) {
		// A catch-up brings clusters to the known-good itself: there is nothing to roll back to.
		// What it switched stays, and the rollout holds until a newer revision or spec.retry.
		fr.Status.Phase = v1alpha1.PhaseHeld
		return
	}
	if fr.OnFailure(w.Settings.OnFail) == v1alpha1.OnFailureRollback && fr.Status.LastKnownGood != nil {
		beginRollback(fr, w)
		return
	}
	fr.Status.Phase = v1alpha1.PhaseHeld
}

// stepRollback waits, until the rollback's deadline, for every cluster the rollout manages to be
// Ready at the known-good revision. At the deadline the rollout is RolledBack all the same, with the
// clusters not seen Ready there listed as unconfirmed: their Kustomizations point at the
// known-good, so Flux converges them when they answer again (trackLag confirms them then).
func stepRollback(fr *v1alpha1.FleetRollout, w *World, now metav1.Time) StepResult {
	st := &fr.Status
	res := StepResult{GateWave: -1, Decided: -1}
	kg := st.LastKnownGood
	present := map[string]bool{}
	for _, c := range w.Inventory {
		present[c.Name] = true
	}
	var confirmed, unconfirmed, gone []string
	for _, c := range SentBack(fr, w) {
		o := w.Kustomizations[c]
		if !present[c] {
			// Its FleetCluster is gone: it is sent back all the same, with the kubeconfig its
			// Kustomization has (ClusterFor).
			gone = append(gone, c)
		}
		if o.ReadyAt(kg.Source, kg.Revision) {
			confirmed = append(confirmed, c)
		} else {
			unconfirmed = append(unconfirmed, c)
		}
	}
	rb := st.Rollback
	if rb == nil || rb.To != kg.Revision || rb.StartedAt == nil || rb.Deadline == nil {
		// A rollback recorded before its deadline was: it starts counting now.
		rb = newRollback(fr, w, len(confirmed)+len(unconfirmed))
	}
	if len(unconfirmed) > 0 && w.Now.Before(rb.Deadline.Time) {
		res.waitFor(v1alpha1.WaitingForRollback, "", rb.StartedAt, rb.Deadline, "rolling back: %d/%d clusters Ready at known-good %s, at most until %s",
			len(confirmed), len(confirmed)+len(unconfirmed), kg.Revision, rb.Deadline.UTC().Format(time.RFC3339))
		res.RequeueAfter = rb.Deadline.Sub(w.Now)
		return res
	}
	if waitForRollbackChecks(fr, w, rb, &res) {
		return res
	}
	// SentBack is sorted, and so are the lists taken from it.
	rb.Confirmed, rb.Unconfirmed, rb.Departed, rb.FinishedAt = confirmed, unconfirmed, gone, &now
	st.Phase = v1alpha1.PhaseRolledBack
	st.CurrentWave = ""
	for i := range st.Waves {
		if st.Waves[i].StartedAt != nil && st.Waves[i].Phase != v1alpha1.WavePending {
			st.Waves[i].Phase = v1alpha1.WaveRolledBack
		}
	}
	reject(fr, st.Candidate, "rolled back to "+kg.Revision, now)
	st.Revert = nil
	return res
}

// waitForRollbackChecks follows, once every cluster sent back is Ready at the known-good (or the
// deadline passed), the policy's checks there (World.KnownGoodChecks), as waitForBackChecks does
// for a rehearsal: it waits while some have not finished, or while checks that apply were not
// observed yet (the pass that began the rollback observed none), until the rollback's deadline,
// and records the runs in rb, with what did not finish by then named, never passed.
func waitForRollbackChecks(fr *v1alpha1.FleetRollout, w *World, rb *v1alpha1.RollbackStatus, res *StepResult) (wait bool) {
	kg := fr.Status.LastKnownGood
	kc, before := w.KnownGoodChecks, w.Now.Before(rb.Deadline.Time)
	switch {
	case kc == nil && before && checksApply(w.Settings, CheckedBack(fr, w)):
		res.waitFor(v1alpha1.WaitingForRollback, "", rb.StartedAt, rb.Deadline, "rolling back: every cluster is Ready at known-good %s; its checks start", kg.Revision)
		res.Next = true
		return true
	case kc == nil:
		return false
	case len(kc.Pending) > 0 && before:
		res.waitFor(v1alpha1.WaitingForRollback, "", rb.StartedAt, rb.Deadline, "rolling back: every cluster is Ready at known-good %s; checks there: %s, at most until %s",
			kg.Revision, FirstNames(kc.Pending, 3), rb.Deadline.UTC().Format(time.RFC3339))
		res.RequeueAfter = rb.Deadline.Sub(w.Now)
		return true
	}
	rb.Checks, rb.Unchecked = kc.Runs, kc.Pending
	if len(rb.Unchecked) > maxUnchecked {
		rb.Unchecked = rb.Unchecked[:maxUnchecked]
	}
	return false
}

// beginRollback sends the rollout back to its known-good revision; without one there is nothing to go
// back to, and it holds.
func beginRollback(fr *v1alpha1.FleetRollout, w *World) {
	if fr.Status.LastKnownGood == nil {
		fr.Status.Phase = v1alpha1.PhaseHeld
		return
	}
	fr.Status.Phase = v1alpha1.PhaseRollingBack
	newRollback(fr, w, len(SentBack(fr, w)))
}

// maxUnchecked bounds the checks a rollback lists as not finished (RollbackStatus.unchecked).
const maxUnchecked = 100

// WaveClusters are clusters of one wave.
type WaveClusters struct {
	Wave     string
	Clusters []string
}

// CheckedBack are the clusters a rollback of fr checks at the known-good, by wave, in the order of
// the waves: those sent back (SentBack) that are members of a wave that started and whose
// FleetCluster is there. A wave that never started never left the known-good; a departed cluster
// is not checked (its kubeconfig went with its FleetCluster), and status names it.
func CheckedBack(fr *v1alpha1.FleetRollout, w *World) []WaveClusters {
	back := map[string]bool{}
	for _, c := range SentBack(fr, w) {
		back[c] = w.Clusters[c] != nil
	}
	var out []WaveClusters
	for _, wv := range fr.Status.Waves {
		if wv.StartedAt == nil {
			continue
		}
		wc := WaveClusters{Wave: wv.Name}
		for _, c := range wv.Clusters {
			if back[c] {
				wc.Clusters = append(wc.Clusters, c)
			}
		}
		if len(wc.Clusters) > 0 {
			sort.Strings(wc.Clusters)
			out = append(out, wc)
		}
	}
	return out
}

// checksApply tells whether some of the policy's checks apply to one of waves.
func checksApply(s verdict.Settings, waves []WaveClusters) bool {
	for _, chk := range s.Checks {
		for _, wc := range waves {
			if chk.AppliesTo(wc.Wave) {
				return true
			}
		}
	}
	return false
}

// SentBack are the clusters a rollback of fr sends to the known-good, sorted: those whose
// Kustomization runs the candidate or the known-good. One held back at an older revision by an
// earlier rollout stays there.
func SentBack(fr *v1alpha1.FleetRollout, w *World) []string {
	var out []string
	for c, o := range w.Kustomizations {
		if o.Exists && rolledBack(o.Source, &fr.Status) {
			out = append(out, c)
		}
	}
	sort.Strings(out)
	return out
}

// newRollback records a rollback starting now, with its deadline, for n clusters sent back.
func newRollback(fr *v1alpha1.FleetRollout, w *World, n int) *v1alpha1.RollbackStatus {
	// Kept to the second, as the API server keeps it, so the deadline is where status says it is.
	start := metav1.NewTime(w.Now.Truncate(time.Second))
	deadline := metav1.NewTime(start.Add(rollbackTimeout(fr, n)))
	fr.Status.Rollback = &v1alpha1.RollbackStatus{To: fr.Status.LastKnownGood.Revision, StartedAt: &start, Deadline: &deadline}
	return fr.Status.Rollback
}

// rollbackTimeout is spec.rollback.timeout, else the wave deadline over the n clusters sent back.
func rollbackTimeout(fr *v1alpha1.FleetRollout, n int) time.Duration {
	if t := fr.Spec.Rollback.Timeout; t != nil && t.Duration > 0 {
		return t.Duration
	}
	return deadlineFor(fr, n)
}
