package collector

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/engine"
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
// together, by cluster label, never once per cluster: a range query over the window, at the
// sample interval, so the points cover the soak however often the rollout was reconciled, and a
// controller restarted mid-soak loses none. A query that could not be asked, or that has too few
// points for a cluster, leaves that cluster's measure unset and the cluster unobserved, with the
// query's name and why: the gate is then Inconclusive, never passed.
func (c *Collector) serviceMetrics(ctx context.Context, w *engine.World, wv *v1alpha1.WaveStatus, win metricWindow, ev *verdict.NoDisruptionEvidence) {
	ms := w.Settings.Metrics
	if len(ms.Queries) == 0 || len(ev.Clusters) == 0 {
		return
	}
	if win.end.Sub(win.start) < win.step {
		win.start = win.end.Add(-win.step)
	}
	me := &verdict.MetricsEvidence{Start: win.start.UTC().Format(time.RFC3339), End: win.end.UTC().Format(time.RFC3339),
		Step: win.step.String(), Queries: ms.Queries, Baseline: map[string]verdict.Baseline{}}
	ev.Metrics = me
	names := make([]string, len(ev.Clusters))
	for i := range ev.Clusters {
		names[i] = ev.Clusters[i].Name
	}
	provider, err := c.metricsProvider(ctx, w.Rollout)
	base := baselineOf(w, wv, ms.BaselineClusters, win)
	for _, q := range slices.Sorted(maps.Keys(ms.Queries)) {
		var wave, baseline map[string][]float64
		if err == nil {
			wave, baseline, err = askMetric(ctx, provider, ms, q, names, base, win)
		}
		if err != nil {
			for i := range ev.Clusters {
				unsetMetric(ev, i, q, err.Error())
			}
			me.BaselineUnset = append(me.BaselineUnset, verdict.Unobserved{Name: q, Reason: err.Error()})
			err = nil // the next query is asked all the same, unless the provider itself is missing
			if provider == nil {
				err = errNoProvider
			}
			continue
		}
		for i := range ev.Clusters {
			pts, found := wave[ev.Clusters[i].Name]
			s, ok := metrics.Summarize(pts)
			switch {
			case !found:
				unsetMetric(ev, i, q, fmt.Sprintf("no series for the cluster (label %s=%q) in %s to %s", ms.ClusterLabel, ev.Clusters[i].Name, me.Start, me.End))
			case !ok || s.Count < win.required:
				unsetMetric(ev, i, q, fmt.Sprintf("%d points that are numbers, %d needed (settings.tolerances.minSampleCoverage of the window at %s)", s.Count, win.required, win.step))
			default:
				if ev.Clusters[i].Metrics == nil {
					ev.Clusters[i].Metrics = map[string]verdict.MetricSummary{}
				}
				ev.Clusters[i].Metrics[q] = s
			}
		}
		recordBaseline(me, q, base, baseline, win.required)
	}
	for i := range ev.Clusters {
		slices.Sort(ev.Clusters[i].Unset)
	}
	ev.Limits = append(ev.Limits, fmt.Sprintf("service metrics are summarised over %s to %s at a %s step: a change shorter than the step, or than a query's own range, may be missed",
		me.Start, me.End, me.Step))
}

var errNoProvider = errors.New("spec.metrics names no Prometheus to ask, and the policy's settings.metrics.queries need one")

// askMetric asks query q for the wave's clusters and its baseline: once for both when the baseline
// is of the same window, else once for each.
func askMetric(ctx context.Context, p metrics.Provider, ms verdict.MetricSettings, q string, names []string, base baseline, win metricWindow) (wave, baseline map[string][]float64, err error) {
	ask := func(clusters []string, start, end time.Time) (map[string][]float64, error) {
		out, err := p.Range(ctx, metrics.Expand(ms.Queries[q], clusters), ms.ClusterLabel, start, end, win.step)
		if err != nil {
			return nil, fmt.Errorf("query %s: %w", q, err)
		}
		return out, nil
	}
	switch base.kind {
	case verdict.BaselineNotYetUpdated:
		wave, err = ask(append(slices.Clone(names), base.clusters...), win.start, win.end)
		return wave, wave, err
	case verdict.BaselineBeforeSwitch:
		if wave, err = ask(names, win.start, win.end); err != nil {
			return nil, nil, err
		}
		baseline, err = ask(base.clusters, base.start, base.end)
		if err != nil {
			// The wave's own points stand; only the baseline is missing.
			return wave, nil, nil
		}
		return wave, baseline, nil
	}
	wave, err = ask(names, win.start, win.end)
	return wave, nil, err
}

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

// recordBaseline puts query q's baseline into the evidence: the baseline's clusters' points
// pooled, when there are enough of them, or why there is none.
func recordBaseline(me *verdict.MetricsEvidence, q string, base baseline, series map[string][]float64, required int) {
	why := base.why
	if base.kind != "" {
		s, ok := metrics.Pool(series, base.clusters)
		if ok && s.Count >= required {
			me.Baseline[q] = verdict.Baseline{MetricSummary: s, Kind: base.kind, Clusters: base.clusters,
				Start: base.start.UTC().Format(time.RFC3339), End: base.end.UTC().Format(time.RFC3339)}
			return
		}
		why = fmt.Sprintf("the %s baseline (%s) has %d points that are numbers, %d needed", base.kind, firstOf(base.clusters), s.Count, required)
		if series == nil {
			why = fmt.Sprintf("the %s baseline (%s) could not be asked", base.kind, firstOf(base.clusters))
		}
	}
	me.BaselineUnset = append(me.BaselineUnset, verdict.Unobserved{Name: q, Reason: why})
}

// metricsProvider is the Provider of the rollout's spec.metrics, with the credentials of its
// Secret. The credentials are read for each decision and kept nowhere else.
func (c *Collector) metricsProvider(ctx context.Context, fr *v1alpha1.FleetRollout) (metrics.Provider, error) {
	if c.MetricsProvider != nil {
		return c.MetricsProvider(ctx, fr)
	}
	if fr.Spec.Metrics == nil {
		return nil, errNoProvider
	}
	src := fr.Spec.Metrics.Prometheus
	p := &metrics.Prometheus{Address: src.Address}
	if src.SecretRef == nil {
		return p, nil
	}
	if c.Secrets == nil {
		return nil, fmt.Errorf("spec.metrics.prometheus.secretRef %s: this controller reads no Secrets", src.SecretRef.Name)
	}
	var s corev1.Secret
	if err := c.Secrets.Get(ctx, client.ObjectKey{Namespace: fr.Namespace, Name: src.SecretRef.Name}, &s); err != nil {
		return nil, fmt.Errorf("spec.metrics.prometheus.secretRef: reading Secret %s/%s: %w", fr.Namespace, src.SecretRef.Name, err)
	}
	p.Token, p.Username, p.Password = string(s.Data["token"]), string(s.Data["username"]), string(s.Data["password"])
	if p.Token == "" && p.Username == "" {
		return nil, fmt.Errorf("spec.metrics.prometheus.secretRef: Secret %s/%s has neither token nor username: give it token (a bearer token) or username and password",
			fr.Namespace, src.SecretRef.Name)
	}
	return p, nil
}
