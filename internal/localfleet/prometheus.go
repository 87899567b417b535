package localfleet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tidegate/tidegate/internal/testbin"
)

// PrometheusOptions says where a Prometheus server keeps its files and what it scrapes.
type PrometheusOptions struct {
	// Dir holds its configuration (prometheus.yml), its data (data/) and its log (prometheus.log,
	// and prometheus.log.N of its earlier runs); created when missing.
	Dir string
	// Targets are the host:port addresses it scrapes /metrics of, every second: the simulator's
	// metrics (simulator.Simulator.MetricsHandler), served as a central Prometheus of the fleet would
	// show them, a cluster label on each series.
	Targets []string
	// Only, when set, makes it the Prometheus of that one cluster: it keeps that cluster's series
	// alone, without their cluster label.
	Only string
}

// Prometheus is a Prometheus server (testbin.Prometheus's build) running as a process: what the
// noDisruption gate queries for the service metrics of the clusters of a wave and of those not yet
// updated. Its methods are safe for concurrent use.
type Prometheus struct {
	// URL is its base URL, http://127.0.0.1:PORT, for the HTTP API (/api/v1/query); it stays the
	// same when it is started again.
	URL string

	bin, dir, logPath string
	args              []string
	addLog            func(path string)

	mu     sync.Mutex
	port   *portSet
	proc   *process // nil while stopped
	runs   int
	closed bool
}

// prometheusConfig is its configuration: a scrape and a rule evaluation every second, so that a
// rate over 30 s has thirty samples, and the targets' labels kept as they are (honor_labels), since
// they stand for a central store whose series already carry their cluster.
//
// With only set, it is one cluster's own Prometheus instead: it keeps the series of that cluster
// alone, without the cluster label, as a Prometheus inside the cluster has them.
func prometheusConfig(targets []string, only string) string {
	var b strings.Builder
	b.WriteString("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n")
	b.WriteString("scrape_configs:\n  - job_name: simulator\n    honor_labels: true\n    static_configs:\n      - targets:\n")
	for _, t := range targets {
		b.WriteString("          - " + strconv.Quote(t) + "\n")
	}
	if only != "" {
		b.WriteString("    metric_relabel_configs:\n")
		b.WriteString("      - {source_labels: [cluster], regex: " + strconv.Quote(regexp.QuoteMeta(only)) + ", action: keep}\n")
		b.WriteString("      - {regex: cluster, action: labeldrop}\n")
	}
	return b.String()
}

// StartPrometheus starts a Prometheus server as opts says, on a newly reserved loopback port, and
// waits until it is ready (/-/ready) or ctx ends. The caller ends it with Close; a fleet's
// (Fleet.StartPrometheus) ends with the fleet.
func StartPrometheus(ctx context.Context, opts PrometheusOptions) (*Prometheus, error) {
	return startPrometheus(ctx, opts, nil)
}

// StartPrometheus starts a Prometheus server that scrapes targets (host:port, see
// PrometheusOptions.Targets), with its files in the fleet's directory and its log with the fleet's
// (DumpLogs), and waits until it is ready. Stop stops it with the rest of the fleet. A fleet may run
// several; each has a directory of its own.
func (f *Fleet) StartPrometheus(ctx context.Context, targets ...string) (*Prometheus, error) {
	return f.startPrometheus(ctx, PrometheusOptions{Targets: targets})
}

// StartClusterPrometheus is StartPrometheus for the Prometheus of one cluster (PrometheusOptions.Only).
func (f *Fleet) StartClusterPrometheus(ctx context.Context, cluster string, targets ...string) (*Prometheus, error) {
	return f.startPrometheus(ctx, PrometheusOptions{Targets: targets, Only: cluster})
}

func (f *Fleet) startPrometheus(ctx context.Context, opts PrometheusOptions) (*Prometheus, error) {
	f.promMu.Lock()
	defer f.promMu.Unlock()
	dir := filepath.Join(f.Dir, "prometheus-"+strconv.Itoa(len(f.prometheus)+1))
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	opts.Dir = dir
	p, err := startPrometheus(ctx, opts, f.addLogFile)
	if err != nil {
		return nil, err
	}
	f.prometheus = append(f.prometheus, p)
	return p, nil
}

// closePrometheus ends every Prometheus server the fleet started.
func (f *Fleet) closePrometheus() {
	f.promMu.Lock()
	defer f.promMu.Unlock()
	for _, p := range f.prometheus {
		p.Close()
	}
}

func startPrometheus(ctx context.Context, opts PrometheusOptions, addLog func(string)) (*Prometheus, error) {
	bin, err := testbin.Prometheus()
	if err != nil {
		return nil, err
	}
	if len(opts.Targets) == 0 {
		return nil, errors.New("localfleet: a Prometheus server needs a target to scrape")
	}
	if err := os.MkdirAll(filepath.Join(opts.Dir, "data"), 0o755); err != nil {
		return nil, err
	}
	config := filepath.Join(opts.Dir, "prometheus.yml")
	if err := os.WriteFile(config, []byte(prometheusConfig(opts.Targets, opts.Only)), 0o644); err != nil {
		return nil, fmt.Errorf("writing Prometheus's configuration: %w", err)
	}
	p := &Prometheus{bin: bin, dir: opts.Dir, logPath: filepath.Join(opts.Dir, "prometheus.log"), addLog: addLog,
		args: []string{"--config.file=" + config, "--storage.tsdb.path=" + filepath.Join(opts.Dir, "data")}}
	if addLog != nil {
		addLog(p.logPath)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	// As startController: a port taken before Prometheus could listen on it is replaced by another.
	for attempt := 1; ; attempt++ {
		if p.port, err = reserve(1); err != nil {
			return nil, err
		}
		p.URL = "http://" + addr(p.port.ports[0])
		if err = p.start(ctx); err == nil {
			return p, nil
		}
		p.port.release()
		if attempt == 3 || !addressInUse(p.logPath) {
			return nil, err
		}
	}
}

// start runs the process on p's port, keeping the log of an earlier run as prometheus.log.N, and
// waits until it is ready. p.mu is held.
func (p *Prometheus) start(ctx context.Context) error {
	if p.runs > 0 {
		old := fmt.Sprintf("%s.%d", p.logPath, p.runs)
		if err := os.Rename(p.logPath, old); err == nil && p.addLog != nil {
			p.addLog(old)
		}
	}
	p.runs++
	args := append([]string{"--web.listen-address=" + addr(p.port.ports[0])}, p.args...)
	proc, err := startProcess("prometheus", p.logPath, nil, p.bin, args...)
	if err != nil {
		return err
	}
	if err := proc.waitHTTP200(ctx, p.URL+"/-/ready"); err != nil {
		proc.stop()
		return err
	}
	p.proc = proc
	return nil
}

// Stop stops the server, as an outage of the fleet's Prometheus: its API refuses connections until
// Start. Its port stays reserved and its data directory is kept. Stopping a stopped server does
// nothing.
func (p *Prometheus) Stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stop()
}

// stop ends the process if it runs. p.mu is held.
func (p *Prometheus) stop() {
	if p.proc != nil {
		p.proc.stop()
		p.proc = nil
	}
}

// Start starts a stopped server again on the same port (URL) with the same configuration and data
// directory, as a Prometheus with a persistent volume comes back: what it scraped before Stop is
// still there, with a gap for the outage. It waits until it is ready or ctx ends. Starting a running
// server does nothing; a closed one cannot start.
func (p *Prometheus) Start(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errors.New("localfleet: this Prometheus server was closed")
	}
	if p.proc != nil {
		return nil
	}
	return p.start(ctx)
}

// Close stops the server for good and releases its port. Its directory is left to its owner (a
// fleet's goes with the fleet's). Safe to call twice.
func (p *Prometheus) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stop()
	if !p.closed {
		p.closed = true
		p.port.release()
	}
}
