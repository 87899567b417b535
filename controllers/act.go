package controllers

import (
	"context"
	"errors"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/engine"
)

// act makes the Flux objects match the recorded status: the candidate's and the known-good's pinned
// sources exist, and every cluster's Kustomization points at the revision the status gives it.
func (r *FleetRolloutReconciler) act(ctx context.Context, p *pass) outcome {
	fr := p.Rollout
	st := &fr.Status
	existing, err := r.listMembers(ctx, fr)
	if err != nil {
		return retryable(err)
	}
	r.writes.overlay(fr, existing)
	p.Objects = existing
	for _, rev := range []*v1alpha1.RevisionStatus{st.Candidate, st.LastKnownGood} {
		if rev == nil {
			continue
		}
		pin := func() error { return r.hook("pin:" + rev.Revision) }
		if err := ensurePinnedSource(ctx, r.Client, fr, p.tracked, rev, pin); err != nil {
			return retryable(err)
		}
	}
	if err := r.orphanDeparted(ctx, p); err != nil {
		return retryable(err)
	}
	if err := r.writeTargets(ctx, p); err != nil {
		return retryable(err)
	}
	return proceeding()
}

// writeTargets writes each cluster's Kustomization the status gives a target (engine.Targets),
// when it may (engine.MayWrite) and its backoff allows. A write that fails is recorded for its
// cluster (status.writeFailures) and stops no other; only the crash-point hook, or a Kustomization
// that cannot be encoded, ends it with an error.
func (r *FleetRolloutReconciler) writeTargets(ctx context.Context, p *pass) error {
	fr := p.Rollout
	st := &fr.Status
	existing := p.Objects
	targets := engine.Targets(fr, p.Plan, existing)
	point := "switch:"
	if st.Phase == v1alpha1.PhaseRollingBack || st.Phase == v1alpha1.PhaseRolledBack {
		point = "rollback:"
	}
	failures := map[string]v1alpha1.WriteFailure{}
	for _, f := range st.WriteFailures {
		failures[f.Cluster] = f
	}
	isMoving := engine.Moving(st)
	switched := map[waveRevision][]string{}
	defer r.announceSwitched(log.FromContext(ctx), fr, switched)
	for _, c := range slices.Sorted(maps.Keys(targets)) {
		t := targets[c]
		fc := engine.ClusterFor(p.Clusters, st, c, existing[c])
		if fc == nil {
			continue // the FleetCluster is gone: only a rollback writes its Kustomization; its wave reports it missing
		}
		if !r.writes.due(fr, c, p.Now) {
			continue // its last write failed: it is tried again after its backoff
		}
		desired, err := engine.DesiredMember(fr, fc, t)
		if err != nil {
			// The chart's values for the cluster could not be made (FleetRollout.ChartValues): nothing
			// can be written for it until they are fixed.
			r.recordWriteFailure(fr, c, failures, &writeError{reason: v1alpha1.WriteRefused, kind: engine.MemberKind(fr),
				ks: client.ObjectKey{Namespace: fr.Namespace, Name: v1alpha1.KustomizationName(fr.Name, c)}, err: err}, p.Now)
			continue
		}
		if !engine.MayWrite(isMoving, c, desired, existing[c]) {
			// Not in a wave being switched, and what it would get is not what tidegate wrote
			// before (its values or credentials changed, or its Kustomization is
			// gone): it lags, and a catch-up wave brings it there through the gates.
			continue
		}
		wrote, err := r.writeKustomization(ctx, fr, desired, existing[c], func() error { return r.hook(point + c) })
		var werr *writeError
		switch {
		case errors.As(err, &werr):
			r.recordWriteFailure(fr, c, failures, werr, p.Now)
			continue
		case err != nil:
			return err
		}
		delete(failures, c)
		r.writes.succeeded(fr, c)
		if wrote {
			key := waveRevision{t.Wave, t.Revision}
			switched[key] = append(switched[key], c)
			// The cached copy is older than the write: observe what the API server answered (the
			// written spec, with the status kustomize-controller gave the spec before), so this pass,
			// and the next ones until the cache shows the write, count the cluster as switched and
			// not yet healthy at a revision it had not applied, keep a soaking member that applied
			// the candidate at its health (engine.Observation.AwaitingAt), and do not write it again.
			r.writes.wrote(fr, c, existing[c], desired)
			existing[c] = desired
		}
	}
	r.recordWriteFailures(p, targets, failures)
	return nil
}

// recordWriteFailure records that cluster c's member could not be written. One cluster's member
// that cannot be written stops no other: it is recorded, counted in its wave, and tried again with
// backoff.
func (r *FleetRolloutReconciler) recordWriteFailure(fr *v1alpha1.FleetRollout, c string, failures map[string]v1alpha1.WriteFailure, werr *writeError, now time.Time) {
	f := werr.failure(c, now)
	if prev, ok := failures[c]; ok && prev.Reason == f.Reason && prev.Message == f.Message {
		f.Since = prev.Since
	} else {
		r.event(fr, corev1.EventTypeWarning, "WriteFailed", "%s", f.Message)
	}
	failures[c] = f
	r.writes.failed(fr, c, now)
}

// recordWriteFailures keeps in status the write failures of the clusters still to be written, and
// when the next failed write is due again.
func (r *FleetRolloutReconciler) recordWriteFailures(p *pass, targets map[string]engine.Target, failures map[string]v1alpha1.WriteFailure) {
	fr := p.Rollout
	for c := range failures {
		if _, ok := targets[c]; !ok || p.Clusters[c] == nil {
			delete(failures, c) // nothing is to be written to it any more
			r.writes.succeeded(fr, c)
		}
	}
	setWriteFailures(&fr.Status, failures)
	if retry := r.writes.nextRetry(fr, p.Now); retry > 0 {
		p.retryWritesAfter = retry
	}
}
