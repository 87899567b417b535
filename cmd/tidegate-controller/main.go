// Command tidegate-controller runs tidegate's FleetRollout and FleetCluster controllers on a hub
// cluster beside Flux's source-controller and kustomize-controller.
package main

import (
	flag "github.com/spf13/pflag"
	"os"

	"github.com/fluxcd/pkg/runtime/logger"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/tidegate/tidegate/controllers"
	"github.com/tidegate/tidegate/internal/scheme"
)

const controllerName = "tidegate-controller"

func main() {
	var (
		metricsAddr    string
		healthAddr     string
		leaderElection bool
		concurrent     int
		logOptions     logger.Options
	)
	flag.StringVar(&metricsAddr, "metrics-addr", ":8080", "The address the metrics endpoint binds to.")
	flag.StringVar(&healthAddr, "health-addr", ":9440", "The address the health endpoints bind to.")
	flag.BoolVar(&leaderElection, "enable-leader-election", true, "Elect a leader so only one replica acts at a time.")
	flag.IntVar(&concurrent, "concurrent", 4, "How many FleetRollouts are reconciled at once.")
	logOptions.BindFlags(flag.CommandLine)
	flag.Parse()

	ctrl.SetLogger(logger.NewLogger(logOptions))
	log := ctrl.Log.WithName("setup")

	restConfig := ctrl.GetConfigOrDie()
	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{
		Scheme:                        scheme.New(),
		Cache:                         controllers.CacheOptions(),
		Metrics:                       metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress:        healthAddr,
		LeaderElection:                leaderElection,
		LeaderElectionID:              "tidegate-controller-leader",
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		log.Error(err, "unable to create manager")
		os.Exit(1)
	}
	if err := controllers.Setup(mgr, restConfig, controllers.Options{MaxConcurrentReconciles: concurrent}); err != nil {
		log.Error(err, "unable to set up controllers")
		os.Exit(1)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		log.Error(err, "unable to add health check")
		os.Exit(1)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		log.Error(err, "unable to add ready check")
		os.Exit(1)
	}
	log.Info("starting manager")
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "manager stopped")
		os.Exit(1)
	}
}
