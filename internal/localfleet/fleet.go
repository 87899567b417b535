package localfleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fluxcd/pkg/gittestserver"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/tidegate/tidegate/internal/scheme"
	"github.com/tidegate/tidegate/internal/testbin"
)

// Options says what fleet to start.
type Options struct {
	// Members is the number of member API servers, named member-1 … member-N.
	Members int
	// Namespace on the hub where member kubeconfig Secrets are written. Defaults to "fleet".
	Namespace string
	// NoFlux skips starting source-controller and kustomize-controller.
	NoFlux bool
	// NoKustomizeController starts source-controller alone: something else plays kustomize-controller
	// (the scale bench's stand-in), while artifacts are still served by the real source-controller.
	NoKustomizeController bool
	// KustomizeControllerArgs are extra flags for kustomize-controller (e.g. --concurrent).
	KustomizeControllerArgs []string
	// APIServerArgs, when set, is called for each API server before it starts ("hub", "member-1", …)
	// to add flags, such as an audit log.
	APIServerArgs func(name string, args *envtest.Arguments)
	// SourceControllerArgs are extra flags for source-controller (e.g. artifact retention settings).
	SourceControllerArgs []string
	// Testbin is the directory of the binaries `make testbin` built; when empty, testbin.Dir finds it.
	Testbin string
	// Front, when set, is asked once the API servers run, and before anything is given their
	// addresses, what to put in front of each of them, by name ("hub", "member-1", …, with an admin
	// config of it); nil leaves it direct. The tests put fault proxies there (test/faultproxy's
	// StartFleet). A member's kubeconfig Secret, which its FleetCluster and Flux's Kustomizations
	// use, then points at its front; the Flux controllers and the users AddHubUser adds reach the hub
	// through the hub's. Member.Config, Member.Client, HubConfig and Hub stay direct: what a test
	// reads through them is the real state, whatever faults are set.
	Front func(name string, admin *rest.Config) (Front, error)
	// MembersTrustHubTokens makes every member's API server authenticate the hub's ServiceAccount
	// tokens (identity.go), for members reached through workload identity. The members then start
	// after the hub, whose issuer they need.
	MembersTrustHubTokens bool
}

// Member is one member cluster.
type Member struct {
	Name string
	// Config reaches the member API server as an admin.
	Config *rest.Config
	// Client is a controller-runtime client for the member.
	Client client.Client
	// KubeConfigSecret is the name of the Secret on the hub, key "value", holding the member's kubeconfig.
	KubeConfigSecret string

	env        *envtest.Environment
	front      Front  // Options.Front's for the member; nil when direct
	kubeConfig []byte // direct
	secret     []byte // what the kubeconfig Secret holds: kubeConfig, or one through front
}

// Fleet is a running local fleet.
type Fleet struct {
	// Dir holds every file of the fleet (logs, storage, clones); removed by Stop.
	Dir string
	// HubConfig reaches the hub API server as an admin.
	HubConfig *rest.Config
	// Hub is a client for the hub with tidegate's and Flux's types in its scheme.
	Hub client.Client
	// HubKubeConfigPath is a kubeconfig file for the hub, for processes and people.
	HubKubeConfigPath string
	// Members are the member clusters in order.
	Members []*Member
	// Namespace holds the member kubeconfig Secrets.
	Namespace string
	// Scheme has the Kubernetes, Flux and tidegate types.
	Scheme *runtime.Scheme
	// Registry is the fleet's OCI registry, for packages pushed as Flux OCI artifacts (oci.go).
	Registry *Registry

	hub            *envtest.Environment
	testbinDir     string
	apiServerArgs  func(string, *envtest.Arguments)
	trustHub       bool
	git            *gittestserver.GitServer
	hubFront       Front  // Options.Front's for the hub; nil when direct
	fluxKubeConfig string // the kubeconfig the Flux controllers use: the hub's, or through hubFront
	processes      []*process
	reserved       []*portSet
	reaper         *exec.Cmd
	logMu          sync.Mutex
	logFiles       []string
	stopOnce       sync.Once
}

// NewScheme returns a scheme with the Kubernetes, Flux source and kustomize, and tidegate types.
func NewScheme() *runtime.Scheme { return scheme.New() }

// Start starts a fleet, once fewer than MaxStarts fleets are starting on the machine (ctx bounds
// the wait too). On error everything already started is stopped.
func Start(ctx context.Context, opts Options) (*Fleet, error) {
	release, err := takeStartSlot(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	return start(ctx, opts)
}

// start starts a fleet now.
func start(ctx context.Context, opts Options) (f *Fleet, err error) {
	testbinDir, err := testbin.Dir(opts.Testbin)
	if err != nil {
		return nil, err
	}
	kubeControllerManager, err := testbin.KubeControllerManager(testbinDir)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "tidegate-fleet-")
	if err != nil {
		return nil, err
	}
	if opts.Namespace == "" {
		opts.Namespace = "fleet"
	}
	f = &Fleet{Dir: dir, Namespace: opts.Namespace, Scheme: NewScheme(), apiServerArgs: opts.APIServerArgs, testbinDir: testbinDir,
		trustHub: opts.MembersTrustHubTokens}
	defer func() {
		if err != nil {
			f.Stop()
		}
	}()
	if err := os.MkdirAll(f.logDir(), 0o755); err != nil {
		return nil, err
	}
	if err := f.startReaper(); err != nil {
		return nil, err
	}

	for i := 1; i <= opts.Members; i++ {
		name := fmt.Sprintf("member-%d", i)
		f.Members = append(f.Members, &Member{Name: name, KubeConfigSecret: name + "-kubeconfig"})
	}
	// The API servers and the Git server start in parallel: each API server takes a few seconds.
	var wg sync.WaitGroup
	errs := make([]error, opts.Members+2)
	start := func(i int, fn func() error) {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = fn() }()
	}
	start(opts.Members+1, func() (err error) {
		if f.git, err = startGitServer(); err != nil {
			return err
		}
		f.Registry, err = StartRegistry()
		return err
	})
	if f.trustHub {
		// The members' authentication configuration names the hub's issuer and CA.
		if err := f.startHub(kubeControllerManager); err != nil {
			wg.Wait()
			return f, err
		}
		if err := f.allowIssuerDiscovery(ctx); err != nil {
			wg.Wait()
			return f, err
		}
	} else {
		start(0, func() error { return f.startHub(kubeControllerManager) })
	}
	for i, m := range f.Members {
		start(i+1, func() error { return f.startMember(m) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return f, err
	}
	if err := f.startFronts(opts.Front); err != nil {
		return f, err
	}
	if err := f.WriteMemberSecrets(ctx, opts.Namespace); err != nil {
		return f, err
	}
	if !opts.NoFlux {
		if err := f.startFlux(ctx, filepath.Join(testbinDir, "bin"), opts); err != nil {
			return f, err
		}
	}
	return f, nil
}

func (f *Fleet) logDir() string { return filepath.Join(f.Dir, "logs") }

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

// OpenLog creates a log file in the fleet's log directory that DumpLogs prints with the others.
func (f *Fleet) OpenLog(name string) io.Writer { return f.openLog(name) }

func (f *Fleet) openLog(name string) io.Writer {
	path := filepath.Join(f.logDir(), name)
	file, err := os.Create(path)
	if err != nil {
		return io.Discard
	}
	f.addLogFile(path)
	return file
}

// addLogFile adds path to the logs DumpLogs prints, once.
func (f *Fleet) addLogFile(path string) {
	f.logMu.Lock()
	defer f.logMu.Unlock()
	if !slices.Contains(f.logFiles, path) {
		f.logFiles = append(f.logFiles, path)
	}
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
	if f.Hub, err = client.New(f.HubConfig, client.Options{Scheme: f.Scheme}); err != nil {
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
	m.Client, err = client.New(m.Config, client.Options{Scheme: f.Scheme})
	return err
}

// WriteMemberSecrets writes every member's kubeconfig Secret (key "value") into namespace ns on the
// hub, creating ns. A Secret that exists is left as it is.
func (f *Fleet) WriteMemberSecrets(ctx context.Context, ns string) error {
	return f.WriteMemberSecretsThrough(ctx, ns, nil)
}

// WriteMemberSecretsThrough is WriteMemberSecrets with the kubeconfig through[member] for each
// member it names, in place of the fleet's own (direct, or through the member's Front): how a
// namespace with fronts of its own, which its clients alone go through, is given its Secrets
// (test/faultproxy's ProxyTenant).
func (f *Fleet) WriteMemberSecretsThrough(ctx context.Context, ns string, through map[string][]byte) error {
	if err := f.EnsureNamespace(ctx, ns); err != nil {
		return err
	}
	for _, m := range f.Members {
		kc := m.secret
		if through[m.Name] != nil {
			kc = through[m.Name]
		}
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: m.KubeConfigSecret, Namespace: ns},
			Data:       map[string][]byte{"value": kc},
		}
		if err := f.Hub.Create(ctx, s); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("writing kubeconfig secret %s/%s: %w", ns, s.Name, err)
		}
	}
	return nil
}

// KubeConfig returns a kubeconfig that reaches the member's API server directly as its admin,
// whatever stands in front of it: for a caller that puts a front of its own before it.
func (m *Member) KubeConfig() []byte { return m.kubeConfig }

// EnsureNamespace creates namespace ns on the hub if it does not exist.
func (f *Fleet) EnsureNamespace(ctx context.Context, ns string) error {
	err := f.Hub.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s on the hub: %w", ns, err)
	}
	return nil
}

func (f *Fleet) sourceStorage() string { return filepath.Join(f.Dir, "source-storage") }

func (f *Fleet) startFlux(ctx context.Context, bin string, opts Options) error {
	storage := f.sourceStorage()
	if err := os.MkdirAll(storage, 0o755); err != nil {
		return err
	}
	env := []string{"KUBECONFIG=" + f.fluxKubeConfig, "RUNTIME_NAMESPACE=flux-system"}
	// ports[0] and ports[1] are every controller's metrics and health ports.
	common := func(ports []int) []string {
		return []string{
			"--metrics-addr=" + addr(ports[0]), "--health-addr=" + addr(ports[1]),
			"--enable-leader-election=false", "--log-level=debug", "--log-encoding=console", "--events-addr=",
		}
	}
	type controller struct {
		name  string
		ports int
		args  func(ports []int) []string
	}
	controllers := []controller{{"source-controller", 3, func(ports []int) []string {
		args := append(common(ports), "--storage-path="+storage, "--storage-addr="+addr(ports[2]), "--storage-adv-addr="+addr(ports[2]))
		return append(args, opts.SourceControllerArgs...)
	}}}
	if !opts.NoKustomizeController {
		controllers = append(controllers, controller{"kustomize-controller", 2, func(ports []int) []string {
			args := append(common(ports), "--concurrent=10", "--requeue-dependency=2s")
			return append(args, opts.KustomizeControllerArgs...)
		}})
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for _, c := range controllers {
		if err := f.startController(ctx, c.name, filepath.Join(bin, c.name), env, c.ports, c.args); err != nil {
			return err
		}
	}
	return nil
}

// startController starts a Flux controller on n newly reserved ports and waits until it is ready.
// When a port it was given was taken before it could listen, it starts it again on other ports.
func (f *Fleet) startController(ctx context.Context, name, bin string, env []string, n int, args func(ports []int) []string) error {
	logPath := filepath.Join(f.logDir(), name+".log")
	f.addLogFile(logPath)
	// A temporary directory of its own: kustomize-controller removes every kustomization-* directory
	// of its TMPDIR when it starts (the leftovers of an earlier process of its own), and with one
	// /tmp for every fleet on the machine, a fleet starting deleted the builds in flight of the
	// others' kustomize-controllers (BuildFailed: "evalsymlink failure on /tmp/kustomization-…").
	tmp := filepath.Join(f.Dir, name+"-tmp")
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return err
	}
	env = append(slices.Clip(env), "TMPDIR="+tmp)
	for attempt := 1; ; attempt++ {
		ports, err := reserve(n)
		if err != nil {
			return err
		}
		f.reserved = append(f.reserved, ports)
		proc, err := startProcess(name, logPath, env, bin, args(ports.ports)...)
		if err != nil {
			return err
		}
		proc.ports = ports.ports
		if err = proc.waitReady(ctx); err == nil {
			f.processes = append(f.processes, proc)
			return nil
		}
		proc.stop()
		if attempt == 3 || !addressInUse(logPath) {
			return err
		}
		_ = os.Rename(logPath, fmt.Sprintf("%s.%d", logPath, attempt))
	}
}

// RestartSourceController stops source-controller and starts it again with the same flags and
// ports, as a restarted pod would be. With loseStorage its storage directory is emptied in between,
// as a pod without a persistent volume comes back: every artifact it served is gone until it
// builds them again. The log of the first run is kept as source-controller.log.before-restart.
func (f *Fleet) RestartSourceController(ctx context.Context, loseStorage bool) error {
	i := slices.IndexFunc(f.processes, func(p *process) bool { return p.name == "source-controller" })
	if i < 0 {
		return errors.New("localfleet: this fleet runs no source-controller")
	}
	old := f.processes[i]
	old.stop()
	if loseStorage {
		if err := os.RemoveAll(f.sourceStorage()); err != nil {
			return fmt.Errorf("emptying source-controller's storage: %w", err)
		}
		if err := os.MkdirAll(f.sourceStorage(), 0o755); err != nil {
			return err
		}
	}
	_ = os.Rename(old.logPath, old.logPath+".before-restart")
	f.addLogFile(old.logPath + ".before-restart")
	proc, err := startProcess(old.name, old.logPath, old.env, old.bin, old.args...)
	if err != nil {
		return err
	}
	proc.ports = old.ports
	f.processes[i] = proc
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	return proc.waitReady(ctx)
}

// Stop stops every process and API server and removes the fleet's directory. Safe to call twice.
func (f *Fleet) Stop() {
	f.stopOnce.Do(func() {
		if f.reaper != nil {
			_ = f.reaper.Process.Kill()
			_, _ = f.reaper.Process.Wait()
		}
		for i := len(f.processes) - 1; i >= 0; i-- {
			f.processes[i].stop()
		}
		for _, s := range f.reserved {
			s.release()
		}
		f.closeFronts()
		var wg sync.WaitGroup
		stopEnv := func(e *envtest.Environment) {
			if e == nil {
				return
			}
			wg.Add(1)
			go func() { defer wg.Done(); _ = e.Stop() }()
		}
		stopEnv(f.hub)
		for _, m := range f.Members {
			stopEnv(m.env)
		}
		wg.Wait()
		// envtest retries a control plane that did not come up in time, and the API server of a
		// failed try (slow to answer on a loaded machine) is not stopped with the last: end whatever
		// still names the fleet's directory, as the reaper would.
		killLeftovers(f.Dir)
		f.Registry.Stop()
		if f.git != nil {
			f.git.StopHTTP()
			os.RemoveAll(f.git.Root())
		}
		if os.Getenv("TIDEGATE_KEEP_FLEET") == "" {
			os.RemoveAll(f.Dir)
		}
	})
}

// DumpLogs writes the last lines of every log of the fleet (API servers, etcd, Flux controllers) to w.
func (f *Fleet) DumpLogs(w io.Writer, lines int) {
	for _, path := range f.logFiles {
		b, err := os.ReadFile(path)
		if err != nil || len(b) == 0 {
			continue
		}
		all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		if len(all) > lines {
			all = all[len(all)-lines:]
		}
		fmt.Fprintf(w, "===== %s (last %d lines) =====\n%s\n", filepath.Base(path), len(all), strings.Join(all, "\n"))
	}
}

// startReaper starts a watchdog, outside this process's group, that kills every process of the fleet
// and removes its directory once this process is gone. Stop ends it first; it matters only when the
// test binary dies without cleaning up (a `go test -timeout` panic, a kill): envtest's API servers and
// etcd would otherwise outlive it.
func (f *Fleet) startReaper() error {
	const script = `while kill -0 "$0" 2>/dev/null; do sleep 1; done
for p in /proc/[0-9]*; do [ "${p#/proc/}" = "$$" ] && continue; grep -qsaF -- "$1" "$p/cmdline" && kill -9 "${p#/proc/}" 2>/dev/null; done
rm -rf -- "$1"`
	cmd := exec.Command("/bin/sh", "-c", script, strconv.Itoa(os.Getpid()), f.Dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting the fleet reaper: %w", err)
	}
	f.reaper = cmd
	return nil
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

// PID returns the process id of the fleet's Flux controller named name ("source-controller",
// "kustomize-controller"), or 0 when it does not run.
func (f *Fleet) PID(name string) int {
	for _, p := range f.processes {
		if p.name == name {
			if ended, _ := p.exited(); !ended {
				return p.cmd.Process.Pid
			}
		}
	}
	return 0
}

// Member returns the member named name, or nil.
func (f *Fleet) Member(name string) *Member {
	for _, m := range f.Members {
		if m.Name == name {
			return m
		}
	}
	return nil
}
