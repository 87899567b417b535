package member

import (
	"context"
	"strings"
	"testing"

	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/auth"
	authutils "github.com/fluxcd/pkg/auth/utils"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/internal/localfleet"
)

// A workload identity ConfigMap that cannot work is a kubeconfig error (only the user fixes it),
// naming the FleetCluster or the ConfigMap and the fix; a FleetCluster with both refs or with
// neither is told what to set. The real path, tokens minted on a hub and trusted by a member, is
// TestE2EMembersThroughWorkloadIdentity.
func TestWorkloadIdentityConfigMapErrors(t *testing.T) {
	auth.DisableObjectLevelWorkloadIdentity()
	cm := func(name string, data map[string]string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "fleet"}, Data: data}
	}
	hub := fake.NewClientBuilder().WithScheme(localfleet.NewScheme()).WithObjects(
		cm("no-provider", map[string]string{meta.KubeConfigKeyAddress: "https://m.example"}),
		cm("exec", map[string]string{meta.KubeConfigKeyProvider: "exec", meta.KubeConfigKeyAddress: "https://m.example"}),
		cm("no-address", map[string]string{meta.KubeConfigKeyProvider: "generic"}),
		cm("gated", map[string]string{meta.KubeConfigKeyProvider: "generic", meta.KubeConfigKeyAddress: "https://m.example",
			meta.KubeConfigKeyServiceAccountName: "deployer"}),
		cm("no-account", map[string]string{meta.KubeConfigKeyProvider: "generic", meta.KubeConfigKeyAddress: "https://m.example",
			meta.KubeConfigKeyServiceAccountName: "nobody"}),
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "deployer", Namespace: "fleet"}},
	).Build()
	m := &Clients{Secrets: hub, Tokens: hub, WorkloadIdentity: authutils.GetRESTConfig, Scheme: localfleet.NewScheme()}
	fc := func(ref *meta.KubeConfigReference) *v1alpha1.FleetCluster {
		return &v1alpha1.FleetCluster{ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: "fleet"}, Spec: v1alpha1.FleetClusterSpec{KubeConfig: ref}}
	}
	byName := func(name string) *meta.KubeConfigReference {
		return &meta.KubeConfigReference{ConfigMapRef: &meta.LocalObjectReference{Name: name}}
	}
	for _, tc := range []struct {
		name string
		ref  *meta.KubeConfigReference
		want []string
	}{
		{"missing", byName("missing"), []string{"fleet/m", "ConfigMap fleet/missing not found", "provider and address"}},
		{"no provider", byName("no-provider"), []string{"fleet/no-provider", `key "provider" is ""`, "aws, azure, gcp, generic"}},
		{"exec is no provider", byName("exec"), []string{`key "provider" is "exec"`}},
		{"generic needs an address", byName("no-address"), []string{"fleet/no-address", `needs key "address"`}},
		{"serviceAccountName needs the gate", byName("gated"), []string{"fleet/gated", "ObjectLevelWorkloadIdentity feature gate is not enabled"}},
		{"a ServiceAccount that does not exist", byName("no-account"), []string{"fleet/no-account", `service account 'fleet/nobody'`, "not found"}},
		{"neither ref", &meta.KubeConfigReference{}, []string{"fleet/m", "neither a Secret nor a ConfigMap"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := m.Config(context.Background(), fc(tc.ref))
			if err == nil || !IsKubeConfigError(err) {
				t.Fatalf("want a kubeconfig error, got %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q should contain %q", err, w)
				}
			}
		})
	}
	scoped := &Clients{Secrets: hub, Tokens: hub, WorkloadIdentity: authutils.GetRESTConfig, Scheme: localfleet.NewScheme(), Namespaces: []string{"fleet-a", "fleet-b"}}
	if _, err := scoped.Config(context.Background(), fc(byName("gated"))); err == nil || !IsKubeConfigError(err) ||
		!strings.Contains(err.Error(), "namespace fleet is not one of the controller's --fleet-namespaces (fleet-a,fleet-b)") {
		t.Errorf("a FleetCluster outside --fleet-namespaces should be told so: %v", err)
	}
	if got := CredentialSource(fc(byName("gated"))); got != "workload identity ConfigMap fleet/gated" {
		t.Errorf("CredentialSource = %q", got)
	}
	var _ client.Client = hub
}

// A process that was not given a way to reach members through workload identity (every one but the
// controller's binary, which links the cloud SDKs for it) refuses such a FleetCluster with an error
// naming the fix, and never panics or calls out.
func TestWorkloadIdentityNotInjectedNamesTheFix(t *testing.T) {
	hub := fake.NewClientBuilder().WithScheme(localfleet.NewScheme()).Build()
	m := &Clients{Secrets: hub, Tokens: hub, Scheme: localfleet.NewScheme()}
	fc := &v1alpha1.FleetCluster{ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: "fleet"},
		Spec: v1alpha1.FleetClusterSpec{KubeConfig: &meta.KubeConfigReference{ConfigMapRef: &meta.LocalObjectReference{Name: "cm"}}}}
	_, err := m.Config(context.Background(), fc)
	if err == nil || !IsKubeConfigError(err) {
		t.Fatalf("Config = %v, want a kubeconfig error", err)
	}
	for _, want := range []string{"fleetcluster fleet/m", "spec.kubeConfig.configMapRef", "tidegate-controller", "spec.kubeConfig.secretRef"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}
