package e2e

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/controllers"
)

// TestE2EIdleRolloutCostsNothing: a completed rollout on a fleet where real kustomize-controller
// re-reconciles every Kustomization every 5 s. Over three rollout intervals the controller makes no
// write, no create attempt and no Secret read on the hub, and reconciles the rollout about once per
// spec.interval, not once per Flux status write.
func TestE2EIdleRolloutCostsNothing(t *testing.T) {
	parallel(t)
	// Its namespace, its own on the shared fleet, tells this test's rollout apart in the
	// process-wide metrics registry, which the managers of the tests running beside it share; the
	// requests counted are its own manager's.
	s, first := newFleetSetup(t, 3, demoPackage("v1"))
	var requests hubRequests
	startTidegateOn(t, s, requests.wrap(s.f.HubConfig), controllers.Options{})
	ctx, cancel := testContext(t, 6*time.Minute)
	defer cancel()
	const fluxInterval, rolloutInterval = 5 * time.Second, 10 * time.Second
	s.rollOutFirst(ctx, t, first, func(fr *v1alpha1.FleetRollout) {
		fr.Spec.Template.Interval = &metav1.Duration{Duration: fluxInterval}
		fr.Spec.Interval = &metav1.Duration{Duration: rolloutInterval}
	})
	// Three members for three waves: the canary takes one and the ring (40%) two, so rest, with no
	// cluster left, is skipped, not refused, and the rollout completes without it.
	if rest := s.rollout(t, "web").Status.Waves[2]; rest.Phase != v1alpha1.WaveSkipped || !strings.Contains(rest.Message, "no cluster left for this wave") {
		t.Errorf("wave rest = %+v, want Skipped: no cluster left for this wave", rest)
	}
	// Let the last wave's writes and reconciles pass.
	time.Sleep(2 * rolloutInterval)

	// kustomize-controller's status writes over the window, and how many of them are mid-reconcile
	// (Ready Unknown).
	watcher, err := client.NewWithWatch(s.f.HubConfig, client.Options{Scheme: s.f.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	w, err := watcher.Watch(ctx, &kustomizev1.KustomizationList{}, client.InNamespace(s.ns))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	fluxWrites, fluxUnknown := 0, 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if ks, ok := ev.Object.(*kustomizev1.Kustomization); ok {
				fluxWrites++
				if conditions.IsUnknown(ks, meta.ReadyCondition) {
					fluxUnknown++
				}
			}
		}
	}()

	const window = 3 * rolloutInterval
	before, quiet := reconciles(t, s.ns, "web"), requests.snapshot()
	time.Sleep(window)
	got, during := reconciles(t, s.ns, "web")-before, requests.since(quiet)
	w.Stop()
	<-done

	var verbs []string
	for k, n := range during {
		verbs = append(verbs, fmt.Sprintf("%s ×%d", k, n))
	}
	sort.Strings(verbs)
	t.Logf("over %s idle: %d Kustomization writes by Flux (%d with Ready Unknown), %d rollout reconciles, manager requests %v",
		window, fluxWrites, fluxUnknown, got, verbs)
	if fluxUnknown < 3 {
		t.Fatalf("kustomize-controller went through %d Ready=Unknown writes in the window, too few to show anything", fluxUnknown)
	}
	for k, n := range during {
		verb, path, _ := strings.Cut(k, " ")
		if verb != http.MethodGet || strings.Contains(path, "/secrets") {
			t.Errorf("%d requests %s while idle, want no write, no create and no Secret read", n, k)
		}
	}
	// One reconcile per spec.interval, give or take the jitter and the window's edges.
	if limit := int(window/rolloutInterval) + 2; got > limit {
		t.Errorf("%d rollout reconciles in %s at spec.interval %s, want at most %d", got, window, rolloutInterval, limit)
	}
}

// hubRequests counts the requests through a rest.Config's transport by verb and path (watches,
// long-lived, are not counted).
type hubRequests struct {
	mu     sync.Mutex
	counts map[string]int
}

func (c *hubRequests) wrap(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.URL.Query().Get("watch") != "true" {
				c.mu.Lock()
				if c.counts == nil {
					c.counts = map[string]int{}
				}
				c.counts[r.Method+" "+r.URL.Path]++
				c.mu.Unlock()
			}
			return rt.RoundTrip(r)
		})
	}
	return cfg
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func (c *hubRequests) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.counts))
	for k, v := range c.counts {
		out[k] = v
	}
	return out
}

func (c *hubRequests) since(before map[string]int) map[string]int {
	out := map[string]int{}
	for k, n := range c.snapshot() {
		if d := n - before[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}
