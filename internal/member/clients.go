package member

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// clientTimeout bounds one request to a member's API server.
const clientTimeout = 10 * time.Second

// Clients builds and caches one client per member cluster, rebuilt when its kubeconfig changes. Its
// zero value is not usable: set Secrets, Hub and Scheme.
type Clients struct {
	// Secrets reads kubeconfig Secrets (uncached: the manager does not cache Secrets).
	Secrets client.Reader
	// Hub is the hub's REST config, used for a FleetCluster without spec.kubeConfig.
	Hub *rest.Config
	// Scheme of the member clients.
	Scheme *runtime.Scheme

	mu      sync.Mutex
	clients map[types.NamespacedName]cached
}

type cached struct {
	key string
	c   client.Client
}

// Config returns the member's REST config (see RESTConfig).
func (m *Clients) Config(ctx context.Context, fc *v1alpha1.FleetCluster) (*rest.Config, error) {
	return RESTConfig(ctx, m.Secrets, m.Hub, fc)
}

// Client returns a client for the member's API server.
func (m *Clients) Client(ctx context.Context, fc *v1alpha1.FleetCluster) (client.Client, error) {
	cfg, err := m.Config(ctx, fc)
	if err != nil {
		return nil, err
	}
	key := configKey(cfg)
	name := types.NamespacedName{Namespace: fc.Namespace, Name: fc.Name}
	m.mu.Lock()
	defer m.mu.Unlock()
	if c, ok := m.clients[name]; ok && c.key == key {
		return c.c, nil
	}
	cfg.Timeout = clientTimeout
	c, err := client.New(cfg, client.Options{Scheme: m.Scheme})
	if err != nil {
		return nil, fmt.Errorf("building a client for cluster %s: %w", fc.Name, err)
	}
	if m.clients == nil {
		m.clients = map[types.NamespacedName]cached{}
	}
	m.clients[name] = cached{key: key, c: c}
	return c, nil
}

// configKey identifies a rest.Config's endpoint and credentials without keeping them.
func configKey(cfg *rest.Config) string {
	h := sha256.New()
	for _, b := range [][]byte{[]byte(cfg.Host), []byte(cfg.BearerToken), cfg.CertData, cfg.KeyData, cfg.CAData, []byte(cfg.CertFile), []byte(cfg.KeyFile)} {
		h.Write(b)
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}
