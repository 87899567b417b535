package controllers

import (
	"fmt"
	"sync"

	runtimectrl "github.com/fluxcd/pkg/runtime/controller"
	fluxevents "github.com/fluxcd/pkg/runtime/events"
	"github.com/fluxcd/pkg/runtime/metrics"

	"github.com/tidegate/tidegate/evidence/collector"
	"github.com/tidegate/tidegate/internal/member"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
)

// Options configure the controllers Setup registers.
type Options struct {
	// MaxConcurrentReconciles of the FleetRollout controller.
	MaxConcurrentReconciles int
	// Gates decides the gates; nil means CUEGates, each rollout's CUE policy.
	Gates GateEvaluator
	// TestHook is passed to the FleetRollout reconciler (crash-point tests).
	TestHook func(point string) error
	// SkipNameValidation lets tests start several managers in one process.
	SkipNameValidation bool
}

// Setup registers the FleetRollout and FleetCluster controllers with mgr, with one Flux event
// recorder for both and Flux's metrics. The manager binary and the tests use this same wiring.
func Setup(mgr ctrl.Manager, hubConfig *rest.Config, opts Options) error {
	recorder, err := fluxevents.NewRecorder(ctrl.Log.WithName("events"), "", controllerName, fluxevents.WithManager(mgr))
	if err != nil {
		return fmt.Errorf("creating event recorder: %w", err)
	}
	m := runtimectrl.NewMetrics(mgr, metricsRecorder())
	evidence := &collector.Collector{
		// Kubeconfig Secrets are read uncached: the manager does not list and watch every Secret.
		Members:  &member.Clients{Secrets: mgr.GetAPIReader(), Hub: hubConfig, Scheme: mgr.GetScheme()},
		Sources:  mgr.GetClient(),
		Rollouts: mgr.GetClient(),
	}
	// The collector's background work (sampling soaks, gathering evidence ahead) ends with the manager.
	if err := mgr.Add(evidence); err != nil {
		return fmt.Errorf("adding the evidence collector: %w", err)
	}
	rollouts := &FleetRolloutReconciler{
		Client:        mgr.GetClient(),
		APIReader:     mgr.GetAPIReader(),
		EventRecorder: recorder,
		Metrics:       &m,
		Evidence:      evidence,
		Gates:         opts.Gates,
		TestHook:      opts.TestHook,
	}
	if err := rollouts.SetupWithManager(mgr, FleetRolloutOptions{MaxConcurrentReconciles: opts.MaxConcurrentReconciles, SkipNameValidation: opts.SkipNameValidation}); err != nil {
		return fmt.Errorf("setting up the fleetrollout controller: %w", err)
	}
	clusters := &FleetClusterReconciler{
		Client:        mgr.GetClient(),
		EventRecorder: recorder,
		HubConfig:     hubConfig,

		SkipNameValidation: opts.SkipNameValidation,
	}
	if err := clusters.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the fleetcluster controller: %w", err)
	}
	return nil
}

// metricsRecorder registers Flux's reconcile metrics once per process: the registry is global, and a
// second registration (a second manager in one process, as tests run) would panic.
var metricsRecorder = sync.OnceValue(metrics.MustMakeRecorder)

// controllerName reports events and owns writes.
const controllerName = "tidegate-controller"
