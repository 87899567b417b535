// Command tidegate-controller runs tidegate's FleetRollout and FleetCluster controllers on a hub
// cluster beside Flux's source-controller and kustomize-controller.
//
// config/default deploys it; docs/operations.md describes its flags, RBAC and metrics.
package main

import (
	"context"
	"errors"
	"fmt"
	authutils "github.com/fluxcd/pkg/auth/utils"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/fluxcd/pkg/runtime/logger"
	flag "github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/resource"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"

	"github.com/tidegate/tidegate/controllers"
	"github.com/tidegate/tidegate/evidence/boundedrender"
	"github.com/tidegate/tidegate/internal/attest"
	"github.com/tidegate/tidegate/internal/member"
	"github.com/tidegate/tidegate/verdict/bounded"
)

// podNamespaceEnv holds the pod's namespace (the Deployment sets it from the downward API): the
// default namespace of the leader election Lease.
const podNamespaceEnv = "POD_NAMESPACE"

// inClusterNamespaceFile is where a pod reads its namespace, which leader election defaults to.
const inClusterNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

func main() {
	var (
		metricsAddr     string
		healthAddr      string
		leaderElect     bool
		leaderNamespace string
		leaseDuration   time.Duration
		renewDeadline   time.Duration
		retryPeriod     time.Duration
		concurrent      int
		clusterWorkers  int
		hubQPS          float32
		hubBurst        int
		members         controllers.MemberOptions
		featureGates    string
		fleetNamespaces string
		signingKey      string
		policyMemory    string
		policyBudget    bounded.Budget
		renderMemory    string
		renderBudget    bounded.Budget
		recordsDir      string
		logOptions      logger.Options
	)
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8080",
		"The address the Prometheus metrics endpoint binds to; \"0\" turns it off.")
	flag.StringVar(&healthAddr, "health-probe-bind-address", ":8081",
		"The address the /healthz and /readyz endpoints bind to.")
	flag.BoolVar(&leaderElect, "leader-elect", true,
		"Elect a leader on the Lease "+controllers.LeaderElectionID+", so that only one replica acts at a time; --leader-elect=false only for a single replica run outside a cluster.")
	flag.StringVar(&leaderNamespace, "leader-election-namespace", os.Getenv(podNamespaceEnv),
		"The namespace of the leader election Lease; defaults to $"+podNamespaceEnv+", else the pod's service account namespace.")
	flag.DurationVar(&leaseDuration, "leader-election-lease-duration", 35*time.Second,
		"How long a standby replica waits before it takes over a lease that was not renewed.")
	flag.DurationVar(&renewDeadline, "leader-election-renew-deadline", 30*time.Second,
		"How long the leader tries to renew its lease before it gives up leadership (and exits).")
	flag.DurationVar(&retryPeriod, "leader-election-retry-period", 5*time.Second,
		"How often replicas try to acquire or renew the lease.")
	flag.IntVar(&concurrent, "concurrent", 4, "How many FleetRollouts are reconciled at once.")
	flag.IntVar(&clusterWorkers, "concurrent-clusters", controllers.DefaultClusterConcurrency,
		"How many FleetClusters are probed at once.")
	flag.Float32Var(&hubQPS, "kube-api-qps", controllers.DefaultHubQPS,
		"The maximum queries per second of requests to the hub's API server.")
	flag.IntVar(&hubBurst, "kube-api-burst", controllers.DefaultHubBurst,
		"The maximum burst of requests to the hub's API server.")
	flag.Float32Var(&members.QPS, "member-api-qps", member.DefaultQPS,
		"The maximum queries per second of requests to one member cluster's API server.")
	flag.IntVar(&members.Burst, "member-api-burst", member.DefaultBurst,
		"The maximum burst of requests to one member cluster's API server.")
	flag.DurationVar(&members.Timeout, "member-request-timeout", member.DefaultTimeout,
		"How long one request to a member cluster's API server may take.")
	flag.IntVar(&members.CacheSize, "member-client-cache-size", member.DefaultCacheSize,
		"How many member kubeconfigs, and how many member clients, are kept (least recently used first out).")
	flag.StringVar(&featureGates, "feature-gates", "",
		"Feature gates, as Name=true,Other=false: "+strings.Join(controllers.FeatureGates, ", ")+" (off by default).")
	flag.StringVar(&signingKey, "receipt-signing-key", "",
		"The Secret, in the controller's namespace, whose data key signing.key holds the PEM private key (ECDSA P-256 or Ed25519) receipts and ledger entries are signed with; empty writes them unsigned.")
	flag.StringVar(&fleetNamespaces, "fleet-namespaces", "",
		"Comma-separated namespaces where FleetClusters live: member credentials (Secrets, ConfigMaps) are watched and read only there, "+
			"with the ClusterRole tidegate-member-credentials bound in each (config/default: fleet). Empty: every namespace, the ClusterRole bound cluster-wide (config/cluster-wide).")
	flag.DurationVar(&policyBudget.Time, "policy-time-budget", bounded.DefaultBudget.Time,
		"The longest one load or one gate evaluation of a rollout's own CUE policy may take, in a worker process; past it the gate is Inconclusive (the policy's load: the rollout stalls), naming the budget.")
	flag.StringVar(&policyMemory, "policy-memory-budget", "256Mi",
		"The most memory one load or one gate evaluation of a rollout's own CUE policy may hold, in a worker process (a quantity: 256Mi). Each of --concurrent rollouts may run one worker at once: keep --concurrent times it, plus the manager's own, under the container's limit.")
	flag.DurationVar(&renderBudget.Time, "render-time-budget", boundedrender.DefaultBudget.Time,
		"The longest one render (kustomize build) of a rollout's package may take, in a worker process; past it the gate that needed it is Inconclusive, naming the budget, and fails at the policy's inconclusiveAfter.")
	flag.StringVar(&renderMemory, "render-memory-budget", "256Mi",
		"The most memory one render of a rollout's package may hold, in a worker process, the package's files included (a quantity: 256Mi). Each of --concurrent rollouts may run one worker at once: keep --concurrent times the larger of this and --policy-memory-budget, plus the manager's own, under the container's limit.")
	flag.BoolVar(&members.AllowInsecure, "allow-insecure-member-kubeconfigs", false,
		"Accept member kubeconfigs whose cluster sets insecure-skip-tls-verify or proxy-url; refused by default (the FleetCluster says why).")
	flag.StringVar(&recordsDir, "records-export-dir", "",
		"A directory (a volume of the pod) that each gate receipt pruning deletes is written to first, as <namespace>/<rollout>/<receipt>.json with its evidence; a receipt that cannot be written there is kept. Empty: pruned receipts are not exported.")
	eventsAddr := flag.String("events-addr", "", "The address of notification-controller's events endpoint (http://notification-controller.flux-system.svc.cluster.local./), which every event is posted to as well; empty: events are only recorded in the cluster.")
	logOptions.BindFlags(flag.CommandLine)
	flag.Parse()

	ctrl.SetLogger(logger.NewLogger(logOptions))
	log := ctrl.Log.WithName("setup")
	if err := controllers.SetFeatureGates(featureGates); err != nil {
		log.Error(err, "invalid flag")
		os.Exit(1)
	}
	for _, b := range []struct {
		name   string
		memory string
		budget *bounded.Budget
	}{{"policy", policyMemory, &policyBudget}, {"render", renderMemory, &renderBudget}} {
		q, err := resource.ParseQuantity(b.memory)
		if err != nil || q.Value() < 16<<20 || b.budget.Time < time.Second {
			log.Error(fmt.Errorf("--%s-memory-budget %q and --%s-time-budget %s: give at least 16Mi and 1s (e.g. 256Mi, 10s)", b.name, b.memory, b.name, b.budget.Time), "invalid flag")
			os.Exit(1)
		}
		b.budget.Memory = q.Value()
	}

	for _, ns := range strings.Split(fleetNamespaces, ",") {
		if ns = strings.TrimSpace(ns); ns != "" {
			members.FleetNamespaces = append(members.FleetNamespaces, ns)
		}
	}
	if leaderElect && leaderNamespace == "" {
		if _, err := os.Stat(inClusterNamespaceFile); err != nil {
			log.Error(errors.New("no namespace for the leader election Lease"), "outside a cluster, set --leader-election-namespace (or "+podNamespaceEnv+"), or run a single replica with --leader-elect=false")
			os.Exit(1)
		}
	}
	restConfig := controllers.HubConfig(ctrl.GetConfigOrDie(), controllers.ManagerConfig{QPS: hubQPS, Burst: hubBurst})
	mgr, err := ctrl.NewManager(restConfig, controllers.ManagerOptions(controllers.ManagerConfig{
		MetricsAddr:             metricsAddr,
		HealthAddr:              healthAddr,
		LeaderElection:          leaderElect,
		LeaderElectionNamespace: leaderNamespace,
		LeaseDuration:           leaseDuration,
		RenewDeadline:           renewDeadline,
		RetryPeriod:             retryPeriod,
		FleetNamespaces:         members.FleetNamespaces,
	}))
	if err != nil {
		log.Error(err, "unable to create manager")
		os.Exit(1)
	}
	var signer *attest.Signer
	if signingKey != "" {
		ns := os.Getenv(podNamespaceEnv)
		if ns == "" {
			log.Error(errors.New(podNamespaceEnv+" is not set"), "--receipt-signing-key names a Secret in the controller's namespace: set "+podNamespaceEnv+" (the manifests set it from the pod's namespace)")
			os.Exit(1)
		}
		reader, err := client.New(restConfig, client.Options{Scheme: mgr.GetScheme()})
		if err == nil {
			signer, err = controllers.LoadSigner(context.Background(), reader, ns, signingKey)
		}
		if err != nil {
			log.Error(err, "unable to load the receipt signing key")
			os.Exit(1)
		}
		log.Info("signing receipts and ledger entries", "secret", ns+"/"+signingKey, "keyID", signer.KeyID())
	}
	// Workload identity links the cloud providers' SDKs: only this binary does.
	members.WorkloadIdentity = authutils.GetRESTConfig
	if err := controllers.Setup(mgr, restConfig, controllers.Options{
		MaxConcurrentReconciles: concurrent, ClusterConcurrency: clusterWorkers, Members: members, Signer: signer, PolicyBudget: policyBudget, RenderBudget: renderBudget,
		RecordsExportDir: recordsDir, EventsAddr: *eventsAddr,
	}); err != nil {
		log.Error(err, "unable to set up controllers")
		os.Exit(1)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		log.Error(err, "unable to add health check")
		os.Exit(1)
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		log.Error(err, "unable to add ready check")
		os.Exit(1)
	}
	if err := mgr.AddReadyzCheck("informers", cacheSynced(mgr)); err != nil {
		log.Error(err, "unable to add ready check")
		os.Exit(1)
	}
	log.Info("starting manager", "leaderElection", leaderElect, "leaderElectionNamespace", leaderNamespace, "concurrent", concurrent,
		"concurrentClusters", clusterWorkers, "hubQPS", hubQPS, "hubBurst", hubBurst, "memberQPS", members.QPS, "memberBurst", members.Burst)
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "manager stopped")
		os.Exit(1)
	}
}

// cacheSynced is ready once the manager's informers have synced: before that the controllers would
// act on an empty view of the hub. A standby replica syncs too (its caches run without leadership).
func cacheSynced(mgr ctrl.Manager) healthz.Checker {
	return func(req *http.Request) error {
		ctx, cancel := context.WithTimeout(req.Context(), time.Second)
		defer cancel()
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			return errors.New("the informer caches have not synced yet")
		}
		return nil
	}
}
