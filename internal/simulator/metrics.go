package simulator

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// The metrics MetricsHandler serves, with the labels of a central Prometheus that scrapes every member
// cluster and tells them apart by a cluster label: cluster (the member's name, as given to New),
// namespace and workload (the Deployment's, StatefulSet's or DaemonSet's name).
const (
	// RequestsMetric counts requests by answer: label code is "200" or "500".
	RequestsMetric = "http_requests_total"
	// DurationMetric is the histogram of request latencies, in seconds, over LatencyBuckets.
	DurationMetric = "http_request_duration_seconds"
)

// Label names of the metrics.
const (
	ClusterLabel   = "cluster"
	NamespaceLabel = "namespace"
	WorkloadLabel  = "workload"
	CodeLabel      = "code"
)

// MetricsHandler serves the simulated service traffic of every member cluster in the Prometheus
// exposition format: RequestsMetric and DurationMetric for each workload that has answered a request.
// The counts are brought up to the moment of the scrape, so two scrapes a second apart differ by a
// second of traffic whatever the simulator's Interval. It serves from a registry of the simulator's
// own, not the global one, so two simulators in one process do not collide.
func (s *Simulator) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{})
}

// trafficCollector exports the traffic of a Simulator at the time of each scrape.
type trafficCollector struct {
	traffic            *traffic
	requests, duration *prometheus.Desc
}

func newTrafficCollector(t *traffic) *trafficCollector {
	labels := []string{ClusterLabel, NamespaceLabel, WorkloadLabel}
	return &trafficCollector{
		traffic: t,
		requests: prometheus.NewDesc(RequestsMetric, "Requests answered by the workload, by HTTP status code (simulated).",
			append(labels, CodeLabel), nil),
		duration: prometheus.NewDesc(DurationMetric, "Latency of the workload's requests in seconds (simulated).",
			labels, nil),
	}
}

func (c *trafficCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.requests
	ch <- c.duration
}

// Collect exports both codes of every series, a 500 count of 0 included: a ratio of errors to
// requests then reads 0 for a healthy workload rather than nothing.
func (c *trafficCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.traffic.snapshot(time.Now()) {
		ch <- prometheus.MustNewConstMetric(c.requests, prometheus.CounterValue, float64(s.ok), s.cluster, s.namespace, s.workload, strconv.Itoa(http.StatusOK))
		ch <- prometheus.MustNewConstMetric(c.requests, prometheus.CounterValue, float64(s.failed), s.cluster, s.namespace, s.workload, strconv.Itoa(http.StatusInternalServerError))
		cumulative := make(map[float64]uint64, len(LatencyBuckets))
		var below uint64
		for i, bound := range LatencyBuckets {
			below += s.buckets[i]
			cumulative[bound] = below
		}
		ch <- prometheus.MustNewConstHistogram(c.duration, s.ok+s.failed, s.sum, cumulative, s.cluster, s.namespace, s.workload)
	}
}
