package collector

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/engine"
	"github.com/tidegate/tidegate/evidence"
	"github.com/tidegate/tidegate/evidence/metrics"
	"github.com/tidegate/tidegate/verdict"
)

// metricWindow is what a wave's metric queries cover: from the wave's readiness to the decision, at
// the wave's sample interval, and how many points a cluster needs to be judged (the soak's
// required samples).
type metricWindow struct {
	start, end time.Time
	step       time.Duration
	required   int
	// switched is when the wave's clusters were switched: a baseline of the wave's own clusters
	// ends there.
	switched time.Time
}

// serviceMetrics adds to ev what the policy's metric queries (settings.metrics.queries) say of the
// wave's clusters and of its baseline. Each query is asked once for the wave and its baseline
// together, by cluster label, never once per cluster (but for clusters with a Prometheus of their
// own, asked each at theirs): a range query over the window, at the sample interval, so the points
// cover the soak however often the rollout was reconciled, and a controller restarted mid-soak loses
// none. A query that could not be asked, or that has too few points for a cluster, leaves that
// cluster's measure unset and the cluster unobserved, with the query's name and why: the gate is
// then Inconclusive, never passed.
func (c *Collector) serviceMetrics(ctx context.Context, w *engine.World, wv *v1alpha1.WaveStatus, win metricWindow, ev *verdict.NoDisruptionEvidence) {
	ms := w.Settings.Metrics
	if len(ms.Queries) == 0 || len(ev.Clusters) == 0 {
		return
	}
	if win.end.Sub(win.start) < win.step {
		win.start = win.end.Add(-win.step)
	}
	widened := false
	if span := win.end.Sub(win.start); span/win.step > maxMetricPoints {
		// A long window is asked at a coarser step, so that an answer stays bounded (at 1,000
		// clusters, about 41 bytes a point): the points needed scale down with it.
		win.step = (span/maxMetricPoints + time.Second - 1).Truncate(time.Second)
		win.required = min(win.required, int(math.Ceil(float64(span/win.step)*w.Settings.Tolerances.MinSampleCoverage)))
		widened = true
	}
	me := &verdict.MetricsEvidence{Start: win.start.UTC().Format(time.RFC3339), End: win.end.UTC().Format(time.RFC3339),
		Step: win.step.String(), Queries: ms.Queries, Baseline: map[string]verdict.Baseline{}}
	ev.Metrics = me
	names := make([]string, len(ev.Clusters))
	for i := range ev.Clusters {
		names[i] = ev.Clusters[i].Name
	}
	base := baselineOf(w, wv, ms.BaselineClusters, win)
	srcs := &metricSources{c: c, known: map[string]sourceAnswer{}}
	for _, q := range slices.Sorted(maps.Keys(ms.Queries)) {
		asked := names
		if base.kind == verdict.BaselineNotYetUpdated {
			asked = append(slices.Clone(names), base.clusters...)
		}
		series, errs := srcs.ask(ctx, w, q, asked, win.start, win.end, win.step)
		for i := range ev.Clusters {
			name := ev.Clusters[i].Name
			pts, found := series[name]
			s, ok := metrics.Summarize(pts)
			switch {
			case errs[name] != nil:
				unsetMetric(ev, i, q, errs[name].Error())
			case !found:
				unsetMetric(ev, i, q, fmt.Sprintf("no series for the cluster (label %s=%q) in %s to %s", ms.ClusterLabel, name, me.Start, me.End))
			case !ok || s.Count < win.required:
				unsetMetric(ev, i, q, fmt.Sprintf("%d points that are numbers, %d needed (settings.tolerances.minSampleCoverage of the window at %s)", s.Count, win.required, win.step))
			default:
				if ev.Clusters[i].Metrics == nil {
					ev.Clusters[i].Metrics = map[string]verdict.MetricSummary{}
				}
				ev.Clusters[i].Metrics[q] = s
			}
		}
		if base.kind == verdict.BaselineBeforeSwitch {
			series, errs = srcs.ask(ctx, w, q, base.clusters, base.start, base.end, win.step)
		}
		recordBaseline(me, q, base, series, errs, win.required)
	}
	for i := range ev.Clusters {
		slices.Sort(ev.Clusters[i].Unset)
	}
	ev.Limits = append(ev.Limits, fmt.Sprintf("service metrics are summarised over %s to %s at a %s step: a change shorter than the step, or than a query's own range, may be missed",
		me.Start, me.End, me.Step))
	if widened {
		ev.Limits = append(ev.Limits, fmt.Sprintf("the window is longer than %d sample intervals: it was asked at a %s step instead", maxMetricPoints, me.Step))
	}
}

// maxMetricPoints bounds the points of one series in a metric query's answer: a window longer than
// that many sample intervals is asked at a coarser step.
const maxMetricPoints = 720

// ask asks query q over start to end for clusters: once at the rollout's Prometheus
// (spec.metrics) for every cluster without one of its own, and once at each other cluster's own
// (its FleetCluster's spec.metrics), where {{clusters}} matches any value and the one series
// answered is the cluster's. It returns the points by cluster, and why a cluster has none when it
// could not be asked.
func (m *metricSources) ask(ctx context.Context, w *engine.World, q string, clusters []string, start, end time.Time, step time.Duration) (map[string][]float64, map[string]error) {
	ms := w.Settings.Metrics
	series, errs := map[string][]float64{}, map[string]error{}
	var shared, own []string
	for _, cl := range clusters {
		if fc := w.Clusters[cl]; fc != nil && fc.Spec.Metrics != nil {
			own = append(own, cl)
		} else {
			shared = append(shared, cl)
		}
	}
	if len(shared) > 0 {
		out, err := m.rangeAt(ctx, w.Rollout.Namespace, w.Rollout.Spec.Metrics, "spec.metrics", metrics.Expand(ms.Queries[q], shared), ms.ClusterLabel, start, end, step)
		for _, cl := range shared {
			if err != nil {
				errs[cl] = fmt.Errorf("query %s: %w", q, err)
			} else if pts, ok := out[cl]; ok {
				series[cl] = pts
			}
		}
	}
	answers := make([]map[string][]float64, len(own))
	failures := make([]error, len(own))
	evidence.Each(len(own), checksParallel, func(j int) {
		fc := w.Clusters[own[j]]
		query := strings.ReplaceAll(ms.Queries[q], metrics.ClustersPlaceholder, ".*")
		answers[j], failures[j] = m.rangeAt(ctx, fc.Namespace, fc.Spec.Metrics, "FleetCluster "+fc.Name+"'s spec.metrics", query, "", start, end, step)
	})
	for j, cl := range own {
		if failures[j] != nil {
			errs[cl] = fmt.Errorf("query %s: %w", q, failures[j])
		} else if pts, ok := answers[j][""]; ok {
			series[cl] = pts
		}
	}
	return series, errs
}

// metricSources are the Prometheus APIs one decision asks, each with the credentials of its
// Secret, read once for the decision and kept nowhere else.
type metricSources struct {
	c     *Collector
	mu    sync.Mutex
	known map[string]sourceAnswer // by what names the source
}

type sourceAnswer struct {
	p   *metrics.Prometheus
	err error
}

// rangeAt asks src's Prometheus; what names src in messages.
func (m *metricSources) rangeAt(ctx context.Context, namespace string, src *v1alpha1.MetricsSource, what, query, label string, start, end time.Time, step time.Duration) (map[string][]float64, error) {
	m.mu.Lock()
	a, ok := m.known[what]
	m.mu.Unlock()
	if !ok {
		a.p, a.err = m.c.prometheus(ctx, namespace, src, what)
		m.mu.Lock()
		m.known[what] = a
		m.mu.Unlock()
	}
	if a.err != nil {
		return nil, a.err
	}
	return a.p.Range(ctx, query, label, start, end, step)
}

// prometheus is src's Prometheus with the credentials of its Secret.
func (c *Collector) prometheus(ctx context.Context, namespace string, src *v1alpha1.MetricsSource, what string) (*metrics.Prometheus, error) {
	if src == nil {
		return nil, errNoProvider
	}
	p := &metrics.Prometheus{Address: src.Prometheus.Address}
	if ref := src.Prometheus.SecretRef; ref != nil {
		if c.Secrets == nil {
			return nil, fmt.Errorf("%s.prometheus.secretRef %s: this controller reads no Secrets", what, ref.Name)
		}
		var s corev1.Secret
		if err := c.Secrets.Get(ctx, client.ObjectKey{Namespace: namespace, Name: ref.Name}, &s); err != nil {
			return nil, fmt.Errorf("%s.prometheus.secretRef: reading Secret %s/%s: %w", what, namespace, ref.Name, err)
		}
		p.Token, p.Username, p.Password = string(s.Data["token"]), string(s.Data["username"]), string(s.Data["password"])
		if p.Token == "" && p.Username == "" {
			return nil, fmt.Errorf("%s.prometheus.secretRef: Secret %s/%s has neither token nor username: give it token (a bearer token) or username and password",
				what, namespace, ref.Name)
		}
	}
	return p, nil
}

var errNoProvider = errors.New("spec.metrics names no Prometheus to ask, and the policy's settings.metrics.queries need one")

// unsetMetric records that query q has no value for cluster i, and why.
func unsetMetric(ev *verdict.NoDisruptionEvidence, i int, q, why string) {
	cc := &ev.Clusters[i]
	cc.Unset = append(cc.Unset, verdict.MeasureMetric(q))
	ev.Unobserved = append(ev.Unobserved, verdict.Unobserved{Name: cc.Name, Reason: "query " + q + ": " + why})
}

// baseline is the clusters a wave's metrics are compared with.
type baseline struct {
	kind       string // verdict.BaselineNotYetUpdated, BaselineBeforeSwitch, or "" for none
	clusters   []string
	start, end time.Time
	why        string // when there is none
}

// baselineOf picks the wave's baseline: up to n clusters still at the known-good (the first by
// name: the choice is the same at every decision of the wave), over the wave's window; when none
// is left (the last wave), the wave's own clusters over the window of the same length before they
// were switched.
func baselineOf(w *engine.World, wv *v1alpha1.WaveStatus, n int, win metricWindow) baseline {
	if n == 0 {
		return baseline{why: "settings.metrics.baselineClusters is 0"}
	}
	inWave := make(map[string]bool, len(wv.Clusters))
	for _, c := range wv.Clusters {
		inWave[c] = true
	}
	var at []string
	if kg := w.Rollout.Status.LastKnownGood; kg != nil {
		for _, c := range slices.Sorted(maps.Keys(w.Kustomizations)) {
			o := w.Kustomizations[c]
			if !inWave[c] && (o.ReadyAt(kg.Source, kg.Revision) || o.StillAt(kg.Source, kg.Revision)) {
				at = append(at, c)
				if len(at) == n {
					break
				}
			}
		}
	}
	if len(at) > 0 {
		return baseline{kind: verdict.BaselineNotYetUpdated, clusters: at, start: win.start, end: win.end}
	}
	if win.switched.IsZero() {
		return baseline{why: "no cluster is still at the known-good, and the wave has no switch time"}
	}
	own := slices.Clone(wv.Clusters)
	if len(own) > n {
		own = own[:n]
	}
	length := win.end.Sub(win.start)
	return baseline{kind: verdict.BaselineBeforeSwitch, clusters: own, start: win.switched.Add(-length), end: win.switched}
}

// recordBaseline puts query q's baseline into the evidence: the points of the baseline's clusters
// that could be asked, pooled, when there are enough of them, or why there is none.
func recordBaseline(me *verdict.MetricsEvidence, q string, base baseline, series map[string][]float64, errs map[string]error, required int) {
	why := base.why
	if base.kind != "" {
		var asked []string
		var failed error
		for _, cl := range base.clusters {
			if errs[cl] != nil {
				failed = errs[cl]
				continue
			}
			asked = append(asked, cl)
		}
		s, ok := metrics.Pool(series, asked)
		switch {
		case ok && s.Count >= required:
			me.Baseline[q] = verdict.Baseline{MetricSummary: s, Kind: base.kind, Clusters: asked,
				Start: base.start.UTC().Format(time.RFC3339), End: base.end.UTC().Format(time.RFC3339)}
			return
		case len(asked) == 0 && failed != nil:
			why = fmt.Sprintf("the %s baseline (%s) could not be asked: %v", base.kind, firstOf(base.clusters), failed)
		default:
			why = fmt.Sprintf("the %s baseline (%s) has %d points that are numbers, %d needed", base.kind, firstOf(base.clusters), s.Count, required)
		}
	}
	me.BaselineUnset = append(me.BaselineUnset, verdict.Unobserved{Name: q, Reason: why})
}
