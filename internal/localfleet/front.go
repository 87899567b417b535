package localfleet

import (
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/rest"
)

// Front stands in front of one API server of the fleet (Options.Front), such as the tests' fault
// proxy (test/faultproxy): the fleet hands out the ways to reach that API server rewritten to go
// through it, and closes it when it stops. localfleet ships in the sandbox's binary, which must not
// link the tests' fault injection, so the fleet knows a front only by what it does with it.
type Front interface {
	// Config returns cfg rewritten to reach the API server through the front, as the same user.
	Config(cfg *rest.Config) (*rest.Config, error)
	// KubeConfig returns kubeconfig rewritten to reach the API server through the front, as the
	// same user.
	KubeConfig(kubeconfig []byte) ([]byte, error)
	// Close stops the front.
	Close()
}

// startFronts asks front (Options.Front) what stands in front of each API server, once they run
// and before anything is given their addresses: the hub's front is what the Flux controllers and
// the users AddHubUser adds reach the hub through; a member's is what its kubeconfig Secret points
// at.
func (f *Fleet) startFronts(front func(name string, admin *rest.Config) (Front, error)) error {
	if front == nil {
		return nil
	}
	hub, err := front("hub", f.HubConfig)
	if err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	if hub != nil {
		f.hubFront = hub
		kc, err := os.ReadFile(f.HubKubeConfigPath)
		if err != nil {
			return err
		}
		if kc, err = hub.KubeConfig(kc); err != nil {
			return fmt.Errorf("hub: %w", err)
		}
		f.fluxKubeConfig = filepath.Join(f.Dir, "hub-front.kubeconfig")
		if err := os.WriteFile(f.fluxKubeConfig, kc, 0o600); err != nil {
			return err
		}
	}
	for _, m := range f.Members {
		mf, err := front(m.Name, m.Config)
		if err != nil {
			return fmt.Errorf("%s: %w", m.Name, err)
		}
		if mf == nil {
			continue
		}
		m.front = mf
		if m.secret, err = mf.KubeConfig(m.kubeConfig); err != nil {
			return fmt.Errorf("%s: %w", m.Name, err)
		}
	}
	return nil
}

func (f *Fleet) closeFronts() {
	if f.hubFront != nil {
		f.hubFront.Close()
	}
	for _, m := range f.Members {
		if m.front != nil {
			m.front.Close()
		}
	}
}
