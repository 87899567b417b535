package controllers

import (
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/internal/scheme"
)

// LeaderElectionID names the Lease the controller's replicas elect their leader on.
const LeaderElectionID = "tidegate-controller-leader"

// ManagerConfig is what differs between the managers that run tidegate's controllers: the
// controller binary's, the sandbox's and the end-to-end tests'. The zero value is a manager for a
// process of its own: no endpoints, no leader election.
type ManagerConfig struct {
	// Logger is the manager's logger; the zero value is controller-runtime's (ctrl.SetLogger).
	Logger logr.Logger
	// MetricsAddr is the address the Prometheus metrics endpoint binds to; empty or "0" turns it off.
	MetricsAddr string
	// HealthAddr is the address the /healthz and /readyz endpoints bind to; empty turns them off.
	HealthAddr string
	// LeaderElection makes replicas elect a leader on the Lease LeaderElectionID, so that only one acts.
	LeaderElection bool
	// LeaderElectionNamespace is the Lease's namespace; empty is the service account's.
	LeaderElectionNamespace string
	// LeaseDuration, RenewDeadline and RetryPeriod time the leader election; zero is
	// controller-runtime's default.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// ManagerOptions returns the options of a manager that runs tidegate's controllers. Every manager
// is built from them, so that what the tests and the sandbox run is cached and read as the
// controller binary does.
func ManagerOptions(c ManagerConfig) ctrl.Options {
	metrics := c.MetricsAddr
	if metrics == "" {
		metrics = "0" // controller-runtime would bind :8080
	}
	return ctrl.Options{
		Scheme: scheme.New(),
		Logger: c.Logger,
		Cache:  cacheOptions(),
		Client: client.Options{Cache: &client.CacheOptions{
			// Kubeconfig Secrets are read from the API server, never cached: a cached read would make
			// the manager list and watch every Secret of the hub, and need the RBAC to do so. The
			// controller may only get Secrets (config/rbac).
			DisableFor: []client.Object{&corev1.Secret{}},
		}},
		Metrics:                       metricsserver.Options{BindAddress: metrics},
		HealthProbeBindAddress:        c.HealthAddr,
		LeaderElection:                c.LeaderElection,
		LeaderElectionID:              LeaderElectionID,
		LeaderElectionNamespace:       c.LeaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 durationOrDefault(c.LeaseDuration),
		RenewDeadline:                 durationOrDefault(c.RenewDeadline),
		RetryPeriod:                   durationOrDefault(c.RetryPeriod),
	}
}

// durationOrDefault is d, or nil (controller-runtime's default) when d is zero.
func durationOrDefault(d time.Duration) *time.Duration {
	if d == 0 {
		return nil
	}
	return &d
}

// cacheOptions keeps the manager's cache small: managedFields are stripped from every object, and
// only the Kustomizations tidegate labelled are cached, not every Kustomization on the hub.
func cacheOptions() cache.Options {
	managed, err := labels.NewRequirement(v1alpha1.RolloutLabel, selection.Exists, nil)
	if err != nil {
		panic(err)
	}
	return cache.Options{
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&kustomizev1.Kustomization{}: {Label: labels.NewSelector().Add(*managed)},
			// Tracked sources are the user's, pinned ones are labelled: both are needed.
			&sourcev1.GitRepository{}: {},
			&sourcev1.OCIRepository{}: {},
		},
	}
}

func controllerOptions(maxConcurrent int, skipNameValidation bool) controller.Options {
	o := controller.Options{MaxConcurrentReconciles: maxConcurrent}
	if skipNameValidation {
		o.SkipNameValidation = &skipNameValidation
	}
	return o
}
