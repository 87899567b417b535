package collector

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/evidence"
	"github.com/tidegate/tidegate/evidence/chart"
	"github.com/tidegate/tidegate/evidence/preflight"
)

const (
	// maxCachedChartRenders bounds the chart renders kept in memory: one per chart and distinct
	// values, so that a fleet whose clusters set values of their own renders each once.
	maxCachedChartRenders = 1024
	// chartRenderParallel bounds the chart renders a collection runs at once: each is a render
	// worker under the render budget, and a collection, like a kustomize package's, holds one
	// worker at a time, so that the workers at once stay one per rollout reconciled (the render
	// budget's memory times --concurrent fits the manager's limit). Distinct values among a wave's
	// clusters are few (a region, a size), and each is rendered once (chartRenders).
	chartRenderParallel = 1
)

// chartPackage is one revision of a rollout's Helm chart (spec.chart): the archive its pinned
// OCIRepository serves, which is the chart itself (helm push's layer, which source-controller
// copies out of the artifact), and what decides how helm-controller renders it besides the values.
type chartPackage struct {
	archive []byte
	// key is the package's render key (renderKey); each render of it with values is kept under
	// the key and the values' digest.
	key string
	// release is the HelmRelease the chart renders for (chartRelease).
	release *helmv2.HelmRelease
	// opts carry the source's artifact revision when it is an OCIRepository, so that the chart's
	// version carries its digest as helm-controller renders it (for that kind of source alone: a
	// HelmChart's chart keeps its version), and whether the release is upgraded.
	opts chart.Options
	// shared is the render with the rollout's values (spec.chart.values): the objects of a member
	// without values of its own.
	shared *chart.Rendered
}

// chartRelease is the HelmRelease the collector renders fr's chart for: shaped as tidegate writes
// each member's, for what decides the render (the release's name and namespace). It is named
// after the rollout, where each member's is named after the rollout and the cluster: that name is
// only in the label helm.toolkit.fluxcd.io/name, which no gate judges, and one name lets every
// cluster with the same values share a render.
func chartRelease(fr *v1alpha1.FleetRollout) *helmv2.HelmRelease {
	hr := &helmv2.HelmRelease{ObjectMeta: metav1.ObjectMeta{Namespace: fr.Namespace, Name: fr.Name}}
	hr.Spec.ReleaseName, hr.Spec.TargetNamespace = fr.ReleaseName(), fr.ReleaseNamespace()
	return hr
}

// renderedUpgrade tells whether fr's chart is rendered as an upgrade of its release: when a
// known-good runs on the members, the candidate upgrades it, and going back upgrades it again.
func renderedUpgrade(fr *v1alpha1.FleetRollout) bool { return fr.Status.LastKnownGood != nil }

// chartKey is what of fr, besides the build spec, decides its chart's render: spec.chart, the
// source's artifact revision (the version's digest) and whether it renders as an upgrade.
func chartKey(fr *v1alpha1.FleetRollout, revision string) []byte {
	b, _ := json.Marshal(struct {
		Chart    *v1alpha1.ChartSpec `json:"chart"`
		Revision string              `json:"revision"`
		Upgrade  bool                `json:"upgrade"`
	}{fr.Spec.Chart, revision, renderedUpgrade(fr)})
	return b
}

// newChartPackage is a chart revision of fr from the archive its source serves (data, and art,
// the archive unpacked; src, the source's revision), rendered with the rollout's values: a chart
// that does not render with them comes back with RenderErr. An *unfinishedRender when that render
// came to no result.
func (c *Collector) newChartPackage(ctx context.Context, fr *v1alpha1.FleetRollout, src string, key string, data []byte, art *evidence.Artifact, what string) (*renderedPackage, error) {
	cp := &chartPackage{archive: data, key: key, release: chartRelease(fr), opts: chart.Options{Upgrade: renderedUpgrade(fr)}}
	if fr.Spec.SourceRef.Kind == sourcev1.OCIRepositoryKind {
		cp.opts.SourceRevision = src
	}
	p := &renderedPackage{Chart: cp, InstallSchema: chartInstallSchema(art)}
	shared, renderErr, err := c.renderChart(ctx, fr, nil, cp, what)
	if err != nil {
		return nil, err
	}
	cp.shared, p.RenderErr = shared, renderErr
	return p, nil
}

// chartInstallSchema is the chart's tidegate/install.cue (at <chart>/tidegate/install.cue in its
// archive, whose one top directory is the chart's), nil when it ships none.
func chartInstallSchema(art *evidence.Artifact) []byte {
	entries, err := art.FS.ReadDir("/")
	if err != nil {
		return nil
	}
	for _, e := range entries {
		if b, err := art.FS.ReadFile(path.Join("/", e, installSchemaFile)); err == nil {
			return b
		}
	}
	return nil
}

// chartRender is a finished render of a chart with one set of values: the render, or Helm's error.
type chartRender struct {
	rendered *chart.Rendered
	err      error
}

// renderChart renders cp's chart with the values fr gives cluster fc (fr.ChartValues; fc nil: a
// cluster without values of its own), in a worker under RenderBudget when it is set; what names
// the render in errors. A chart that does not render with those values (a template fails, or its
// values.schema.json refuses them) comes back as renderErr. err, an *unfinishedRender, says the
// render came to no result. Finished renders are kept by the package and the values' digest.
func (c *Collector) renderChart(ctx context.Context, fr *v1alpha1.FleetRollout, fc *v1alpha1.FleetCluster, cp *chartPackage, what string) (r *chart.Rendered, renderErr, err error) {
	values, err := fr.ChartValues(fc)
	if err != nil {
		return nil, err, nil
	}
	raw, err := json.Marshal(values)
	if err != nil {
		return nil, fmt.Errorf("encoding the chart's values: %w", err), nil
	}
	sum := sha256.Sum256(raw)
	key := cp.key + ":" + hex.EncodeToString(sum[:16])
	if done, ok := c.chartRenders.get(key); ok {
		return done.rendered, done.err, nil
	}
	if c.RenderBudget != nil {
		r, renderErr, err = c.RenderBudget.RenderChart(ctx, "rendering "+what, cp.archive, cp.release, values, cp.opts)
		if err != nil {
			return nil, nil, &unfinishedRender{err}
		}
	} else {
		r, renderErr = chart.Render(ctx, cp.archive, cp.release, values, cp.opts)
	}
	c.chartRenders.put(key, &chartRender{rendered: r, err: renderErr}, maxCachedChartRenders)
	return r, renderErr, nil
}

// chartDigest identifies a chart's render: equal digests are the same objects, CRDs and hooks.
func chartDigest(r *chart.Rendered) (string, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// chartApplied is what helm-controller applies of a chart's render on a member, in its order:
// the CRDs of its crds/ directory first (it applies them before the release), the release's
// namespace (it installs with install.createNamespace, so the namespace is one the package
// creates, as a kustomize package's own Namespace object is), then the release's objects. Hooks
// are not among them: Helm runs them at install and upgrade, and they are not dry-run.
func chartApplied(r *chart.Rendered) []*unstructured.Unstructured {
	ns := &unstructured.Unstructured{}
	ns.SetAPIVersion("v1")
	ns.SetKind("Namespace")
	ns.SetName(r.Namespace)
	out := make([]*unstructured.Unstructured, 0, len(r.CRDs)+1+len(r.Objects))
	out = append(out, r.CRDs...)
	out = append(out, ns)
	return append(out, r.Objects...)
}

// renderOwnChartValues has each target whose FleetCluster sets values of its own preflighted with
// what helm-controller applies on it: the chart rendered with its values (chartApplied). The
// renders are made first, chartRenderParallel at once, each distinct values once. A
// chart that does not render with a cluster's values is that cluster's failure, among its dry-run
// errors, as a member's refusal is; a render that came to no result leaves the cluster
// unobserved.
func (c *Collector) renderOwnChartValues(ctx context.Context, fr *v1alpha1.FleetRollout, clusters map[string]*v1alpha1.FleetCluster, targets []preflight.Target, cp *chartPackage) {
	var own []int
	for i := range targets {
		if fc := clusters[targets[i].Name]; fc != nil && len(fc.Spec.Values) > 0 && targets[i].Err == nil {
			own = append(own, i)
		}
	}
	renders := make([]chartRender, len(own))
	unfinished := make([]error, len(own))
	evidence.Each(len(own), chartRenderParallel, func(k int) {
		fc := clusters[targets[own[k]].Name]
		r, renderErr, err := c.renderChart(ctx, fr, fc, cp, "the candidate with cluster "+fc.Name+"'s values")
		renders[k], unfinished[k] = chartRender{rendered: r, err: renderErr}, err
	})
	for k, i := range own {
		t, r := &targets[i], renders[k]
		switch {
		case unfinished[k] != nil:
			t.Resolve, t.Err = nil, fmt.Errorf("not checked: the chart did not finish rendering with the cluster's values (spec.values): %w", unfinished[k])
		case r.err != nil:
			err := fmt.Errorf("the chart does not render with the cluster's values (spec.values): %w", r.err)
			t.Objects = func() ([]*unstructured.Unstructured, error) { return nil, err }
		default:
			objs := chartApplied(r.rendered)
			t.Objects = func() ([]*unstructured.Unstructured, error) { return objs, nil }
		}
	}
}

// hooksLimit says, for a chart with hooks, that they are not part of what is judged: Helm runs
// them at the events they name, and nothing dry-runs them. "" without hooks.
func hooksLimit(what string, r *chart.Rendered, runs string) string {
	if r == nil || len(r.Hooks) == 0 {
		return ""
	}
	hooks := make([]string, 0, len(r.Hooks))
	for _, h := range r.Hooks {
		hooks = append(hooks, fmt.Sprintf("%s %s (%s)", h.Kind, h.Name, strings.Join(h.Events, ", ")))
	}
	return fmt.Sprintf("%s's hooks %s: %s", what, runs, firstOf(hooks))
}

// errUnfinished tells whether err is a render that came to no result.
func errUnfinished(err error) bool {
	var u *unfinishedRender
	return errors.As(err, &u)
}
