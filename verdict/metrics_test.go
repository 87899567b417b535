package verdict

import (
	"slices"
	"strings"
	"testing"
)

// withMetrics gives wave ev the metric evidence of an errorRatio and a latencyP95 query: each
// cluster's means as given (a cluster missing from a map has no value for that query: it is unset,
// and unobserved), and the baselines' means (a negative one: no baseline for that query).
func withMetrics(ev NoDisruptionEvidence, errorRatio, latency map[string]float64, errorBase, latencyBase float64) NoDisruptionEvidence {
	ev.Metrics = &MetricsEvidence{Start: "2026-03-01T09:58:00Z", End: "2026-03-01T10:00:00Z", Step: "5s",
		Queries:  map[string]string{"errorRatio": `sum by (cluster) (rate(http_requests_total{code="500",cluster=~"{{clusters}}"}[30s])) / sum by (cluster) (rate(http_requests_total{cluster=~"{{clusters}}"}[30s]))`, "latencyP95": `histogram_quantile(0.95, sum by (cluster, le) (rate(http_request_duration_seconds_bucket{cluster=~"{{clusters}}"}[30s])))`},
		Baseline: map[string]Baseline{}}
	for q, mean := range map[string]float64{"errorRatio": errorBase, "latencyP95": latencyBase} {
		if mean < 0 {
			ev.Metrics.BaselineUnset = append(ev.Metrics.BaselineUnset, Unobserved{Name: q, Reason: "no cluster is still at the known-good"})
			continue
		}
		ev.Metrics.Baseline[q] = Baseline{MetricSummary: MetricSummary{Count: 48, Min: mean, Max: mean, Mean: mean, Last: mean},
			Kind: BaselineNotYetUpdated, Clusters: []string{"member-0100", "member-0101"}, Start: ev.Metrics.Start, End: ev.Metrics.End}
	}
	for i := range ev.Clusters {
		c := &ev.Clusters[i]
		c.Metrics = map[string]MetricSummary{}
		for q, by := range map[string]map[string]float64{"errorRatio": errorRatio, "latencyP95": latency} {
			mean, ok := by[c.Name]
			if !ok {
				c.Unset = append(c.Unset, MeasureMetric(q))
				ev.Unobserved = append(ev.Unobserved, Unobserved{Name: c.Name, Reason: "query " + q + ": no series for the cluster"})
				continue
			}
			c.Metrics[q] = MetricSummary{Count: 24, Min: mean, Max: mean * 2, Mean: mean, Last: mean}
		}
	}
	return ev
}

func all(names []string, v float64) map[string]float64 {
	out := map[string]float64{}
	for _, n := range names {
		out[n] = v
	}
	return out
}

// The default policy's metric rules: an error ratio above 1 % fails, and the reason names the
// cluster, the query, the measured mean and the baseline's; a latency 2x the baseline's fails on
// the relative rule alone; a query with no value for a cluster makes the gate Inconclusive, never a
// pass; a failure budget counts clusters failing on metrics.
func TestTheDefaultPolicysMetricRules(t *testing.T) {
	base := wave(3, 0)
	names := base.Targets
	healthyErr, healthyLat := all(names, 0.002), all(names, 0.05)
	for _, tc := range []struct {
		name         string
		ev           NoDisruptionEvidence
		pass, inconc bool
		reason       []string
	}{
		{name: "healthy, with a baseline", ev: withMetrics(wave(3, 0), healthyErr, healthyLat, 0.002, 0.05), pass: true},
		{name: "healthy, no baseline left", ev: withMetrics(wave(3, 0), healthyErr, healthyLat, -1, -1), pass: true},
		{name: "a 30 % error ratio on one cluster", ev: withMetrics(wave(3, 0), map[string]float64{names[0]: 0.3, names[1]: 0.002, names[2]: 0.002}, healthyLat, 0.002, 0.05),
			reason: []string{"cluster member-0000: errorRatio's mean over the soak is 0.3", "baseline's mean is 0.002"}},
		{name: "0.8 % errors where the baseline has 0.1 %: under the absolute limit, over 1.5x the baseline", ev: withMetrics(wave(3, 0), map[string]float64{names[0]: 0.008, names[1]: 0.001, names[2]: 0.001}, healthyLat, 0.001, 0.05),
			reason: []string{"cluster member-0000: errorRatio's mean over the soak is 0.008"}},
		{name: "latency twice the baseline's", ev: withMetrics(wave(3, 0), healthyErr, map[string]float64{names[0]: 0.05, names[1]: 0.1, names[2]: 0.05}, 0.002, 0.05),
			reason: []string{"cluster member-0001: latencyP95's mean over the soak is 0.1, above 1.5x the baseline's mean of 0.05"}},
		{name: "latency twice another cluster's, no baseline: no relative rule to break", ev: withMetrics(wave(3, 0), healthyErr, map[string]float64{names[0]: 0.05, names[1]: 0.1, names[2]: 0.05}, 0.002, -1), pass: true},
		{name: "no error ratio for one cluster", ev: withMetrics(wave(3, 0), map[string]float64{names[0]: 0.002, names[2]: 0.002}, healthyLat, 0.002, 0.05), inconc: true,
			reason: []string{"target member-0001 could not be observed: query errorRatio"}},
		{name: "no error ratio for one cluster, one failing, within a budget of one if the first is fine: inconclusive", ev: withMetrics(wave(3, 1), map[string]float64{names[0]: 0.002, names[2]: 0.5}, healthyLat, 0.002, 0.05),
			inconc: true, reason: []string{"2 clusters failed, more than the wave's maxFailures of 1"}},
		{name: "two failing on errors over a budget of one: fails", ev: withMetrics(wave(3, 1), map[string]float64{names[0]: 0.002, names[1]: 0.4, names[2]: 0.5}, healthyLat, 0.002, 0.05),
			reason: []string{"2 clusters failed, more than the wave's maxFailures of 1: member-0001, member-0002"}},
		{name: "one failing on errors within a budget of one", ev: withMetrics(wave(3, 1), map[string]float64{names[0]: 0.002, names[1]: 0.002, names[2]: 0.5}, healthyLat, 0.002, 0.05), pass: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Evaluate(DefaultPolicy(), GateNoDisruption, tc.ev)
			if err != nil {
				t.Fatal(err)
			}
			if d.Pass != tc.pass || d.Inconclusive != tc.inconc {
				t.Fatalf("pass %v inconclusive %v, want %v %v: %q", d.Pass, d.Inconclusive, tc.pass, tc.inconc, d.Reasons)
			}
			for _, want := range tc.reason {
				if !strings.Contains(strings.Join(d.Reasons, "\n"), want) {
					t.Errorf("the reasons do not say %q:\n%s", want, strings.Join(d.Reasons, "\n"))
				}
			}
		})
	}
}

// The default policy's check rule: a check that failed fails its cluster, with the check's name and
// message; within a failure budget the wave passes; a check that could not run is unset and its
// cluster unobserved: Inconclusive.
func TestTheDefaultPolicysCheckRule(t *testing.T) {
	checked := func(ev NoDisruptionEvidence, failed ...string) NoDisruptionEvidence {
		for i := range ev.Clusters {
			c := &ev.Clusters[i]
			c.Checks = map[string]CheckResult{"smoke": {Result: CheckPassed, Message: "Job smoke-1 completed"}}
			if slices.Contains(failed, c.Name) {
				c.Checks["smoke"] = CheckResult{Result: CheckFailed, Message: "Job smoke-1 failed: BackoffLimitExceeded", Logs: "curl: (7) refused"}
			}
		}
		return ev
	}
	notRun := checked(wave(3, 0))
	delete(notRun.Clusters[1].Checks, "smoke")
	notRun.Clusters[1].Unset = []string{MeasureCheck("smoke")}
	notRun.Unobserved = []Unobserved{{Name: notRun.Clusters[1].Name, Reason: "check smoke: the Job is still running"}}
	for _, tc := range []struct {
		name         string
		ev           NoDisruptionEvidence
		pass, inconc bool
		reason       string
	}{
		{name: "every check passed", ev: checked(wave(5, 0)), pass: true},
		{name: "one failed, no budget", ev: checked(wave(5, 0), "member-0003"), reason: "cluster member-0003: check smoke failed: Job smoke-1 failed: BackoffLimitExceeded"},
		{name: "one failed within a budget of one", ev: checked(wave(5, 1), "member-0003"), pass: true},
		{name: "two failed over a budget of one", ev: checked(wave(5, 1), "member-0001", "member-0003"), reason: "2 clusters failed, more than the wave's maxFailures of 1: member-0001, member-0003"},
		{name: "one could not run", ev: notRun, inconc: true, reason: "target member-0001 could not be observed: check smoke: the Job is still running"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Evaluate(DefaultPolicy(), GateNoDisruption, tc.ev)
			if err != nil {
				t.Fatal(err)
			}
			if d.Pass != tc.pass || d.Inconclusive != tc.inconc || (tc.reason != "" && !strings.Contains(strings.Join(d.Reasons, "\n"), tc.reason)) {
				t.Fatalf("pass %v inconclusive %v, reasons %q; want %v %v and %q", d.Pass, d.Inconclusive, d.Reasons, tc.pass, tc.inconc, tc.reason)
			}
		})
	}
}
