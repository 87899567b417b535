package config

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"
)

// The shipped alerts pass what `promtool check rules` checks: monitoring/prometheusrule.yaml's
// groups, as a Prometheus rule file, parse and validate with the Prometheus module's rule parser
// (unknown fields refused, every expression and template parsed), and every query of the Grafana
// dashboard parses as PromQL (Grafana's $__range given a value). That its metrics are ones the
// controller exports is TestMonitoringQueriesNameExportedMetrics (controllers).
func TestMonitoringRulesAndDashboardParse(t *testing.T) {
	groups, alerts, err := RuleGroups()
	if err != nil {
		t.Fatal(err)
	}
	file, err := yaml.Marshal(map[string]any{"groups": groups})
	if err != nil {
		t.Fatal(err)
	}
	p := parser.NewParser(parser.Options{})
	parsed, errs := rulefmt.Parse(file, false, model.UTF8Validation, p, slog.New(slog.DiscardHandler))
	for _, err := range errs {
		t.Errorf("prometheusrule.yaml: %v", err)
	}
	rules := 0
	if parsed != nil {
		for _, g := range parsed.Groups {
			rules += len(g.Rules)
		}
	}
	if len(errs) == 0 && (rules == 0 || rules != len(alerts)) {
		t.Errorf("prometheusrule.yaml parsed to %d rules, and has %d alerts", rules, len(alerts))
	}

	queries, _, err := DashboardQueries()
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range queries {
		if _, err := p.ParseExpr(strings.ReplaceAll(q.Expr, "$__range", "1h")); err != nil {
			t.Errorf("%s: %q does not parse: %v", q.Where, q.Expr, err)
		}
	}
	if len(queries) == 0 {
		t.Error("the dashboard has no query")
	}
}
