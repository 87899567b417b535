package collector

import (
	"context"
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/engine"
	"github.com/tidegate/tidegate/evidence"
	"github.com/tidegate/tidegate/evidence/chart"
	"github.com/tidegate/tidegate/verdict"
)

// rollbackSafe classifies the diff between the rendered known-good and candidate. The
// approvals of the candidate's irreversible changes are returned for the receipt.
func (c *Collector) rollbackSafe(ctx context.Context, sc *engine.World, wv *v1alpha1.WaveStatus) (verdict.RollbackSafeEvidence, []v1alpha1.Approval, error) {
	fr := sc.Rollout.Built(sc.Rollout.Status.Candidate.Build)
	ev := verdict.RollbackSafeEvidence{Evidence: baseEvidence(fr, wv.Name, wv.Clusters, sc.Now)}
	var unfinished *unfinishedRender
	cand, err := c.renderRevision(ctx, fr, sc.Candidate, fr.Status.Candidate.Digest, "the candidate", false)
	if errors.As(err, &unfinished) {
		return ev, nil, fmt.Errorf("%w: %w", ErrUnobserved, err)
	}
	if err != nil {
		return ev, nil, fmt.Errorf("%w: the candidate: %w", ErrUnobserved, err)
	}
	if cand.RenderErr != nil {
		return ev, nil, fmt.Errorf("the candidate does not render: %w", cand.RenderErr)
	}
	var good *renderedPackage
	goodFR := fr
	if kg := fr.Status.LastKnownGood; kg != nil {
		// The known-good as its clusters run it: with its own build, which a template edit changed.
		goodFR = sc.Rollout.Built(kg.Build)
		pkg, err := c.renderRevision(ctx, goodFR, sc.KnownGood, kg.Digest, "the known-good "+kg.Revision, false)
		if errors.As(err, &unfinished) {
			return ev, nil, fmt.Errorf("%w: %w", ErrUnobserved, err)
		}
		if err != nil {
			return ev, nil, fmt.Errorf("%w: the known-good %s: %w", ErrUnobserved, kg.Revision, err)
		}
		if pkg.RenderErr != nil {
			return ev, nil, fmt.Errorf("the known-good %s does not render: %w", kg.Revision, pkg.RenderErr)
		}
		good = pkg
	}
	diff, err := c.classifyEach(ctx, goodFR, fr, ev.Targets, sc.Clusters, good, cand)
	if errUnfinished(err) {
		return ev, nil, fmt.Errorf("%w: %w", ErrUnobserved, err)
	}
	if err != nil {
		return ev, nil, err
	}
	if cand.Chart != nil {
		ev.Limits = append(ev.Limits, chartRollbackFindings(&diff, good, cand)...)
	}
	ev.FirstRollout = diff.FirstRollout
	ev.PrunedStateful, ev.ChangedStateful, ev.CRDChanges, ev.ImmutableRecreates, ev.Irreversible =
		diff.PrunedStateful, diff.ChangedStateful, diff.CRDChanges, diff.ImmutableRecreates, diff.Irreversible
	var used []v1alpha1.Approval
	for _, a := range fr.Spec.Approvals {
		if a.Irreversible && fr.ApprovesCandidate(a, fr.Status.Candidate) {
			used = append(used, a)
		}
	}
	if len(used) > 0 {
		for _, l := range [][]verdict.Finding{ev.PrunedStateful, ev.ChangedStateful, ev.CRDChanges, ev.ImmutableRecreates, ev.Irreversible} {
			for i := range l {
				l[i].Approved = true
			}
		}
	}
	ev.Limits = append(ev.Limits, substituteFromLimits(fr)...)
	return ev, used, nil
}

// rollbackSucceeds checks that the known-good's pinned source still serves its recorded
// content and that it renders, and reports the wave's rehearsal when there was one.
func (c *Collector) rollbackSucceeds(ctx context.Context, sc *engine.World, wv *v1alpha1.WaveStatus) verdict.RollbackSucceedsEvidence {
	fr, w := sc.Rollout, sc
	ev := verdict.RollbackSucceedsEvidence{Evidence: baseEvidence(fr, wv.Name, wv.Clusters, sc.Now)}
	kg := fr.Status.LastKnownGood
	if kg == nil {
		ev.FirstRollout = true
		return ev
	}
	src := &verdict.KnownGoodSource{
		Name: kg.Source, Exists: w.KnownGood.Exists, Ready: w.KnownGood.Ready,
		ServedDigest: w.KnownGood.Digest, RecordedDigest: kg.Digest,
	}
	goodFR := fr.Built(kg.Build)
	var unfinished *unfinishedRender
	if pkg, err := c.renderRevision(ctx, goodFR, w.KnownGood, kg.Digest, "the known-good "+kg.Revision, true); err != nil {
		src.RenderError = err.Error()
		answered := errors.Is(err, evidence.ErrNotServed) || errors.Is(err, evidence.ErrDigestMismatch)
		if errors.As(err, &unfinished) {
			ev.Unobserved = append(ev.Unobserved, verdict.Unobserved{Reason: err.Error()})
		} else if src.Exists && src.ServedDigest == src.RecordedDigest && !answered {
			// The source says it serves the recorded content and the fetch got no answer: not
			// observed. A source that answered it no longer serves it (its storage lost the file),
			// or serves other content, was observed: the way back is gone, and the gate decides so.
			ev.Unobserved = append(ev.Unobserved, verdict.Unobserved{Reason: "fetching the known-good's artifact failed: " + err.Error()})
		}
	} else if pkg.RenderErr != nil {
		src.RenderError = pkg.RenderErr.Error()
	} else if _, err := c.objectsOf(ctx, goodFR, nil, pkg); err != nil {
		src.RenderError = "postBuild substitution: " + err.Error()
	} else {
		src.Renders = true
	}
	ev.KnownGoodSource = src
	if rh := wv.Rehearsal; rh != nil {
		re := &verdict.RehearsalEvidence{Required: w.Settings.Rehearsal, Done: rh.Phase == v1alpha1.RehearsalDone}
		re.Rollback = rehearsalLeg(rh.BackStartedAt, rh.BackReadyAt, w.Now)
		re.Forward = rehearsalLeg(rh.ForwardStartedAt, rh.ForwardReadyAt, w.Now)
		if re.Rollback != nil {
			for _, r := range rh.BackChecks {
				re.Rollback.Checks = append(re.Rollback.Checks, verdict.RehearsalCheck{Cluster: r.Cluster, Check: r.Check, Result: r.Result, Message: r.Message})
			}
			if len(rh.BackChecks) > 0 {
				ev.Limits = append(ev.Limits, fmt.Sprintf("the way back was checked: %d runs of the policy's checks at the known-good %s", len(rh.BackChecks), kg.Revision))
			}
		}
		if rh.Message != "" {
			if re.Forward != nil && !re.Forward.OK {
				re.Forward.Message = rh.Message
			} else if re.Rollback != nil && !re.Rollback.OK {
				re.Rollback.Message = rh.Message
			}
		}
		ev.Rehearsal = re
		ev.Limits = append(ev.Limits, "the rehearsal proves the first wave's rollback; later waves' clusters were not rehearsed")
	}
	return ev
}

// chartRollbackFindings adds to diff what going back cannot undo of a chart's crds/ CRDs
// (evidence.ClassifyChartCRDs), and returns the limits of going back to a chart: its hooks run
// again, unjudged.
func chartRollbackFindings(diff *evidence.RollbackSafety, good, cand *renderedPackage) []string {
	var goodCRDs []*unstructured.Unstructured
	var goodChart *chart.Rendered
	if good != nil {
		goodChart = good.Chart.shared
		goodCRDs = append([]*unstructured.Unstructured{}, goodChart.CRDs...)
	}
	diff.Merge(evidence.RollbackSafety{FirstRollout: diff.FirstRollout, CRDChanges: evidence.ClassifyChartCRDs(goodCRDs, cand.Chart.shared.CRDs)})
	var out []string
	if l := hooksLimit("the known-good chart", goodChart, "run again when going back (a rollback is an upgrade of the release to the known-good chart), and are not judged here"); l != "" {
		out = append(out, l)
	}
	if l := hooksLimit("the candidate chart", cand.Chart.shared, "run when it installs or upgrades, and are not judged here"); l != "" {
		out = append(out, l)
	}
	return out
}

func rehearsalLeg(started, ready *metav1.Time, now time.Time) *verdict.RehearsalLeg {
	if started == nil {
		return nil
	}
	if ready == nil {
		return &verdict.RehearsalLeg{OK: false, Seconds: now.Sub(started.Time).Seconds()}
	}
	return &verdict.RehearsalLeg{OK: true, Seconds: ready.Sub(started.Time).Seconds()}
}
