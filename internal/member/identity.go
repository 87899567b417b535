package member

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/auth"
	fluxcache "github.com/fluxcd/pkg/cache"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// Workload identity: a FleetCluster whose spec.kubeConfig.configMapRef names a ConfigMap of Flux's
// keys (provider: aws, azure, gcp or generic; address, ca.crt, cluster, audiences,
// serviceAccountName) is reached with short-lived tokens that fluxcd/pkg/auth gets from the cloud
// provider, or, for generic, mints on the hub (a ServiceAccount token, which the member's API server
// trusts as an OIDC token). No Secret holds a credential. The same ConfigMap goes into the
// Kustomizations tidegate writes, so kustomize-controller reaches the member the same way.

// identityTokenCacheSize bounds the tokens kept for members reached through workload identity.
const identityTokenCacheSize = 1024

// configMapOf names the workload-identity ConfigMap of a FleetCluster, or "" when it has none.
func configMapOf(fc *v1alpha1.FleetCluster) types.NamespacedName {
	kc := fc.Spec.KubeConfig
	if kc == nil || kc.SecretRef != nil || kc.ConfigMapRef == nil || kc.ConfigMapRef.Name == "" {
		return types.NamespacedName{}
	}
	return types.NamespacedName{Namespace: fc.Namespace, Name: kc.ConfigMapRef.Name}
}

// RESTConfigFunc gets the REST config of a member reached through workload identity, as
// fluxcd/pkg/auth/utils.GetRESTConfig does.
type RESTConfigFunc func(ctx context.Context, ref meta.KubeConfigReference, namespace string, c client.Client, opts ...auth.Option) (*rest.Config, error)

// identitySource returns the REST config of a FleetCluster reached through workload identity,
// building it again only when its ConfigMap's resourceVersion changed.
func (m *Clients) identitySource(ctx context.Context, fc *v1alpha1.FleetCluster, cm types.NamespacedName) (*source, error) {
	switch {
	case m.Tokens == nil:
		return nil, &kubeConfigError{msg: fmt.Sprintf(
			"fleetcluster %s/%s: spec.kubeConfig.configMapRef: this controller has no client to get workload identity tokens with", fc.Namespace, fc.Name)}
	case m.WorkloadIdentity == nil:
		return nil, &kubeConfigError{msg: fmt.Sprintf(
			"fleetcluster %s/%s: spec.kubeConfig.configMapRef: this process cannot reach members through workload identity (tidegate-controller can): use spec.kubeConfig.secretRef here", fc.Namespace, fc.Name)}
	}
	key := sourceKey{kind: "ConfigMap", namespace: cm.Namespace, name: cm.Name}
	held, _ := m.sources.Get(key)
	if version, ok := m.version(ctx, "ConfigMap", cm); ok && held != nil && held.(*source).version == version {
		return held.(*source), nil
	}
	v, err, _ := m.loads.Do("ConfigMap/"+cm.String(), func() (any, error) {
		var obj corev1.ConfigMap
		if err := m.Tokens.Get(ctx, cm, &obj); apierrors.IsNotFound(err) {
			return &source{err: &kubeConfigError{msg: fmt.Sprintf(
				"workload identity ConfigMap %s not found: create it with the keys provider and address (and ca.crt, serviceAccountName, audiences as the provider needs), or fix spec.kubeConfig.configMapRef.name",
				cm)}}, nil
		} else if err != nil {
			return nil, err
		}
		if held, ok := m.sources.Get(key); ok && held.(*source).version == obj.ResourceVersion {
			return held, nil
		}
		src := &source{version: obj.ResourceVersion}
		if err := checkIdentityConfigMap(&obj); err != nil {
			src.err = err
			m.sources.Add(key, src)
			return src, nil
		}
		involved := fluxcache.InvolvedObject{Kind: v1alpha1.FleetClusterKind, Name: fc.Name, Namespace: fc.Namespace, Operation: "connect"}
		cfg, err := m.WorkloadIdentity(ctx, *fc.Spec.KubeConfig, fc.Namespace, m.Tokens, auth.WithCache(*m.tokens, involved))
		if err != nil {
			if identityConfigError(err) {
				src.err = &kubeConfigError{msg: fmt.Sprintf("workload identity ConfigMap %s: %s", cm, err)}
				m.sources.Add(key, src)
				return src, nil
			}
			return nil, err // transient: a token the provider or the hub did not give this time
		}
		src = m.build(cfg, obj.ResourceVersion)
		m.sources.Add(key, src)
		return src, nil
	})
	if err != nil {
		return nil, fmt.Errorf("fleetcluster %s/%s: workload identity through ConfigMap %s: %w", fc.Namespace, fc.Name, cm, err)
	}
	return v.(*source), nil
}

// identityProviders are the providers of fluxcd/pkg/auth that give a REST config.
var identityProviders = []string{"aws", "azure", "gcp", "generic"}

// checkIdentityConfigMap refuses a ConfigMap that names no provider tidegate knows, or no address
// where the provider needs one (generic: the address is all it knows of the member). Its errors
// name the ConfigMap and the fix.
func checkIdentityConfigMap(cm *corev1.ConfigMap) error {
	name := cm.Namespace + "/" + cm.Name
	p := cm.Data[meta.KubeConfigKeyProvider]
	known := false
	for _, k := range identityProviders {
		known = known || p == k
	}
	if !known {
		return &kubeConfigError{msg: fmt.Sprintf("workload identity ConfigMap %s: key %q is %q: set it to one of %s",
			name, meta.KubeConfigKeyProvider, p, strings.Join(identityProviders, ", "))}
	}
	if p == "generic" && cm.Data[meta.KubeConfigKeyAddress] == "" {
		return &kubeConfigError{msg: fmt.Sprintf("workload identity ConfigMap %s: provider generic needs key %q, the member API server's https URL",
			name, meta.KubeConfigKeyAddress)}
	}
	return nil
}

// identityConfigError tells the errors of fluxcd/pkg/auth only a change by the user fixes.
func identityConfigError(err error) bool {
	if errors.Is(err, auth.ErrObjectLevelWorkloadIdentityNotEnabled) || apierrors.IsNotFound(err) {
		return true
	}
	msg := err.Error()
	for _, s := range []string{"cluster address is required", "failed to parse cluster address", "does not support", "invalid"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}
