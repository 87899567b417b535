package member

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	fluxcache "github.com/fluxcd/pkg/cache"
	"golang.org/x/sync/singleflight"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/lru"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// Defaults of the Clients' limits.
const (
	// DefaultQPS and DefaultBurst are the request rate tidegate allows itself towards one member
	// cluster: a soaking wave's availability reads and a preflight's discovery and dry-runs share it.
	DefaultQPS   = 20
	DefaultBurst = 40
	// DefaultTimeout bounds one request to a member's API server.
	DefaultTimeout = 10 * time.Second
	// DefaultCacheSize bounds the kubeconfigs and the member clients kept (each, least recently used
	// first out).
	DefaultCacheSize = 1024
)

// userAgent is what member API servers see of tidegate's requests.
const userAgent = "tidegate-controller"

// Clients reaches member clusters: REST configs, clients and discovery clients built from
// FleetClusters' kubeconfig Secrets, kept while the Secret's resourceVersion stays the same.
//
// A kubeconfig Secret is read whole only when its resourceVersion changed: Versions tells the
// resourceVersion from a metadata-only informer (the manager's cache, which so never holds a
// Secret's data). What is built from one kubeconfig (its parsed config, HTTP client and REST mapper)
// is shared by every FleetCluster that names the same Secret and key; each FleetCluster has its own
// rate limiter, since each stands for a cluster of its own.
//
// Its zero value is not usable: set Secrets, Hub and Scheme.
type Clients struct {
	// Secrets reads kubeconfig Secrets whole, from the API server.
	Secrets client.Reader
	// Versions reads kubeconfig Secrets' metadata (metav1.PartialObjectMetadata), from a cache. nil:
	// every use reads the Secret through Secrets.
	Versions client.Reader
	// Tokens reads workload identity ConfigMaps and mints ServiceAccount tokens on the hub
	// (spec.kubeConfig.configMapRef, identity.go): a hub client, uncached. nil: such FleetClusters
	// are refused.
	Tokens client.Client
	// WorkloadIdentity gets the REST config of a member reached through workload identity:
	// fluxcd/pkg/auth/utils.GetRESTConfig, which links the AWS, Azure and GCP SDKs, so it is set by
	// the controller's binary and by the tests of workload identity, not linked into every package
	// that reaches members. nil: such FleetClusters are refused with an error saying so.
	WorkloadIdentity RESTConfigFunc
	// Hub is the hub's REST config, used for a FleetCluster without spec.kubeConfig.
	Hub *rest.Config
	// Scheme of the member clients.
	Scheme *runtime.Scheme
	// QPS and Burst limit the requests to one member; zero is DefaultQPS and DefaultBurst.
	QPS   float32
	Burst int
	// Timeout bounds one request to a member; zero is DefaultTimeout.
	Timeout time.Duration
	// CacheSize bounds the kubeconfigs and the member clients kept; zero is DefaultCacheSize.
	CacheSize int
	// Namespaces, when set, are the only namespaces whose FleetClusters have credentials tidegate
	// may read (the controller's --fleet-namespaces); a FleetCluster elsewhere with a kubeConfig
	// gets a kubeconfig error that says so.
	Namespaces []string
	// AllowInsecure accepts kubeconfigs whose cluster sets insecure-skip-tls-verify or proxy-url
	// (--allow-insecure-member-kubeconfigs); refused otherwise.
	AllowInsecure bool

	once    sync.Once
	sources *lru.Cache // sourceKey → *source
	members *lru.Cache // types.NamespacedName → *memberClient
	loads   singleflight.Group
	mu      sync.Mutex // building a memberClient's client, versionsOff
	hub     *source
	tokens  *fluxcache.TokenCache
	// versionsOff is until when Versions is not asked.
	versionsOff time.Time
}

// sourceKey names a kubeconfig: a Secret and the key in it (empty: the default keys), or a workload
// identity ConfigMap (kind "ConfigMap").
type sourceKey struct {
	kind, namespace, name, key string
}

// source is one kubeconfig, at one resourceVersion of its Secret, and what is built from it.
type source struct {
	version string
	cfg     *rest.Config // QPS, Burst and Timeout set, no rate limiter
	http    *http.Client
	mapper  meta.RESTMapper
	// err is why this version of the kubeconfig cannot be used; it names the Secret.
	err error
}

// memberClient is what one FleetCluster has of its own: a rate limiter and a client using it.
type memberClient struct {
	src     *source
	limiter flowcontrol.RateLimiter
	client  client.Client
}

func (m *Clients) init() {
	m.once.Do(func() {
		size := m.CacheSize
		if size <= 0 {
			size = DefaultCacheSize
		}
		m.sources, m.members = lru.New(size), lru.New(size)
		m.tokens, _ = fluxcache.NewTokenCache(identityTokenCacheSize) // an error only for a capacity ≤ 0
		if m.Hub != nil {
			m.hub = m.build(rest.CopyConfig(m.Hub), "")
		}
	})
}

// Config returns the member's REST config: a copy the caller may change, sharing the member's rate
// limiter. It comes from spec.kubeConfig.secretRef (keys: the ref's key, else "value", else
// "value.yaml", as Flux does) in the FleetCluster's namespace, or from Hub when spec.kubeConfig is nil.
//
// A missing Secret or key and an unusable kubeconfig give an error for which IsKubeConfigError is
// true; other errors (reading the Secret failed) are transient. Errors name the FleetCluster and the
// Secret and never quote its content. Kubeconfigs that reference local files or run exec or
// auth-provider plugins are refused: the kubeconfig comes from a Secret that any fleet author may
// write, and must not make the controller read its own files or run programs. Client and Discovery
// return the same errors.
func (m *Clients) Config(ctx context.Context, fc *v1alpha1.FleetCluster) (*rest.Config, error) {
	mc, err := m.member(ctx, fc)
	if err != nil {
		return nil, err
	}
	return mc.config(), nil
}

// Client returns a client for the member's API server.
func (m *Clients) Client(ctx context.Context, fc *v1alpha1.FleetCluster) (client.Client, error) {
	mc, err := m.member(ctx, fc)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if mc.client == nil {
		c, err := client.New(mc.config(), client.Options{Scheme: m.Scheme, HTTPClient: mc.src.http, Mapper: mc.src.mapper})
		if err != nil {
			return nil, fmt.Errorf("fleetcluster %s/%s: building a client from %s: %s", fc.Namespace, fc.Name, CredentialSource(fc), Redact(err.Error(), mc.src.cfg))
		}
		mc.client = c
	}
	return mc.client, nil
}

// Discovery returns a discovery client for the member's API server, and the config it uses (for
// its host, and to redact its credentials from messages; the caller must not change it).
func (m *Clients) Discovery(ctx context.Context, fc *v1alpha1.FleetCluster) (*discovery.DiscoveryClient, *rest.Config, error) {
	mc, err := m.member(ctx, fc)
	if err != nil {
		return nil, nil, err
	}
	cfg := mc.config()
	dc, err := discovery.NewDiscoveryClientForConfigAndClient(cfg, mc.src.http)
	if err != nil {
		return nil, nil, &kubeConfigError{msg: fmt.Sprintf("fleetcluster %s/%s: building a client from %s: %s",
			fc.Namespace, fc.Name, CredentialSource(fc), Redact(err.Error(), cfg))}
	}
	return dc, cfg, nil
}

// config is a copy of the source's config that shares the member's rate limiter.
func (mc *memberClient) config() *rest.Config {
	cfg := rest.CopyConfig(mc.src.cfg)
	cfg.RateLimiter = mc.limiter
	return cfg
}

// member returns fc's memberClient, made anew when its kubeconfig changed.
func (m *Clients) member(ctx context.Context, fc *v1alpha1.FleetCluster) (*memberClient, error) {
	src, err := m.source(ctx, fc)
	if err != nil {
		return nil, err
	}
	if src.err != nil {
		return nil, forCluster(fc, src.err)
	}
	name := types.NamespacedName{Namespace: fc.Namespace, Name: fc.Name}
	m.mu.Lock()
	defer m.mu.Unlock()
	if v, ok := m.members.Get(name); ok && v.(*memberClient).src == src {
		return v.(*memberClient), nil
	}
	mc := &memberClient{src: src, limiter: flowcontrol.NewTokenBucketRateLimiter(m.qps(), m.burst())}
	m.members.Add(name, mc)
	return mc, nil
}

// source returns the kubeconfig fc names, reading its Secret only when its resourceVersion is not
// the one already held.
func (m *Clients) source(ctx context.Context, fc *v1alpha1.FleetCluster) (*source, error) {
	m.init()
	if fc.Spec.KubeConfig == nil {
		if m.hub == nil {
			return nil, noHubError(fc)
		}
		return m.hub, nil
	}
	if len(m.Namespaces) > 0 && !slices.Contains(m.Namespaces, fc.Namespace) {
		return nil, &kubeConfigError{msg: fmt.Sprintf(
			"fleetcluster %s/%s: namespace %s is not one of the controller's --fleet-namespaces (%s), where it may read member credentials: add it there and bind the ClusterRole tidegate-member-credentials in it, or move the FleetCluster",
			fc.Namespace, fc.Name, fc.Namespace, strings.Join(m.Namespaces, ","))}
	}
	if cm := configMapOf(fc); cm.Name != "" {
		return m.identitySource(ctx, fc, cm)
	}
	secret, err := secretOf(fc)
	if err != nil {
		return nil, err
	}
	key := sourceKey{kind: "Secret", namespace: secret.Namespace, name: secret.Name, key: fc.Spec.KubeConfig.SecretRef.Key}
	held, _ := m.sources.Get(key)
	if version, ok := m.version(ctx, "Secret", secret); ok && held != nil && held.(*source).version == version {
		return held.(*source), nil
	}
	v, err, _ := m.loads.Do(fmt.Sprintf("%s/%s/%s", key.namespace, key.name, key.key), func() (any, error) {
		var s corev1.Secret
		if err := m.Secrets.Get(ctx, secret, &s); err != nil {
			return nil, err
		}
		if held, ok := m.sources.Get(key); ok && held.(*source).version == s.ResourceVersion {
			return held, nil // the cache lags the API server: nothing changed
		}
		src := &source{version: s.ResourceVersion}
		if cfg, err := configFromSecret(&s, key.key, m.AllowInsecure); err != nil {
			src.err = err
		} else {
			src = m.build(cfg, s.ResourceVersion)
		}
		m.sources.Add(key, src)
		return src, nil
	})
	if err != nil {
		return nil, readError(fc, secret, err)
	}
	return v.(*source), nil
}

// versionWait bounds a wait for the metadata cache (its first sync); a cache that could not tell
// (it may not list Secrets, say) is not asked again for versionRetry, and the Secret is read instead.
const (
	versionWait  = 5 * time.Second
	versionRetry = time.Minute
)

// version is the resourceVersion of the Secret or ConfigMap (kind) as the cache has it; false when
// it cannot tell.
func (m *Clients) version(ctx context.Context, kind string, name types.NamespacedName) (string, bool) {
	if m.Versions == nil {
		return "", false
	}
	m.mu.Lock()
	off := time.Now().Before(m.versionsOff)
	m.mu.Unlock()
	if off {
		return "", false
	}
	ctx, cancel := context.WithTimeout(ctx, versionWait)
	defer cancel()
	obj := &metav1.PartialObjectMetadata{}
	obj.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind(kind))
	if err := m.Versions.Get(ctx, name, obj); err != nil {
		if !apierrors.IsNotFound(err) {
			m.mu.Lock()
			m.versionsOff = time.Now().Add(versionRetry)
			m.mu.Unlock()
		}
		return "", false // not in the cache (yet), or no cache: the API server says
	}
	return obj.ResourceVersion, true
}

// build makes what every member of one kubeconfig shares.
func (m *Clients) build(cfg *rest.Config, version string) *source {
	cfg.QPS, cfg.Burst, cfg.Timeout, cfg.RateLimiter = m.qps(), m.burst(), m.timeout(), nil
	cfg.UserAgent = userAgent
	src := &source{version: version, cfg: cfg}
	hc, err := rest.HTTPClientFor(cfg)
	if err == nil {
		src.http = hc
		src.mapper, err = apiutil.NewDynamicRESTMapper(cfg, hc)
	}
	if err != nil {
		src.err = &kubeConfigError{msg: "building a client from the kubeconfig: " + Redact(err.Error(), cfg)}
	}
	return src
}

func (m *Clients) qps() float32 {
	if m.QPS > 0 {
		return m.QPS
	}
	return DefaultQPS
}

func (m *Clients) burst() int {
	if m.Burst > 0 {
		return m.Burst
	}
	return DefaultBurst
}

func (m *Clients) timeout() time.Duration {
	if m.Timeout > 0 {
		return m.Timeout
	}
	return DefaultTimeout
}
