package localfleet

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/internal/simulator"
)

// The queries the noDisruption gate is to make: each cluster's share of 500s, and its p95 latency.
const (
	errorRatioQuery = `sum by (cluster) (rate(http_requests_total{code="500"}[30s])) / sum by (cluster) (rate(http_requests_total[30s]))`
	p95Query        = `histogram_quantile(0.95, sum by (cluster, le) (rate(http_request_duration_seconds_bucket[30s])))`
	// samplesQuery counts each cluster's samples of its 200s in the window of the two above: 30 (one a
	// second) once the window is full.
	samplesQuery = `min by (cluster) (count_over_time(http_requests_total{code="200"}[30s]))`
)

// query returns the value of each cluster in the instant vector q evaluates to now.
func query(ctx context.Context, api promv1.API, q string) (map[string]float64, error) {
	v, _, _, err := api.Query(ctx, q, time.Now())
	if err != nil {
		return nil, err
	}
	vec, ok := v.(model.Vector)
	if !ok {
		return nil, fmt.Errorf("%s: a %s, not a vector", q, v.Type())
	}
	out := map[string]float64{}
	for _, s := range vec {
		out[string(s.Metric["cluster"])] = float64(s.Value)
	}
	return out, nil
}

// waitForWindow waits until Prometheus holds a full 30 s window of samples of every cluster in
// clusters, and fails the test when ctx ends first.
func waitForWindow(ctx context.Context, t *testing.T, api promv1.API, clusters ...string) {
	t.Helper()
	for {
		got, err := query(ctx, api, samplesQuery)
		full := err == nil
		for _, c := range clusters {
			full = full && got[c] >= 25
		}
		if full {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("Prometheus never held 30 s of samples of %v: last %v, %v", clusters, got, err)
		case <-time.After(time.Second):
		}
	}
}

func webDeployment(ns, image string) *appsv1.Deployment {
	labels := map[string]string{"app": "web"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: new(int32(2)), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: image}}},
			},
		},
	}
}

// A real Prometheus server scrapes the simulator's traffic of two member clusters, one running a
// release that answers 30 % errors twice as slowly: its queries tell them apart by the cluster label
// as the noDisruption gate is to. Stopped, it refuses connections; started again, it answers at the
// same URL.
func TestPrometheusScrapesTheSimulatedTrafficOfEachCluster(t *testing.T) {
	f := StartForTest(t, Options{Members: 2, NoFlux: true})
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()

	clients := map[string]client.Client{}
	for _, m := range f.Members {
		clients[m.Name] = m.Client
	}
	sim := simulator.New(clients, simulator.Options{Interval: 200 * time.Millisecond})
	sim.Start(ctx)
	t.Cleanup(sim.Stop)
	metrics := httptest.NewServer(sim.MetricsHandler())
	t.Cleanup(metrics.Close)

	// The bad release is v2; member-1 runs it, member-2 still runs v1. The fault is set on both: its
	// image limits it to member-1's.
	bad := simulator.Fault{Workload: "web", ErrorRatio: 0.3, LatencyFactor: 2, Image: ":v2"}
	images := map[string]string{"member-1": "example.com/web:v2", "member-2": "example.com/web:v1"}
	for _, m := range f.Members {
		sim.SetFault(m.Name, bad)
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}
		if err := m.Client.Create(ctx, ns); err != nil {
			t.Fatal(err)
		}
		if err := m.Client.Create(ctx, webDeployment(ns.Name, images[m.Name])); err != nil {
			t.Fatal(err)
		}
	}

	prom, err := f.StartPrometheus(ctx, strings.TrimPrefix(metrics.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := promapi.NewClient(promapi.Config{Address: prom.URL})
	if err != nil {
		t.Fatal(err)
	}
	api := promv1.NewAPI(c)
	waitForWindow(ctx, t, api, "member-1", "member-2")

	ratios, err := query(ctx, api, errorRatioQuery)
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := ratios["member-1"]; !ok || math.Abs(r-0.3) > 0.02 {
		t.Errorf("member-1 (v2, ErrorRatio 0.3): error ratio %v, want 0.3 ± 0.02 (all: %v)", r, ratios)
	}
	if r, ok := ratios["member-2"]; !ok || r != 0 {
		t.Errorf("member-2 (v1): error ratio %v, want 0 (all: %v)", r, ratios)
	}
	p95, err := query(ctx, api, p95Query)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("error ratios %v, p95 latencies %v", ratios, p95)
	if slow, normal := p95["member-1"], p95["member-2"]; normal <= 0 || math.Abs(slow/normal-2) > 0.3 {
		t.Errorf("p95 latency: member-1 (v2, LatencyFactor 2) %vs, member-2 (v1) %vs; want twice as slow", slow, normal)
	}

	prom.Stop()
	if _, err := query(ctx, api, errorRatioQuery); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("a query to the stopped Prometheus: %v, want connection refused", err)
	}
	if err := prom.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for {
		got, err := query(ctx, api, errorRatioQuery)
		if err == nil && len(got) == 2 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("Prometheus started again never answered for both clusters: last %v, %v", got, err)
		case <-time.After(time.Second):
		}
	}

	// The fleet stops with its Prometheus, the simulator first, which would report the API servers gone.
	sim.Stop()
	dir := f.Dir
	f.Stop()
	if left := fleetProcesses(t, dir); len(left) > 0 {
		t.Errorf("processes left after the fleet stopped: %v", left)
	}
}
