package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/procfs"

	"github.com/tidegate/tidegate/evidence/metrics"
	"github.com/tidegate/tidegate/internal/localfleet"
	"github.com/tidegate/tidegate/internal/simulator"
)

// queries are the example of docs/policy.md ("Metrics and checks"), as its CUE strings read.
var queries = map[string]string{
	"errorRatio": `sum by (cluster) (rate(http_requests_total{code=~"5..",cluster=~"{{clusters}}"}[30s]))
/ sum by (cluster) (rate(http_requests_total{cluster=~"{{clusters}}"}[30s]))`,
	"latencyP95": `histogram_quantile(0.95, sum by (cluster, le)
(rate(http_request_duration_seconds_bucket{cluster=~"{{clusters}}"}[30s])))`,
}

// config is one run's: a wave of Clusters and a baseline of Baseline more.
type config struct {
	Clusters, Baseline int
	// Window is how long Prometheus scrapes before the decisions, and what they cover; Step is
	// their sample interval.
	Window, Step time.Duration
	// Decisions is how many times the wave's evidence is asked.
	Decisions int
	// RPS is each workload's requests a second, ErrorShare the share of them answered 500.
	RPS, ErrorShare float64
	// PerTarget is how many clusters one scrape target serves.
	PerTarget int
	// Dir holds the run's files (Prometheus's configuration, data and log); the caller removes it.
	Dir  string
	Logf func(format string, args ...any)
}

// result is what one run measured.
type result struct {
	Config config
	// Version is Prometheus's, HeadSeries the series it held after the decisions.
	Version    string
	HeadSeries string
	// QueriesPerDecision is how many requests one decision sent Prometheus.
	QueriesPerDecision int
	Queries            []queryResult
	// Summarising is each decision's time summarising every cluster's points and pooling the
	// baseline's, for every query.
	Summarising []time.Duration
	// ScrapeCPU is Prometheus's CPU seconds per second of the window; QueryCPU its CPU seconds
	// while it was asked, per query, less what scraping took in that time.
	ScrapeCPU, QueryCPU float64
	// RSS and PeakRSS are Prometheus's resident set after the decisions and its peak (VmHWM).
	RSS, PeakRSS uint64
	// ProcOK is false when Prometheus's process was not found in /proc.
	ProcOK bool
	// ServedErrorRatio is the mean of the wave's clusters' error shares as served.
	ServedErrorRatio float64
}

// queryResult is what one policy query cost, in every decision.
type queryResult struct {
	Name string
	// RequestBytes is the form's size; AnswerBytes the JSON answer's, WireBytes the answer as it
	// came over the connection (gzip, headers included).
	RequestBytes, AnswerBytes, WireBytes int64
	// Series and Points are what the answer held; Missing the wave's clusters without a summary,
	// ReadBack the mean of the wave's clusters' means.
	Series, Points, Missing int
	ReadBack                float64
	// Wall is each query's time as the collector sees it (Range: sending, Prometheus's evaluation,
	// reading and parsing the answer); FirstByte the time to the answer's headers, which
	// Prometheus sends once it has evaluated and encoded the query.
	Wall, FirstByte []time.Duration
}

// run measures one wave: it serves the clusters' traffic, lets a Prometheus server scrape it for
// the window, then asks the wave's evidence Decisions times. Prometheus is stopped before it
// returns.
func run(ctx context.Context, c config) (*result, error) {
	var wave, base []string
	for i := range c.Clusters + c.Baseline {
		name := fmt.Sprintf("c-%04d.eu-west-1", i+1)
		if i < c.Clusters {
			wave = append(wave, name)
		} else {
			base = append(base, name)
		}
	}
	targets, stopTraffic, err := serveTraffic(append(slices.Clone(wave), base...), c.PerTarget, time.Now(), c.RPS, c.ErrorShare)
	if err != nil {
		return nil, err
	}
	defer stopTraffic()
	prom, err := localfleet.StartPrometheus(ctx, localfleet.PrometheusOptions{Dir: filepath.Join(c.Dir, "prometheus"), Targets: targets})
	if err != nil {
		return nil, err
	}
	defer prom.Close()
	pid, procOK := prometheusPID(filepath.Join(c.Dir, "prometheus", "prometheus.yml"))
	r := &result{Config: c, Version: buildVersion(ctx, prom.URL), ProcOK: procOK}
	for i := range wave {
		r.ServedErrorRatio += errorShareOf(i, c.ErrorShare) / float64(len(wave))
	}

	c.Logf("%d + %d clusters from %d scrape target(s): Prometheus scraping for %s", c.Clusters, c.Baseline, len(targets), c.Window)
	start, cpu0 := time.Now(), cpuSeconds(pid)
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(c.Window):
	}
	end, cpu1 := time.Now(), cpuSeconds(pid)
	r.ScrapeCPU = (cpu1 - cpu0) / end.Sub(start).Seconds()

	counter := newCountingTransport()
	p := &metrics.Prometheus{Address: prom.URL, Client: &http.Client{Timeout: 30 * time.Second, Transport: counter}}
	names := slices.Sorted(maps.Keys(queries))
	r.Queries = make([]queryResult, len(names))
	asking := time.Now()
	for d := range c.Decisions {
		before := counter.requests
		var summarising time.Duration
		for i, name := range names {
			s, err := ask(ctx, p, counter, name, wave, base, start, end, c.Step, &r.Queries[i])
			if err != nil {
				return nil, fmt.Errorf("decision %d: %w", d+1, err)
			}
			summarising += s
		}
		r.Summarising = append(r.Summarising, summarising)
		r.QueriesPerDecision = counter.requests - before
	}
	r.QueryCPU = (cpuSeconds(pid) - cpu1 - r.ScrapeCPU*time.Since(asking).Seconds()) / float64(c.Decisions*len(names))
	r.HeadSeries = headSeries(ctx, prom.URL)
	if st, err := procStatus(pid); err == nil {
		r.RSS, r.PeakRSS = st.VmRSS, st.VmHWM
	}
	return r, nil
}

// ask runs one query of a decision as the collector does for a wave whose baseline is clusters not
// yet updated (evidence/collector's askMetric and serviceMetrics): once for the wave and its
// baseline together, then each wave cluster's points summarised and the baseline's pooled. It
// adds what it measured to q and returns the summarising time.
func ask(ctx context.Context, p *metrics.Prometheus, counter *countingTransport, name string, wave, base []string,
	start, end time.Time, step time.Duration, q *queryResult) (time.Duration, error) {
	q.Name = name
	t0 := time.Now()
	series, err := p.Range(ctx, metrics.Expand(queries[name], append(slices.Clone(wave), base...)), simulator.ClusterLabel, start, end, step)
	if err != nil {
		return 0, fmt.Errorf("query %s: %w", name, err)
	}
	q.Wall = append(q.Wall, time.Since(t0))
	x := counter.last
	q.FirstByte = append(q.FirstByte, x.firstByte)
	q.RequestBytes, q.AnswerBytes, q.WireBytes = x.requestBytes, x.answerBytes.Load(), x.wireBytes.Load()

	t1 := time.Now()
	sum, missing := 0.0, 0
	for _, c := range wave {
		s, ok := metrics.Summarize(series[c])
		if !ok {
			missing++
			continue
		}
		sum += s.Mean
	}
	_, _ = metrics.Pool(series, base)
	summarising := time.Since(t1)

	q.Series, q.Points, q.Missing = len(series), 0, missing
	for _, pts := range series {
		q.Points += len(pts)
	}
	if n := len(wave) - missing; n > 0 {
		q.ReadBack = sum / float64(n)
	}
	return summarising, nil
}

// countingTransport is the default transport (gzip accepted, as the controller's client does),
// counting the requests sent through it and the bytes of the last one. It serves one request at
// a time.
type countingTransport struct {
	base     *http.Transport
	requests int
	last     *exchange
	// conn counts what the connection of the request in flight reads.
	conn atomic.Pointer[atomic.Int64]
}

// exchange is what one request and its answer weighed, and how long the answer took to begin.
type exchange struct {
	requestBytes           int64
	answerBytes, wireBytes atomic.Int64
	firstByte              time.Duration
}

func newCountingTransport() *countingTransport {
	t := &countingTransport{base: http.DefaultTransport.(*http.Transport).Clone()}
	dialer := &net.Dialer{Timeout: 30 * time.Second}
	t.base.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dialer.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &countingConn{Conn: c, t: t}, nil
	}
	return t
}

func (t *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	x := &exchange{requestBytes: req.ContentLength}
	t.conn.Store(&x.wireBytes)
	start := time.Now()
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	x.firstByte = time.Since(start)
	t.requests++
	t.last = x
	resp.Body = &countingBody{ReadCloser: resp.Body, n: &x.answerBytes}
	return resp, nil
}

// countingConn counts the bytes read from a connection into the request in flight's exchange.
type countingConn struct {
	net.Conn
	t *countingTransport
}

func (c *countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if w := c.t.conn.Load(); w != nil {
		w.Add(int64(n))
	}
	return n, err
}

// countingBody counts the bytes of an answer's body as read (after gzip).
type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// prometheusPID finds the Prometheus process that runs with config: localfleet keeps its process
// to itself, and its configuration's path, in this run's own directory, names it.
func prometheusPID(config string) (int, bool) {
	procs, err := procfs.AllProcs()
	if err != nil {
		return 0, false
	}
	for _, p := range procs {
		args, err := p.CmdLine()
		if err == nil && slices.Contains(args, "--config.file="+config) {
			return p.PID, true
		}
	}
	return 0, false
}

// cpuSeconds is the process's CPU time so far (0 when it is not found).
func cpuSeconds(pid int) float64 {
	if pid == 0 {
		return 0
	}
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0
	}
	st, err := p.Stat()
	if err != nil {
		return 0
	}
	return st.CPUTime()
}

func procStatus(pid int) (procfs.ProcStatus, error) {
	if pid == 0 {
		return procfs.ProcStatus{}, fmt.Errorf("no Prometheus process found")
	}
	p, err := procfs.NewProc(pid)
	if err != nil {
		return procfs.ProcStatus{}, err
	}
	return p.NewStatus()
}

// buildVersion is the server's version from its build information, "?" when it does not say.
func buildVersion(ctx context.Context, url string) string {
	var info struct {
		Data struct {
			Version string `json:"version"`
		} `json:"data"`
	}
	body, err := get(ctx, url+"/api/v1/status/buildinfo")
	if err != nil || json.Unmarshal(body, &info) != nil || info.Data.Version == "" {
		return "?"
	}
	return info.Data.Version
}

// headSeries is the number of series Prometheus holds in memory, from its own metrics.
func headSeries(ctx context.Context, url string) string {
	body, err := get(ctx, url+"/metrics")
	if err != nil {
		return "?"
	}
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "prometheus_tsdb_head_series "); ok {
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				return strconv.FormatFloat(f, 'f', 0, 64)
			}
		}
	}
	return "?"
}

func get(ctx context.Context, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: HTTP %d", url, resp.StatusCode)
	}
	return io.ReadAll(resp.Body)
}
