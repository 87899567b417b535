package simulator

import (
	"math"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The service traffic the simulator makes up for the workloads it tracks, as the service metrics of a
// central Prometheus (Thanos, Mimir) scraping every member cluster would show it: what the
// noDisruption gate compares between the clusters of a wave and those not yet updated. Each available
// pod answers a fixed number of requests per second of the simulator's clock, in a fixed order of
// latencies and with a fixed share of errors, so that a rate over a few tens of seconds reads the
// configured error ratio and latency, not a random draw around them.

// DefaultRequestsPerSecond is how many requests each available pod answers per second unless
// Options.RequestsPerSecond says otherwise: 300 per pod in a 30 s rate window, enough for an error
// ratio read to within a percentage point.
const DefaultRequestsPerSecond = 10

// LatencyBuckets are the upper bounds, in seconds, of the http_request_duration_seconds histogram:
// 5 ms doubling up to 10.24 s. Doubling buckets make a LatencyFactor of 2 move every request exactly
// one bucket up, so that histogram_quantile reads exactly twice the latency.
var LatencyBuckets = prometheus.ExponentialBuckets(0.005, 2, 12)

// baseLatencies are the latencies, in seconds, of a healthy workload's requests, answered in this
// order over and over: the 20 quantiles (k+0.5)/20 of a log-normal distribution with a median of
// 50 ms and σ 0.6, from 15 ms to 162 ms. One request in 20 takes more than 120 ms, so
// histogram_quantile reads a p95 of 160 ms, the bound of its bucket, and a p50 of about 50 ms. A
// 30 s window at DefaultRequestsPerSecond holds 15 full rounds of them per pod.
var baseLatencies = func() []float64 {
	const n, median, sigma = 20, 0.05, 0.6
	out := make([]float64, n)
	for k := range out {
		p := (float64(k) + 0.5) / n
		out[k] = median * math.Exp(sigma*math.Sqrt2*math.Erfinv(2*p-1))
	}
	return out
}()

// flow is the traffic of one workload on one cluster: what its last pass saw, in effect until the
// next, and the counts so far.
type flow struct {
	namespace, name string
	// available pods, and the error ratio and latency factor of the fault on them, as the last pass saw.
	available     int32
	errorRatio    float64
	latencyFactor float64
	// at is when the counts were last brought up to date.
	at time.Time
	// carry and errCarry are the fractions of a request, and of an error, not counted yet: what makes
	// the counts exact over time whatever the length of each step.
	carry, errCarry float64
	// next is the index in baseLatencies of the next request's latency.
	next int
	// ok and failed count requests answered 200 and 500; buckets[i] those whose latency falls in
	// LatencyBuckets[i] and not in the bucket below (the last one: above every bound), sum their
	// latencies.
	ok, failed uint64
	buckets    []uint64
	sum        float64
}

// advance counts the requests answered from f.at to now at rps requests per second per available pod.
func (f *flow) advance(now time.Time, rps float64) {
	if f.at.IsZero() || !now.After(f.at) {
		if f.at.IsZero() {
			f.at = now
		}
		return
	}
	f.carry += float64(f.available) * rps * now.Sub(f.at).Seconds()
	f.at = now
	n := uint64(f.carry)
	if n == 0 {
		return
	}
	f.carry -= float64(n)
	f.errCarry += float64(n) * f.errorRatio
	failed := min(uint64(f.errCarry), n)
	f.errCarry -= float64(failed)
	f.failed += failed
	f.ok += n - failed

	factor := f.latencyFactor
	if factor <= 0 {
		factor = 1
	}
	if f.buckets == nil {
		f.buckets = make([]uint64, len(LatencyBuckets)+1)
	}
	// Whole rounds of baseLatencies at once, then the requests left one by one.
	rounds, rest := n/uint64(len(baseLatencies)), n%uint64(len(baseLatencies))
	if rounds > 0 {
		for _, l := range baseLatencies {
			f.buckets[bucketOf(l*factor)] += rounds
			f.sum += float64(rounds) * l * factor
		}
	}
	for range rest {
		l := baseLatencies[f.next] * factor
		f.next = (f.next + 1) % len(baseLatencies)
		f.buckets[bucketOf(l)]++
		f.sum += l
	}
}

// bucketOf is the index in flow.buckets of a request that took latency seconds.
func bucketOf(latency float64) int {
	return sort.SearchFloat64s(LatencyBuckets, latency)
}

// traffic holds the flows of every cluster. Its lock is its own, not a member's: a scrape must not wait
// for a pass stuck on a stalled API server.
type traffic struct {
	rps   float64
	mu    sync.Mutex
	flows map[string]map[string]*flow // cluster → kind/namespace/name (as member.tracked) → flow
}

// observe records what a pass over cluster saw of the workload key at now: its available pods and the
// fault on them (nil: none). The traffic up to now is counted with what the previous pass saw.
func (t *traffic) observe(cluster, key, namespace, name string, available int32, f *activeFault, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.flows[cluster] == nil {
		t.flows[cluster] = map[string]*flow{}
	}
	fl := t.flows[cluster][key]
	if fl == nil {
		fl = &flow{namespace: namespace, name: name}
		t.flows[cluster][key] = fl
	}
	fl.advance(now, t.rps)
	fl.available, fl.errorRatio, fl.latencyFactor = available, 0, 1
	if f != nil {
		fl.errorRatio, fl.latencyFactor = f.ErrorRatio, f.LatencyFactor
	}
}

// forget drops the flows of cluster whose workloads a pass no longer saw (seen is keyed as
// member.tracked): their series end, as a deleted workload's do.
func (t *traffic) forget(cluster string, seen map[string]bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for key := range t.flows[cluster] {
		if !seen[key] {
			delete(t.flows[cluster], key)
		}
	}
}

// series is the traffic of one workload name on one cluster, as exported: the flows of workloads of
// different kinds with the same namespace and name are one service to the metrics.
type series struct {
	cluster, namespace, workload string
	ok, failed                   uint64
	buckets                      []uint64
	sum                          float64
}

// snapshot brings every flow up to now and returns the series that have answered a request, sorted.
func (t *traffic) snapshot(now time.Time) []series {
	t.mu.Lock()
	defer t.mu.Unlock()
	byName := map[[3]string]*series{}
	for cluster, flows := range t.flows {
		for _, fl := range flows {
			fl.advance(now, t.rps)
			if fl.ok+fl.failed == 0 {
				continue
			}
			k := [3]string{cluster, fl.namespace, fl.name}
			s := byName[k]
			if s == nil {
				s = &series{cluster: cluster, namespace: fl.namespace, workload: fl.name, buckets: make([]uint64, len(fl.buckets))}
				byName[k] = s
			}
			s.ok += fl.ok
			s.failed += fl.failed
			s.sum += fl.sum
			for i, b := range fl.buckets {
				s.buckets[i] += b
			}
		}
	}
	out := make([]series, 0, len(byName))
	for _, s := range byName {
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		return a.cluster+"\x00"+a.namespace+"\x00"+a.workload < b.cluster+"\x00"+b.namespace+"\x00"+b.workload
	})
	return out
}
