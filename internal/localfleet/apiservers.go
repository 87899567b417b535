package localfleet

import (
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/tidegate/tidegate/internal/testbin"
)

// startEnv starts the API server and etcd of name with crds into *env. When one of them could not
// listen because its port was taken meanwhile (by a process that does not reserve ports as envtest
// does), it starts them again on other ports.
func (f *Fleet) startEnv(env **envtest.Environment, name string, crds testbin.CRDs) (*rest.Config, error) {
	var err error
	for attempt := 1; ; attempt++ {
		if *env, err = f.newEnv(name, crds); err != nil {
			return nil, err
		}
		cfg, err := (*env).Start()
		if err == nil {
			return cfg, nil
		}
		logs := []string{filepath.Join(f.logDir(), name+"-kube-apiserver.log"), filepath.Join(f.logDir(), name+"-etcd.log")}
		if attempt == 3 || (!addressInUse(logs[0]) && !addressInUse(logs[1])) {
			return nil, fmt.Errorf("starting %s API server: %w (logs in %s)", name, err, f.logDir())
		}
		_ = (*env).Stop()
		for _, l := range logs {
			_ = os.Rename(l, fmt.Sprintf("%s.%d", l, attempt))
		}
		_ = os.RemoveAll(filepath.Join(f.Dir, name))
	}
}

func (f *Fleet) newEnv(name string, crds testbin.CRDs) (*envtest.Environment, error) {
	env, err := testbin.NewEnvironment(f.testbinDir, crds)
	if err != nil {
		return nil, err
	}
	env.Scheme = f.Scheme
	apiLog := f.openLog(name + "-kube-apiserver.log")
	etcdLog := f.openLog(name + "-etcd.log")
	// Data and certificate directories live under the fleet's directory, so the reaper can find every
	// process of this fleet by its command line.
	dataDir, certDir := filepath.Join(f.Dir, name, "etcd"), filepath.Join(f.Dir, name, "certs")
	_ = os.MkdirAll(dataDir, 0o700)
	_ = os.MkdirAll(certDir, 0o700)
	// The start timeout is testbin.NewEnvironment's (ControlPlaneStartTimeout): envtest sets it on
	// both processes when it starts them.
	env.ControlPlane.APIServer = &envtest.APIServer{Out: apiLog, Err: apiLog, CertDir: certDir}
	env.ControlPlane.Etcd = &envtest.Etcd{Out: etcdLog, Err: etcdLog, DataDir: dataDir}
	switch {
	case f.trustHub && name == "hub":
		// The issuer's discovery document names its keys at the advertised address, by default the
		// machine's, where the hub does not listen. A loopback address cannot be the kubernetes
		// Service's endpoint, which nothing on a test hub uses.
		env.ControlPlane.APIServer.Configure().Set("advertise-address", "127.0.0.1").Set("endpoint-reconciler-type", "none")
	case f.trustHub:
		path, err := f.writeMemberAuthentication(name)
		if err != nil {
			return nil, err
		}
		env.ControlPlane.APIServer.Configure().Set("authentication-config", path)
	}
	if f.apiServerArgs != nil {
		f.apiServerArgs(name, env.ControlPlane.APIServer.Configure())
	}
	return env, nil
}

// startHub starts the hub's API server and, beside it, its garbage collector (gc.go).
func (f *Fleet) startHub(kubeControllerManager string) error {
	if _, err := f.startEnv(&f.hub, "hub", testbin.TidegateCRDs|testbin.FluxCRDs); err != nil {
		return err
	}
	user, err := f.hub.AddUser(envtest.User{Name: "fleet-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fmt.Errorf("adding hub admin user: %w", err)
	}
	f.HubConfig = user.Config()
	kc, err := user.KubeConfig()
	if err != nil {
		return err
	}
	f.HubKubeConfigPath = filepath.Join(f.Dir, "hub.kubeconfig")
	if err := os.WriteFile(f.HubKubeConfigPath, kc, 0o600); err != nil {
		return err
	}
	f.fluxKubeConfig = f.HubKubeConfigPath
	if f.Hub, err = client.New(unthrottled(f.HubConfig), client.Options{Scheme: f.Scheme}); err != nil {
		return err
	}
	return f.startGarbageCollector(kubeControllerManager)
}

func (f *Fleet) startMember(m *Member) error {
	if _, err := f.startEnv(&m.env, m.Name, 0); err != nil {
		return err
	}
	user, err := m.env.AddUser(envtest.User{Name: "fleet-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fmt.Errorf("adding %s admin user: %w", m.Name, err)
	}
	m.Config = user.Config()
	if m.kubeConfig, err = user.KubeConfig(); err != nil {
		return err
	}
	m.secret = m.kubeConfig
	m.Client, err = client.New(unthrottled(m.Config), client.Options{Scheme: f.Scheme})
	return err
}

// unthrottled is cfg without client-go's client-side rate limit (5 requests a second by default):
// Hub and Member.Client serve every scenario of a test package at once, and under that limit a
// scenario's read waited seconds behind the others' and lost races with the controller it was
// watching (a hold set after the wave it was to stop had switched). The API servers' own priority
// and fairness still bound them.
func unthrottled(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.QPS = -1
	return c
}

// AddHubUser adds a user of the hub in groups and returns a REST config and a kubeconfig for it: a
// process of its own identity, told apart from the others in the hub's audit log. With a front
// before the hub (Options.Front) both reach the hub through it, as that same user.
func (f *Fleet) AddHubUser(name string, groups []string) (*rest.Config, []byte, error) {
	user, err := f.hub.AddUser(envtest.User{Name: name, Groups: groups}, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("adding hub user %s: %w", name, err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		return nil, nil, err
	}
	if f.hubFront == nil {
		return user.Config(), kc, nil
	}
	cfg, err := f.hubFront.Config(user.Config())
	if err != nil {
		return nil, nil, err
	}
	if kc, err = f.hubFront.KubeConfig(kc); err != nil {
		return nil, nil, err
	}
	return cfg, kc, nil
}
