package simulator

import (
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/fluxcd/cli-utils/pkg/kstatus/status"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// quantile is the q-quantile of the requests in buckets as histogram_quantile computes it from a
// histogram's buckets: linear within the bucket the rank falls in, from 0 in the first.
func quantile(q float64, buckets []uint64) float64 {
	var total uint64
	for _, b := range buckets {
		total += b
	}
	rank := q * float64(total)
	var below uint64
	for i, b := range buckets[:len(LatencyBuckets)] {
		if float64(below+b) >= rank {
			lower := 0.0
			if i > 0 {
				lower = LatencyBuckets[i-1]
			}
			return lower + (LatencyBuckets[i]-lower)*(rank-float64(below))/float64(b)
		}
		below += b
	}
	return math.Inf(1)
}

// Over 30 s counted in uneven steps (a pass every 300 ms, scrapes in between, a late pass), a flow
// answers RequestsPerSecond per available pod with the fault's share of errors, and its latencies
// read the same quantiles whatever the steps; a LatencyFactor of 2 reads twice the p95.
func TestFlowCountsTheConfiguredTrafficWhateverTheSteps(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	steps := []time.Duration{300 * time.Millisecond, 70 * time.Millisecond, 230 * time.Millisecond, 2 * time.Second, 1 * time.Millisecond}
	run := func(f Fault) *flow {
		fl := &flow{available: 3, errorRatio: f.ErrorRatio, latencyFactor: f.LatencyFactor}
		fl.advance(start, DefaultRequestsPerSecond)
		for i, elapsed := 0, time.Duration(0); elapsed < 30*time.Second; i++ {
			elapsed = min(elapsed+steps[i%len(steps)], 30*time.Second)
			fl.advance(start.Add(elapsed), DefaultRequestsPerSecond)
		}
		return fl
	}
	healthy, failing, slow := run(Fault{}), run(Fault{ErrorRatio: 0.3}), run(Fault{LatencyFactor: 2})

	const want = 3 * DefaultRequestsPerSecond * 30
	for name, fl := range map[string]*flow{"healthy": healthy, "failing": failing, "slow": slow} {
		if got := fl.ok + fl.failed; got < want-1 || got > want {
			t.Errorf("%s: %d requests in 30 s from 3 pods, want %d", name, got, want)
		}
	}
	if healthy.failed != 0 {
		t.Errorf("healthy: %d errors, want none", healthy.failed)
	}
	if ratio := float64(failing.failed) / float64(failing.ok+failing.failed); math.Abs(ratio-0.3) > 0.005 {
		t.Errorf("ErrorRatio 0.3: %d of %d requests failed (%.3f)", failing.failed, failing.ok+failing.failed, ratio)
	}
	p95, slowP95 := quantile(0.95, healthy.buckets), quantile(0.95, slow.buckets)
	if p95 < 0.08 || p95 > 0.32 {
		t.Errorf("healthy p95 %.3fs, want between 80 ms and 320 ms (about 160 ms)", p95)
	}
	if r := slowP95 / p95; math.Abs(r-2) > 0.05 {
		t.Errorf("LatencyFactor 2: p95 %.3fs against %.3fs healthy, a ratio of %.2f, want 2", slowP95, p95, r)
	}
	if mean, slowMean := healthy.sum/float64(want), slow.sum/float64(want); math.Abs(slowMean/mean-2) > 0.05 {
		t.Errorf("LatencyFactor 2: mean latency %.3fs against %.3fs healthy", slowMean, mean)
	}
}

// A workload without available pods answers nothing, and the change of its pods or fault applies from
// the pass that saw it: the traffic up to that pass is counted as the previous one saw it.
func TestTrafficFollowsWhatEachPassSaw(t *testing.T) {
	tr := &traffic{rps: 10, flows: map[string]map[string]*flow{}}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	key := "Deployment/demo/web"
	tr.observe("member-1", key, "demo", "web", 0, nil, start)
	if got := tr.snapshot(start.Add(10 * time.Second)); len(got) != 0 {
		t.Fatalf("a workload without available pods has traffic: %+v", got)
	}
	tr.observe("member-1", key, "demo", "web", 2, nil, start.Add(10*time.Second))
	tr.observe("member-1", key, "demo", "web", 2, &activeFault{Fault: Fault{ErrorRatio: 1}}, start.Add(20*time.Second))
	got := tr.snapshot(start.Add(30 * time.Second))
	if len(got) != 1 || got[0].ok != 200 || got[0].failed != 200 {
		t.Fatalf("10 s healthy then 10 s failing at 2 pods × 10/s: %+v, want 200 ok and 200 failed", got)
	}
	// A StatefulSet of the same name is the same service to the metrics.
	tr.observe("member-1", "StatefulSet/demo/web", "demo", "web", 1, nil, start.Add(30*time.Second))
	got = tr.snapshot(start.Add(40 * time.Second))
	if len(got) != 1 || got[0].ok+got[0].failed != 400+300 {
		t.Fatalf("a Deployment (2 pods) and a StatefulSet (1 pod) named web for 10 s more: %+v, want one series of 700 requests", got)
	}
	tr.forget("member-1", map[string]bool{"StatefulSet/demo/web": true})
	if got = tr.snapshot(start.Add(50 * time.Second)); len(got) != 1 || got[0].ok+got[0].failed != 200 {
		t.Fatalf("after the Deployment is gone: %+v, want the StatefulSet's 200 requests alone", got)
	}
}

// scrape reads the simulator's metrics as Prometheus would, keyed by metric name.
func scrape(t *testing.T, s *Simulator) map[string]*dto.MetricFamily {
	t.Helper()
	srv := httptest.NewServer(s.MetricsHandler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing the metrics: %v", err)
	}
	return families
}

// labelsOf returns m's labels as name=value strings, sorted.
func labelsOf(m *dto.Metric) []string {
	var out []string
	for _, l := range m.GetLabel() {
		out = append(out, l.GetName()+"="+l.GetValue())
	}
	sort.Strings(out)
	return out
}

// inNamespaceOnly returns the metrics of family whose namespace label is ns.
func inNamespaceOnly(family *dto.MetricFamily, ns string) []*dto.Metric {
	var out []*dto.Metric
	for _, m := range family.GetMetric() {
		if slices.Contains(labelsOf(m), NamespaceLabel+"="+ns) {
			out = append(out, m)
		}
	}
	return out
}

// On a real API server: a Deployment's available pods answer traffic, exported with the cluster's name;
// a fault that sets only an error ratio leaves the Deployment available and turns that share of its
// requests into 500s.
func TestOnAPIServerAvailableWorkloadsServeTrafficWithTheirCluster(t *testing.T) {
	s, ns := start(t)
	d := inNamespace(deployment(2), ns)
	s.SetFault(cluster, Fault{Workload: ns + "/" + d.Name, ErrorRatio: 0.5})
	create(t, d)
	waitUntil(t, d, "Current", is(status.CurrentStatus))

	// The member's API server holds the workloads of the other tests too: only the namespace's count.
	var requests []*dto.Metric
	deadline := time.Now().Add(waitFor)
	for {
		families := scrape(t, s)
		requests = inNamespaceOnly(families[RequestsMetric], ns)
		if len(requests) == 2 && requests[1].GetCounter().GetValue() >= 10 {
			if d := inNamespaceOnly(families[DurationMetric], ns); len(d) != 1 || d[0].GetHistogram().GetSampleCount() < 20 {
				t.Fatalf("%s without the requests of %s: %v", DurationMetric, RequestsMetric, d)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no traffic of 2 available pods after %s: %v", waitFor, requests)
		}
		time.Sleep(interval)
	}
	ok, failed := requests[0], requests[1]
	if got, want := labelsOf(failed), []string{"cluster=" + cluster, "code=500", "namespace=" + ns, "workload=" + d.Name}; !slices.Equal(got, want) {
		t.Errorf("labels %v, want %v", got, want)
	}
	if a, b := ok.GetCounter().GetValue(), failed.GetCounter().GetValue(); math.Abs(a-b) > 1 {
		t.Errorf("ErrorRatio 0.5: %v answered 200 and %v 500", a, b)
	}
	if observe(t, d) != status.CurrentStatus {
		t.Errorf("a fault with only an error ratio made the Deployment %s", observe(t, d))
	}
}

// Two simulators in one process serve their own registries: neither panics on registering, and each
// shows its own clusters only.
func TestSimulatorsHaveRegistriesOfTheirOwn(t *testing.T) {
	a := New(map[string]client.Client{"a": nil}, Options{})
	b := New(map[string]client.Client{"b": nil}, Options{})
	now := time.Now().Add(-time.Minute)
	a.traffic.observe("a", "Deployment/demo/web", "demo", "web", 1, nil, now)
	b.traffic.observe("b", "Deployment/demo/web", "demo", "web", 1, nil, now)
	for name, s := range map[string]*Simulator{"a": a, "b": b} {
		got := scrape(t, s)[RequestsMetric].GetMetric()
		if len(got) != 2 || labelsOf(got[0])[0] != "cluster="+name {
			t.Errorf("simulator %s exports %v", name, got)
		}
	}
}
