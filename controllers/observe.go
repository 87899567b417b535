package controllers

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/engine"
	"github.com/tidegate/tidegate/evidence/collector"
)

// observe reads what the Kustomizations say and the states of the candidate's and the known-good's
// pinned sources.
func (r *FleetRolloutReconciler) observe(ctx context.Context, p *pass) outcome {
	fr := p.Rollout
	p.Observe(p.Objects)
	notOurSpec(p)
	if c := fr.Status.Candidate; c != nil {
		p.Candidate = r.readPinned(ctx, fr, c.Source)
	}
	if kg := fr.Status.LastKnownGood; kg != nil {
		p.KnownGood = r.readPinned(ctx, fr, kg.Source)
	}
	r.renderDigests(ctx, p)
	r.knownGoodChecks(ctx, p)
	return proceeding()
}

// knownGoodChecks runs, while a wave's rehearsal rolls back or the rollout rolls back, the
// policy's functional checks at the known-good on the clusters sent back
// (collector.RehearsalChecks, collector.RollbackChecks), for the step to wait on and record.
func (r *FleetRolloutReconciler) knownGoodChecks(ctx context.Context, p *pass) {
	fr := p.Rollout
	if r.Evidence == nil || fr.Status.Candidate == nil || fr.Status.LastKnownGood == nil {
		return
	}
	if fr.Status.Phase == v1alpha1.PhaseRollingBack {
		p.KnownGoodChecks = r.Evidence.RollbackChecks(ctx, p.World)
		return
	}
	for i, wv := range fr.Status.Waves {
		if wv.Rehearsal != nil && wv.Rehearsal.Phase == v1alpha1.RehearsalRollingBack {
			p.KnownGoodChecks = r.Evidence.RehearsalChecks(ctx, p.World, i)
			return
		}
	}
}

// readPinned reads the state of the rollout's pinned source name. A source that is not there is a
// state (it does not exist); a read that failed otherwise is recorded as failed (ReadError), not
// taken for a missing source: a gate judges the absence of a source, never a read that failed.
func (r *FleetRolloutReconciler) readPinned(ctx context.Context, fr *v1alpha1.FleetRollout, name string) engine.SourceState {
	_, s, err := collector.GetSource(ctx, r.Client, fr.Namespace, fr.Spec.SourceRef.Kind, name)
	switch {
	case err == nil:
		return s
	case apierrors.IsNotFound(err):
		return engine.SourceState{Name: name}
	}
	return engine.SourceState{Name: name, ReadError: fmt.Sprintf("reading pinned source %s/%s: %v", fr.Namespace, name, err)}
}

// renderDigests fills, when a completed rollout's tracked source serves a revision it has not
// rolled out (engine.UnchangedCandidate), the digests of what that revision and the known-good build to:
// the step does not roll out a revision that builds what the known-good does. A digest that cannot
// be had stays "": the revision is then rolled out, through the gates, as any other.
func (r *FleetRolloutReconciler) renderDigests(ctx context.Context, p *pass) {
	fr := p.Rollout
	if !engine.UnchangedCandidate(fr, p.World) || r.Evidence == nil {
		return
	}
	kg := fr.Status.LastKnownGood
	target, err := r.Evidence.RenderDigest(ctx, fr, p.TrackedState, "")
	if err != nil {
		return
	}
	known, err := r.Evidence.RenderDigest(ctx, fr.Built(kg.Build), p.KnownGood, kg.Digest)
	if err != nil {
		return
	}
	p.TargetRender, p.KnownGoodRender = target, known
}

// notOurSpec marks as not current the observation of every Kustomization whose spec no longer has
// what tidegate gives it (a field tidegate sets, changed by someone else: its path, its interval):
// what kustomize-controller says of that spec is not about what tidegate applies, so it neither
// passes nor fails the cluster; the writes of this pass put tidegate's spec back
// (applyKustomization), and the cluster is judged on it.
func notOurSpec(p *pass) {
	for c, m := range p.Objects {
		fc := p.Clusters[c]
		if m == nil || fc == nil {
			continue
		}
		source := engine.MemberSource(m)
		want, err := engine.DesiredMember(p.Rollout, fc, engine.Target{Source: source, Revision: m.GetAnnotations()[v1alpha1.RevisionAnnotation],
			Wave: m.GetLabels()[v1alpha1.WaveLabel], Build: engine.BuildOfSource(&p.Rollout.Status, source)})
		if err != nil {
			continue // nothing can be written for it (a write failure says why): what it says stands
		}
		if kept, err := engine.SpecKept(want, m); err == nil && !kept {
			o := p.Kustomizations[c]
			o.Current, o.ReadyCurrent = false, false
			p.Kustomizations[c] = o
		}
	}
}
