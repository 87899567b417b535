package config

import (
	"embed"
	"encoding/json"
	"fmt"

	"sigs.k8s.io/yaml"
)

// monitoringFiles are the shipped alerts, dashboard and ServiceMonitor (config/monitoring).
//
//go:embed monitoring/prometheusrule.yaml monitoring/dashboard.json monitoring/servicemonitor.yaml
var monitoringFiles embed.FS

// Query is a PromQL expression of the shipped monitoring, and where it is (an alert or a panel).
type Query struct {
	Where, Expr string
}

// Alert is an alerting rule of monitoring/prometheusrule.yaml, as far as tidegate's tests read it.
type Alert struct {
	Alert string `json:"alert"`
	Expr  string `json:"expr"`
	// For is how long the expression must hold before the alert fires ("" for at once).
	For         string            `json:"for"`
	Annotations map[string]string `json:"annotations"`
}

// RuleGroups returns the groups of monitoring/prometheusrule.yaml (a PrometheusRule) as they are
// written, for a Prometheus rule file, and its alerts.
func RuleGroups() (groups []json.RawMessage, alerts []Alert, err error) {
	b, err := monitoringFiles.ReadFile("monitoring/prometheusrule.yaml")
	if err != nil {
		return nil, nil, err
	}
	var rule struct {
		Kind string
		Spec struct {
			Groups []json.RawMessage `json:"groups"`
		}
	}
	if err := yaml.Unmarshal(b, &rule); err != nil {
		return nil, nil, fmt.Errorf("prometheusrule.yaml: %w", err)
	}
	if rule.Kind != "PrometheusRule" || len(rule.Spec.Groups) == 0 {
		return nil, nil, fmt.Errorf("prometheusrule.yaml: kind %q with %d groups, want a PrometheusRule with groups", rule.Kind, len(rule.Spec.Groups))
	}
	for _, g := range rule.Spec.Groups {
		var group struct{ Rules []Alert }
		if err := json.Unmarshal(g, &group); err != nil {
			return nil, nil, fmt.Errorf("prometheusrule.yaml: %w", err)
		}
		alerts = append(alerts, group.Rules...)
	}
	return rule.Spec.Groups, alerts, nil
}

// DashboardQueries returns every query of monitoring/dashboard.json, with its panel's title, and the
// number of panels.
func DashboardQueries() (queries []Query, panels int, err error) {
	b, err := monitoringFiles.ReadFile("monitoring/dashboard.json")
	if err != nil {
		return nil, 0, err
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		return nil, 0, fmt.Errorf("dashboard.json: %w", err)
	}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			queries = append(queries, Query{Where: "dashboard panel " + p.Title, Expr: tg.Expr})
		}
	}
	return queries, len(dash.Panels), nil
}

// HonorsLabels tells whether monitoring/servicemonitor.yaml keeps the labels of the controller's
// series when they collide with the labels of the scrape target (the endpoint's honorLabels).
func HonorsLabels() (bool, error) {
	b, err := monitoringFiles.ReadFile("monitoring/servicemonitor.yaml")
	if err != nil {
		return false, err
	}
	var sm struct {
		Kind string
		Spec struct {
			Endpoints []struct {
				HonorLabels bool `json:"honorLabels"`
			}
		}
	}
	if err := yaml.Unmarshal(b, &sm); err != nil {
		return false, fmt.Errorf("servicemonitor.yaml: %w", err)
	}
	if sm.Kind != "ServiceMonitor" || len(sm.Spec.Endpoints) != 1 {
		return false, fmt.Errorf("servicemonitor.yaml: kind %q with %d endpoints, want a ServiceMonitor with one", sm.Kind, len(sm.Spec.Endpoints))
	}
	return sm.Spec.Endpoints[0].HonorLabels, nil
}

// DashboardVariables returns the names of monitoring/dashboard.json's template variables.
func DashboardVariables() ([]string, error) {
	b, err := monitoringFiles.ReadFile("monitoring/dashboard.json")
	if err != nil {
		return nil, err
	}
	var dash struct {
		Templating struct {
			List []struct{ Name string }
		}
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		return nil, fmt.Errorf("dashboard.json: %w", err)
	}
	var names []string
	for _, v := range dash.Templating.List {
		names = append(names, v.Name)
	}
	return names, nil
}
