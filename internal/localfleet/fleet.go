package localfleet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"

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
	// NotificationController starts Flux's notification-controller on the hub too, after
	// source-controller and kustomize-controller, with the CRDs NotificationCRDs gives (nil: those
	// of its build as they are); Fleet.EventsAddr is then its events endpoint
	// (Fleet.StartNotificationController).
	NotificationController bool
	NotificationCRDs       NotificationCRDs
	// HelmController starts Flux's helm-controller on the hub too, after the other Flux
	// controllers, with its CRD (Fleet.StartHelmController).
	HelmController bool
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
	// EventsAddr is the events endpoint of the fleet's notification-controller, when it runs one
	// (StartNotificationController): tidegate's --events-addr.
	EventsAddr string

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
	// prometheus are the Prometheus servers StartPrometheus started, which a test may start from a
	// goroutine of its own while others read the fleet: promMu guards the list.
	promMu     sync.Mutex
	prometheus []*Prometheus
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
	if opts.NotificationController {
		if err := f.StartNotificationController(ctx, opts.NotificationCRDs); err != nil {
			return f, err
		}
	}
	if opts.HelmController {
		if err := f.StartHelmController(ctx); err != nil {
			return f, err
		}
	}
	return f, nil
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

// Member returns the member named name, or nil.
func (f *Fleet) Member(name string) *Member {
	for _, m := range f.Members {
		if m.Name == name {
			return m
		}
	}
	return nil
}
