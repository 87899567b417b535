package config

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/util/annotations"
)

// The labels the Prometheus Operator gives the target of a ServiceMonitor endpoint: the controller's
// metrics Service in tidegate-system.
var operatorTargetLabels = map[string]string{
	"namespace": "tidegate-system",
	"job":       "tidegate-controller-metrics",
	"service":   "tidegate-controller-metrics",
	"endpoint":  "http-metrics",
	"pod":       "tidegate-controller-7d9f8b6c5-x2x4q",
	"container": "manager",
	"instance":  "10.244.0.17:8080",
}

// exported is one series as the controller exports it, with its own labels, and its value at a time
// (false: no sample then).
type exported struct {
	metric string
	labels map[string]string
	value  func(t time.Time) (float64, bool)
}

// Every shipped alert fires on the series that should fire it, as Prometheus stores them when it
// scrapes the controller through the shipped ServiceMonitor: the series' own labels merged with the
// Operator's target labels, as honorLabels says (false: a series' own `namespace` becomes
// `exported_namespace`, and the target's, tidegate-system, takes its place). Each fires about the
// rollout, wave, cluster or gate it should, and a rollout of the same name in another namespace,
// which should not fire, stays apart. The expressions run in Prometheus's own PromQL engine, over
// the alert's `for` window.
func TestShippedAlertsFireWithTheOperatorsTargetLabels(t *testing.T) {
	_, alerts, err := RuleGroups()
	if err != nil {
		t.Fatal(err)
	}
	honor, err := HonorsLabels()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	rollout := func(extra ...string) map[string]string {
		l := map[string]string{"namespace": "team-a", "name": "web"}
		for i := 0; i+1 < len(extra); i += 2 {
			l[extra[i]] = extra[i+1]
		}
		return l
	}
	since := func(ago time.Duration) func(time.Time) (float64, bool) {
		return constant(float64(now.Add(-ago).Unix()))
	}
	// The other rollout named web, in team-b, is in the same state for a few minutes only: its
	// alert is not due. Merged with team-a's, it would hide it, or be named by it.
	other := func(metric string, value func(time.Time) (float64, bool), extra ...string) exported {
		l := rollout(extra...)
		l["namespace"] = "team-b"
		return exported{metric, l, value}
	}
	cases := map[string]struct {
		series []exported
		want   map[string]string
	}{
		"TidegateRolloutHeldTooLong": {
			[]exported{{"tidegate_rollout_held_since_timestamp_seconds", rollout("reason", "GateFailed"), since(2 * time.Hour)},
				other("tidegate_rollout_held_since_timestamp_seconds", since(5*time.Minute), "reason", "GateFailed")},
			rollout("reason", "GateFailed")},
		"TidegateRolloutAwaitingApproval": {
			[]exported{{"tidegate_rollout_waiting_since_timestamp_seconds", rollout("reason", "Approval", "wave", "ring-1"), since(5 * time.Hour)},
				other("tidegate_rollout_waiting_since_timestamp_seconds", since(5*time.Minute), "reason", "Approval", "wave", "ring-1")},
			rollout("wave", "ring-1")},
		"TidegateRolloutGateBlocked": {
			[]exported{{"tidegate_rollout_waiting_since_timestamp_seconds", rollout("reason", "GateBlocked", "wave", "canary"), since(time.Hour)},
				other("tidegate_rollout_waiting_since_timestamp_seconds", since(5*time.Minute), "reason", "GateBlocked", "wave", "canary")},
			rollout("wave", "canary")},
		"TidegateRolloutInconclusiveTooLong": {
			[]exported{{"tidegate_rollout_waiting_since_timestamp_seconds", rollout("reason", "Inconclusive", "wave", "canary"), since(time.Hour)},
				other("tidegate_rollout_waiting_since_timestamp_seconds", since(5*time.Minute), "reason", "Inconclusive", "wave", "canary")},
			rollout("wave", "canary")},
		"TidegateRolloutSourceNotServed": {
			[]exported{{"tidegate_rollout_waiting_since_timestamp_seconds", rollout("reason", "Source", "wave", ""), since(time.Hour)},
				other("tidegate_rollout_waiting_since_timestamp_seconds", since(5*time.Minute), "reason", "Source", "wave", "")},
			rollout()},
		"TidegateRolledBack": {
			[]exported{{"tidegate_rollbacks_total", rollout(), step(now.Add(-30*time.Minute), 0, 1)},
				other("tidegate_rollbacks_total", step(now.Add(-30*time.Minute), 1, 0))},
			rollout()},
		"TidegateMemberUnreachable": {
			[]exported{{"tidegate_fleetcluster_reachable", map[string]string{"namespace": "team-a", "name": "member-3"}, constant(0)},
				{"tidegate_fleetcluster_reachable", map[string]string{"namespace": "team-b", "name": "member-3"}, constant(1)}},
			map[string]string{"namespace": "team-a", "name": "member-3"}},
		"TidegateEvidenceErrors": {
			[]exported{{"tidegate_evidence_collection_errors_total", map[string]string{"gate": "noDisruption"}, step(now.Add(-10*time.Minute), 0, 3)}},
			map[string]string{"gate": "noDisruption"}},
		"TidegateRolloutStalled": {
			[]exported{gotkCondition(rollout(), "Stalled", "True"), gotkCondition(other("", nil).labels, "Stalled", "False")},
			rollout()},
		"TidegateRolloutNotReady": {
			[]exported{gotkCondition(rollout(), "Ready", "False"), gotkCondition(other("", nil).labels, "Ready", "True")},
			rollout()},
		"TidegateRolloutTooLong": {
			[]exported{gotkCondition(rollout(), "Ready", "Unknown"), gotkCondition(other("", nil).labels, "Ready", "True")},
			rollout()},
		"TidegateReconcileErrors": {
			[]exported{{"controller_runtime_reconcile_errors_total", map[string]string{"controller": "fleetrollout"}, rising(now)}},
			map[string]string{"controller": "fleetrollout"}},
		"TidegateControllerNoLeader": {
			[]exported{{"leader_election_master_status", map[string]string{"name": "tidegate-controller-leader"}, constant(0)}},
			map[string]string{}},
	}

	engine := promql.NewEngine(promql.EngineOpts{MaxSamples: 1e6, Timeout: time.Minute, LookbackDelta: 5 * time.Minute})
	for _, a := range alerts {
		c, ok := cases[a.Alert]
		if !ok {
			t.Errorf("alert %s: no case here shows it firing; add one", a.Alert)
			continue
		}
		delete(cases, a.Alert)
		t.Run(a.Alert, func(t *testing.T) {
			var hold time.Duration
			if a.For != "" {
				d, err := model.ParseDuration(a.For)
				if err != nil {
					t.Fatalf("for %q: %v", a.For, err)
				}
				hold = time.Duration(d)
			}
			db := scraped(c.series, honor, now.Add(-hold-time.Hour), now)
			firing := firesThroughout(t, engine, db, a.Expr, now.Add(-hold), now)
			if len(firing) != 1 || !maps.Equal(subject(firing[0]), c.want) {
				t.Errorf("fired for %v; want once, for %v (the ServiceMonitor's honorLabels: %v)", firing, c.want, honor)
			}
		})
	}
	for name := range cases {
		t.Errorf("a case for %s, which prometheusrule.yaml does not ship", name)
	}
}

// The dashboard can be narrowed to a namespace and a rollout, and every panel about rollouts is.
func TestDashboardFiltersByNamespaceAndRollout(t *testing.T) {
	vars, err := DashboardVariables()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"namespace", "rollout"} {
		if !slices.Contains(vars, want) {
			t.Errorf("dashboard.json has the variables %v, not %s", vars, want)
		}
	}
	queries, _, err := DashboardQueries()
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range queries {
		expr, err := parser.NewParser(parser.Options{}).ParseExpr(strings.ReplaceAll(q.Expr, "$__range", "1h"))
		if err != nil {
			t.Fatalf("%s: %v", q.Where, err)
		}
		parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
			vs, ok := n.(*parser.VectorSelector)
			if !ok || !strings.HasPrefix(vs.Name, "tidegate_") {
				return nil
			}
			want := map[string]string{}
			switch {
			case strings.HasPrefix(vs.Name, "tidegate_rollout"), strings.HasPrefix(vs.Name, "tidegate_wave_"),
				vs.Name == "tidegate_gate_decisions_total":
				want = map[string]string{"namespace": "$namespace", "name": "$rollout"}
			case vs.Name == "tidegate_fleetcluster_reachable":
				want = map[string]string{"namespace": "$namespace"}
			}
			for l, v := range want {
				if !slices.ContainsFunc(vs.LabelMatchers, func(m *labels.Matcher) bool {
					return m.Name == l && m.Type == labels.MatchRegexp && m.Value == v
				}) {
					t.Errorf("%s: %s is not narrowed by %s=~%q", q.Where, vs.Name, l, v)
				}
			}
			return nil
		})
	}
}

// subject is what an alert's labels say it is about (the target's labels, and the metric's name an
// alert drops, left out).
func subject(l map[string]string) map[string]string {
	out := map[string]string{}
	for _, k := range []string{"namespace", "name", "wave", "reason", "gate", "controller"} {
		if v, ok := l[k]; ok {
			out[k] = v
		}
	}
	return out
}

func constant(v float64) func(time.Time) (float64, bool) {
	return func(time.Time) (float64, bool) { return v, true }
}

// step is before until at, then after.
func step(at time.Time, before, after float64) func(time.Time) (float64, bool) {
	return func(t time.Time) (float64, bool) {
		if t.Before(at) {
			return before, true
		}
		return after, true
	}
}

// rising is a counter that grows by one a minute up to now.
func rising(now time.Time) func(time.Time) (float64, bool) {
	return func(t time.Time) (float64, bool) { return float64(t.Unix()-now.Unix()) / 60, true }
}

func gotkCondition(l map[string]string, typ, status string) exported {
	l = maps.Clone(l)
	l["kind"], l["type"], l["status"] = "FleetRollout", typ, status
	return exported{"gotk_reconcile_condition", l, constant(1)}
}

// scraped stores the series as Prometheus does when it scrapes them every 30 s from start to end
// from the Operator's target: each series' labels merged with the target's, a collision decided by
// honor (the series' label kept), or else the series' label renamed exported_<name>; an empty label
// is no label.
func scraped(series []exported, honor bool, start, end time.Time) storage.Queryable {
	var stored []storage.Series
	for _, s := range series {
		l := map[string]string{}
		for k, v := range s.labels {
			l[k] = v
		}
		for k, v := range operatorTargetLabels {
			if own, ok := l[k]; ok && own != "" {
				if honor {
					continue
				}
				l["exported_"+k] = own
			}
			l[k] = v
		}
		l[model.MetricNameLabel] = s.metric
		for k, v := range l {
			if v == "" {
				delete(l, k)
			}
		}
		var samples []chunks.Sample
		for t := start; !t.After(end); t = t.Add(30 * time.Second) {
			if v, ok := s.value(t); ok {
				samples = append(samples, sample{t: t.UnixMilli(), f: v})
			}
		}
		stored = append(stored, storage.NewListSeries(labels.FromMap(l), samples))
	}
	return &storage.MockQueryable{MockQuerier: &storage.MockQuerier{
		SelectMockFunction: func(_ bool, _ *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
			var out []storage.Series
			for _, s := range stored {
				if matchAll(ms, s.Labels()) {
					out = append(out, s)
				}
			}
			return &seriesSet{series: out, at: -1}
		},
	}}
}

func matchAll(ms []*labels.Matcher, l labels.Labels) bool {
	for _, m := range ms {
		if !m.Matches(l.Get(m.Name)) {
			return false
		}
	}
	return true
}

// firesThroughout evaluates expr every 30 s from start to end and returns the label sets of the
// series it returned at every step: what the alert fires for once its `for` has passed.
func firesThroughout(t *testing.T, engine *promql.Engine, db storage.Queryable, expr string, start, end time.Time) []map[string]string {
	t.Helper()
	q, err := engine.NewRangeQuery(context.Background(), db, nil, expr, start, end, 30*time.Second)
	if err != nil {
		t.Fatalf("%q: %v", expr, err)
	}
	defer q.Close()
	res := q.Exec(context.Background())
	if res.Err != nil {
		t.Fatalf("%q: %v", expr, res.Err)
	}
	m, err := res.Matrix()
	if err != nil {
		t.Fatalf("%q: %v", expr, err)
	}
	steps := int(end.Sub(start)/(30*time.Second)) + 1
	var firing []map[string]string
	for _, s := range m {
		if len(s.Floats) == steps {
			firing = append(firing, s.Metric.Map())
		}
	}
	return firing
}

// sample is one float sample, as storage.NewListSeries takes it.
type sample struct {
	t int64
	f float64
}

func (s sample) T() int64                      { return s.t }
func (s sample) ST() int64                     { return 0 }
func (s sample) F() float64                    { return s.f }
func (s sample) H() *histogram.Histogram       { return nil }
func (s sample) FH() *histogram.FloatHistogram { return nil }
func (s sample) Type() chunkenc.ValueType      { return chunkenc.ValFloat }
func (s sample) Copy() chunks.Sample           { return s }

// seriesSet walks a list of series.
type seriesSet struct {
	series []storage.Series
	at     int
}

func (s *seriesSet) Next() bool                        { s.at++; return s.at < len(s.series) }
func (s *seriesSet) At() storage.Series                { return s.series[s.at] }
func (s *seriesSet) Err() error                        { return nil }
func (s *seriesSet) Warnings() annotations.Annotations { return nil }
