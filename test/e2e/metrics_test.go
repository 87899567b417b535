package e2e

import (
	"testing"
	"time"

	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// metric reads the value of the series name{labels} from the registry the managers of this process
// serve on /metrics (a counter's or gauge's value, a histogram's sample count); ok is false when
// there is no such series. Tests that read metrics run in a namespace of their own: every test's
// manager writes to the same registry.
func metric(t *testing.T, name string, labels map[string]string) (value float64, ok bool) {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatalf("gathering metrics: %v", err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue series
				}
			}
			switch {
			case m.Counter != nil:
				return m.GetCounter().GetValue(), true
			case m.Gauge != nil:
				return m.GetGauge().GetValue(), true
			case m.Histogram != nil:
				return float64(m.GetHistogram().GetSampleCount()), true
			}
		}
	}
	return 0, false
}

// wantMetric fails the test unless name{labels} comes to exist with ok(value) within a minute. The
// controller records its metrics after the pass's status write lands, so a test that has just seen
// the status can read the metrics of the pass before: it waits for the pass to end, not for time.
func wantMetric(t *testing.T, what, name string, labels map[string]string, ok func(float64) bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		v, found := metric(t, name, labels)
		if found && ok(v) {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%s: %s%v = %v (present: %v)", what, name, labels, v, found)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func atLeast(n float64) func(float64) bool { return func(v float64) bool { return v >= n } }
func equals(n float64) func(float64) bool  { return func(v float64) bool { return v == n } }
