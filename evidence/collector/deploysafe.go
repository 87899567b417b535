package collector

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/engine"
	"github.com/tidegate/tidegate/evidence"
	"github.com/tidegate/tidegate/evidence/chart"
	"github.com/tidegate/tidegate/evidence/preflight"
	"github.com/tidegate/tidegate/verdict"
)

// deploySafe gathers the candidate's provenance, its render, its install-time values (the
// rollout's, and each target's own) against its install schema, and a preflight of every target of
// the wave, with the objects as its Kustomization substitutes them and the wave's failure budget.
// The first wave's preflight also covers every later wave's planned targets (laterWaves), so that
// a cluster that cannot take the candidate is found before the canary runs it.
func (c *Collector) deploySafe(ctx context.Context, sc *engine.World, wv *v1alpha1.WaveStatus, key string) (verdict.DeploySafeEvidence, error) {
	fr := sc.Rollout.Built(sc.Rollout.Status.Candidate.Build)
	ev := verdict.DeploySafeEvidence{Evidence: baseEvidence(fr, wv.Name, wv.Clusters, sc.Now)}
	ev.Preflight.MaxFailures = maxFailuresOf(fr.WaveSpec(wv.Name))
	later := laterWaves(sc, wv)
	ev.Source = sourceEvidence(sc.Candidate)
	if src := sc.Candidate; src.VerifyFailed {
		if !SignatureRefused(src.VerifyMessage) {
			// The verification did not run to a verdict: nothing is known of the signature yet.
			ev.Unobserved = append(ev.Unobserved, verdict.Unobserved{Reason: "source-controller could not verify the candidate's signature: " + src.VerifyMessage})
			ev.Render.Error = "the candidate is not served until its signature is verified"
			return ev, fmt.Errorf("%w: source-controller could not verify the signature of the candidate (pinned source %s): %s", ErrUnobserved, src.Name, src.VerifyMessage)
		}
		// A verdict: the candidate is refused, and no artifact of it will ever be served. That is
		// known, not unobserved: the gate decides on it now.
		ev.Render.Error = "source-controller refused the candidate's signature and serves no artifact of it"
		ev.Limits = append(ev.Limits, "no render and no preflight: source-controller refused the candidate, so there is nothing to build or to ask the clusters about")
		return ev, nil
	}

	pkg, err := c.renderRevision(ctx, fr, sc.Candidate, fr.Status.Candidate.Digest, "the candidate", false)
	var objs []*unstructured.Unstructured
	var unfinished *unfinishedRender
	switch {
	case errors.As(err, &unfinished):
		// Not observed: whether the candidate builds is not known until a render finishes.
		ev.Render.Error = err.Error()
		ev.Unobserved = append(ev.Unobserved, verdict.Unobserved{Reason: err.Error()})
	case err != nil:
		ev.Render.Error = "fetching the candidate: " + err.Error()
		// Not observed: the gate is Inconclusive until the artifact can be fetched again.
		ev.Unobserved = append(ev.Unobserved, verdict.Unobserved{Reason: "fetching the candidate's artifact failed: " + err.Error()})
	case pkg.RenderErr != nil:
		ev.Render.Error = pkg.RenderErr.Error()
	case pkg.Chart != nil:
		// What a cluster without values of its own applies: the CRDs of the chart's crds/ first.
		r := pkg.Chart.shared
		objs = chartApplied(r)
		ev.Render.OK, ev.Render.Chart = true, &verdict.ChartRef{Name: r.Chart, Version: r.Version}
		summarizeRender(&ev.Render, append(r.CRDs[:len(r.CRDs):len(r.CRDs)], r.Objects...))
		ev.Limits = append(ev.Limits, chartLimits(fr, r)...)
	default:
		// The objects a cluster without values of its own applies.
		if objs, err = c.objectsOf(ctx, fr, nil, pkg); err != nil {
			ev.Render.Error = "postBuild substitution: " + err.Error()
			break
		}
		ev.Render.OK = true
		summarizeRender(&ev.Render, objs)
	}
	ev.Limits = append(ev.Limits, substituteFromLimits(fr)...)
	values := valuesOf(fr, ev.Targets, sc.Clusters)
	if pkg != nil {
		ev.Install = values.check(pkg.InstallSchema)
	}

	if !ev.Render.OK {
		ev.Limits = append(ev.Limits, "no preflight: the candidate did not render, so there is nothing to ask the clusters about")
		return ev, nil
	}
	names := slices.Clone(ev.Targets)
	for _, lw := range later {
		names = append(names, lw.Clusters...)
	}
	results, reused, oldest := c.recheck(sc, key, names, len(ev.Targets), func(names []string) []verdict.ClusterPreflight {
		return c.preflight(ctx, sc, names, pkg, objs, preflight.Options{Force: fr.Spec.Template.Force})
	})
	if pkg.Build != nil {
		maskPreflight(pkg.Build, results)
	}
	if reused > 0 {
		ev.Limits = append(ev.Limits, c.reusedLimit(reused, len(names), oldest, sc.Now))
	}
	for _, r := range results[:len(ev.Targets)] {
		if !r.Reachable {
			ev.Unobserved = append(ev.Unobserved, verdict.Unobserved{Name: r.Name, Reason: "preflight: " + r.Problem()})
		}
	}
	ev.Preflight.WavePreflight = verdict.NewWavePreflight("", ev.Preflight.MaxFailures, results[:len(ev.Targets)])
	results = results[len(ev.Targets):]
	var away []string
	for _, lw := range later {
		// A later wave's cluster that does not answer now is its own wave's business: that wave
		// holds on it when it is due. What the first wave looks for in the later ones is a cluster
		// that cannot take the candidate.
		answered := make([]verdict.ClusterPreflight, 0, len(lw.Clusters))
		for _, r := range results[:len(lw.Clusters)] {
			if r.Reachable {
				answered = append(answered, r)
			} else {
				away = append(away, r.Name)
			}
		}
		ev.Preflight.LaterWaves = append(ev.Preflight.LaterWaves, verdict.NewWavePreflight(lw.Name, lw.MaxFailures, answered))
		results = results[len(lw.Clusters):]
	}
	if len(away) > 0 {
		ev.Limits = append(ev.Limits, fmt.Sprintf("%d clusters of later waves did not answer the preflight (%s): they are not judged here; their own wave's deploySafe checks them before it starts, and holds while they do not answer",
			len(away), firstOf(away)))
	}
	ev.Limits = append(ev.Limits, "the preflight is a server-side dry-run at decision time; admission webhooks and quotas may still decide otherwise when Flux applies")
	if sa := fr.Spec.Template.ServiceAccountName; sa != "" {
		applier := "kustomize-controller"
		if fr.IsChart() {
			applier = "helm-controller"
		}
		ev.Limits = append(ev.Limits, fmt.Sprintf("the preflight dry-runs with each FleetCluster's credentials, not as the service account %s that %s impersonates to apply (spec.template.serviceAccountName): what that account may not do is not checked", sa, applier))
	}
	if len(later) > 0 {
		ev.Limits = append(ev.Limits, "the later waves' preflight covers the clusters planned for them now; each wave is checked again, on its own members, before it starts")
	}
	return ev, nil
}

// summarizeRender lists objs, at most verdict.MaxRenderedObjects of them, in ev.
func summarizeRender(ev *verdict.RenderEvidence, objs []*unstructured.Unstructured) {
	sum := evidence.Summarize(objs, verdict.MaxRenderedObjects)
	ev.Total, ev.Truncated = sum.Total, sum.Truncated
	for _, o := range sum.Objects {
		ev.Objects = append(ev.Objects, verdict.ObjectRef(o))
	}
}

// chartLimits say what deploySafe's evidence of chart r does not establish: its hooks are not
// dry-run, and what the templates read of a member, or of the release's history, is Helm's
// defaults, not the member's.
func chartLimits(fr *v1alpha1.FleetRollout, r *chart.Rendered) []string {
	var out []string
	if l := hooksLimit("the chart", r, "run at install and upgrade and are not dry-run"); l != "" {
		out = append(out, l)
	}
	how := "as a first install of the release (no known-good runs)"
	if renderedUpgrade(fr) {
		how = "as an upgrade of the release from the known-good"
	}
	out = append(out, "the chart is rendered "+how+", with Helm's default capabilities (.Capabilities.KubeVersion and APIVersions), not each member's; templates that read them, or that look up objects on the cluster, may render otherwise there")
	return out
}

// sourceEvidence is the candidate's provenance as its pinned source reports it. Its verification
// is the one of the source's current spec, which pins one digest or commit: what is verified is
// the revision the source serves, and a refused one is never served.
func sourceEvidence(src engine.SourceState) verdict.SourceEvidence {
	ev := verdict.SourceEvidence{Verified: src.Verified, Verification: src.Verification, Message: src.VerifyMessage}
	if src.Verified {
		ev.Revision = src.Revision
	}
	return ev
}

// plannedWave is a wave after the one a first wave's deploySafe is about, as planned now.
type plannedWave struct {
	Name        string
	MaxFailures int
	Clusters    []string
}

// laterWaves are the waves after wv with the clusters today's plan gives them, when wv is the
// first wave (else none): its deploySafe preflights the whole fleet.
func laterWaves(sc *engine.World, wv *v1alpha1.WaveStatus) []plannedWave {
	waves := sc.Rollout.Status.Waves
	if len(waves) < 2 || waves[0].Name != wv.Name {
		return nil
	}
	taken := make(map[string]bool, len(wv.Clusters))
	for _, c := range wv.Clusters {
		taken[c] = true
	}
	var out []plannedWave
	for _, w := range waves[1:] {
		lw := plannedWave{Name: w.Name, MaxFailures: maxFailuresOf(sc.Rollout.WaveSpec(w.Name))}
		for _, pw := range sc.Plan.Waves {
			if pw.Name != w.Name {
				continue
			}
			for _, c := range pw.Clusters {
				if !taken[c] {
					taken[c] = true
					lw.Clusters = append(lw.Clusters, c)
				}
			}
		}
		out = append(out, lw)
	}
	return out
}

// maxFailuresOf is a wave's failure budget: its spec's maxFailures, else 0.
func maxFailuresOf(spec v1alpha1.Wave) int {
	if spec.MaxFailures != nil {
		return int(*spec.MaxFailures)
	}
	return 0
}

// preflight checks targets, in the order given, at most PreflightParallel at once, each within its
// share of the time ctx has left (preflight.CheckAll). A target's kubeconfig is read in its own
// turn, within its own deadline.
func (c *Collector) preflight(ctx context.Context, sc *engine.World, targets []string, pkg *renderedPackage, objs []*unstructured.Unstructured, opts preflight.Options) []verdict.ClusterPreflight {
	fr := sc.Rollout
	pts := make([]preflight.Target, 0, len(targets))
	for _, name := range targets {
		t := preflight.Target{Name: name}
		if fc := sc.Clusters[name]; fc != nil {
			t.Resolve = func(ctx context.Context) (*rest.Config, error) { return c.Members.Config(ctx, fc) }
		} else {
			t.Err = fmt.Errorf("fleetcluster %s/%s is gone", fr.Namespace, name)
		}
		pts = append(pts, t)
	}
	// A target with values of its own is checked with the package substituted, or the chart
	// rendered, with them.
	if pkg.Chart != nil {
		c.renderOwnChartValues(ctx, fr, sc.Clusters, pts, pkg.Chart)
	} else {
		substituteOwnValues(fr, sc.Clusters, pts, pkg)
	}
	return preflight.CheckAll(ctx, pts, objs, opts, c.PreflightParallel)
}
