package faultproxy

import (
	"context"
	"fmt"

	"k8s.io/client-go/rest"

	"github.com/tidegate/tidegate/internal/localfleet"
)

// AllMembers, among the names of API servers to proxy, stands for every member of the fleet.
const AllMembers = "members"

// Proxies are fault proxies in front of a fleet's API servers: those StartFleet put there from the
// start, or those of one namespace (a tenant, ProxyTenant).
type Proxies struct {
	// Hub is the proxy in front of the hub, when asked for; nil otherwise.
	Hub *Proxy
	// HubConfig reaches the hub through Hub as the fleet's admin (nil without Hub): the config to
	// give the controller under test.
	HubConfig *rest.Config
	// Members are the proxies in front of the members asked for, by name. The kubeconfig Secret of
	// each (the fleet's, or the tenant's) points at its proxy.
	Members map[string]*Proxy
}

// Member returns the proxy in front of member name, or nil.
func (ps *Proxies) Member(name string) *Proxy { return ps.Members[name] }

// Close stops every proxy.
func (ps *Proxies) Close() {
	if ps.Hub != nil {
		ps.Hub.Close()
	}
	for _, p := range ps.Members {
		p.Close()
	}
}

// add starts a proxy in front of the API server called name, which admin reaches, and keeps it.
func (ps *Proxies) add(name string, admin *rest.Config) (*Proxy, error) {
	p, err := New(admin)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if name != "hub" {
		ps.Members[name] = p
		return p, nil
	}
	if ps.HubConfig, err = p.Config(admin); err != nil {
		p.Close()
		return nil, fmt.Errorf("hub: %w", err)
	}
	ps.Hub = p
	return p, nil
}

// StartFleet starts a fleet for t as localfleet.StartForTest does, with a fault proxy in front of
// each API server names lists ("hub", AllMembers, member-N) from the start (localfleet's
// Options.Front): a proxied member's kubeconfig Secret, which its FleetCluster and Flux's
// Kustomizations use, points at its proxy, and the Flux controllers reach a proxied hub through
// its proxy. The fleet's own clients (Member.Client, Hub) stay direct. The fleet closes the
// proxies when it stops.
func StartFleet(t localfleet.TB, opts localfleet.Options, names []string) (*localfleet.Fleet, *Proxies) {
	t.Helper()
	if err := checkNames(names, opts.Members); err != nil {
		t.Fatalf("%v", err)
	}
	ps := &Proxies{Members: map[string]*Proxy{}}
	opts.Front = func(name string, admin *rest.Config) (localfleet.Front, error) {
		if !wanted(names, name) {
			return nil, nil
		}
		p, err := ps.add(name, admin)
		if err != nil {
			return nil, err
		}
		return p, nil
	}
	return localfleet.StartForTest(t, opts), ps
}

// checkNames refuses names that are no API server of a fleet of members members.
func checkNames(names []string, members int) error {
	valid := map[string]bool{"hub": true, AllMembers: true}
	for i := 1; i <= members; i++ {
		valid[fmt.Sprintf("member-%d", i)] = true
	}
	for _, name := range names {
		if !valid[name] {
			return fmt.Errorf("faultproxy: %q is not an API server of this fleet: use %q, %q or member-1 … member-%d",
				name, "hub", AllMembers, members)
		}
	}
	return nil
}

// wanted tells whether names asks for a proxy in front of the API server called name.
func wanted(names []string, name string) bool {
	for _, n := range names {
		if n == name || (n == AllMembers && name != "hub") {
			return true
		}
	}
	return false
}

// ProxyTenant puts proxies of namespace ns's own in front of the API servers of f that names lists
// ("hub", AllMembers, member-N), and writes every member's kubeconfig Secret into ns, those of the
// proxied members through their proxies (the others as the fleet's WriteMemberSecrets writes
// them). A fault set on them meets that namespace's FleetClusters, Kustomizations and controller,
// and nobody else's, with no API server of its own to start; the Flux controllers keep reaching the
// hub directly. Close the result when done. The proxies are goroutines of the caller, not
// processes.
func ProxyTenant(ctx context.Context, f *localfleet.Fleet, ns string, names []string) (*Proxies, error) {
	if err := checkNames(names, len(f.Members)); err != nil {
		return nil, err
	}
	ps := &Proxies{Members: map[string]*Proxy{}}
	secrets := map[string][]byte{}
	err := ps.startTenant(f, names, secrets)
	if err == nil {
		err = f.WriteMemberSecretsThrough(ctx, ns, secrets)
	}
	if err != nil {
		ps.Close()
		return nil, fmt.Errorf("faultproxy: proxies of namespace %s: %w", ns, err)
	}
	return ps, nil
}

// startTenant starts proxies in front of the API servers of f that names lists, and puts in
// secrets each proxied member's kubeconfig through its proxy.
func (ps *Proxies) startTenant(f *localfleet.Fleet, names []string, secrets map[string][]byte) error {
	if wanted(names, "hub") {
		if _, err := ps.add("hub", f.HubConfig); err != nil {
			return err
		}
	}
	for _, m := range f.Members {
		if !wanted(names, m.Name) {
			continue
		}
		p, err := ps.add(m.Name, m.Config)
		if err != nil {
			return err
		}
		if secrets[m.Name], err = p.KubeConfig(m.KubeConfig()); err != nil {
			return fmt.Errorf("%s: %w", m.Name, err)
		}
	}
	return nil
}
