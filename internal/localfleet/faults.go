package localfleet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/rest"

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
	return f.eachProxied(names, f.proxyHub, (*Member).proxy)
}

// eachProxied calls hub once when names (checked) lists "hub", and member once for each member
// they list, by name or as AllMembers; it stops at the first error.
func (f *Fleet) eachProxied(names []string, hub func() error, member func(*Member) error) error {
	seen := map[string]bool{}
	do := func(name string, fn func() error) error {
		if seen[name] {
			return nil
		}
		seen[name] = true
		return fn()
	}
	for _, name := range names {
		var err error
		switch name {
		case "hub":
			err = do(name, hub)
		case AllMembers:
			for _, m := range f.Members {
				if err = do(m.Name, func() error { return member(m) }); err != nil {
					break
				}
			}
		default:
			m := f.Member(name)
			err = do(name, func() error { return member(m) })
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (f *Fleet) proxyHub() error {
	if f.HubFaults != nil {
		return nil
	}
	p, cfg, err := proxyHub(f.HubConfig)
	if err != nil {
		return err
	}
	f.HubFaults, f.HubProxyConfig = p, cfg
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

// proxyHub starts a proxy in front of the hub admin reaches, and returns it with admin's config
// through it.
func proxyHub(admin *rest.Config) (*faultproxy.Proxy, *rest.Config, error) {
	p, err := faultproxy.New(admin)
	if err != nil {
		return nil, nil, fmt.Errorf("hub: %w", err)
	}
	cfg, err := p.Config(admin)
	if err != nil {
		p.Close()
		return nil, nil, fmt.Errorf("hub: %w", err)
	}
	return p, cfg, nil
}

func (m *Member) proxy() error {
	if m.Faults != nil {
		return nil
	}
	p, kc, err := m.newProxy()
	if err != nil {
		return err
	}
	m.Faults, m.secret = p, kc
	return nil
}

// newProxy starts a proxy in front of m, and returns it with m's kubeconfig through it.
func (m *Member) newProxy() (*faultproxy.Proxy, []byte, error) {
	p, err := faultproxy.New(m.Config)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", m.Name, err)
	}
	kc, err := p.KubeConfig(m.kubeConfig)
	if err != nil {
		p.Close()
		return nil, nil, fmt.Errorf("%s: %w", m.Name, err)
	}
	return p, kc, nil
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

// TenantFaults are the fault proxies of one namespace of a fleet (a tenant, such as one scenario of
// a fleet that many share): proxies of its own in front of the fleet's API servers, which only its
// clients go through. A fault set on them meets that namespace's FleetClusters, Kustomizations and
// controller, and nobody else's, with no API server of its own to start.
type TenantFaults struct {
	// Hub is the proxy in front of the hub, when asked for; nil otherwise.
	Hub *faultproxy.Proxy
	// HubConfig reaches the hub through Hub as the fleet's admin (nil without Hub): the config to
	// give the tenant's controller. The Flux controllers keep reaching the hub directly.
	HubConfig *rest.Config
	// Members are the proxies in front of the members asked for, by name. The tenant's kubeconfig
	// Secret of each points at its proxy.
	Members map[string]*faultproxy.Proxy
}

// Member returns the proxy in front of member name, or nil.
func (t *TenantFaults) Member(name string) *faultproxy.Proxy { return t.Members[name] }

// Close stops every proxy of the tenant.
func (t *TenantFaults) Close() {
	if t.Hub != nil {
		t.Hub.Close()
	}
	for _, p := range t.Members {
		p.Close()
	}
}

// ProxyTenant puts proxies of namespace ns's own in front of the API servers names lists (as
// Options.FaultProxies: "hub", AllMembers, member-N), and writes every member's kubeconfig Secret
// into ns, those of the proxied members through their proxies (WriteMemberSecrets writes the rest
// the same way, directly). Close the result when done. The proxies are goroutines of the caller,
// not processes.
func (f *Fleet) ProxyTenant(ctx context.Context, ns string, names []string) (*TenantFaults, error) {
	if err := f.checkFaultProxies(names); err != nil {
		return nil, err
	}
	tf := &TenantFaults{Members: map[string]*faultproxy.Proxy{}}
	secrets := map[string][]byte{}
	err := f.eachProxied(names, func() (err error) {
		tf.Hub, tf.HubConfig, err = proxyHub(f.HubConfig)
		return err
	}, func(m *Member) error {
		p, kc, err := m.newProxy()
		if err != nil {
			return err
		}
		tf.Members[m.Name], secrets[m.Name] = p, kc
		return nil
	})
	if err == nil {
		err = f.writeMemberSecrets(ctx, ns, secrets)
	}
	if err != nil {
		tf.Close()
		return nil, fmt.Errorf("localfleet: proxies of namespace %s: %w", ns, err)
	}
	return tf, nil
}
