package controllers

import (
	"fmt"
	"math/rand"
	"sync"
	"time"

	runtimectrl "github.com/fluxcd/pkg/runtime/controller"
	fluxevents "github.com/fluxcd/pkg/runtime/events"
	"github.com/fluxcd/pkg/runtime/jitter"
	"github.com/fluxcd/pkg/runtime/metrics"

	"github.com/tidegate/tidegate/evidence/boundedrender"
	"github.com/tidegate/tidegate/evidence/collector"
	"github.com/tidegate/tidegate/internal/attest"
	"github.com/tidegate/tidegate/internal/member"
	"github.com/tidegate/tidegate/verdict/bounded"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Options configure the controllers Setup registers.
type Options struct {
	// MaxConcurrentReconciles of the FleetRollout controller.
	MaxConcurrentReconciles int
	// Gates decides the gates; nil means CUEGates, each rollout's CUE policy.
	Gates GateEvaluator
	// TestHook is passed to the FleetRollout reconciler (crash-point tests).
	TestHook func(point string) error
	// ClusterConcurrency is how many FleetClusters are reconciled at once; zero is
	// DefaultClusterConcurrency.
	ClusterConcurrency int
	// Members limits the requests to member clusters.
	Members MemberOptions
	// SkipNameValidation lets tests start several managers in one process.
	SkipNameValidation bool
	// Signer, when set, signs every receipt and ledger entry (--receipt-signing-key); nil writes
	// them unsigned.
	Signer *attest.Signer
	// PolicyBudget bounds each load and evaluation of a rollout's own policy, run in a worker
	// process (--policy-time-budget, --policy-memory-budget); zero fields are bounded.DefaultBudget's.
	PolicyBudget bounded.Budget
	// RenderBudget bounds each render of a rollout's package, run in a worker process
	// (--render-time-budget, --render-memory-budget); zero fields are boundedrender.DefaultBudget's.
	RenderBudget bounded.Budget
	// RecordsExportDir, when set, is where each receipt pruning deletes is written first
	// (--records-export-dir, ReceiptExport).
	RecordsExportDir string
	// RateLimiter spaces the retries of a failing reconcile of either controller (Flux's
	// --min-retry-delay and --max-retry-delay); nil is controller-runtime's default.
	RateLimiter workqueue.TypedRateLimiter[reconcile.Request]
	// Shard is the manager's --watch-label-selector (ManagerConfig.WatchSelector): the FleetRollouts
	// this manager reconciles and the FleetClusters it probes (FleetRolloutReconciler.Shard,
	// FleetClusterReconciler.Shard). Nil: every one.
	Shard labels.Selector
	// EventsAddr, when set, is notification-controller's events endpoint, which every event is posted
	// to as well as recorded (--events-addr, as Flux's controllers name it).
	EventsAddr string
}

// MemberOptions limit what tidegate asks of member clusters; zero values are member's defaults.
type MemberOptions struct {
	// QPS and Burst limit the requests to one member cluster.
	QPS   float32
	Burst int
	// Timeout bounds one request to a member.
	Timeout time.Duration
	// CacheSize bounds the kubeconfigs and member clients kept.
	CacheSize int
	// FleetNamespaces, when set, are the only namespaces whose FleetClusters are reached: a
	// FleetCluster elsewhere is told to be moved or the list extended (--fleet-namespaces).
	FleetNamespaces []string
	// AllowInsecure accepts member kubeconfigs that skip TLS verification or go through a proxy
	// (--allow-insecure-member-kubeconfigs).
	AllowInsecure bool
	// WorkloadIdentity reaches members through workload identity (member.Clients.WorkloadIdentity):
	// the controller's binary sets it to fluxcd/pkg/auth/utils.GetRESTConfig.
	WorkloadIdentity member.RESTConfigFunc
}

// NewMemberClients returns the member clients of a manager: kubeconfig Secrets and workload identity
// ConfigMaps are read from the API server, and only when their resourceVersion, which the manager's
// cache keeps from a metadata-only watch, changed; the manager never holds a Secret's data. Workload
// identity tokens are minted through the manager's client (ConfigMaps are not cached: ManagerOptions).
func NewMemberClients(mgr ctrl.Manager, hubConfig *rest.Config, o MemberOptions) *member.Clients {
	return &member.Clients{
		Secrets: mgr.GetAPIReader(), Versions: mgr.GetCache(), Tokens: mgr.GetClient(), Hub: hubConfig, Scheme: mgr.GetScheme(),
		QPS: o.QPS, Burst: o.Burst, Timeout: o.Timeout, CacheSize: o.CacheSize, Namespaces: o.FleetNamespaces, AllowInsecure: o.AllowInsecure,
		WorkloadIdentity: o.WorkloadIdentity,
	}
}

// Setup registers the FleetRollout and FleetCluster controllers with mgr, with one Flux event
// recorder for both and Flux's metrics. The manager binary and the tests use this same wiring.
func Setup(mgr ctrl.Manager, hubConfig *rest.Config, opts Options) error {
	recorder, err := fluxevents.NewRecorder(mgr.GetLogger().WithName("events"), opts.EventsAddr, controllerName, fluxevents.WithManager(mgr))
	if err != nil {
		return fmt.Errorf("creating event recorder: %w", err)
	}
	m := runtimectrl.NewMetrics(mgr, metricsRecorder())
	members := NewMemberClients(mgr, hubConfig, opts.Members)
	budget := opts.PolicyBudget
	if budget.Time <= 0 {
		budget.Time = bounded.DefaultBudget.Time
	}
	if budget.Memory <= 0 {
		budget.Memory = bounded.DefaultBudget.Memory
	}
	policies := &bounded.Evaluator{Budget: budget}
	renderBudget := opts.RenderBudget
	if renderBudget.Time <= 0 {
		renderBudget.Time = boundedrender.DefaultBudget.Time
	}
	if renderBudget.Memory <= 0 {
		renderBudget.Memory = boundedrender.DefaultBudget.Memory
	}
	evidence := &collector.Collector{
		Members:      members,
		Sources:      mgr.GetClient(),
		Rollouts:     mgr.GetClient(),
		PolicyBudget: policies,
		RenderBudget: &boundedrender.Renderer{Budget: renderBudget},
		Secrets:      mgr.GetAPIReader(),
	}
	gates := opts.Gates
	if gates == nil {
		gates = CUEGates{Budget: policies}
	}
	// The collector's background work (sampling soaks, gathering evidence ahead) ends with the manager.
	if err := mgr.Add(evidence); err != nil {
		return fmt.Errorf("adding the evidence collector: %w", err)
	}
	rollouts := &FleetRolloutReconciler{
		Client:        mgr.GetClient(),
		APIReader:     mgr.GetAPIReader(),
		Receipts:      mgr.GetCache(),
		EventRecorder: recorder,
		Metrics:       &m,
		Evidence:      evidence,
		Gates:         gates,
		TestHook:      opts.TestHook,
		Signer:        opts.Signer,
		Shard:         opts.Shard,
	}
	if opts.RecordsExportDir != "" {
		rollouts.Export = &ReceiptExport{Dir: opts.RecordsExportDir, Reader: mgr.GetAPIReader()}
	}
	if err := rollouts.SetupWithManager(mgr, FleetRolloutOptions{
		MaxConcurrentReconciles: opts.MaxConcurrentReconciles, SkipNameValidation: opts.SkipNameValidation, RateLimiter: opts.RateLimiter,
	}); err != nil {
		return fmt.Errorf("setting up the fleetrollout controller: %w", err)
	}
	clusters := &FleetClusterReconciler{
		Client:        mgr.GetClient(),
		EventRecorder: recorder,
		HubConfig:     hubConfig,
		Members:       members,

		MaxConcurrentReconciles: opts.ClusterConcurrency,
		SkipNameValidation:      opts.SkipNameValidation,
		RateLimiter:             opts.RateLimiter,
		Shard:                   opts.Shard,
	}
	if err := clusters.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the fleetcluster controller: %w", err)
	}
	return nil
}

// SetIntervalJitter spreads the FleetClusters' probe intervals by o's percentage (Flux's
// --interval-jitter-percentage): each probe is due after its spec.interval, plus or minus up to that
// share of it, so that FleetClusters created together, or all reconciled at a start, do not probe
// their members in lockstep. Only the first call of a process counts (jitter.SetGlobalIntervalJitter).
func SetIntervalJitter(o jitter.IntervalOptions) error {
	// The reconciler's workers draw from one generator at once: math/rand's are not safe for that.
	return o.SetGlobalJitter(rand.New(&lockedSource{src: rand.NewSource(time.Now().UnixNano())}))
}

// lockedSource is a rand.Source safe for concurrent use.
type lockedSource struct {
	mu  sync.Mutex
	src rand.Source
}

func (s *lockedSource) Int63() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.src.Int63()
}

func (s *lockedSource) Seed(seed int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.src.Seed(seed)
}

// metricsRecorder registers Flux's reconcile metrics once per process: the registry is global, and a
// second registration (a second manager in one process, as tests run) would panic.
var metricsRecorder = sync.OnceValue(metrics.MustMakeRecorder)

// controllerName reports events and owns writes.
const controllerName = "tidegate-controller"
