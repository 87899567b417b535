package localfleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
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
	kubeConfig []byte
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

	hub           *envtest.Environment
	apiServerArgs func(string, *envtest.Arguments)
	git           *gittestserver.GitServer
	processes     []*process
	reaper        *exec.Cmd
	logFiles      []string
	stopOnce      sync.Once
}

// NewScheme returns a scheme with the Kubernetes, Flux source and kustomize, and tidegate types.
func NewScheme() *runtime.Scheme { return scheme.New() }

// Start starts a fleet. On error everything already started is stopped.
func Start(ctx context.Context, opts Options) (f *Fleet, err error) {
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
	f = &Fleet{Dir: dir, Namespace: opts.Namespace, Scheme: NewScheme(), apiServerArgs: opts.APIServerArgs}
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

	// The API servers and the Git server start in parallel: each API server takes a few seconds.
	if f.hub, err = f.newEnv(testbinDir, "hub", testbin.TidegateCRDs|testbin.FluxCRDs); err != nil {
		return nil, err
	}
	for i := 1; i <= opts.Members; i++ {
		name := fmt.Sprintf("member-%d", i)
		env, err := f.newEnv(testbinDir, name, 0)
		if err != nil {
			return nil, err
		}
		f.Members = append(f.Members, &Member{Name: name, KubeConfigSecret: name + "-kubeconfig", env: env})
	}
	var wg sync.WaitGroup
	errs := make([]error, opts.Members+2)
	start := func(i int, fn func() error) {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = fn() }()
	}
	start(0, func() error { return f.startHub(kubeControllerManager) })
	for i, m := range f.Members {
		start(i+1, func() error { return f.startMember(m) })
	}
	start(opts.Members+1, func() (err error) { f.git, err = startGitServer(); return err })
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return f, err
	}
	if err := f.writeMemberSecrets(ctx, opts.Namespace); err != nil {
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

func (f *Fleet) newEnv(testbinDir, name string, crds testbin.CRDs) (*envtest.Environment, error) {
	env, err := testbin.NewEnvironment(testbinDir, crds)
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
	env.ControlPlane.APIServer = &envtest.APIServer{Out: apiLog, Err: apiLog, StartTimeout: 2 * time.Minute, CertDir: certDir}
	env.ControlPlane.Etcd = &envtest.Etcd{Out: etcdLog, Err: etcdLog, StartTimeout: 2 * time.Minute, DataDir: dataDir}
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
	f.logFiles = append(f.logFiles, path)
	return file
}

// startHub starts the hub's API server and, beside it, its garbage collector (gc.go).
func (f *Fleet) startHub(kubeControllerManager string) error {
	if _, err := f.hub.Start(); err != nil {
		return fmt.Errorf("starting hub API server: %w (logs in %s)", err, f.logDir())
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
	if f.Hub, err = client.New(f.HubConfig, client.Options{Scheme: f.Scheme}); err != nil {
		return err
	}
	return f.startGarbageCollector(kubeControllerManager)
}

func (f *Fleet) startMember(m *Member) error {
	if _, err := m.env.Start(); err != nil {
		return fmt.Errorf("starting %s API server: %w (logs in %s)", m.Name, err, f.logDir())
	}
	user, err := m.env.AddUser(envtest.User{Name: "fleet-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fmt.Errorf("adding %s admin user: %w", m.Name, err)
	}
	m.Config = user.Config()
	if m.kubeConfig, err = user.KubeConfig(); err != nil {
		return err
	}
	m.Client, err = client.New(m.Config, client.Options{Scheme: f.Scheme})
	return err
}

// WriteMemberSecrets writes every member's kubeconfig Secret into namespace ns on the hub, creating ns.
func (f *Fleet) writeMemberSecrets(ctx context.Context, ns string) error {
	if err := f.EnsureNamespace(ctx, ns); err != nil {
		return err
	}
	for _, m := range f.Members {
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: m.KubeConfigSecret, Namespace: ns},
			Data:       map[string][]byte{"value": m.kubeConfig},
		}
		if err := f.Hub.Create(ctx, s); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("writing kubeconfig secret %s/%s: %w", ns, s.Name, err)
		}
	}
	return nil
}

// WriteMemberSecrets writes every member's kubeconfig Secret (key "value") into namespace ns on the hub.
func (f *Fleet) WriteMemberSecrets(ctx context.Context, ns string) error {
	return f.writeMemberSecrets(ctx, ns)
}

// EnsureNamespace creates namespace ns on the hub if it does not exist.
func (f *Fleet) EnsureNamespace(ctx context.Context, ns string) error {
	err := f.Hub.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s on the hub: %w", ns, err)
	}
	return nil
}

func (f *Fleet) startFlux(ctx context.Context, bin string, opts Options) error {
	ports, err := freePorts(5)
	if err != nil {
		return err
	}
	storage := filepath.Join(f.Dir, "source-storage")
	if err := os.MkdirAll(storage, 0o755); err != nil {
		return err
	}
	env := []string{"KUBECONFIG=" + f.HubKubeConfigPath, "RUNTIME_NAMESPACE=flux-system"}
	common := func(metrics, health int) []string {
		return []string{
			"--metrics-addr=" + addr(metrics), "--health-addr=" + addr(health),
			"--enable-leader-election=false", "--log-level=debug", "--log-encoding=console", "--events-addr=",
		}
	}
	srcArgs := append(common(ports[0], ports[1]),
		"--storage-path="+storage, "--storage-addr="+addr(ports[2]), "--storage-adv-addr="+addr(ports[2]))
	srcArgs = append(srcArgs, opts.SourceControllerArgs...)
	ksArgs := append(common(ports[3], ports[4]), "--concurrent=10", "--requeue-dependency=2s")
	ksArgs = append(ksArgs, opts.KustomizeControllerArgs...)

	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	type controller struct {
		name   string
		args   []string
		health int
	}
	controllers := []controller{{"source-controller", srcArgs, ports[1]}}
	if !opts.NoKustomizeController {
		controllers = append(controllers, controller{"kustomize-controller", ksArgs, ports[4]})
	}
	for _, p := range controllers {
		logPath := filepath.Join(f.logDir(), p.name+".log")
		f.logFiles = append(f.logFiles, logPath)
		proc, err := startProcess(p.name, logPath, env, filepath.Join(bin, p.name), p.args...)
		if err != nil {
			return err
		}
		f.processes = append(f.processes, proc)
		if err := proc.waitHTTP200(ctx, "http://"+addr(p.health)+"/readyz"); err != nil {
			return err
		}
	}
	return nil
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
// process of its own identity, told apart from the others in the hub's audit log.
func (f *Fleet) AddHubUser(name string, groups []string) (*rest.Config, []byte, error) {
	user, err := f.hub.AddUser(envtest.User{Name: name, Groups: groups}, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("adding hub user %s: %w", name, err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		return nil, nil, err
	}
	return user.Config(), kc, nil
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
