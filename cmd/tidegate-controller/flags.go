package main

import (
	"fmt"
	"os"
	"strconv"
	"time"

	runtimeclient "github.com/fluxcd/pkg/runtime/client"
	runtimectrl "github.com/fluxcd/pkg/runtime/controller"
	"github.com/fluxcd/pkg/runtime/features"
	"github.com/fluxcd/pkg/runtime/jitter"
	"github.com/fluxcd/pkg/runtime/leaderelection"
	"github.com/fluxcd/pkg/runtime/logger"
	flag "github.com/spf13/pflag"

	"github.com/tidegate/tidegate/controllers"
	"github.com/tidegate/tidegate/evidence/boundedrender"
	"github.com/tidegate/tidegate/internal/member"
	"github.com/tidegate/tidegate/verdict/bounded"
)

// The flags Flux's controllers name as tidegate's do; bindFlags makes their defaults tidegate's.
const (
	flagEnableLeaderElection = "enable-leader-election"
	flagKubeAPIQPS           = "kube-api-qps"
	flagKubeAPIBurst         = "kube-api-burst"
	flagWatchLabelSelector   = "watch-label-selector"
)

// flags are the controller's command line. The options Flux's controllers share are bound by
// fluxcd/pkg/runtime, under the names kustomize-controller and source-controller give them, so that
// tidegate is run and tuned as they are.
type flags struct {
	metricsAddr     string
	healthAddr      string
	leaderElection  leaderelection.Options
	leaderNamespace string
	concurrent      int
	clusterWorkers  int
	client          runtimeclient.Options
	rateLimiter     runtimectrl.RateLimiterOptions
	watch           runtimectrl.WatchOptions
	intervalJitter  jitter.IntervalOptions
	featureGates    features.FeatureGates
	log             logger.Options
	members         controllers.MemberOptions
	fleetNamespaces string
	signingKey      string
	policyMemory    string
	policyBudget    bounded.Budget
	renderMemory    string
	renderBudget    bounded.Budget
	recordsDir      string
	eventsAddr      string
}

// deprecatedAliases are the flags of earlier releases, named as kubebuilder names them, and the
// Flux flags that replace them. They still work for one release, hidden from --help, and say so
// when used.
var deprecatedAliases = map[string]string{
	"leader-elect":              flagEnableLeaderElection,
	"metrics-bind-address":      "metrics-addr",
	"health-probe-bind-address": "health-addr",
}

// bindFlags binds the controller's flags to fs and returns where they land once fs is parsed.
func bindFlags(fs *flag.FlagSet) *flags {
	f := &flags{}
	fs.StringVar(&f.metricsAddr, "metrics-addr", ":8080",
		"The address the Prometheus metrics endpoint (and /debug/pprof) binds to; \"0\" turns it off.")
	fs.StringVar(&f.healthAddr, "health-addr", ":8081",
		"The address the /healthz and /readyz endpoints bind to.")
	f.leaderElection.BindFlags(fs)
	// Unlike Flux's, tidegate's replicas elect a leader unless told not to: two replicas acting at
	// once would decide the same gates twice.
	setDefault(fs, flagEnableLeaderElection, "true")
	fs.Lookup(flagEnableLeaderElection).Usage = "Elect a leader on the Lease " + controllers.LeaderElectionID +
		" (a shard: a Lease of its own), so that only one replica acts at a time; --enable-leader-election=false only for a single replica run outside a cluster."
	fs.StringVar(&f.leaderNamespace, "leader-election-namespace", os.Getenv(podNamespaceEnv),
		"The namespace of the leader election Lease; defaults to $"+podNamespaceEnv+", else the pod's service account namespace.")
	fs.IntVar(&f.concurrent, "concurrent", 4, "How many FleetRollouts are reconciled at once.")
	fs.IntVar(&f.clusterWorkers, "concurrent-clusters", controllers.DefaultClusterConcurrency,
		"How many FleetClusters are probed at once.")
	f.client.BindFlags(fs)
	// The hub's request budget is tidegate's (controllers.DefaultHubQPS): Flux's burst is larger.
	setDefault(fs, flagKubeAPIQPS, strconv.Itoa(controllers.DefaultHubQPS))
	setDefault(fs, flagKubeAPIBurst, strconv.Itoa(controllers.DefaultHubBurst))
	f.rateLimiter.BindFlags(fs)
	bindWatchLabelSelector(fs, &f.watch)
	f.intervalJitter.BindFlags(fs)
	f.featureGates.BindFlags(fs)
	f.log.BindFlags(fs)
	bindMemberFlags(fs, f)
	for old, current := range deprecatedAliases {
		alias := *fs.Lookup(current)
		alias.Name, alias.Shorthand = old, ""
		fs.AddFlag(&alias)
		_ = fs.MarkDeprecated(old, "use --"+current+" instead; --"+old+" will be removed in the next release")
		_ = fs.MarkHidden(old)
	}
	return f
}

// bindWatchLabelSelector binds Flux's --watch-label-selector, the shard of FleetRollouts this
// controller reconciles. Of WatchOptions' other flags, --watch-all-namespaces and
// --watch-configs-label-selector, tidegate has no use: --fleet-namespaces scopes what it reads of
// member credentials, and it watches no ConfigMap or Secret for changes of their data.
func bindWatchLabelSelector(fs *flag.FlagSet, o *runtimectrl.WatchOptions) {
	all := flag.NewFlagSet("watch", flag.ContinueOnError)
	o.BindFlags(all)
	selector := all.Lookup(flagWatchLabelSelector)
	selector.Usage = "Reconcile only the FleetRollouts whose labels match, e.g. '" + controllers.ShardLabel + "=shard1', and probe only such FleetClusters (docs/operations.md, Sharding)."
	fs.AddFlag(selector)
}

// bindMemberFlags binds the flags of tidegate's own: members, policies, renders and receipts.
func bindMemberFlags(fs *flag.FlagSet, f *flags) {
	fs.Float32Var(&f.members.QPS, "member-api-qps", member.DefaultQPS,
		"The maximum queries per second of requests to one member cluster's API server.")
	fs.IntVar(&f.members.Burst, "member-api-burst", member.DefaultBurst,
		"The maximum burst of requests to one member cluster's API server.")
	fs.DurationVar(&f.members.Timeout, "member-request-timeout", member.DefaultTimeout,
		"How long one request to a member cluster's API server may take.")
	fs.IntVar(&f.members.CacheSize, "member-client-cache-size", member.DefaultCacheSize,
		"How many member kubeconfigs, and how many member clients, are kept (least recently used first out).")
	fs.StringVar(&f.signingKey, "receipt-signing-key", "",
		"The Secret, in the controller's namespace, whose data key signing.key holds the PEM private key (ECDSA P-256 or Ed25519) receipts and ledger entries are signed with; empty writes them unsigned.")
	fs.StringVar(&f.fleetNamespaces, "fleet-namespaces", "",
		"Comma-separated namespaces where FleetClusters live: member credentials (Secrets, ConfigMaps) are watched and read only there, "+
			"with the ClusterRole tidegate-member-credentials bound in each (config/default: fleet). Empty: every namespace, the ClusterRole bound cluster-wide (config/cluster-wide).")
	fs.DurationVar(&f.policyBudget.Time, "policy-time-budget", bounded.DefaultBudget.Time,
		"The longest one load or one gate evaluation of a rollout's own CUE policy may take, in a worker process; past it the gate is Inconclusive (the policy's load: the rollout stalls), naming the budget.")
	fs.StringVar(&f.policyMemory, "policy-memory-budget", "256Mi",
		"The most memory one load or one gate evaluation of a rollout's own CUE policy may hold, in a worker process (a quantity: 256Mi). Each of --concurrent rollouts may run one worker at once: keep --concurrent times it, plus the manager's own, under the container's limit.")
	fs.DurationVar(&f.renderBudget.Time, "render-time-budget", boundedrender.DefaultBudget.Time,
		"The longest one render (kustomize build) of a rollout's package may take, in a worker process; past it the gate that needed it is Inconclusive, naming the budget, and fails at the policy's inconclusiveAfter.")
	fs.StringVar(&f.renderMemory, "render-memory-budget", "256Mi",
		"The most memory one render of a rollout's package may hold, in a worker process, the package's files included (a quantity: 256Mi). Each of --concurrent rollouts may run one worker at once: keep --concurrent times the larger of this and --policy-memory-budget, plus the manager's own, under the container's limit.")
	fs.BoolVar(&f.members.AllowInsecure, "allow-insecure-member-kubeconfigs", false,
		"Accept member kubeconfigs whose cluster sets insecure-skip-tls-verify or proxy-url; refused by default (the FleetCluster says why).")
	fs.StringVar(&f.eventsAddr, "events-addr", "",
		"The address of notification-controller's events endpoint (http://notification-controller.flux-system.svc.cluster.local./), which every event is posted to as well; empty: events are only recorded in the cluster.")
	fs.StringVar(&f.recordsDir, "records-export-dir", "",
		"A directory (a volume of the pod) that each gate receipt pruning deletes is written to first, as <namespace>/<rollout>/<receipt>.json with its evidence; a receipt that cannot be written there is kept. Empty: pruned receipts are not exported.")
}

// setDefault gives the flag name of fs the default value, before fs is parsed.
func setDefault(fs *flag.FlagSet, name, value string) {
	f := fs.Lookup(name)
	if err := f.Value.Set(value); err != nil {
		panic(fmt.Sprintf("default of --%s: %v", name, err))
	}
	f.DefValue = value
}

// setFeatureGates applies --feature-gates, parsed as Flux's controllers parse it: a gate tidegate
// does not know is an error, and each known gate takes the value given, else its default (off).
func (f *flags) setFeatureGates() error {
	supported := make(map[string]bool, len(controllers.FeatureGates))
	for _, name := range controllers.FeatureGates {
		supported[name] = false
	}
	if err := f.featureGates.SupportedFeatures(supported); err != nil {
		return fmt.Errorf("--feature-gates: %w (known: %v)", err, controllers.FeatureGates)
	}
	for _, name := range controllers.FeatureGates {
		on, err := features.Enabled(name)
		if err != nil {
			return err
		}
		if err := controllers.SetFeatureGates(name + "=" + strconv.FormatBool(on)); err != nil {
			return err
		}
	}
	return nil
}

// budgets checks and completes the policy and render budgets: at least 16Mi and 1s each.
func (f *flags) budgets() error {
	for _, b := range []struct {
		name   string
		memory string
		budget *bounded.Budget
	}{{"policy", f.policyMemory, &f.policyBudget}, {"render", f.renderMemory, &f.renderBudget}} {
		q, err := parseQuantity(b.memory)
		if err != nil || q < 16<<20 || b.budget.Time < time.Second {
			return fmt.Errorf("--%s-memory-budget %q and --%s-time-budget %s: give at least 16Mi and 1s (e.g. 256Mi, 10s)", b.name, b.memory, b.name, b.budget.Time)
		}
		b.budget.Memory = q
	}
	return nil
}
