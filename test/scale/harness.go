package scale

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/internal/localfleet"
	"github.com/tidegate/tidegate/internal/scheme"
	"github.com/tidegate/tidegate/internal/simulator"
	"github.com/tidegate/tidegate/test/fluxstandin"
)

// Flux says what plays kustomize-controller.
type Flux string

const (
	// StandIn is test/fluxstandin: simulated Flux. Every figure measured with it says so.
	StandIn Flux = "simulated Flux"
	// RealFlux is kustomize-controller v1.9 applying to the members.
	RealFlux Flux = "real Flux"
)

// The rollout the bench plays, and the names it uses.
const (
	RolloutName = "web"
	sourceName  = "fleet"
	packagePath = "./app"
	workload    = "web"
	workloadNS  = "demo"
)

// Config is one run of the bench.
type Config struct {
	// Clusters is the number of FleetClusters, c-0001 … c-N, spread over the members.
	Clusters int
	// Members is the number of member API servers the FleetClusters share (default 3).
	Members int
	// Flux is what plays kustomize-controller.
	Flux Flux
	// StandIn configures the stand-in (Flux == StandIn); SetupPace is its pace while the first
	// revision installs, which is setup and not measured.
	StandIn   fluxstandin.Options
	SetupPace fluxstandin.Pace
	// KustomizeConcurrency is real kustomize-controller's --concurrent (default 10).
	KustomizeConcurrency int
	// ControllerBinary is bin/tidegate-controller, run as a child process; empty runs the
	// controllers in this process (no CPU or memory figures then).
	ControllerBinary string
	// ControllerArgs are extra flags for the binary.
	ControllerArgs []string
	// Soak is each wave's soak; RingPercent the second wave's share (the first is one cluster, the
	// third the rest). SetupSoak is the soak while the first revision installs (default Soak).
	Soak, SetupSoak time.Duration
	RingPercent     int32
	// Timeout and Interval are the Kustomization template's (Interval is how often Flux re-reconciles).
	Timeout, Interval time.Duration
	// RolloutInterval is the FleetRollout's spec.interval, ClusterInterval the FleetClusters'; zero
	// leaves their defaults.
	RolloutInterval, ClusterInterval time.Duration
	// StandInQPS and StandInBurst are the stand-in's client limits; zero is kustomize-controller's
	// defaults (--kube-api-qps 50, --kube-api-burst 300).
	StandInQPS   float32
	StandInBurst int
	// Testbin is the directory of the test binaries; empty finds them as the tests do.
	Testbin string
	// Logf reports progress; nil is silent.
	Logf func(format string, args ...any)
}

func (c *Config) defaults() {
	if c.Members <= 0 {
		c.Members = 3
	}
	if c.Flux == "" {
		c.Flux = StandIn
	}
	if c.Soak <= 0 {
		c.Soak = 30 * time.Second
	}
	if c.SetupSoak <= 0 {
		c.SetupSoak = c.Soak
	}
	if c.RingPercent <= 0 {
		c.RingPercent = 30
	}
	if c.Timeout <= 0 {
		c.Timeout = 2 * time.Minute
	}
	if c.Interval <= 0 {
		c.Interval = 10 * time.Minute
	}
	if c.KustomizeConcurrency <= 0 {
		c.KustomizeConcurrency = 10
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
}

// Harness is a running bench: a hub with N FleetClusters, the members, source-controller, what
// plays kustomize-controller, the tidegate controller, and what watches them.
type Harness struct {
	cfg   Config
	fleet *localfleet.Fleet
	hub   client.Client
	repo  *localfleet.GitRepo
	sim   *simulator.Simulator
	// standIn is nil with real Flux.
	standIn *fluxstandin.StandIn
	ctl     controller
	tl      *timeline
	audit   *audit

	clusters map[string]string // FleetCluster → member
	names    []string
	// away is the FleetCluster with a kubeconfig Secret of its own (the last by name, which the plan
	// puts in the last wave), that ReleaseWithOneAway takes away.
	away     string
	versions map[string]string // version → revision

	// soak is the waves' soak in force.
	soak time.Duration

	stopSim, stopStandIn context.CancelFunc
	standInDone          chan error

	// restarted is when the controller last started again, and afterRestart its metrics then:
	// counters start from zero in a new process.
	restarted    time.Time
	afterRestart Sample

	scrapeMu   sync.Mutex
	peakHeap   float64
	peakRSS    float64
	stopScrape context.CancelFunc
}

// Start brings the bench up to the point where the rollout can be created.
func Start(ctx context.Context, cfg Config) (h *Harness, err error) {
	cfg.defaults()
	dir, err := os.MkdirTemp("", "tidegate-scale-")
	if err != nil {
		return nil, err
	}
	args, err := auditArgs(dir)
	if err != nil {
		return nil, err
	}
	opts := localfleet.Options{Members: cfg.Members, Testbin: cfg.Testbin, APIServerArgs: args,
		KustomizeControllerArgs: []string{fmt.Sprintf("--concurrent=%d", cfg.KustomizeConcurrency)}}
	if cfg.Flux == StandIn {
		opts.NoKustomizeController = true
	}
	cfg.Logf("starting the hub, %d member API servers and Flux (%s)", cfg.Members, cfg.Flux)
	f, err := localfleet.Start(ctx, opts)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	h = &Harness{cfg: cfg, fleet: f, clusters: map[string]string{}, versions: map[string]string{}, soak: cfg.SetupSoak}
	defer func() {
		if err != nil {
			h.Stop()
		}
	}()
	var members []string
	for _, m := range f.Members {
		members = append(members, m.Name)
	}
	h.audit = newAudit(dir, members)
	// The bench's own writes go fast: they are setup, not what is measured.
	fast := rest.CopyConfig(f.HubConfig)
	fast.QPS, fast.Burst = 500, 1000
	if h.hub, err = client.New(fast, client.Options{Scheme: f.Scheme}); err != nil {
		return h, err
	}
	if err := h.startMembers(ctx); err != nil {
		return h, err
	}
	if err := h.createFleet(ctx); err != nil {
		return h, err
	}
	if cfg.ControllerBinary != "" {
		// The in-process controller sets the global logger; without it, the bench's own managers
		// (the stand-in, the watch) log here.
		ctrl.SetLogger(zap.New(zap.WriteTo(f.OpenLog("bench.log"))))
	}
	if cfg.Flux == StandIn {
		if err := h.startStandIn(); err != nil {
			return h, err
		}
	}
	if h.tl, err = startTimeline(context.Background(), f.HubConfig, f.Namespace); err != nil {
		return h, err
	}
	ctlConfig, kubeconfig, err := f.AddHubUser(ControllerUser, []string{"system:masters"})
	if err != nil {
		return h, err
	}
	log := f.OpenLog("tidegate-controller.log")
	if cfg.ControllerBinary != "" {
		path := filepath.Join(f.Dir, "tidegate-controller.kubeconfig")
		if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
			return h, err
		}
		h.ctl = &processController{bin: cfg.ControllerBinary, kubeconfig: path, log: log, args: cfg.ControllerArgs}
	} else {
		// The binary's client limits: its --kube-api-qps and --kube-api-burst defaults.
		ctlConfig.QPS, ctlConfig.Burst = 50, 300
		h.ctl = newInProcessController(ctlConfig, log)
	}
	cfg.Logf("starting the tidegate controller")
	if err := h.ctl.start(ctx); err != nil {
		return h, err
	}
	h.startScraping()
	return h, nil
}

// Dir is where the fleet keeps its logs.
func (h *Harness) Dir() string { return h.fleet.Dir }

// Stop stops everything the harness started.
func (h *Harness) Stop() {
	if h.stopScrape != nil {
		h.stopScrape()
	}
	if h.ctl != nil {
		h.ctl.kill()
	}
	if h.stopStandIn != nil {
		h.stopStandIn()
		<-h.standInDone
	}
	if h.tl != nil {
		h.tl.stop()
	}
	if h.stopSim != nil {
		h.stopSim()
		h.sim.Stop()
	}
	h.fleet.Stop()
	if h.audit != nil && os.Getenv("TIDEGATE_KEEP_FLEET") == "" {
		os.RemoveAll(filepath.Dir(h.audit.hub.path))
	}
}

// startMembers starts the workload simulator on the members. With the stand-in, nothing applies the
// package, so its workload is created on every member for tidegate to sample.
func (h *Harness) startMembers(ctx context.Context) error {
	clients := map[string]client.Client{}
	for _, m := range h.fleet.Members {
		clients[m.Name] = m.Client
		if h.cfg.Flux != StandIn {
			continue
		}
		for _, obj := range []client.Object{
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: workloadNS}},
			workloadDeployment("v0"),
		} {
			if err := m.Client.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("creating %s on %s: %w", obj.GetName(), m.Name, err)
			}
		}
	}
	h.sim = simulator.New(clients, simulator.Options{Interval: time.Second})
	simCtx, stop := context.WithCancel(context.Background())
	h.stopSim = stop
	h.sim.Start(simCtx)
	return nil
}

// createFleet commits the package's first version, creates the tracked source and the FleetClusters.
func (h *Harness) createFleet(ctx context.Context) error {
	repo, sha, err := h.fleet.NewRepo("fleet", packageFiles("v1"))
	if err != nil {
		return err
	}
	h.repo = repo
	h.versions["v1"] = repo.Revision(sha)
	ns := h.fleet.Namespace
	src := &sourcev1.GitRepository{
		ObjectMeta: metav1.ObjectMeta{Name: sourceName, Namespace: ns},
		Spec: sourcev1.GitRepositorySpec{URL: repo.URL, Reference: &sourcev1.GitRepositoryRef{Branch: repo.Branch},
			Interval: metav1.Duration{Duration: 5 * time.Second}},
	}
	if err := h.hub.Create(ctx, src); err != nil {
		return err
	}
	h.cfg.Logf("creating %d FleetClusters on %d members", h.cfg.Clusters, len(h.fleet.Members))
	for i := 1; i <= h.cfg.Clusters; i++ {
		name := fmt.Sprintf("c-%04d", i)
		h.names = append(h.names, name)
		h.clusters[name] = h.fleet.Members[(i-1)%len(h.fleet.Members)].Name
	}
	h.away = h.names[len(h.names)-1]
	return parallel(ctx, h.names, 20, func(ctx context.Context, name string) error {
		m := h.fleet.Member(h.clusters[name])
		secret := m.KubeConfigSecret
		if name == h.away {
			secret = awaySecret(name)
			var s corev1.Secret
			if err := h.hub.Get(ctx, client.ObjectKey{Namespace: ns, Name: m.KubeConfigSecret}, &s); err != nil {
				return err
			}
			own := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: secret, Namespace: ns}, Data: s.Data}
			if err := h.hub.Create(ctx, own); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("creating the kubeconfig Secret of %s: %w", name, err)
			}
		}
		fc := &v1alpha1.FleetCluster{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"member": m.Name}},
			Spec: v1alpha1.FleetClusterSpec{
				KubeConfig: &meta.KubeConfigReference{SecretRef: &meta.SecretKeyReference{Name: secret}},
			},
		}
		if h.cfg.ClusterInterval > 0 {
			fc.Spec.Interval = &metav1.Duration{Duration: h.cfg.ClusterInterval}
		}
		if err := h.hub.Create(ctx, fc); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating FleetCluster %s: %w", name, err)
		}
		return nil
	})
}

// startStandIn runs the stand-in in this process, with its own manager and kustomize-controller's
// client rate limits (Flux's defaults: 50 QPS, burst 300).
func (h *Harness) startStandIn() error {
	cfg := rest.CopyConfig(h.fleet.HubConfig)
	cfg.QPS, cfg.Burst = 50, 300
	if h.cfg.StandInQPS > 0 {
		cfg.QPS, cfg.Burst = h.cfg.StandInQPS, max(h.cfg.StandInBurst, int(h.cfg.StandInQPS))
	}
	skip := true
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:     scheme.New(),
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Cache:      cache.Options{DefaultNamespaces: map[string]cache.Config{h.fleet.Namespace: {}}, DefaultTransform: cache.TransformStripManagedFields()},
		Controller: config.Controller{SkipNameValidation: &skip},
	})
	if err != nil {
		return err
	}
	opts := h.cfg.StandIn
	opts.SkipNameValidation = true
	opts.Inventory = func(*kustomizev1.Kustomization) []kustomizev1.ResourceRef {
		return []kustomizev1.ResourceRef{fluxstandin.WorkloadEntry("Deployment", workloadNS, workload)}
	}
	if h.cfg.SetupPace.ApplyLatency > 0 {
		opts.Pace = h.cfg.SetupPace
	}
	h.standIn = fluxstandin.New(opts)
	if err := h.standIn.SetupWithManager(mgr); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.stopStandIn, h.standInDone = cancel, make(chan error, 1)
	go func() { h.standInDone <- mgr.Start(ctx) }()
	return nil
}

// rollout is the FleetRollout the bench plays: three waves (one cluster, RingPercent, the rest),
// the default policy, rollback on failure.
func (h *Harness) rollout() *v1alpha1.FleetRollout {
	fr := &v1alpha1.FleetRollout{
		ObjectMeta: metav1.ObjectMeta{Name: RolloutName, Namespace: h.fleet.Namespace},
		Spec: v1alpha1.FleetRolloutSpec{
			SourceRef: v1alpha1.SourceReference{Kind: sourcev1.GitRepositoryKind, Name: sourceName},
			Path:      packagePath,
			Template: v1alpha1.KustomizationTemplate{
				Interval: &metav1.Duration{Duration: h.cfg.Interval},
				Timeout:  &metav1.Duration{Duration: h.cfg.Timeout},
			},
			Waves:    h.waves(h.soak),
			Rollback: v1alpha1.RollbackSpec{OnFailure: v1alpha1.OnFailureRollback},
		},
	}
	if h.cfg.RolloutInterval > 0 {
		fr.Spec.Interval = &metav1.Duration{Duration: h.cfg.RolloutInterval}
	}
	return fr
}

// waves are the rollout's waves with soak.
func (h *Harness) waves(soak time.Duration) []v1alpha1.Wave {
	one, ring := int32(1), h.cfg.RingPercent
	d := &metav1.Duration{Duration: soak}
	return []v1alpha1.Wave{
		{Name: "canary", Count: &one, Soak: d},
		{Name: "ring", Percent: &ring, Soak: d},
		{Name: "rest", Selector: &metav1.LabelSelector{}, Soak: d},
	}
}

// commit commits version of the package and returns its revision.
func (h *Harness) commit(version string) (string, error) {
	sha, err := h.repo.Commit(version, packageFiles(version), nil)
	if err != nil {
		return "", err
	}
	rev := h.repo.Revision(sha)
	h.versions[version] = rev
	return rev, nil
}

// startScraping samples the controller's metrics every 5 s for its peak heap and resident set.
func (h *Harness) startScraping() {
	ctx, cancel := context.WithCancel(context.Background())
	h.stopScrape = cancel
	go func() {
		for {
			if s, err := scrape(ctx, h.ctl.metricsURL()); err == nil {
				h.scrapeMu.Lock()
				h.peakHeap = max(h.peakHeap, s.Sum("go_memstats_heap_alloc_bytes", nil))
				h.peakRSS = max(h.peakRSS, s.Sum("process_resident_memory_bytes", nil))
				h.scrapeMu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(5 * time.Second):
			}
		}
	}()
}

// metricsNow scrapes the controller's metrics.
func (h *Harness) metricsNow(ctx context.Context) (Sample, error) {
	return scrape(ctx, h.ctl.metricsURL())
}

// parallel runs fn over items with at most n at once and returns the first error.
func parallel(ctx context.Context, items []string, n int, fn func(context.Context, string) error) error {
	sem := make(chan struct{}, n)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, it := range items {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := fn(ctx, it); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// packageFiles is the package at version: a namespace, a Deployment the simulator makes available
// and a ConfigMap carrying the version.
func packageFiles(version string) map[string]string {
	return map[string]string{
		"app/kustomization.yaml": "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [namespace.yaml, deployment.yaml, configmap.yaml]\n",
		"app/namespace.yaml":     "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: " + workloadNS + "\n",
		"app/configmap.yaml": fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web-version\n  namespace: %s\ndata:\n  version: %q\n",
			workloadNS, version),
		"app/deployment.yaml": fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: %s
  namespace: %s
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: ghcr.io/example/web:%s
`, workload, workloadNS, version),
	}
}

// workloadDeployment is the package's Deployment, for members nothing applies it to.
func workloadDeployment(version string) *appsv1.Deployment {
	replicas := int32(2)
	labels := map[string]string{"app": "web"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: workload, Namespace: workloadNS},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "ghcr.io/example/web:" + version}}},
			},
		},
	}
}
