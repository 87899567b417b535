package main

import (
	"context"
	"net"
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tidegate/tidegate/internal/simulator"
)

// The series are the simulator's (internal/simulator: the same names, labels and latency buckets),
// so that the queries of docs/policy.md read them as they read the local fleet's; their values are
// made up here from the time alone, so that serving a thousand clusters costs a scrape nothing but
// the encoding.
const (
	namespace = "shop"
	workload  = "web"
)

// latencies are the latencies, in seconds, that every workload's requests take, in equal shares:
// a median of 55 ms and one request in ten above 160 ms (histogram_quantile reads a p95 between
// 160 and 320 ms, the bounds of its bucket).
var latencies = []float64{0.008, 0.012, 0.018, 0.022, 0.028, 0.034, 0.04, 0.045, 0.05, 0.055,
	0.06, 0.07, 0.08, 0.09, 0.1, 0.12, 0.14, 0.155, 0.2, 0.3}

// meanLatency is the mean of latencies: a histogram's sum is its count times this.
var meanLatency = func() float64 {
	sum := 0.0
	for _, l := range latencies {
		sum += l
	}
	return sum / float64(len(latencies))
}()

// syntheticTraffic exports, for each of its clusters, one workload's requests and their latencies
// as counters that grow at a fixed rate from start: about rps requests a second, about errorShare
// of them answered 500 (each cluster its own, see vary).
type syntheticTraffic struct {
	clusters []string
	// first is the index of clusters[0] among all clusters served.
	first           int
	start           time.Time
	rps, errorShare float64

	requests, duration *prometheus.Desc
}

func newSyntheticTraffic(clusters []string, first int, start time.Time, rps, errorShare float64) *syntheticTraffic {
	labels := []string{simulator.ClusterLabel, simulator.NamespaceLabel, simulator.WorkloadLabel}
	return &syntheticTraffic{clusters: clusters, first: first, start: start, rps: rps, errorShare: errorShare,
		requests: prometheus.NewDesc(simulator.RequestsMetric, "Requests answered by the workload, by HTTP status code (synthetic).",
			append(labels, simulator.CodeLabel), nil),
		duration: prometheus.NewDesc(simulator.DurationMetric, "Latency of the workload's requests in seconds (synthetic).",
			labels, nil),
	}
}

func (t *syntheticTraffic) Describe(ch chan<- *prometheus.Desc) {
	ch <- t.requests
	ch <- t.duration
}

// Collect exports every cluster's counts at the time of the scrape.
func (t *syntheticTraffic) Collect(ch chan<- prometheus.Metric) {
	elapsed := time.Since(t.start).Seconds()
	for i, c := range t.clusters {
		total := t.rps * vary(t.first+i, 3) * elapsed
		errors := total * errorShareOf(t.first+i, t.errorShare)
		count := uint64(total)
		// A map per cluster: a constant histogram keeps it until the registry encodes it.
		buckets := make(map[float64]uint64, len(simulator.LatencyBuckets))
		for _, bound := range simulator.LatencyBuckets {
			buckets[bound] = count * uint64(latenciesAtMost(bound)) / uint64(len(latencies))
		}
		ch <- prometheus.MustNewConstMetric(t.requests, prometheus.CounterValue, total-errors, c, namespace, workload, strconv.Itoa(http.StatusOK))
		ch <- prometheus.MustNewConstMetric(t.requests, prometheus.CounterValue, errors, c, namespace, workload, strconv.Itoa(http.StatusInternalServerError))
		ch <- prometheus.MustNewConstHistogram(t.duration, count, float64(count)*meanLatency, buckets, c, namespace, workload)
	}
}

// vary is a factor from 0.5 to 1.5 for cluster i, 1 on average over ten clusters, different for
// each salt: the clusters' figures differ, as a fleet's do, so that Prometheus's answers are as
// long and compress as much as those of a fleet rather than repeat one number.
func vary(i, salt int) float64 { return 0.5 + float64((i*salt)%10)/9 }

// errorShareOf is the share of cluster i's requests answered 500: share on average.
func errorShareOf(i int, share float64) float64 { return share * vary(i, 7) }

// latenciesAtMost is how many of latencies are at most bound.
func latenciesAtMost(bound float64) int {
	n := sort.SearchFloat64s(latencies, bound)
	for n < len(latencies) && latencies[n] == bound {
		n++
	}
	return n
}

// serveTraffic serves the traffic of clusters from one loopback listener per perTarget clusters,
// as a central Prometheus scrapes a fleet from several targets, each from a registry of its own.
// It returns the targets' host:port addresses and a function that stops them.
func serveTraffic(clusters []string, perTarget int, start time.Time, rps, errorShare float64) ([]string, func(), error) {
	var (
		targets []string
		servers []*http.Server
	)
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, s := range servers {
			_ = s.Shutdown(ctx)
		}
	}
	for i := 0; i < len(clusters); i += perTarget {
		reg := prometheus.NewRegistry()
		if err := reg.Register(newSyntheticTraffic(clusters[i:min(i+perTarget, len(clusters))], i, start, rps, errorShare)); err != nil {
			stop()
			return nil, nil, err
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			stop()
			return nil, nil, err
		}
		s := &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 10 * time.Second}
		// Serve ends with Shutdown; a target that failed otherwise shows as clusters without
		// series in the tables.
		go func() { _ = s.Serve(l) }()
		servers = append(servers, s)
		targets = append(targets, l.Addr().String())
	}
	return targets, stop, nil
}
