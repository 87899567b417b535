package e2e

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/controllers"
	"github.com/tidegate/tidegate/internal/localfleet"
	"github.com/tidegate/tidegate/internal/simulator"
	"github.com/tidegate/tidegate/test/faultproxy"
)

// controllerHandle is a running tidegate manager that a test can stop and replace, as a crash and a
// restart of the controller would.
type controllerHandle struct {
	cancel context.CancelFunc
	// done is closed when the manager has stopped, with err what it returned.
	done chan struct{}
	err  error
	// elected is closed once the manager leads (at once without leader election).
	elected <-chan struct{}
}

func (h *controllerHandle) Stop(t *testing.T) {
	t.Helper()
	h.cancel()
	select {
	case <-h.done:
		if h.err != nil && !errors.Is(h.err, context.Canceled) {
			t.Errorf("tidegate manager stopped with error: %v", h.err)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("tidegate manager did not stop within 30s")
	}
}

// startTidegate runs tidegate's controllers in-process against the fleet's hub, wired as the manager
// binary wires them. Each manager logs to a file of its scenario's (tidegate-controller.log on a
// fleet of its own, tidegate-controller-<ns>.log on the shared one); the process-wide logger
// discards (TestMain).
func startTidegate(t *testing.T, s *fleetSetup, opts controllers.Options) *controllerHandle {
	t.Helper()
	return startTidegateWith(t, s, s.f.HubConfig, controllers.ManagerConfig{}, opts)
}

// startTidegateOn is startTidegate with the controller reaching the hub through cfg, such as the
// hub's fault proxy (s.proxies.HubConfig).
func startTidegateOn(t *testing.T, s *fleetSetup, cfg *rest.Config, opts controllers.Options) *controllerHandle {
	t.Helper()
	return startTidegateWith(t, s, cfg, controllers.ManagerConfig{}, opts)
}

// startTidegateWith is startTidegate reaching the hub through hub, with a manager configured by cfg
// (its Logger is set here).
func startTidegateWith(t *testing.T, s *fleetSetup, hub *rest.Config, cfg controllers.ManagerConfig, opts controllers.Options) *controllerHandle {
	t.Helper()
	logName := "tidegate-controller.log"
	if s.shared {
		logName = "tidegate-controller-" + s.ns + ".log"
	}
	logger := zap.New(zap.UseDevMode(true), zap.WriteTo(s.f.OpenLog(logName)))
	cfg.Logger = logger
	mgrOpts := controllers.ManagerOptions(cfg)
	if s.shared {
		// On the shared fleet a scenario's manager sees its own namespace only, as a controller
		// installed for one tenant would: the other scenarios' rollouts are not its business.
		mgrOpts.Cache.DefaultNamespaces = map[string]cache.Config{s.ns: {}}
	}
	mgr, err := ctrl.NewManager(hub, mgrOpts)
	if err != nil {
		t.Fatal(err)
	}
	opts.SkipNameValidation = true // every test starts its own manager in this one process
	if err := controllers.Setup(mgr, hub, opts); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &controllerHandle{cancel: cancel, done: make(chan struct{}), elected: mgr.Elected()}
	go func() { h.err = mgr.Start(ctx); close(h.done) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-h.done:
		case <-time.After(30 * time.Second):
		}
	})
	return h
}

// fleetSetup is a scenario's part of a fleet: FleetClusters for its members in its namespace, and a
// tracked GitRepository "fleet" in the same namespace.
type fleetSetup struct {
	f    *localfleet.Fleet
	repo *localfleet.GitRepo
	// faults sets the simulator's faults on the scenario's own workloads.
	faults *faults
	// ns is the scenario's namespace: on the hub, where its objects live, and on the members, where
	// its package is applied (every rollout's template sets it as targetNamespace).
	ns string
	// members are the members the scenario has FleetClusters for: the first N of the fleet's.
	members []*localfleet.Member
	// shared says the fleet is the shared one (shared_test.go): the scenario's manager caches its
	// namespace only.
	shared bool
	// proxies are the scenario's own fault proxies in front of the shared fleet's API servers
	// (newFleetSetupProxied); nil without.
	proxies *faultproxy.Proxies
}

// newFleetSetup sets a scenario up on the shared fleet (shared_test.go) with members FleetClusters
// (at most sharedMembers) and a Git repository of its own holding files.
func newFleetSetup(t *testing.T, members int, files map[string]string) (*fleetSetup, string) {
	t.Helper()
	return newFleetSetupProxied(t, members, files, nil)
}

// newFleetSetupProxied is newFleetSetup with fault proxies of the scenario's own in front of the
// shared fleet's API servers that proxies names (faultproxy.ProxyTenant: "hub", member-N or
// faultproxy.AllMembers): its kubeconfig Secrets of those members point at them (s.proxies.Member),
// and a controller it starts with startTidegateThroughHubProxy reaches the hub through s.proxies.Hub.
// A fault set on them meets the scenario's FleetClusters, Kustomizations and controller alone.
func newFleetSetupProxied(t *testing.T, members int, files map[string]string, proxies []string) (*fleetSetup, string) {
	t.Helper()
	if members > sharedMembers {
		t.Fatalf("the shared fleet has %d members, %d asked for", sharedMembers, members)
	}
	f, sim := sharedFleet(t)
	ns := testNamespace(t)
	s := &fleetSetup{f: f, ns: ns, members: f.Members[:members], shared: true, faults: &faults{sim: sim, ns: ns}}
	if len(proxies) > 0 {
		tf, err := faultproxy.ProxyTenant(context.Background(), f, ns, proxies)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(tf.Close)
		s.proxies = tf
	} else if err := f.WriteMemberSecrets(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			dumpSharedLogs(t, f, ns)
		}
		s.retire(t) // after the scenario's controllers stopped: their cleanups run first
	})
	return s, s.setUp(t, files, secretRef)
}

// newFleetSetupWith sets a scenario up on a fleet of its own, started with opts and members members.
func newFleetSetupWith(t *testing.T, members int, files map[string]string, opts localfleet.Options) (*fleetSetup, string) {
	t.Helper()
	return newFleetSetupReaching(t, members, files, opts, secretRef)
}

// secretRef reaches a member through its kubeconfig Secret.
func secretRef(_ *localfleet.Fleet, m *localfleet.Member) *meta.KubeConfigReference {
	return &meta.KubeConfigReference{SecretRef: &meta.SecretKeyReference{Name: m.KubeConfigSecret}}
}

// newFleetSetupReaching is newFleetSetupWith with each member's FleetCluster reaching it as
// kubeConfig says (called once per member, before its FleetCluster is created in f.Namespace).
func newFleetSetupReaching(t *testing.T, members int, files map[string]string, opts localfleet.Options,
	kubeConfig func(f *localfleet.Fleet, m *localfleet.Member) *meta.KubeConfigReference) (*fleetSetup, string) {
	t.Helper()
	opts.Members = members
	if opts.Namespace == "" {
		// A namespace named after the test, as on the shared fleet: the metrics the managers of
		// every test in the process share tell its rollouts apart by it.
		opts.Namespace = testNamespace(t)
	}
	ownFleetSlot(t)
	f := localfleet.StartForTest(t, opts)
	sim, stopSim := startSimulator(f)
	t.Cleanup(stopSim)
	s := &fleetSetup{f: f, ns: f.Namespace, members: f.Members, faults: &faults{sim: sim, ns: f.Namespace}}
	return s, s.setUp(t, files, kubeConfig)
}

// startSimulator starts the workload simulator on every member of f; stop stops it. Its errors (a
// member it cannot reach) go to the fleet's simulator.log, printed when a test fails.
func startSimulator(f *localfleet.Fleet) (sim *simulator.Simulator, stop func()) {
	clients := map[string]client.Client{}
	for _, m := range f.Members {
		clients[m.Name] = m.Client
	}
	sim = simulator.New(clients, simulator.Options{})
	log := zap.New(zap.UseDevMode(true), zap.WriteTo(f.OpenLog("simulator.log")))
	ctx, cancel := context.WithCancel(logf.IntoContext(context.Background(), log))
	sim.Start(ctx)
	return sim, func() { cancel(); sim.Stop() }
}

// setUp creates the scenario's Git repository holding files, its FleetClusters and its tracked
// source, and returns the repository's first commit.
func (s *fleetSetup) setUp(t *testing.T, files map[string]string, kubeConfig func(f *localfleet.Fleet, m *localfleet.Member) *meta.KubeConfigReference) string {
	t.Helper()
	ctx := context.Background()
	repo, sha, err := s.f.NewRepo(s.ns, files)
	if err != nil {
		t.Fatal(err)
	}
	s.repo = repo
	waitMembersServing(t, s.members)
	for i, m := range s.members {
		fc := &v1alpha1.FleetCluster{
			ObjectMeta: metav1.ObjectMeta{Name: m.Name, Namespace: s.ns, Labels: map[string]string{"index": fmt.Sprint(i + 1)}},
			Spec:       v1alpha1.FleetClusterSpec{KubeConfig: kubeConfig(s.f, m)},
		}
		if err := s.f.Hub.Create(ctx, fc); err != nil {
			t.Fatal(err)
		}
	}
	s.gitSource(t, "fleet", repo)
	return sha
}

// waitMembersServing waits until every member's API server answers a read: the scenarios start from
// a fleet whose members all serve, and on a loaded machine a member's API server can still be
// coming up (envtest retries a control plane that was slow to start) when the fleet is handed over.
func waitMembersServing(t *testing.T, members []*localfleet.Member) {
	t.Helper()
	ctx, cancel := testContext(t, 2*time.Minute)
	defer cancel()
	for _, m := range members {
		eventually(ctx, t, m.Name+"'s API server serving", func() (bool, string) {
			var nss corev1.NamespaceList
			err := m.Client.List(ctx, &nss, client.Limit(1))
			return err == nil, fmt.Sprint(err)
		})
	}
}

// gitSource creates a GitRepository that tracks repo's branch every 2s.
func (s *fleetSetup) gitSource(t *testing.T, name string, repo *localfleet.GitRepo) {
	t.Helper()
	src := &sourcev1.GitRepository{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.ns},
		Spec: sourcev1.GitRepositorySpec{
			URL:       repo.URL,
			Reference: &sourcev1.GitRepositoryRef{Branch: repo.Branch},
			Interval:  metav1.Duration{Duration: 2 * time.Second},
		},
	}
	if err := s.f.Hub.Create(context.Background(), src); err != nil {
		t.Fatal(err)
	}
}

func (s *fleetSetup) rollout(t *testing.T, name string) *v1alpha1.FleetRollout {
	t.Helper()
	var fr v1alpha1.FleetRollout
	if err := s.f.Hub.Get(context.Background(), types.NamespacedName{Namespace: s.ns, Name: name}, &fr); err != nil {
		t.Fatal(err)
	}
	return &fr
}

// kustomization returns the rollout's Kustomization for a cluster, or nil.
func (s *fleetSetup) kustomization(t *testing.T, rollout, cluster string) *kustomizev1.Kustomization {
	t.Helper()
	var ks kustomizev1.Kustomization
	err := s.f.Hub.Get(context.Background(), types.NamespacedName{Namespace: s.ns, Name: v1alpha1.KustomizationName(rollout, cluster)}, &ks)
	if err != nil {
		return nil
	}
	return &ks
}

// waitPhase waits for the rollout's phase, and for its candidate to be rev when rev is not empty.
func (s *fleetSetup) waitPhase(ctx context.Context, t *testing.T, name, phase, rev string) *v1alpha1.FleetRollout {
	t.Helper()
	var fr *v1alpha1.FleetRollout
	eventually(ctx, t, fmt.Sprintf("rollout %s phase %s at %s", name, phase, rev), func() (bool, string) {
		fr = s.rollout(t, name)
		cand := ""
		if fr.Status.Candidate != nil {
			cand = fr.Status.Candidate.Revision
		}
		return fr.Status.Phase == phase && (rev == "" || cand == rev), describe(fr)
	})
	return fr
}

func describe(fr *v1alpha1.FleetRollout) string {
	s := fmt.Sprintf("phase=%s wave=%s", fr.Status.Phase, fr.Status.CurrentWave)
	if fr.Status.Candidate != nil {
		s += " candidate=" + fr.Status.Candidate.Revision
	}
	for _, w := range fr.Status.Waves {
		s += fmt.Sprintf(" [%s %s %d/%d/%d]", w.Name, w.Phase, len(w.Clusters), w.Updated, w.Healthy)
	}
	for _, c := range fr.Status.Conditions {
		s += fmt.Sprintf(" {%s=%s %s: %s}", c.Type, c.Status, c.Reason, c.Message)
	}
	return s
}

var _ client.Object = &v1alpha1.FleetRollout{}

// rollOutFirst creates the three-wave rollout "web" (changed by mutate) and waits until the first
// commit runs everywhere; it returns that commit's revision.
func (s *fleetSetup) rollOutFirst(ctx context.Context, t *testing.T, first string, mutate func(*v1alpha1.FleetRollout)) string {
	t.Helper()
	fr := threeWaveRollout(s.ns, "web")
	if mutate != nil {
		mutate(fr)
	}
	if err := s.f.Hub.Create(ctx, fr); err != nil {
		t.Fatal(err)
	}
	rev := s.repo.Revision(first)
	s.waitPhase(ctx, t, "web", v1alpha1.PhaseCompleted, rev)
	return rev
}

// commitVersion commits the demo package at version and returns the commit's revision.
func (s *fleetSetup) commitVersion(t *testing.T, version string) string {
	t.Helper()
	sha, err := s.repo.Commit(version, demoPackage(version), nil)
	if err != nil {
		t.Fatal(err)
	}
	return s.repo.Revision(sha)
}

// breakVersion makes the demo workload crash-loop wherever it runs the image of version.
func (s *fleetSetup) breakVersion(version string) {
	for _, m := range s.members {
		s.faults.SetFault(m.Name, simulator.Fault{Workload: "web", Mode: simulator.NeverAvailable, Image: ":" + version})
	}
}

// loseAvailabilityOnceSoaking makes the workload of version lose its availability on cluster as
// soon as wave wave of the rollout soaks rev: a fault triggered by the rollout's state, not by a
// clock, so the loss falls inside the soak however slow the machine.
func (s *fleetSetup) loseAvailabilityOnceSoaking(ctx context.Context, t *testing.T, rollout, rev, version, cluster string, wave int) {
	t.Helper()
	eventually(ctx, t, fmt.Sprintf("wave %d of %s soaking %s", wave, rollout, rev), func() (bool, string) {
		fr := s.rollout(t, rollout)
		return fr.Status.Candidate != nil && fr.Status.Candidate.Revision == rev && len(fr.Status.Waves) > wave &&
			fr.Status.Waves[wave].Phase == v1alpha1.WaveSoaking, describe(fr)
	})
	s.faults.SetFault(cluster, simulator.Fault{Workload: "web", Mode: simulator.LoseAvailability, Image: ":" + version})
}
