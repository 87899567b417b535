package controllers

import (
	"maps"
	"slices"
	"time"

	"github.com/fluxcd/cli-utils/pkg/object"
	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/runtime/leaderelection"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/evidence/availability"
	"github.com/tidegate/tidegate/internal/scheme"
)

// LeaderElectionID names the Lease the controller's replicas elect their leader on. The replicas of
// a shard elect theirs on a Lease of their own (leaderElectionID).
const LeaderElectionID = "tidegate-controller-leader"

// ShardLabel is Flux's sharding label (v1alpha1.ShardLabel).
const ShardLabel = v1alpha1.ShardLabel

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
	// QPS and Burst limit the manager's requests to the hub (HubConfig); zero is DefaultHubQPS and
	// DefaultHubBurst.
	QPS   float32
	Burst int
	// FleetNamespaces, when set, are the only namespaces whose Secrets and ConfigMaps the manager
	// watches (metadata only, for member credentials): the controller's --fleet-namespaces, with
	// tidegate-member-credentials bound in each of them rather than cluster-wide.
	FleetNamespaces []string
	// WatchSelector, when set, limits the FleetRollouts the manager caches, and so reconciles, to
	// those whose labels match it: the controller's --watch-label-selector, one shard of the
	// rollouts (ShardLabel). Nil or empty: every FleetRollout.
	WatchSelector labels.Selector
}

// The hub's request budget. A reconcile of an idle rollout reads its FleetRollout and nothing else
// from the API server; a wave transition writes one Kustomization per cluster: 1,000 switches take
// about 20 s at 50 a second, while kustomize-controller applies about 4 a second.
const (
	DefaultHubQPS   = 50
	DefaultHubBurst = 100
)

// HubConfig is cfg with the hub request limits of c.
func HubConfig(cfg *rest.Config, c ManagerConfig) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = DefaultHubQPS, DefaultHubBurst
	if c.QPS != 0 {
		cfg.QPS = c.QPS
	}
	if c.Burst != 0 {
		cfg.Burst = c.Burst
	}
	return cfg
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
		Cache:  cacheOptions(c.FleetNamespaces, c.WatchSelector),
		// A chart rollout's members, HelmReleases, are cached as Kustomizations are, when the hub
		// serves them: the cache cannot be told of a kind the hub does not have.
		NewCache: func(cfg *rest.Config, o cache.Options) (cache.Cache, error) {
			if served, err := helmReleasesServed(o.Mapper); err != nil {
				return nil, err
			} else if served {
				o.ByObject = maps.Clone(o.ByObject)
				o.ByObject[&helmv2.HelmRelease{}] = o.ByObject[&kustomizev1.Kustomization{}]
			}
			return cache.New(cfg, o)
		},
		Client: client.Options{Cache: &client.CacheOptions{
			// Kubeconfig Secrets are read from the API server, never cached: the manager holds no
			// Secret's data. Only their metadata is cached (NewMemberClients), so that a Secret is
			// read again only when its resourceVersion changed. Workload identity ConfigMaps
			// (spec.kubeConfig.configMapRef) the same way, and the ServiceAccounts they name are
			// read by name: a cache of every ConfigMap or ServiceAccount of the hub would hold far
			// more than tidegate reads.
			// GateReceipts likewise: the cache holds their metadata (FleetRolloutReconciler.Receipts),
			// and a receipt is read whole only when a pass needs it.
			DisableFor: []client.Object{&corev1.Secret{}, &corev1.ConfigMap{}, &corev1.ServiceAccount{}, &v1alpha1.GateReceipt{}},
		}},
		Metrics:                       metricsserver.Options{BindAddress: metrics},
		HealthProbeBindAddress:        c.HealthAddr,
		LeaderElection:                c.LeaderElection,
		LeaderElectionID:              leaderElectionID(c.WatchSelector),
		LeaderElectionNamespace:       c.LeaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 durationOrDefault(c.LeaseDuration),
		RenewDeadline:                 durationOrDefault(c.RenewDeadline),
		RetryPeriod:                   durationOrDefault(c.RetryPeriod),
	}
}

// leaderElectionID is LeaderElectionID for a manager of every FleetRollout, and a Lease of its own
// for a shard, named from its selector as Flux's controllers name theirs: the shards of one hub run
// side by side, each electing its own leader.
func leaderElectionID(selector labels.Selector) string {
	if selector == nil || selector.Empty() {
		return LeaderElectionID
	}
	return leaderelection.GenerateID(LeaderElectionID, selector.String())
}

// durationOrDefault is d, or nil (controller-runtime's default) when d is zero.
func durationOrDefault(d time.Duration) *time.Duration {
	if d == 0 {
		return nil
	}
	return &d
}

// cacheOptions keeps the manager's cache small: managedFields are stripped from every object, only
// the Kustomizations tidegate labelled are cached, not every Kustomization on the hub, and of those
// only what tidegate reads (trimKustomization).
//
// A shard (watch, not empty) caches the FleetRollouts that match it only. It still caches every
// FleetCluster, every tidegate Kustomization and every source: a FleetCluster is shared by the
// rollouts of all shards (one shard probes it: FleetClusterReconciler.Shard), and its
// status.rollouts lists the Kustomizations of every rollout that deploys to it; a tracked source
// is the user's, and rollouts of several shards may track it; and when a rollout moves to another
// shard, the new shard finds the rollout's Kustomizations where the old one left them, where a
// cache limited to its own label would see none and take every cluster for one that lost its
// Kustomization.
func cacheOptions(fleetNamespaces []string, watch labels.Selector) cache.Options {
	managed, err := labels.NewRequirement(v1alpha1.RolloutLabel, selection.Exists, nil)
	if err != nil {
		panic(err)
	}
	opts := cache.Options{
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&kustomizev1.Kustomization{}: {Label: labels.NewSelector().Add(*managed), Transform: trimKustomization},
			// Tracked sources are the user's, pinned ones are labelled: both are needed.
			&sourcev1.GitRepository{}: {},
			&sourcev1.OCIRepository{}: {},
			&sourcev1.HelmChart{}:     {},
		},
	}
	if watch != nil && !watch.Empty() {
		opts.ByObject[&v1alpha1.FleetRollout{}] = cache.ByObject{Label: watch}
	}
	if len(fleetNamespaces) > 0 {
		// Member credentials are watched (their metadata) only where FleetClusters may live.
		namespaces := make(map[string]cache.Config, len(fleetNamespaces))
		for _, ns := range fleetNamespaces {
			namespaces[ns] = cache.Config{}
		}
		opts.ByObject[&corev1.Secret{}] = cache.ByObject{Namespaces: namespaces}
		opts.ByObject[&corev1.ConfigMap{}] = cache.ByObject{Namespaces: namespaces}
	}
	return opts
}

// trimKustomization keeps of a Kustomization what tidegate reads (its metadata, spec, conditions and
// revisions, the latest entry of status.history, by which a member in the middle of a reconcile is
// judged: engine.Observation) and drops the rest before it enters the cache: managedFields; the
// older entries of status.history; and of
// status.inventory every entry but the objects sampled for availability (Deployments,
// StatefulSets and DaemonSets, and the kinds the Kustomization's spec.healthCheckExprs judge:
// availability.Sampled, WorkloadsFromInventory) and any entry whose ID does not parse, which that
// function reports. At 1,000 clusters the inventory is most of a cached
// Kustomization. Nothing writes a cached Kustomization back: tidegate writes them by server-side
// apply of the desired object (applyKustomization). A HelmRelease, a chart rollout's member, is
// trimmed the same way: its latest release only (engine.Observe reads it), and of its inventory the
// objects sampled.
func trimKustomization(obj any) (any, error) {
	switch m := obj.(type) {
	case *kustomizev1.Kustomization:
		m.ManagedFields = nil
		if len(m.Status.History) > 1 {
			m.Status.History = slices.Clip(m.Status.History[:1])
		}
		if inv := m.Status.Inventory; inv != nil {
			inv.Entries = sampledEntries(inv.Entries, func(e kustomizev1.ResourceRef) string { return e.ID }, availability.Sampled(m.Spec.HealthCheckExprs...))
		}
		return m, nil
	case *helmv2.HelmRelease:
		m.ManagedFields = nil
		if len(m.Status.History) > 1 {
			m.Status.History.SortByVersion() // before the object is shared: the newest first
			m.Status.History = slices.Clip(m.Status.History[:1])
		}
		if inv := m.Status.Inventory; inv != nil {
			inv.Entries = sampledEntries(inv.Entries, func(e helmv2.ResourceRef) string { return e.ID }, availability.Sampled(m.Spec.HealthCheckExprs...))
		}
		return m, nil
	}
	return cache.TransformStripManagedFields()(obj)
}

// sampledEntries keeps, of a member's inventory entries, the objects sampled for availability and
// any entry whose ID does not parse, in place.
func sampledEntries[E any](entries []E, id func(E) string, sampled func(schema.GroupKind) bool) []E {
	kept := entries[:0]
	for _, e := range entries {
		m, err := object.ParseObjMetadata(id(e))
		if err != nil || sampled(m.GroupKind) {
			kept = append(kept, e)
		}
	}
	return slices.Clip(kept)
}

// controllerOptions are the options of tidegate's controllers. A nil rateLimiter is
// controller-runtime's default; the controller binary passes Flux's (--min-retry-delay,
// --max-retry-delay).
func controllerOptions(maxConcurrent int, skipNameValidation bool, rateLimiter workqueue.TypedRateLimiter[reconcile.Request]) controller.Options {
	o := controller.Options{MaxConcurrentReconciles: maxConcurrent, RateLimiter: rateLimiter}
	if skipNameValidation {
		o.SkipNameValidation = &skipNameValidation
	}
	return o
}

// inShard tells whether obj is of the shard selector picks; a nil selector picks every object.
func inShard(selector labels.Selector, obj client.Object) bool {
	return selector == nil || selector.Matches(labels.Set(obj.GetLabels()))
}
