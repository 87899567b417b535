package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/controllers"
	"github.com/tidegate/tidegate/internal/localfleet"
	"github.com/tidegate/tidegate/internal/simulator"
	"github.com/tidegate/tidegate/verdict"
)

// The metric scenarios: a real Prometheus (built from its pinned module, hack/prometheus.sh) scrapes
// the shared fleet's simulated service traffic, one series per member cluster, namespace and
// workload, labelled with the member's name, which is its FleetCluster's: the shape of a central
// Thanos or Mimir. Each scenario runs a Prometheus of its own (a few seconds to start), so that one
// that stops it stops no other; its policy's queries select its own namespace.

// simMetrics serves the shared simulator's metrics, once per package run.
var simMetrics struct {
	once sync.Once
	addr string
	err  error
}

// prometheusFor starts a Prometheus of the scenario's own, scraping the shared simulator's metrics.
func (s *fleetSetup) prometheusFor(t *testing.T) *localfleet.Prometheus {
	t.Helper()
	simMetrics.once.Do(func() {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			simMetrics.err = err
			return
		}
		simMetrics.addr = l.Addr().String()
		go func() { _ = http.Serve(l, s.faults.sim.MetricsHandler()) }()
	})
	if simMetrics.err != nil {
		t.Fatal(simMetrics.err)
	}
	ctx, cancel := testContext(t, 3*time.Minute)
	defer cancel()
	p, err := s.f.StartPrometheus(ctx, simMetrics.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// metricsPolicy is the built-in policy with the scenario's errorRatio and latencyP95 queries, over
// its own namespace's workload web, sampled every 2s.
func metricsPolicy(t *testing.T, ns string) string {
	sel := fmt.Sprintf(`namespace="%s",workload="web",cluster=~"{{clusters}}"`, ns)
	return defaultPolicy(t,
		`sampleInterval: "5s"`, `sampleInterval: "2s"`,
		"rehearsal:      false", fmt.Sprintf(`rehearsal:      false
	metrics: queries: {
		errorRatio: """
			sum by (cluster) (rate(http_requests_total{code="500",%[1]s}[10s]))
			/ sum by (cluster) (rate(http_requests_total{%[1]s}[10s]))
			"""
		latencyP95: """
			histogram_quantile(0.95, sum by (cluster, le) (rate(http_request_duration_seconds_bucket{%[1]s}[10s])))
			"""
	}`, sel))
}

// metricScenario sets up a three-member scenario (canary, then the two others) with the metrics
// policy, a Prometheus of its own named in spec.metrics, and v1 rolled out; it returns the canary.
func metricScenario(ctx context.Context, t *testing.T, soak time.Duration) (*fleetSetup, *localfleet.Prometheus, string) {
	t.Helper()
	s, first := newFleetSetup(t, 3, demoPackage("v1"))
	prom := s.prometheusFor(t)
	s.policyRepo(t, map[string]string{"policy/policy.cue": metricsPolicy(t, s.ns)})
	// The API's credentials, sent with every query (this Prometheus asks for none, and ignores
	// them): TestE2EMetricsHealthyReleasePasses checks they are written nowhere.
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "prometheus-reader", Namespace: s.ns},
		Data: map[string][]byte{"token": []byte(metricsToken(s.ns))}}
	if err := s.f.Hub.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	startTidegate(t, s, controllers.Options{})
	s.createRollout(ctx, t, twoWaveRollout(s.ns), s.repo.Revision(first), func(fr *v1alpha1.FleetRollout) {
		usePolicy(fr)
		fr.Spec.Metrics = &v1alpha1.MetricsSource{Prometheus: v1alpha1.PrometheusSource{Address: prom.URL,
			SecretRef: &meta.LocalObjectReference{Name: secret.Name}}}
		for i := range fr.Spec.Waves {
			fr.Spec.Waves[i].Soak = &metav1.Duration{Duration: soak}
		}
	})
	return s, prom, s.rollout(t, "web").Status.Waves[0].Clusters[0]
}

// metricsToken is the bearer token of a metric scenario's Prometheus.
func metricsToken(ns string) string { return "metrics-token-of-" + ns }

// noDisruptionOf is the latest noDisruption receipt of wave for rev, and its evidence.
func (s *fleetSetup) noDisruptionOf(ctx context.Context, t *testing.T, rev, wave string) (*v1alpha1.GateReceipt, verdict.NoDisruptionEvidence) {
	t.Helper()
	var ev verdict.NoDisruptionEvidence
	rc := latestReceipt(s.receiptsOf(ctx, t, "web", rev), v1alpha1.GateNoDisruption, wave)
	if rc == nil {
		t.Fatalf("no noDisruption receipt of wave %s for %s", wave, rev)
	}
	evidenceOf(t, rc, &ev)
	return rc, ev
}

// A release that answers 30 % of its requests with errors while its pods stay Available fails
// noDisruption on the canary: the receipt names the query, the cluster, the measured ratio and the
// baseline's (the two members still at v1, asked in the same query), and the rollout holds with the
// other members at v1.
//
// The canary's metrics come from a Prometheus of its own (its FleetCluster's spec.metrics: its
// series alone, without a cluster label), the baseline's from the central one named by the
// rollout: both ways of scoping a query to a cluster in one decision.
func TestE2EMetricsErrorRatioFailsTheCanary(t *testing.T) {
	parallel(t)
	ctx, cancel := testContext(t, 8*time.Minute)
	defer cancel()
	s, _, canary := metricScenario(ctx, t, 20*time.Second)
	own, err := s.f.StartClusterPrometheus(ctx, canary, simMetrics.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(own.Close)
	var fc v1alpha1.FleetCluster
	if err := s.f.Hub.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: canary}, &fc); err != nil {
		t.Fatal(err)
	}
	fc.Spec.Metrics = &v1alpha1.MetricsSource{Prometheus: v1alpha1.PrometheusSource{Address: own.URL}}
	if err := s.f.Hub.Update(ctx, &fc); err != nil {
		t.Fatal(err)
	}
	for _, m := range s.members {
		s.faults.SetFault(m.Name, simulator.Fault{Workload: "web", ErrorRatio: 0.3, Image: ":v2"})
	}
	rev2 := s.commitVersion(t, "v2")
	held := s.waitPhase(ctx, t, "web", v1alpha1.PhaseHeld, rev2)
	if w := held.Status.Waves[0]; w.Phase != v1alpha1.WaveFailed {
		t.Fatalf("canary wave %+v, want Failed", w)
	}
	rc, ev := s.noDisruptionOf(ctx, t, rev2, "canary")
	if rc.Spec.Result != v1alpha1.ResultFail || !reasonsContain(rc, "cluster "+canary, "errorRatio", "baseline's mean is 0") {
		t.Fatalf("noDisruption %s %q: want a Fail naming %s, the errorRatio query and the baseline's mean", rc.Spec.Result, rc.Spec.Reasons, canary)
	}
	if ev.Metrics == nil || !strings.Contains(ev.Metrics.Queries["errorRatio"], "http_requests_total") {
		t.Fatalf("the evidence does not hold the queries: %+v", ev.Metrics)
	}
	m, ok := ev.Clusters[0].Metrics["errorRatio"]
	// The rate's 10 s range mixes v1's answers into the first points of the soak: the last ones are
	// v2's alone.
	if !ok || m.Last < 0.25 || m.Last > 0.35 || m.Mean <= 0.01 || m.Count < 5 {
		t.Errorf("the canary's errorRatio %+v (ok %v), want the last point near 0.3, the mean above 1 %%", m, ok)
	}
	b, ok := ev.Metrics.Baseline["errorRatio"]
	if !ok || b.Kind != verdict.BaselineNotYetUpdated || len(b.Clusters) != 2 || b.Mean != 0 {
		t.Errorf("the baseline %+v (ok %v), want the two members at v1, with no errors", b, ok)
	}
	for _, m := range s.members[1:] {
		if m.Name != canary {
			if v := s.memberVersion(ctx, m.Name); v != "v1" {
				t.Errorf("%s runs %q after the canary failed: want v1", m.Name, v)
			}
		}
	}
}

// A healthy release passes with metric evidence in every noDisruption receipt: the canary's
// baseline is the members still at v1, the last wave's (none left) the wave's own members before
// their switch.
func TestE2EMetricsHealthyReleasePasses(t *testing.T) {
	parallel(t)
	ctx, cancel := testContext(t, 8*time.Minute)
	defer cancel()
	s, _, _ := metricScenario(ctx, t, 12*time.Second)
	rev2 := s.commitVersion(t, "v2")
	done := s.waitPhase(ctx, t, "web", v1alpha1.PhaseCompleted, rev2)
	// The Prometheus token is in no receipt, event or status.
	var receipts v1alpha1.GateReceiptList
	var events corev1.EventList
	for _, l := range []client.ObjectList{&receipts, &events} {
		if err := s.f.Hub.List(ctx, l, client.InNamespace(s.ns)); err != nil {
			t.Fatal(err)
		}
	}
	for what, obj := range map[string]any{"receipts": receipts.Items, "events": events.Items, "the rollout": done} {
		if b, _ := json.Marshal(obj); len(b) < 100 || strings.Contains(string(b), metricsToken(s.ns)) {
			t.Errorf("%s (%d bytes) hold the Prometheus token, or nothing", what, len(b))
		}
	}
	for wave, kind := range map[string]string{"canary": verdict.BaselineNotYetUpdated, "rest": verdict.BaselineBeforeSwitch} {
		rc, ev := s.noDisruptionOf(ctx, t, rev2, wave)
		if rc.Spec.Result != v1alpha1.ResultPass || ev.Metrics == nil {
			t.Fatalf("wave %s: noDisruption %s with metrics %+v", wave, rc.Spec.Result, ev.Metrics)
		}
		for _, c := range ev.Clusters {
			for _, q := range []string{"errorRatio", "latencyP95"} {
				if m, ok := c.Metrics[q]; !ok || m.Count == 0 || (q == "errorRatio" && m.Max != 0) {
					t.Errorf("wave %s, cluster %s: %s %+v (ok %v), want points and no error", wave, c.Name, q, m, ok)
				}
			}
		}
		if b, ok := ev.Metrics.Baseline["latencyP95"]; !ok || b.Kind != kind || b.Mean <= 0 {
			t.Errorf("wave %s: latency baseline %+v (ok %v), want kind %s with points", wave, b, ok, kind)
		}
	}
}

// A release whose p95 latency is twice the baseline's fails on the rule relative to the baseline,
// though its latency is well under any absolute threshold one would write (half a second).
func TestE2EMetricsLatencyAgainstTheBaseline(t *testing.T) {
	parallel(t)
	ctx, cancel := testContext(t, 8*time.Minute)
	defer cancel()
	s, _, canary := metricScenario(ctx, t, 20*time.Second)
	for _, m := range s.members {
		s.faults.SetFault(m.Name, simulator.Fault{Workload: "web", LatencyFactor: 2, Image: ":v2"})
	}
	rev2 := s.commitVersion(t, "v2")
	s.waitPhase(ctx, t, "web", v1alpha1.PhaseHeld, rev2)
	rc, ev := s.noDisruptionOf(ctx, t, rev2, "canary")
	if rc.Spec.Result != v1alpha1.ResultFail || !reasonsContain(rc, "cluster "+canary, "latencyP95", "the baseline's mean") {
		t.Fatalf("noDisruption %s %q: want a Fail naming %s and latencyP95 against the baseline", rc.Spec.Result, rc.Spec.Reasons, canary)
	}
	m, b := ev.Clusters[0].Metrics["latencyP95"], ev.Metrics.Baseline["latencyP95"]
	if b.Mean <= 0 || m.Last < 1.8*b.Mean || m.Max >= 0.5 {
		t.Errorf("canary p95 %+v against the baseline's %+v: want about twice it, and under 0.5s", m, b)
	}
}

// Prometheus stopped mid-soak: noDisruption is Inconclusive (the queries could not be asked, named
// in its reasons), the rollout holds where it is with nothing torn down; once Prometheus is back,
// the gate is decided on the points it kept, and the rollout completes.
func TestE2EMetricsPrometheusDownMidSoak(t *testing.T) {
	parallel(t)
	ctx, cancel := testContext(t, 8*time.Minute)
	defer cancel()
	s, prom, canary := metricScenario(ctx, t, 15*time.Second)
	rev2 := s.commitVersion(t, "v2")
	eventually(ctx, t, "the canary soaking at "+rev2, func() (bool, string) {
		fr := s.rollout(t, "web")
		return fr.Status.Candidate != nil && fr.Status.Candidate.Revision == rev2 && fr.Status.Waves[0].Phase == v1alpha1.WaveSoaking, describe(fr)
	})
	prom.Stop()
	eventually(ctx, t, "noDisruption Inconclusive with Prometheus down", func() (bool, string) {
		rc := latestReceipt(s.receiptsOf(ctx, t, "web", rev2), v1alpha1.GateNoDisruption, "canary")
		return rc != nil && rc.Spec.Result == v1alpha1.ResultInconclusive && reasonsContain(rc, "query errorRatio", "did not answer"), fmt.Sprint(rc)
	})
	fr := s.rollout(t, "web")
	if fr.Status.Phase != v1alpha1.PhaseProgressing || fr.Status.Waves[0].Phase != v1alpha1.WaveSoaking {
		t.Fatalf("with the gate Inconclusive the rollout moved: %s", describe(fr))
	}
	if v := s.memberVersion(ctx, canary); v != "v2" {
		t.Fatalf("the canary runs %q while the gate waits: want v2, nothing torn down", v)
	}
	if err := prom.Start(ctx); err != nil {
		t.Fatal(err)
	}
	s.waitPhase(ctx, t, "web", v1alpha1.PhaseCompleted, rev2)
	rc, ev := s.noDisruptionOf(ctx, t, rev2, "canary")
	if rc.Spec.Result != v1alpha1.ResultPass || ev.Clusters[0].Metrics["errorRatio"].Count == 0 {
		t.Errorf("once Prometheus was back: %s with %+v, want a pass on its points", rc.Spec.Result, ev.Clusters[0].Metrics)
	}
}
