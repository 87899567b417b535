package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	flag "github.com/spf13/pflag"

	"github.com/tidegate/tidegate/controllers"
)

// parse binds the controller's flags to a fresh FlagSet and parses args; out is what the FlagSet
// printed (deprecation notes).
func parse(t *testing.T, args ...string) (*flags, *flag.FlagSet, string) {
	t.Helper()
	fs := flag.NewFlagSet("tidegate-controller", flag.ContinueOnError)
	var out bytes.Buffer
	fs.SetOutput(&out)
	f := bindFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parsing %v: %v", args, err)
	}
	return f, fs, out.String()
}

// TestFlagsAreFlux: the controller takes the flags Flux's controllers take, under their names, with
// tidegate's defaults where they differ (leader election on, the hub's request budget).
func TestFlagsAreFlux(t *testing.T) {
	f, fs, _ := parse(t)
	for _, name := range []string{
		"enable-leader-election", "leader-election-release-on-cancel", "leader-election-lease-duration",
		"leader-election-renew-deadline", "leader-election-retry-period", "metrics-addr", "health-addr",
		"concurrent", "kube-api-qps", "kube-api-burst", "min-retry-delay", "max-retry-delay",
		"watch-label-selector", "interval-jitter-percentage", "feature-gates", "log-level", "log-encoding",
	} {
		flg := fs.Lookup(name)
		if flg == nil || flg.Hidden || flg.Deprecated != "" {
			t.Errorf("--%s is not a visible flag: %+v", name, flg)
		}
	}
	if !f.leaderElection.Enable || !f.leaderElection.ReleaseOnCancel {
		t.Errorf("leader election = %+v, want on and released on cancel by default", f.leaderElection)
	}
	if f.client.QPS != controllers.DefaultHubQPS || f.client.Burst != controllers.DefaultHubBurst {
		t.Errorf("hub client = %+v, want %d QPS, %d burst", f.client, controllers.DefaultHubQPS, controllers.DefaultHubBurst)
	}
	if f.intervalJitter.Percentage != 5 {
		t.Errorf("interval jitter = %d%%, want Flux's 5%%", f.intervalJitter.Percentage)
	}
	if f.rateLimiter.MinRetryDelay != 750*time.Millisecond || f.rateLimiter.MaxRetryDelay != 15*time.Minute {
		t.Errorf("retry delays = %+v, want Flux's 750ms to 15m", f.rateLimiter)
	}
	if f.metricsAddr != ":8080" || f.healthAddr != ":8081" || f.watch.LabelSelector != "" {
		t.Errorf("metrics %q, health %q, selector %q", f.metricsAddr, f.healthAddr, f.watch.LabelSelector)
	}
	if f.eventsAddr != "" || fs.Lookup("events-addr") == nil {
		t.Errorf("--events-addr: %q, bound %v; want Flux's flag, empty by default", f.eventsAddr, fs.Lookup("events-addr") != nil)
	}
	for _, name := range []string{"watch-all-namespaces", "watch-configs-label-selector"} {
		if fs.Lookup(name) != nil {
			t.Errorf("--%s is bound, but tidegate has no use for it", name)
		}
	}

	f, _, _ = parse(t, "--enable-leader-election=false", "--metrics-addr=:9090", "--health-addr=:9440",
		"--kube-api-qps=20", "--kube-api-burst=40", "--min-retry-delay=1s", "--max-retry-delay=2m",
		"--watch-label-selector=sharding.fluxcd.io/key=shard1", "--interval-jitter-percentage=10", "--concurrent=8")
	if f.leaderElection.Enable || f.metricsAddr != ":9090" || f.healthAddr != ":9440" || f.client.QPS != 20 || f.client.Burst != 40 ||
		f.rateLimiter.MinRetryDelay != time.Second || f.rateLimiter.MaxRetryDelay != 2*time.Minute ||
		f.watch.LabelSelector != "sharding.fluxcd.io/key=shard1" || f.intervalJitter.Percentage != 10 || f.concurrent != 8 {
		t.Errorf("flags not applied: %+v", f)
	}
}

// TestDeprecatedFlagsStillWork: the names of the previous release set what the new ones set, are
// hidden from --help, and print a note naming their replacement.
func TestDeprecatedFlagsStillWork(t *testing.T) {
	f, fs, out := parse(t, "--leader-elect=false", "--metrics-bind-address=:9090", "--health-probe-bind-address=:9440")
	if f.leaderElection.Enable || f.metricsAddr != ":9090" || f.healthAddr != ":9440" {
		t.Errorf("old names not applied: leader election %v, metrics %q, health %q", f.leaderElection.Enable, f.metricsAddr, f.healthAddr)
	}
	for old, current := range deprecatedAliases {
		flg := fs.Lookup(old)
		if flg == nil || !flg.Hidden || flg.Deprecated == "" {
			t.Errorf("--%s is not a hidden, deprecated alias: %+v", old, flg)
		}
		if !strings.Contains(out, "Flag --"+old+" has been deprecated, use --"+current) {
			t.Errorf("using --%s printed %q, want a note naming --%s", old, out, current)
		}
	}
	var usage bytes.Buffer
	fs.SetOutput(&usage)
	fs.PrintDefaults()
	for old := range deprecatedAliases {
		if strings.Contains(usage.String(), "--"+old+" ") {
			t.Errorf("--help lists the deprecated --%s", old)
		}
	}
	// The previous release's manifests pass --leader-elect alone.
	if f, _, _ := parse(t, "--enable-leader-election=false", "--leader-elect"); !f.leaderElection.Enable {
		t.Errorf("--leader-elect did not turn leader election on")
	}
}

// TestFeatureGates: --feature-gates is parsed as Flux's controllers parse it: known gates only.
func TestFeatureGates(t *testing.T) {
	f, _, _ := parse(t, "--feature-gates=ObjectLevelWorkloadIdentity=false")
	if err := f.setFeatureGates(); err != nil {
		t.Errorf("a known gate: %v", err)
	}
	f, _, _ = parse(t, "--feature-gates=NoSuchGate=true")
	if err := f.setFeatureGates(); err == nil || !strings.Contains(err.Error(), "NoSuchGate") {
		t.Errorf("an unknown gate: %v, want an error naming it", err)
	}
}
