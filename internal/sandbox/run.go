package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/tidegate/tidegate/controllers"
	"github.com/tidegate/tidegate/internal/attest"
	"github.com/tidegate/tidegate/internal/localfleet"
	"github.com/tidegate/tidegate/internal/sandboxcmd"
	"github.com/tidegate/tidegate/internal/simulator"
)

// keepFleetEnv makes localfleet's Stop keep the fleet's directory: the background process copies
// the logs out of it first, then removes it.
const keepFleetEnv = "TIDEGATE_KEEP_FLEET"

// sandboxRun is the background process: it starts the fleet, tidegate, the simulator and a
// Prometheus scraping it, commits the demo, and serves the control endpoint until its context ends
// (SIGTERM from `sandbox down`).
type sandboxRun struct {
	dir      string
	members  int
	testbin  string // the directory of the test binaries, as up resolved it
	oci      bool   // the package is delivered as signed OCI artifacts (oci.go)
	chart    bool   // the package is a Helm chart, delivered as a signed OCI artifact (--helm)
	pkg      *ociPackage
	state    *stateWriter
	out      io.Writer // the process's own log (DIR/sandbox.log)
	fleet    *localfleet.Fleet
	sim      *simulator.Simulator
	repos    map[string]*remoteRepo
	stopMgr  context.CancelFunc
	mgrDone  chan struct{} // closed when the manager returned, with mgrErr
	mgrErr   error
	ready    atomic.Bool // the control endpoint acts only once everything it needs is there
	stopSim  context.CancelFunc
	metrics  *http.Server // the simulator's service metrics, for prom
	prom     *localfleet.Prometheus
	control  *http.Server
	stopOnce sync.Once
}

// runBackground is `sandbox run`: it returns when ctx ends, after stopping everything it started.
func runBackground(ctx context.Context, o sandboxcmd.RunOptions, out io.Writer) error {
	dir, members := o.Dir, o.Clusters
	lock, err := acquireLock(dir)
	if errors.Is(err, errLocked) {
		return fmt.Errorf("a sandbox already runs in %s (it holds %s)", dir, layout{dir}.lock())
	}
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := recordPID(lock); err != nil {
		return fmt.Errorf("writing the pid into %s: %w", layout{dir}.lock(), err)
	}

	l := layout{dir}
	r := &sandboxRun{dir: dir, members: members, testbin: o.Testbin, oci: o.OCI || o.Helm, chart: o.Helm, out: out, repos: map[string]*remoteRepo{}}
	r.state = &stateWriter{dir: dir, now: time.Now, s: State{
		PID: os.Getpid(), Dir: dir, Namespace: fleetNamespace, StartedAt: time.Now(),
		LogDir: l.logs(), SandboxLog: l.sandboxLog(), Steps: []Step{},
	}}
	for i := 1; i <= members; i++ {
		r.state.s.Clusters = append(r.state.s.Clusters, memberName(i))
	}
	logf(out, "sandbox %d starting in %s with %s", os.Getpid(), dir, count(members, "member cluster"))
	defer r.stop()

	err = r.start(ctx)
	if err != nil {
		stopped := ctx.Err() != nil
		if stopped {
			// `sandbox down` (or a Ctrl-C) while starting: say so, not what the cancellation broke.
			err = fmt.Errorf("stopped while starting: %v", context.Cause(ctx))
		}
		logf(out, "start-up failed: %v", err)
		_ = r.state.update(func(s *State) {
			if s.Error == "" || stopped {
				s.Error = err.Error()
			}
		})
		return err
	}
	logf(out, "sandbox ready")
	select {
	case <-ctx.Done():
		logf(out, "stopping: %v", context.Cause(ctx))
	case <-r.mgrDone:
		err := fmt.Errorf("the tidegate controller stopped: %v", r.mgrErr)
		logf(out, "%v", err)
		_ = r.state.update(func(s *State) { s.Ready, s.Error = false, err.Error() })
		return err
	}
	r.stop()
	// A clean stop leaves no state: the sandbox is gone. (After a failed start the state stays, with
	// its error, for `sandbox up` to report.)
	_ = os.Remove(l.state())
	_ = os.Remove(l.kubeconfig())
	return nil
}

func logf(w io.Writer, format string, args ...any) {
	fmt.Fprintf(w, "%s %s\n", time.Now().Format(time.RFC3339), fmt.Sprintf(format, args...))
}

func (r *sandboxRun) start(ctx context.Context) error {
	token, err := newToken()
	if err != nil {
		return err
	}
	ln, err := listenLoopback("the control endpoint")
	if err != nil {
		return err
	}
	r.control = &http.Server{Handler: newControlHandler(token, r), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = r.control.Serve(ln) }()
	if err := r.state.update(func(s *State) { s.Control = &Control{URL: "http://" + ln.Addr().String(), Token: token} }); err != nil {
		return fmt.Errorf("writing %s: %w", layout{r.dir}.state(), err)
	}

	st := r.state
	flux := "Flux"
	if r.chart {
		flux = "Flux (with helm-controller)"
	}
	if err := st.step(fmt.Sprintf("starting the hub and %s (an API server and etcd each), %s and a Git server", count(r.members, "member cluster"), flux), func() error {
		return r.startFleet(ctx)
	}); err != nil {
		return err
	}
	if err := st.step("starting tidegate and the workload simulator", func() error { return r.startTidegate(ctx) }); err != nil {
		return err
	}
	if err := st.step("starting Prometheus, scraping the simulator's service metrics every second", func() error {
		return r.startPrometheus(ctx)
	}); err != nil {
		return err
	}
	what := "committing the demo repositories fleet, podinfo and platform-policies"
	switch {
	case r.chart:
		what += ", and pushing podinfo to the OCI registry as a signed Helm chart"
	case r.oci:
		what += ", and pushing podinfo to the OCI registry as a signed artifact"
	}
	if err := st.step(what, r.commitDemo); err != nil {
		return err
	}
	if err := st.step("bootstrapping Flux on the hub: Kustomization flux-system/fleet applies ./hub of the fleet repository", func() error {
		return r.bootstrap(ctx)
	}); err != nil {
		return err
	}
	r.ready.Store(true)
	return st.update(func(s *State) { s.Ready = true })
}

func (r *sandboxRun) startFleet(ctx context.Context) error {
	// Keep the fleet's directory on Stop, so its logs can be copied out of it (also after a failed start).
	os.Setenv(keepFleetEnv, "1")
	startCtx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	f, err := localfleet.Start(startCtx, localfleet.Options{Members: r.members, Testbin: r.testbin, HelmController: r.chart})
	if f != nil {
		r.fleet = f
		_ = r.state.update(func(s *State) { s.FleetDir = f.Dir })
		r.linkLogs()
	}
	if err != nil {
		return err
	}
	// The Git server logs every request with the standard logger.
	log.SetOutput(f.OpenLog("git-server.log"))

	kc, err := kubeconfigFor(f.HubKubeConfigPath, fleetNamespace)
	if err != nil {
		return err
	}
	path := layout{r.dir}.kubeconfig()
	if err := os.WriteFile(path, kc, 0o600); err != nil {
		return err
	}
	return r.state.update(func(s *State) { s.Kubeconfig, s.Hub = path, f.HubConfig.Host })
}

// kubeconfigFor returns the kubeconfig file at path with every context's namespace set to ns, so
// that `tidegate` and kubectl work in the sandbox's namespace without -n.
func kubeconfigFor(path, ns string) ([]byte, error) {
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the hub's kubeconfig: %w", err)
	}
	for _, c := range cfg.Contexts {
		c.Namespace = ns
	}
	return clientcmd.Write(*cfg)
}

// linkLogs makes DIR/logs point at the fleet's log directory while the fleet runs.
func (r *sandboxRun) linkLogs() {
	logs := layout{r.dir}.logs()
	_ = os.RemoveAll(logs)
	if err := os.Symlink(filepath.Join(r.fleet.Dir, "logs"), logs); err != nil {
		logf(r.out, "linking %s: %v", logs, err)
	}
}

// keepLogs replaces the DIR/logs link by a copy of the fleet's logs, which outlive the fleet.
func (r *sandboxRun) keepLogs() {
	logs := layout{r.dir}.logs()
	src := filepath.Join(r.fleet.Dir, "logs")
	entries, err := os.ReadDir(src)
	if err != nil {
		logf(r.out, "keeping the logs: %v", err)
		return
	}
	_ = os.RemoveAll(logs)
	if err := os.MkdirAll(logs, 0o755); err != nil {
		logf(r.out, "keeping the logs: %v", err)
		return
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err == nil {
			err = os.WriteFile(filepath.Join(logs, e.Name()), b, 0o644)
		}
		if err != nil {
			logf(r.out, "keeping log %s: %v", e.Name(), err)
		}
	}
}

func (r *sandboxRun) startTidegate(ctx context.Context) error {
	f := r.fleet
	logger := zap.New(zap.UseDevMode(true), zap.WriteTo(f.OpenLog("tidegate-controller.log")))
	ctrl.SetLogger(logger)
	klog.SetLogger(logger.WithName("client-go"))
	mgr, err := ctrl.NewManager(f.HubConfig, controllers.ManagerOptions(controllers.ManagerConfig{Logger: logger}))
	if err != nil {
		return fmt.Errorf("creating the tidegate manager: %w", err)
	}
	signer, err := sandboxSigner(layout{r.dir})
	if err != nil {
		return err
	}
	logf(r.out, "signing receipts and ledger entries with key %s (public key %s)", signer.KeyID(), layout{r.dir}.signingPub())
	if err := controllers.Setup(mgr, f.HubConfig, controllers.Options{Signer: signer}); err != nil {
		return fmt.Errorf("setting up the tidegate controllers: %w", err)
	}
	mgrCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	r.stopMgr, r.mgrDone = stop, make(chan struct{})
	go func() {
		r.mgrErr = mgr.Start(mgrCtx)
		close(r.mgrDone)
	}()

	members := map[string]client.Client{}
	for _, m := range f.Members {
		members[m.Name] = m.Client
	}
	r.sim = simulator.New(members, simulator.Options{})
	simLogger := zap.New(zap.UseDevMode(true), zap.WriteTo(f.OpenLog("simulator.log")))
	simCtx, stopSim := context.WithCancel(ctrllog.IntoContext(context.WithoutCancel(ctx), simLogger))
	r.stopSim = stopSim
	r.sim.Start(simCtx)
	return nil
}

// startPrometheus serves the simulator's service metrics (every member's simulated traffic, each
// series labelled with its cluster) on a port of 127.0.0.1, and starts a Prometheus of the fleet
// that scrapes them every second: a central store, as noDisruption reads one. The demo rollout's
// spec.metrics names it (bootstrap substitutes its URL), and a user can ask it what a metric rule
// would see. It stops with the fleet.
func (r *sandboxRun) startPrometheus(ctx context.Context) error {
	ln, err := listenLoopback("the simulator's metrics")
	if err != nil {
		return err
	}
	r.metrics = &http.Server{Handler: r.sim.MetricsHandler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = r.metrics.Serve(ln) }()
	if r.prom, err = r.fleet.StartPrometheus(ctx, ln.Addr().String()); err != nil {
		return err
	}
	return r.state.update(func(s *State) { s.Prometheus = r.prom.URL })
}

// commitDemo creates the demo's repositories on the Git server with their first commit.
func (r *sandboxRun) commitDemo() error {
	urls, initial := map[string]string{}, map[string]string{}
	if r.oci {
		var err error
		if r.pkg, err = newOCIPackage(layout{r.dir}, r.fleet.Registry, r.chart, filepath.Join(r.fleet.Dir, "chart")); err != nil {
			return err
		}
	}
	for _, name := range demoRepos {
		files, err := repoFiles(name, r.members)
		if name == repoPodinfo && r.chart {
			files, err = embeddedFiles(chartPackage.dir)
		}
		if err != nil {
			return err
		}
		if name == repoFleet && r.pkg != nil {
			if err := ociFleet(files, r.pkg.key.PublicPEM, r.chart); err != nil {
				return err
			}
		}
		repo, sha, err := r.fleet.NewRepo(name, files)
		if err != nil {
			return fmt.Errorf("creating repository %s: %w", name, err)
		}
		r.repos[name] = &remoteRepo{url: repo.URL, branch: repo.Branch}
		urls[name], initial[name] = repo.URL, repo.Revision(sha)
		if name == repoPodinfo && r.pkg != nil {
			if initial[name], err = r.pkg.push(files, nil, "podinfo "+sha[:8]); err != nil {
				return err
			}
		}
	}
	return r.state.update(func(s *State) {
		s.Git, s.Initial = urls, initial
		if r.pkg != nil {
			s.OCI = &OCIState{Repository: r.pkg.repository, CosignPub: layout{r.dir}.cosignPub(), Chart: r.chart}
		}
	})
}

// bootstrap does what `flux bootstrap` would: a GitRepository for the fleet repository and a
// Kustomization applying its ./hub to the hub, with the Git server's address substituted.
func (r *sandboxRun) bootstrap(ctx context.Context) error {
	f := r.fleet
	if err := f.EnsureNamespace(ctx, bootstrapNS); err != nil {
		return err
	}
	fleetURL := r.repos[repoFleet].url
	server := strings.TrimSuffix(fleetURL, "/"+repoFleet+".git")
	src := &sourcev1.GitRepository{
		ObjectMeta: metav1.ObjectMeta{Name: bootstrapName, Namespace: bootstrapNS},
		Spec: sourcev1.GitRepositorySpec{
			URL:       fleetURL,
			Reference: &sourcev1.GitRepositoryRef{Branch: "main"},
			Interval:  metav1.Duration{Duration: 5 * time.Second},
		},
	}
	ks := &kustomizev1.Kustomization{
		ObjectMeta: metav1.ObjectMeta{Name: bootstrapName, Namespace: bootstrapNS},
		Spec: kustomizev1.KustomizationSpec{
			Interval:  metav1.Duration{Duration: time.Minute},
			Path:      "./hub",
			Prune:     true,
			Timeout:   &metav1.Duration{Duration: time.Minute},
			SourceRef: kustomizev1.CrossNamespaceSourceReference{Kind: sourcev1.GitRepositoryKind, Name: bootstrapName},
			PostBuild: &kustomizev1.PostBuild{Substitute: map[string]string{gitServerVar: server, registryVar: f.Registry.Host, prometheusVar: r.prom.URL}},
		},
	}
	for _, obj := range []client.Object{src, ks} {
		if err := f.Hub.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating %T %s/%s on the hub: %w", obj, obj.GetNamespace(), obj.GetName(), err)
		}
	}
	return nil
}

// stop stops what start started, in reverse order, and keeps the fleet's logs. Safe to call twice.
func (r *sandboxRun) stop() {
	r.stopOnce.Do(func() {
		if r.control != nil {
			shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = r.control.Shutdown(shutdownCtx)
			cancel()
		}
		if r.metrics != nil {
			_ = r.metrics.Close()
		}
		if r.sim != nil {
			r.stopSim()
			r.sim.Stop()
		}
		if r.stopMgr != nil {
			r.stopMgr()
			select {
			case <-r.mgrDone:
				if r.mgrErr != nil && !errors.Is(r.mgrErr, context.Canceled) {
					logf(r.out, "the tidegate manager stopped with: %v", r.mgrErr)
				}
			case <-time.After(30 * time.Second):
				logf(r.out, "the tidegate manager did not stop within 30s")
			}
		}
		if r.fleet != nil {
			r.fleet.Stop()
			r.keepLogs()
			if err := os.RemoveAll(r.fleet.Dir); err != nil {
				logf(r.out, "removing %s: %v", r.fleet.Dir, err)
			}
		}
		logf(r.out, "stopped")
	})
}

// The control endpoint's backend. Until the sandbox is ready its repositories and simulator may not
// exist yet, and it refuses.

var errStarting = errors.New("the sandbox is still starting")

func (r *sandboxRun) Commit(ctx context.Context, repo, message string, files map[string]string, remove []string) (string, string, error) {
	if !r.ready.Load() {
		return "", "", errStarting
	}
	sha, err := r.repos[repo].Commit(ctx, message, files, remove)
	if err != nil {
		return "", "", err
	}
	if repo != repoPodinfo || r.pkg == nil {
		return sha, "main@sha1:" + sha, nil
	}
	rev, err := r.pkg.push(files, remove, message)
	return sha, rev, err
}

func (r *sandboxRun) ReadFile(ctx context.Context, repo, path string) (string, error) {
	if !r.ready.Load() {
		return "", errStarting
	}
	return r.repos[repo].ReadFile(ctx, path)
}

// Clusters is empty until the sandbox is ready, so that no fault reaches a simulator not there yet.
func (r *sandboxRun) Clusters() []string {
	if !r.ready.Load() {
		return nil
	}
	return r.sim.Clusters()
}

func (r *sandboxRun) SetFault(cluster string, f simulator.Fault) { r.sim.SetFault(cluster, f) }

func (r *sandboxRun) ClearFault(cluster, workload string) { r.sim.ClearFault(cluster, workload) }

func (r *sandboxRun) TriggerCronJob(ctx context.Context, cluster, namespace, name string) (string, error) {
	j, err := r.sim.TriggerCronJob(ctx, cluster, namespace, name, "")
	if err != nil {
		return "", err
	}
	return j.Name, nil
}

// sandboxSigner is the sandbox directory's signing key: read from signing.key, or made (Ed25519)
// and written there, mode 0600, with its public key in signing.pub.
func sandboxSigner(l layout) (*attest.Signer, error) {
	return keyFile(l.signingKey(), l.signingPub(), "signing key", attest.ParsePrivateKey,
		func() (*attest.Signer, []byte, []byte, error) { return attest.GenerateKey(true) })
}

// keyFile reads the private key at keyPath with parse, or, when there is none, makes one with
// generate and writes it there (mode 0600) and its public key to pubPath.
func keyFile[K any](keyPath, pubPath, what string, parse func([]byte) (K, error), generate func() (K, []byte, []byte, error)) (K, error) {
	var zero K
	if b, err := os.ReadFile(keyPath); err == nil {
		k, err := parse(b)
		if err != nil {
			return zero, fmt.Errorf("the sandbox's %s %s: %w (remove it to make a new one)", what, keyPath, err)
		}
		return k, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return zero, err
	}
	k, private, public, err := generate()
	if err != nil {
		return zero, err
	}
	if err := os.WriteFile(pubPath, public, 0o644); err != nil {
		return zero, err
	}
	if err := os.WriteFile(keyPath, private, 0o600); err != nil {
		return zero, err
	}
	return k, nil
}
