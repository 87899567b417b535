package member

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/internal/localfleet"
	"github.com/tidegate/tidegate/internal/testbin"
)

// requestCounter counts the requests that go through a rest.Config's transport, by verb and path.
type requestCounter struct {
	mu     sync.Mutex
	counts map[string]int
}

func (c *requestCounter) wrap(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(r *http.Request) (*http.Response, error) {
			c.mu.Lock()
			if c.counts == nil {
				c.counts = map[string]int{}
			}
			c.counts[r.Method+" "+r.URL.Path]++
			c.mu.Unlock()
			return rt.RoundTrip(r)
		})
	}
	return cfg
}

func (c *requestCounter) get(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[key]
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// kubeConfigFor writes a kubeconfig with cfg's server and credentials.
func kubeConfigFor(t *testing.T, cfg *rest.Config) []byte {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["ctx"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	kc.CurrentContext = "ctx"
	b, err := clientcmd.Write(*kc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestClientsReadASecretOnlyWhenItChanged runs Clients against a real API server that is both the
// hub (it holds the kubeconfig Secrets) and the member (they point at it), and counts the Secret
// reads: many FleetClusters sharing one Secret, used again and again, read it once; a changed Secret
// is read once more.
func TestClientsReadASecretOnlyWhenItChanged(t *testing.T) {
	env, err := testbin.NewEnvironment("", testbin.TidegateCRDs)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	scheme := localfleet.NewScheme()
	var hub requestCounter
	secrets, err := client.New(hub.wrap(cfg), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	versions, err := cache.New(cfg, cache.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = versions.Start(ctx) }()
	if !versions.WaitForCacheSync(ctx) {
		t.Fatal("cache did not sync")
	}

	const ns = "default"
	kubeconfig := kubeConfigFor(t, cfg)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "shared", Namespace: ns}, Data: map[string][]byte{"value": kubeconfig}}
	broken := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "broken", Namespace: ns}, Data: map[string][]byte{"value": []byte("not: [a kubeconfig")}}
	for _, s := range []*corev1.Secret{secret, broken} {
		if err := secrets.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	fc := func(name, secret string) *v1alpha1.FleetCluster {
		return &v1alpha1.FleetCluster{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: v1alpha1.FleetClusterSpec{
			KubeConfig: &meta.KubeConfigReference{SecretRef: &meta.SecretKeyReference{Name: secret}}}}
	}
	const clusters, rounds = 50, 4
	m := &Clients{Secrets: secrets, Versions: versions, Hub: cfg, Scheme: scheme}
	secretPath := "/api/v1/namespaces/" + ns + "/secrets/"

	use := func(t *testing.T) map[string]client.Client {
		t.Helper()
		got := map[string]client.Client{}
		for range rounds {
			for i := range clusters {
				name := fmt.Sprintf("c%d", i)
				c, err := m.Client(ctx, fc(name, "shared"))
				if err != nil {
					t.Fatal(err)
				}
				if prev, ok := got[name]; ok && prev != c {
					t.Fatalf("%s: a new client for an unchanged Secret", name)
				}
				got[name] = c
				if _, err := m.Config(ctx, fc(name, "shared")); err != nil {
					t.Fatal(err)
				}
			}
		}
		return got
	}

	var first map[string]client.Client
	t.Run("an unchanged Secret is read once, whatever shares it", func(t *testing.T) {
		first = use(t)
		if n := hub.get("GET " + secretPath + "shared"); n != 1 {
			t.Errorf("%d GETs of the shared Secret for %d clusters × %d rounds, want 1", n, clusters, rounds)
		}
		var ns corev1.Namespace
		if err := first["c0"].Get(ctx, client.ObjectKey{Name: "default"}, &ns); err != nil {
			t.Fatalf("the member client does not reach the member: %v", err)
		}
	})

	t.Run("each cluster has its own request budget", func(t *testing.T) {
		a1, _ := m.Config(ctx, fc("c1", "shared"))
		a2, _ := m.Config(ctx, fc("c1", "shared"))
		b, _ := m.Config(ctx, fc("c2", "shared"))
		if a1.RateLimiter == nil || a1.RateLimiter != a2.RateLimiter || a1.RateLimiter == b.RateLimiter {
			t.Error("want one rate limiter per cluster, shared by its configs")
		}
		if a1.QPS != DefaultQPS || a1.Burst != DefaultBurst || a1.Timeout != DefaultTimeout {
			t.Errorf("QPS %v, burst %d, timeout %v; want the defaults", a1.QPS, a1.Burst, a1.Timeout)
		}
		if first["c1"] == first["c2"] {
			t.Error("two clusters share one client")
		}
	})

	t.Run("a changed Secret is read once more", func(t *testing.T) {
		if err := secrets.Get(ctx, client.ObjectKeyFromObject(secret), secret); err != nil {
			t.Fatal(err)
		}
		before := hub.get("GET " + secretPath + "shared")
		secret.Data["value"] = append(kubeconfig, []byte("\n# rotated\n")...)
		if err := secrets.Update(ctx, secret); err != nil {
			t.Fatal(err)
		}
		// The metadata cache follows the Secret's resourceVersion by watch.
		for deadline := time.Now().Add(30 * time.Second); ; {
			obj := &metav1.PartialObjectMetadata{}
			obj.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
			if err := versions.Get(ctx, client.ObjectKeyFromObject(secret), obj); err == nil && obj.ResourceVersion == secret.ResourceVersion {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the cache did not see the update")
			}
			time.Sleep(50 * time.Millisecond)
		}
		second := use(t)
		if n := hub.get("GET "+secretPath+"shared") - before; n != 1 {
			t.Errorf("%d GETs of the changed Secret, want 1", n)
		}
		if second["c0"] == first["c0"] {
			t.Error("the client was not rebuilt from the changed Secret")
		}
	})

	t.Run("a broken kubeconfig is an error naming the cluster, read once", func(t *testing.T) {
		for range rounds {
			_, err := m.Client(ctx, fc("b", "broken"))
			if !IsKubeConfigError(err) || !strings.Contains(err.Error(), "fleetcluster default/b") || !strings.Contains(err.Error(), "default/broken") {
				t.Fatalf("err = %v, want a kubeconfig error naming the cluster and the Secret", err)
			}
		}
		if n := hub.get("GET " + secretPath + "broken"); n != 1 {
			t.Errorf("%d GETs of the broken Secret, want 1", n)
		}
	})

	t.Run("a missing Secret is a kubeconfig error", func(t *testing.T) {
		_, err := m.Client(ctx, fc("m", "absent"))
		if !IsKubeConfigError(err) || !strings.Contains(err.Error(), "default/absent not found") {
			t.Fatalf("err = %v, want a kubeconfig error", err)
		}
	})

	t.Run("the number of clients kept is bounded", func(t *testing.T) {
		small := &Clients{Secrets: secrets, Versions: versions, Hub: cfg, Scheme: scheme, CacheSize: 4}
		for i := range 10 {
			if _, err := small.Client(ctx, fc(fmt.Sprintf("c%d", i), "shared")); err != nil {
				t.Fatal(err)
			}
		}
		if n := small.members.Len(); n > 4 {
			t.Errorf("%d member clients kept, want at most 4", n)
		}
	})

	t.Run("a metadata cache that cannot sync is given up on, and the Secret read", func(t *testing.T) {
		// As the manager's cache is when the controller may not list Secrets: a Get waits for a sync
		// that never comes.
		stuck := &Clients{Secrets: secrets, Versions: neverSynced{}, Hub: cfg, Scheme: scheme}
		before := hub.get("GET " + secretPath + "shared")
		for i := range 3 {
			if _, err := stuck.Client(ctx, fc(fmt.Sprintf("c%d", i), "shared")); err != nil {
				t.Fatal(err)
			}
		}
		if n := hub.get("GET "+secretPath+"shared") - before; n != 3 {
			t.Errorf("%d GETs, want 3", n)
		}
	})

	t.Run("without the metadata cache every use reads the Secret", func(t *testing.T) {
		// The control: what the cache saves.
		uncached := &Clients{Secrets: secrets, Hub: cfg, Scheme: scheme}
		before := hub.get("GET " + secretPath + "shared")
		for i := range 5 {
			if _, err := uncached.Client(ctx, fc(fmt.Sprintf("c%d", i), "shared")); err != nil {
				t.Fatal(err)
			}
		}
		if n := hub.get("GET "+secretPath+"shared") - before; n != 5 {
			t.Errorf("%d GETs without the cache, want 5", n)
		}
	})
}

// neverSynced is a cache whose informers never sync: a Get waits until its context ends.
type neverSynced struct{ client.Reader }

func (neverSynced) Get(ctx context.Context, _ client.ObjectKey, _ client.Object, _ ...client.GetOption) error {
	<-ctx.Done()
	return ctx.Err()
}
