package controllers

import (
	"context"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/internal/scheme"
	"github.com/tidegate/tidegate/internal/testbin"
)

// testHub is a real API server (envtest) with tidegate's and Flux's CRDs and no controller running.
type testHub struct {
	cfg   *rest.Config
	admin client.Client
}

func startTestHub(t testing.TB) *testHub {
	t.Helper()
	env, err := testbin.NewEnvironment("", testbin.TidegateCRDs|testbin.FluxCRDs)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	admin, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	return &testHub{cfg: cfg, admin: admin}
}

// manager starts a manager with the production options against the hub, its requests counted by
// counter; setup registers what it runs (nothing when nil) before it starts.
func (h *testHub) manager(t *testing.T, counter *requestCounter, setup func(ctrl.Manager) error) ctrl.Manager {
	t.Helper()
	opts := ManagerOptions(ManagerConfig{})
	mgr, err := ctrl.NewManager(counter.wrap(HubConfig(h.cfg, ManagerConfig{})), opts)
	if err != nil {
		t.Fatal(err)
	}
	if setup != nil {
		if err := setup(mgr); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	syncCtx, stop := context.WithTimeout(ctx, time.Minute)
	defer stop()
	if !mgr.GetCache().WaitForCacheSync(syncCtx) {
		t.Fatal("the manager's cache did not sync")
	}
	return mgr
}

// rollout creates a namespace with a tracked GitRepository and a FleetRollout of it.
func (h *testHub) rollout(t *testing.T, ns string, suspend bool) (*v1alpha1.FleetRollout, *sourcev1.GitRepository) {
	t.Helper()
	ctx := context.Background()
	if err := h.admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	git := &sourcev1.GitRepository{
		ObjectMeta: metav1.ObjectMeta{Name: "fleet", Namespace: ns},
		Spec: sourcev1.GitRepositorySpec{URL: "https://git.example/fleet.git", Interval: metav1.Duration{Duration: time.Minute},
			Reference: &sourcev1.GitRepositoryRef{Branch: "main"}},
	}
	one := int32(1)
	fr := &v1alpha1.FleetRollout{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: ns},
		Spec: v1alpha1.FleetRolloutSpec{
			SourceRef: v1alpha1.SourceReference{Kind: sourcev1.GitRepositoryKind, Name: git.Name},
			Path:      "./app",
			Waves:     []v1alpha1.Wave{{Name: "all", Count: &one}},
			Suspend:   suspend,
		},
	}
	for _, o := range []client.Object{git, fr} {
		if err := h.admin.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	return fr, git
}

// eventually polls ok until it holds, failing the test after a minute with what it last said.
func eventually(t *testing.T, what string, ok func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		done, why := ok()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s", what, why)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// requestCounter counts the requests that go through a rest.Config's transport, by verb and path.
// Watches are long-lived and not counted.
type requestCounter struct {
	mu     sync.Mutex
	counts map[string]int
	// accepts holds, by verb and path ("WATCH" for a watch), the media types asked for.
	accepts map[string]map[string]bool
}

func (c *requestCounter) wrap(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return countingTransport{c, rt}
	}
	return cfg
}

type countingTransport struct {
	c  *requestCounter
	rt http.RoundTripper
}

func (t countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	t.c.mu.Lock()
	if t.c.counts == nil {
		t.c.counts, t.c.accepts = map[string]int{}, map[string]map[string]bool{}
	}
	verb := r.Method
	if r.URL.Query().Get("watch") == "true" {
		verb = "WATCH"
	} else {
		t.c.counts[r.Method+" "+r.URL.Path]++
	}
	if t.c.accepts[verb+" "+r.URL.Path] == nil {
		t.c.accepts[verb+" "+r.URL.Path] = map[string]bool{}
	}
	t.c.accepts[verb+" "+r.URL.Path][r.Header.Get("Accept")] = true
	t.c.mu.Unlock()
	return t.rt.RoundTrip(r)
}

// acceptsOf is the media types asked for by each request to a path ending in suffix, by verb and path.
func (c *requestCounter) acceptsOf(suffix string) map[string][]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string][]string{}
	for k, types := range c.accepts {
		if strings.HasSuffix(k, suffix) {
			out[k] = slices.Sorted(maps.Keys(types))
		}
	}
	return out
}

func (c *requestCounter) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.counts)
}

// since returns the requests made after snapshot before, by verb and path.
func (c *requestCounter) since(before map[string]int) map[string]int {
	out := map[string]int{}
	for k, n := range c.snapshot() {
		if d := n - before[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}
