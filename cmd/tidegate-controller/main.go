// Command tidegate-controller runs tidegate's FleetRollout and FleetCluster controllers on a hub
// cluster beside Flux's source-controller and kustomize-controller.
//
// config/default deploys it; docs/operations.md describes its flags, RBAC and metrics.
package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	authutils "github.com/fluxcd/pkg/auth/utils"
	runtimectrl "github.com/fluxcd/pkg/runtime/controller"
	"github.com/fluxcd/pkg/runtime/logger"
	"github.com/fluxcd/pkg/runtime/pprof"
	flag "github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"

	"github.com/tidegate/tidegate/controllers"
	"github.com/tidegate/tidegate/internal/attest"
)

// podNamespaceEnv holds the pod's namespace (the Deployment sets it from the downward API): the
// default namespace of the leader election Lease.
const podNamespaceEnv = "POD_NAMESPACE"

// inClusterNamespaceFile is where a pod reads its namespace, which leader election defaults to.
const inClusterNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

func main() {
	f := bindFlags(flag.CommandLine)
	flag.Parse()

	ctrl.SetLogger(logger.NewLogger(f.log))
	log := ctrl.Log.WithName("setup")
	if err := run(f); err != nil {
		log.Error(err, "unable to run the controller")
		os.Exit(1)
	}
}

// run starts the manager f describes and returns when it stops.
func run(f *flags) error {
	log := ctrl.Log.WithName("setup")
	if err := f.setFeatureGates(); err != nil {
		return err
	}
	if err := f.budgets(); err != nil {
		return err
	}
	if err := controllers.SetIntervalJitter(f.intervalJitter); err != nil {
		return fmt.Errorf("--interval-jitter-percentage: %w", err)
	}
	shard, err := runtimectrl.GetWatchSelector(f.watch)
	if err != nil {
		return fmt.Errorf("--%s: %w", flagWatchLabelSelector, err)
	}
	members := f.members
	for _, ns := range strings.Split(f.fleetNamespaces, ",") {
		if ns = strings.TrimSpace(ns); ns != "" {
			members.FleetNamespaces = append(members.FleetNamespaces, ns)
		}
	}
	if f.leaderElection.Enable && f.leaderNamespace == "" {
		if _, err := os.Stat(inClusterNamespaceFile); err != nil {
			return errors.New("no namespace for the leader election Lease: outside a cluster, set --leader-election-namespace (or " + podNamespaceEnv + "), or run a single replica with --enable-leader-election=false")
		}
	}
	// The hub's requests are limited by --kube-api-qps and --kube-api-burst whether or not the API
	// server has flow control: tidegate's budget is its own (controllers.DefaultHubQPS).
	restConfig := controllers.HubConfig(ctrl.GetConfigOrDie(), controllers.ManagerConfig{QPS: f.client.QPS, Burst: f.client.Burst})
	mgrOpts := controllers.ManagerOptions(controllers.ManagerConfig{
		MetricsAddr:             f.metricsAddr,
		HealthAddr:              f.healthAddr,
		LeaderElection:          f.leaderElection.Enable,
		LeaderElectionNamespace: f.leaderNamespace,
		LeaseDuration:           f.leaderElection.LeaseDuration,
		RenewDeadline:           f.leaderElection.RenewDeadline,
		RetryPeriod:             f.leaderElection.RetryPeriod,
		FleetNamespaces:         members.FleetNamespaces,
		WatchSelector:           shard,
	})
	mgrOpts.LeaderElectionReleaseOnCancel = f.leaderElection.ReleaseOnCancel
	// Profiles are served beside the metrics, as Flux's controllers serve theirs.
	mgrOpts.Metrics.ExtraHandlers = pprof.GetHandlers()
	mgr, err := ctrl.NewManager(restConfig, mgrOpts)
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	var signer *attest.Signer
	if f.signingKey != "" {
		if signer, err = loadSigner(restConfig, mgr, f.signingKey); err != nil {
			return err
		}
	}
	// Workload identity links the cloud providers' SDKs: only this binary does.
	members.WorkloadIdentity = authutils.GetRESTConfig
	if err := controllers.Setup(mgr, restConfig, controllers.Options{
		MaxConcurrentReconciles: f.concurrent, ClusterConcurrency: f.clusterWorkers, Members: members, Signer: signer,
		PolicyBudget: f.policyBudget, RenderBudget: f.renderBudget, RecordsExportDir: f.recordsDir,
		RateLimiter: runtimectrl.GetRateLimiter(f.rateLimiter), Shard: shard, EventsAddr: f.eventsAddr,
	}); err != nil {
		return fmt.Errorf("setting up the controllers: %w", err)
	}
	if err := addChecks(mgr); err != nil {
		return err
	}
	log.Info("starting manager", "leaderElection", f.leaderElection.Enable, "leaderElectionNamespace", f.leaderNamespace, "leaderElectionID", mgrOpts.LeaderElectionID,
		"watchLabelSelector", f.watch.LabelSelector, "concurrent", f.concurrent, "concurrentClusters", f.clusterWorkers,
		"hubQPS", restConfig.QPS, "hubBurst", restConfig.Burst, "memberQPS", members.QPS, "memberBurst", members.Burst)
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		return fmt.Errorf("manager stopped: %w", err)
	}
	return nil
}

// loadSigner reads the receipt signing key from the Secret name in the controller's namespace.
func loadSigner(restConfig *rest.Config, mgr ctrl.Manager, name string) (*attest.Signer, error) {
	ns := os.Getenv(podNamespaceEnv)
	if ns == "" {
		return nil, errors.New("--receipt-signing-key names a Secret in the controller's namespace: set " + podNamespaceEnv + " (the manifests set it from the pod's namespace)")
	}
	reader, err := client.New(restConfig, client.Options{Scheme: mgr.GetScheme()})
	if err != nil {
		return nil, err
	}
	signer, err := controllers.LoadSigner(context.Background(), reader, ns, name)
	if err != nil {
		return nil, fmt.Errorf("loading the receipt signing key: %w", err)
	}
	ctrl.Log.WithName("setup").Info("signing receipts and ledger entries", "secret", ns+"/"+name, "keyID", signer.KeyID())
	return signer, nil
}

// addChecks adds the manager's /healthz and /readyz checks.
func addChecks(mgr ctrl.Manager) error {
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return fmt.Errorf("adding the health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return fmt.Errorf("adding the ready check: %w", err)
	}
	if err := mgr.AddReadyzCheck("informers", cacheSynced(mgr)); err != nil {
		return fmt.Errorf("adding the ready check: %w", err)
	}
	return nil
}

// parseQuantity is the number of bytes of a quantity such as 256Mi.
func parseQuantity(s string) (int64, error) {
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return 0, err
	}
	return q.Value(), nil
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
