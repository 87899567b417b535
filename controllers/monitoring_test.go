package controllers

import (
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidegate/tidegate/config"
)

// tidegateMetricNames are the names of tidegate's own metrics as the controller registers them,
// with the series names a histogram adds.
func tidegateMetricNames(t *testing.T) map[string]bool {
	t.Helper()
	m := domain()
	ch := make(chan *prometheus.Desc, 64)
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
	close(ch)
	names := map[string]bool{}
	fqName := regexp.MustCompile(`fqName: "([a-z_]+)"`)
	for d := range ch {
		n := fqName.FindStringSubmatch(d.String())[1]
		names[n] = true
		for _, suffix := range []string{"_bucket", "_count", "_sum"} {
			names[n+suffix] = true
		}
	}
	return names
}

var tidegateMetricRef = regexp.MustCompile(`\btidegate_[a-z_]+\b`)

// Every tidegate metric the shipped alerts and dashboard query is one the controller exports, and
// every alert says what it is about; a rename of a metric fails here rather than in a silent alert.
func TestMonitoringQueriesNameExportedMetrics(t *testing.T) {
	names := tidegateMetricNames(t)
	check := func(where, expr string) {
		t.Helper()
		refs := tidegateMetricRef.FindAllString(expr, -1)
		for _, ref := range refs {
			if !names[ref] {
				t.Errorf("%s queries %s, which the controller does not export", where, ref)
			}
		}
	}

	_, alerts, err := config.RuleGroups()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range alerts {
		if r.Alert == "" || strings.TrimSpace(r.Expr) == "" || r.Annotations["summary"] == "" {
			t.Errorf("rule %+v: an alert needs a name, an expression and a summary", r)
		}
		check("alert "+r.Alert, r.Expr)
	}
	queries, panels, err := config.DashboardQueries()
	if err != nil {
		t.Fatal(err)
	}
	queried := map[string]bool{}
	for _, q := range queries {
		check(q.Where, q.Expr)
		for _, ref := range tidegateMetricRef.FindAllString(q.Expr, -1) {
			queried[strings.TrimSuffix(ref, "_bucket")] = true
		}
	}
	// The dashboard shows every tidegate metric.
	for n := range names {
		if !strings.HasSuffix(n, "_bucket") && !strings.HasSuffix(n, "_count") && !strings.HasSuffix(n, "_sum") && !queried[n] {
			t.Errorf("the dashboard shows no panel of %s", n)
		}
	}
	if len(alerts) == 0 || panels == 0 {
		t.Fatal("no alerts or no panels")
	}
}
