package localfleet

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/tidegate/tidegate/internal/faultproxy"
)

// checkFaultProxies refuses names in Options.FaultProxies that are no API server of the fleet.
func (f *Fleet) checkFaultProxies(names []string) error {
	for _, name := range names {
		if name != "hub" && name != AllMembers && f.Member(name) == nil {
			return fmt.Errorf("localfleet: Options.FaultProxies names %q, which is not an API server of this fleet: use %q, %q or member-1 … member-%d",
				name, "hub", AllMembers, len(f.Members))
		}
	}
	return nil
}

// startFaultProxies puts a fault proxy in front of each API server names lists (checked), once the
// API servers run and before anything is given their addresses.
func (f *Fleet) startFaultProxies(names []string) error {
	for _, name := range names {
		switch name {
		case "hub":
			if err := f.proxyHub(); err != nil {
				return err
			}
		case AllMembers:
			for _, m := range f.Members {
				if err := m.proxy(); err != nil {
					return err
				}
			}
		default:
			if err := f.Member(name).proxy(); err != nil {
				return err
			}
		}
	}
	return nil
}

func (f *Fleet) proxyHub() error {
	if f.HubFaults != nil {
		return nil
	}
	p, err := faultproxy.New(f.HubConfig)
	if err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	f.HubFaults = p
	if f.HubProxyConfig, err = p.Config(f.HubConfig); err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	kc, err := os.ReadFile(f.HubKubeConfigPath)
	if err != nil {
		return err
	}
	if kc, err = p.KubeConfig(kc); err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	f.fluxKubeConfig = filepath.Join(f.Dir, "hub-proxy.kubeconfig")
	return os.WriteFile(f.fluxKubeConfig, kc, 0o600)
}

func (m *Member) proxy() error {
	if m.Faults != nil {
		return nil
	}
	p, err := faultproxy.New(m.Config)
	if err != nil {
		return fmt.Errorf("%s: %w", m.Name, err)
	}
	m.Faults = p
	if m.secret, err = p.KubeConfig(m.kubeConfig); err != nil {
		return fmt.Errorf("%s: %w", m.Name, err)
	}
	return nil
}

func (f *Fleet) closeFaultProxies() {
	if f.HubFaults != nil {
		f.HubFaults.Close()
	}
	for _, m := range f.Members {
		if m.Faults != nil {
			m.Faults.Close()
		}
	}
}
