package localfleet

import (
	"context"
	"errors"
	"fmt"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/tidegate/tidegate/internal/testbin"
)

// NotificationCRDs gives the CRDs notification-controller is started with, from dir, the directory
// of those its build copied (Alert, Provider, Receiver): the tests patch them as config/notifications
// does, so that Alerts accept FleetRollouts.
type NotificationCRDs func(dir string) ([]*apiextensionsv1.CustomResourceDefinition, error)

// StartNotificationController starts Flux's notification-controller (testbin.NotificationController's
// build) as a process that reaches the hub as the other Flux controllers do, once the CRDs crds gives
// are installed (nil: those of its build as they are), and waits until it is ready. It sets
// EventsAddr, the address of its events endpoint: what tidegate's --events-addr names. Not part of
// every fleet (Options.NotificationController): only the scenarios about notifications need it.
func (f *Fleet) StartNotificationController(ctx context.Context, crds NotificationCRDs) error {
	if f.EventsAddr != "" {
		return errors.New("localfleet: this fleet runs notification-controller already")
	}
	bin, dir, err := testbin.NotificationController()
	if err != nil {
		return err
	}
	install := envtest.CRDInstallOptions{Paths: []string{dir}, ErrorIfPathMissing: true}
	if crds != nil {
		install = envtest.CRDInstallOptions{}
		if install.CRDs, err = crds(dir); err != nil {
			return fmt.Errorf("notification-controller's CRDs: %w", err)
		}
	}
	if _, err := envtest.InstallCRDs(f.HubConfig, install); err != nil {
		return fmt.Errorf("installing notification-controller's CRDs on the hub: %w", err)
	}
	env := []string{"KUBECONFIG=" + f.fluxKubeConfig, "RUNTIME_NAMESPACE=flux-system"}
	var events string
	// ports: metrics, health (as every controller's), the events endpoint and the receivers'.
	args := func(ports []int) []string {
		events = addr(ports[2])
		return []string{
			"--metrics-addr=" + addr(ports[0]), "--health-addr=" + addr(ports[1]),
			"--events-addr=" + events, "--receiverAddr=" + addr(ports[3]),
			"--enable-leader-election=false", "--log-level=debug", "--log-encoding=console",
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := f.startController(ctx, "notification-controller", bin, env, 4, args); err != nil {
		return err
	}
	f.EventsAddr = "http://" + events + "/"
	return nil
}
