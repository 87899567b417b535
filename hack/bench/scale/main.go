// Command scale is the scale bench (`make bench-scale`): for each run it starts a real hub
// kube-apiserver and a few member API servers, N FleetClusters sharing the members' kubeconfig
// Secrets, source-controller and either real kustomize-controller or its stand-in
// (test/fluxstandin, "simulated Flux"), and bin/tidegate-controller as a child process with its
// production flags; it plays a first install, a healthy release, an idle window, a hold, a restart
// and a failed wave, and prints what it measured (test/scale). docs/benchmarks.md describes it.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tidegate/tidegate/hack/bench/internal/machine"
	"github.com/tidegate/tidegate/test/fluxstandin"
	"github.com/tidegate/tidegate/test/scale"
)

func main() {
	var (
		runs       = flag.String("runs", "standin:100,standin:300,standin:1000,real:100", "comma-separated runs, each FLUX:CLUSTERS with FLUX standin (simulated Flux) or real (kustomize-controller)")
		binary     = flag.String("controller", "bin/tidegate-controller", "the controller binary, run as a child process; empty runs it in-process (no CPU or memory figures)")
		members    = flag.Int("members", 3, "member API servers the FleetClusters share")
		soak       = flag.Duration("soak", time.Minute, "each wave's soak (the built-in policy's default)")
		setupSoak  = flag.Duration("setup-soak", 10*time.Second, "each wave's soak while v1 installs (setup, not measured)")
		idle       = flag.Duration("idle", 2*time.Minute, "the idle window")
		interval   = flag.Duration("interval", time.Minute, "the Kustomization template's interval: Flux re-reconciles every interval (as long as the soak, so that every member re-reconciles once while its wave soaks)")
		timeout    = flag.Duration("timeout", 2*time.Minute, "the Kustomization template's timeout")
		workers    = flag.Int("standin-workers", fluxstandin.DefaultWorkers, "stand-in: Kustomizations reconciled at once")
		latency    = flag.Duration("standin-latency", fluxstandin.DefaultApplyLatency, "stand-in: time per apply, health checks included")
		refresh    = flag.Duration("standin-refresh-latency", time.Second, "stand-in: time a periodic re-reconcile keeps Ready and Healthy Unknown")
		rate       = flag.Float64("standin-rate", 0, "stand-in: applies started per second at most (0: workers / latency)")
		standInQPS = flag.Float64("standin-qps", 100, "stand-in: its hub client's QPS (kustomize-controller's default is 50; the stand-in's throughput is bounded by its workers and latency instead)")
		failAfter  = flag.Duration("standin-fail-after", fluxstandin.DefaultFailAfter, "stand-in: how long a failing health check takes to fail")
		setup      = flag.Duration("standin-setup-latency", 200*time.Millisecond, "stand-in: time per apply while v1 installs (setup, not measured)")
		ksConc     = flag.Int("kustomize-concurrent", 10, "real Flux: kustomize-controller --concurrent")
		out        = flag.String("out", "", "also write the tables to this file")
		quiet      = flag.Bool("q", false, "no progress lines on stderr")
		controlArg = flag.String("controller-args", "", "extra flags for the controller binary, space-separated")
	)
	flag.Parse()
	log.SetFlags(0)
	// The fleet's Git server logs every request with the standard logger; errors go to stderr below.
	log.SetOutput(io.Discard)
	fatal := func(err error) { fmt.Fprintln(os.Stderr, err); os.Exit(1) }
	if *binary != "" {
		if _, err := os.Stat(*binary); err != nil {
			fatal(fmt.Errorf("the controller binary %s is missing: run `make build` (or `make bench-scale`, which builds it): %w", *binary, err))
		}
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()

	var w io.Writer = os.Stdout
	if *out != "" {
		f, err := os.Create(*out)
		if err != nil {
			fatal(err)
		}
		defer f.Close()
		w = io.MultiWriter(os.Stdout, f)
	}
	logf := func(format string, args ...any) {
		if !*quiet {
			fmt.Fprintf(os.Stderr, "%s %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
		}
	}
	fmt.Fprintf(w, "# tidegate scale bench, %s\n", time.Now().UTC().Format(time.RFC3339))
	fmt.Fprintf(w, "\nMachine: %s. Figures marked simulated Flux come from the kustomize-controller stand-in (test/fluxstandin), not from Flux.\n", machine.Describe())
	var done []*scale.Run
	for _, spec := range strings.Split(*runs, ",") {
		mode, n, err := parseRun(spec)
		if err != nil {
			fatal(err)
		}
		cfg := scale.Config{
			Clusters: n, Members: *members, Flux: mode, ControllerBinary: *binary, Soak: *soak, SetupSoak: *setupSoak,
			Interval: *interval, Timeout: *timeout, KustomizeConcurrency: *ksConc, Logf: logf,
			StandIn: fluxstandin.Options{Workers: *workers, FailAfter: *failAfter,
				Pace: fluxstandin.Pace{ApplyLatency: *latency, RefreshLatency: *refresh, Rate: *rate}},
			StandInQPS: float32(*standInQPS),
			SetupPace:  fluxstandin.Pace{ApplyLatency: *setup},
		}
		if *controlArg != "" {
			cfg.ControllerArgs = strings.Fields(*controlArg)
		}
		logf("run %s: %d FleetClusters, %s", spec, n, mode)
		r := scale.Bench(ctx, cfg, *idle)
		r.Print(w)
		done = append(done, r)
		if ctx.Err() != nil {
			break
		}
	}
	scale.Summary(w, done)
}

func parseRun(spec string) (scale.Flux, int, error) {
	mode, count, ok := strings.Cut(strings.TrimSpace(spec), ":")
	n, err := strconv.Atoi(count)
	if !ok || err != nil || n < 2 {
		return "", 0, fmt.Errorf("run %q: want FLUX:CLUSTERS, e.g. standin:1000 or real:100", spec)
	}
	switch mode {
	case "standin":
		return scale.StandIn, n, nil
	case "real":
		return scale.RealFlux, n, nil
	}
	return "", 0, fmt.Errorf("run %q: FLUX is standin or real", spec)
}
