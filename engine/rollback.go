package engine

import (
	"sort"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
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
	for c, o := range w.Kustomizations {
		if !o.Exists {
			continue
		}
		if !rolledBack(o.Source, st) {
			continue // held back at an older revision by an earlier rollout: it stays there
		}
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
	sort.Strings(gone)
	sort.Strings(confirmed)
	sort.Strings(unconfirmed)
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

// beginRollback sends the rollout back to its known-good revision; without one there is nothing to go
// back to, and it holds.
func beginRollback(fr *v1alpha1.FleetRollout, w *World) {
	if fr.Status.LastKnownGood == nil {
		fr.Status.Phase = v1alpha1.PhaseHeld
		return
	}
	fr.Status.Phase = v1alpha1.PhaseRollingBack
	n := 0
	for _, o := range w.Kustomizations {
		if o.Exists && rolledBack(o.Source, &fr.Status) {
			n++
		}
	}
	newRollback(fr, w, n)
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
