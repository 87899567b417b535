package metrics

import (
	"context"
	"math"
	"strings"
	"time"

	"github.com/tidegate/tidegate/verdict"
)

// Provider evaluates queries over a window of time.
type Provider interface {
	// Range evaluates query at every step from start to end and returns the points of each series
	// by the value of its label named label (series without it are left out); with label "", the
	// points of the one series it answers (more than one is an error), by "". A query that could
	// not be evaluated is an error that names it; a query that matched nothing is an empty map.
	Range(ctx context.Context, query, label string, start, end time.Time, step time.Duration) (map[string][]float64, error)
}

// ClustersPlaceholder is what a query has where the regular expression matching the names of the
// clusters it asks about goes: cluster=~"{{clusters}}".
const ClustersPlaceholder = "{{clusters}}"

// Expand puts into query a regular expression matching exactly names, written for a PromQL string
// literal: the names' dots are escaped for the regular expression, and that escape for the string.
// FleetCluster names are DNS subdomains: letters, digits, '-' and '.' only.
func Expand(query string, names []string) string {
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = strings.ReplaceAll(n, ".", `\\.`)
	}
	return strings.ReplaceAll(query, ClustersPlaceholder, strings.Join(quoted, "|"))
}

// Summarize summarises points, leaving out those that are not numbers (NaN, such as 0/0 for an
// error ratio with no requests, and infinities): they measured nothing. ok is false when no point
// is left.
func Summarize(points []float64) (s verdict.MetricSummary, ok bool) {
	sum := 0.0
	for _, p := range points {
		if math.IsNaN(p) || math.IsInf(p, 0) {
			continue
		}
		if s.Count == 0 || p < s.Min {
			s.Min = p
		}
		if s.Count == 0 || p > s.Max {
			s.Max = p
		}
		s.Count++
		sum += p
		s.Last = p
	}
	if s.Count == 0 {
		return verdict.MetricSummary{}, false
	}
	s.Mean = sum / float64(s.Count)
	return s, true
}

// Pool summarises the points of several series as one (a baseline over its clusters).
func Pool(series map[string][]float64, names []string) (verdict.MetricSummary, bool) {
	var all []float64
	for _, n := range names {
		all = append(all, series[n]...)
	}
	return Summarize(all)
}
