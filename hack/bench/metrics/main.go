// Command metrics is the metric evidence bench (`make bench-metrics`): what the noDisruption gate's
// service metrics cost a decision at 100 to 1,000 clusters, on a real Prometheus server. For each
// wave size it serves synthetic series of the wave's clusters and of a baseline (one workload each,
// the simulator's metric names), lets Prometheus (internal/localfleet.StartPrometheus, the binary
// hack/prometheus.sh builds) scrape them for a window, then asks the wave's evidence as the
// collector does (evidence/collector's serviceMetrics: metrics.Expand, one
// (*metrics.Prometheus).Range per policy query over the wave and its baseline, metrics.Summarize
// per cluster) several times, and prints a table. docs/benchmarks.md describes it.
//
// It is a program of its own rather than a run of hack/bench/scale: it needs no fleet, no
// controller and no Flux, and takes minutes where the scale bench takes most of an hour.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tidegate/tidegate/hack/bench/internal/machine"
)

func main() {
	var (
		clusters  = flag.String("clusters", "100,300,1000", "comma-separated wave sizes, one run each")
		baseline  = flag.Int("baseline", 5, "baseline clusters asked with the wave (settings.metrics.baselineClusters)")
		window    = flag.Duration("window", 2*time.Minute, "how long Prometheus scrapes before the decisions: the soak their queries cover")
		step      = flag.Duration("step", 5*time.Second, "the queries' step (the soak's sampleInterval)")
		decisions = flag.Int("decisions", 10, "decisions per run: each asks every query once")
		rps       = flag.Float64("rps", 10, "each workload's requests per second")
		errShare  = flag.Float64("error-share", 0.01, "the share of requests answered 500")
		perTarget = flag.Int("per-target", 100, "clusters served by one scrape target")
		out       = flag.String("out", "", "also write the tables to this file")
		quiet     = flag.Bool("q", false, "no progress lines on stderr")
	)
	flag.Parse()
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := bench(ctx, *clusters, *out, *quiet, config{Baseline: *baseline, Window: *window, Step: *step, Decisions: *decisions,
		RPS: *rps, ErrorShare: *errShare, PerTarget: *perTarget})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// bench runs each wave size in turn, each in a directory of its own that it removes, and prints
// the tables of those that completed.
func bench(ctx context.Context, sizes, out string, quiet bool, base config) error {
	if base.Decisions < 1 || base.PerTarget < 1 || base.Step <= 0 || base.Window < base.Step {
		return fmt.Errorf("want -decisions and -per-target of at least 1, and a -window of at least one -step")
	}
	var ns []int
	for _, s := range strings.Split(sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return fmt.Errorf("-clusters %q: want comma-separated wave sizes, e.g. 100,300,1000", sizes)
		}
		ns = append(ns, n)
	}
	var w io.Writer = os.Stdout
	if out != "" {
		f, err := os.Create(out)
		if err != nil {
			return err
		}
		defer f.Close()
		w = io.MultiWriter(os.Stdout, f)
	}
	base.Logf = func(format string, args ...any) {
		if !quiet {
			fmt.Fprintf(os.Stderr, "%s %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
		}
	}
	heading := machine.Describe()
	var done []*result
	var err error
	for _, n := range ns {
		c := base
		c.Clusters = n
		var r *result
		if r, err = runIn(ctx, c); err != nil {
			err = fmt.Errorf("%d clusters: %w", n, err)
			break
		}
		done = append(done, r)
	}
	if len(done) > 0 {
		report(w, heading, done)
	}
	return err
}

// runIn runs c in a new temporary directory and removes it after Prometheus has stopped.
func runIn(ctx context.Context, c config) (*result, error) {
	dir, err := os.MkdirTemp("", "tidegate-bench-metrics-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	c.Dir = dir
	return run(ctx, c)
}

// report prints the tables.
func report(w io.Writer, heading string, rs []*result) {
	c := rs[0].Config
	fmt.Fprintf(w, "# tidegate metric evidence bench, %s\n\n", time.Now().UTC().Format(time.RFC3339))
	fmt.Fprintf(w, "Machine: %s.\n\n", heading)
	fmt.Fprintf(w, "**The series are synthetic; the Prometheus server is real** (Prometheus %s, hack/prometheus.sh's build, scraping every second). "+
		"This program serves, for the wave's clusters and %d baseline clusters, one workload each, `http_requests_total{cluster,namespace,workload,code}` "+
		"(200 and 500, %g requests/s, %g %% answered 500) and the `http_request_duration_seconds` histogram (the simulator's buckets), "+
		"%d clusters a scrape target. After %s of scraping, each of %d decisions asks docs/policy.md's errorRatio and latencyP95 "+
		"queries as the collector does: once each for the wave and its baseline (`cluster=~\"a|b|...\"`), a range query over the %s at a %s step, "+
		"then summarises each cluster's points and pools the baseline's.\n\n",
		rs[0].Version, c.Baseline, c.RPS, 100*c.ErrorShare, c.PerTarget, c.Window, c.Decisions, c.Window, c.Step)
	table(w, []string{"wave + baseline", "series in Prometheus", "queries per decision", "request body per query",
		"answer per query: JSON (on the wire)", "series / points per query",
		"errorRatio query p50 / max", "latencyP95 query p50 / max", "of which to first byte (p50)",
		"summarising per decision p50 / max", "Prometheus CPU per query", "Prometheus RSS after / peak"},
		func(row func(...string)) {
			for _, r := range rs {
				er, lat := r.Queries[0], r.Queries[1]
				sp50, smax := spread(r.Summarising)
				rss := "not found in /proc"
				if r.ProcOK {
					rss = mib(r.RSS) + " / " + mib(r.PeakRSS)
				}
				row(fmt.Sprintf("%d + %d", r.Config.Clusters, r.Config.Baseline), r.HeadSeries, strconv.Itoa(r.QueriesPerDecision),
					kib(er.RequestBytes)+", "+kib(lat.RequestBytes),
					fmt.Sprintf("%s (%s), %s (%s)", kib(er.AnswerBytes), kib(er.WireBytes), kib(lat.AnswerBytes), kib(lat.WireBytes)),
					fmt.Sprintf("%d / %d, %d / %d", er.Series, er.Points, lat.Series, lat.Points),
					pair(er.Wall), pair(lat.Wall), ms(median(er.FirstByte))+", "+ms(median(lat.FirstByte)),
					ms(sp50)+" / "+ms(smax), fmt.Sprintf("%.3f s", r.QueryCPU), rss)
			}
		})
	fmt.Fprintf(w, "\nWhat the summaries read (the mean of the wave's clusters' means), to show the path measured what was served:\n\n")
	table(w, []string{"wave", "errorRatio read (served)", "latencyP95 read", "wave clusters without a summary", "Prometheus CPU while scraping"},
		func(row func(...string)) {
			for _, r := range rs {
				er, lat := r.Queries[0], r.Queries[1]
				row(strconv.Itoa(r.Config.Clusters), fmt.Sprintf("%.4f (%.4f)", er.ReadBack, r.ServedErrorRatio),
					fmt.Sprintf("%.3f s", lat.ReadBack), fmt.Sprintf("%d, %d", er.Missing, lat.Missing),
					fmt.Sprintf("%.2f s per s", r.ScrapeCPU))
			}
		})
}

func table(w io.Writer, header []string, rows func(row func(...string))) {
	fmt.Fprintf(w, "| %s |\n|%s\n", strings.Join(header, " | "), strings.Repeat(" --- |", len(header)))
	rows(func(cells ...string) { fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | ")) })
}

// spread is the median and the largest of ds.
func spread(ds []time.Duration) (p50, largest time.Duration) {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)-1)/2], s[len(s)-1]
}

func median(ds []time.Duration) time.Duration { p50, _ := spread(ds); return p50 }

func pair(ds []time.Duration) string {
	p50, largest := spread(ds)
	return ms(p50) + " / " + ms(largest)
}

func ms(d time.Duration) string {
	if d < 10*time.Millisecond {
		return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
}

func kib(n int64) string { return fmt.Sprintf("%.1f KiB", float64(n)/1024) }

func mib(n uint64) string { return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20)) }
