package localfleet

import (
	"context"
	"errors"
	"fmt"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/tidegate/tidegate/internal/testbin"
)

// StartHelmController starts Flux's helm-controller (testbin.HelmController's build) as a process
// that reaches the hub as the other Flux controllers do, once its CRD (HelmRelease) is installed on
// the hub, and waits until it is ready. A HelmRelease on the hub whose spec.kubeConfig.secretRef
// names a member's kubeconfig Secret (Member.KubeConfigSecret, key "value") installs its chart on
// that member, from an artifact of the fleet's source-controller (an OCIRepository of a chart
// PushChart pushed, spec.chartRef). Not part of every fleet (Options.HelmController): only the
// tests of Helm charts need it.
func (f *Fleet) StartHelmController(ctx context.Context) error {
	if f.PID("helm-controller") != 0 {
		return errors.New("localfleet: this fleet runs helm-controller already")
	}
	bin, crds, err := testbin.HelmController()
	if err != nil {
		return err
	}
	install := envtest.CRDInstallOptions{Paths: []string{crds}, ErrorIfPathMissing: true}
	if _, err := envtest.InstallCRDs(f.HubConfig, install); err != nil {
		return fmt.Errorf("installing helm-controller's CRDs on the hub: %w", err)
	}
	env := []string{"KUBECONFIG=" + f.fluxKubeConfig, "RUNTIME_NAMESPACE=flux-system"}
	// ports: metrics and health, as every controller's. --requeue-dependency as kustomize-controller's
	// here: a HelmRelease whose chart is not served yet is looked at again in seconds, not 30.
	args := func(ports []int) []string {
		return []string{
			"--metrics-addr=" + addr(ports[0]), "--health-addr=" + addr(ports[1]), "--events-addr=",
			"--enable-leader-election=false", "--log-level=debug", "--log-encoding=console",
			"--concurrent=10", "--requeue-dependency=2s",
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	return f.startController(ctx, "helm-controller", bin, env, 2, args)
}
