package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	authutils "github.com/fluxcd/pkg/auth/utils"
	"github.com/fluxcd/pkg/runtime/conditions"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/controllers"
	"github.com/tidegate/tidegate/internal/localfleet"
)

// Members without static secrets: every member's API server trusts the hub's ServiceAccount
// tokens (structured authentication configuration), and each FleetCluster names a workload identity
// ConfigMap of Flux's generic provider: the member's address and CA, and a ServiceAccount on the
// hub whose tokens tidegate and kustomize-controller mint, for the audience the member accepts. No
// Secret is in the fleet's namespace: the kubeconfig Secrets the fleet writes are deleted first.
// tidegate probes the members and gathers its evidence from them, and a rollout goes through its
// gates to every member, applied by kustomize-controller through the same ConfigMaps. Tokens for
// an audience the members do not accept are refused, and the FleetCluster says so.
func TestE2EMembersThroughWorkloadIdentity(t *testing.T) {
	parallel(t)
	// Object-level workload identity (a serviceAccountName in the ConfigMap) is behind Flux's
	// feature gate, in tidegate (this process) as in kustomize-controller. The gate is global in
	// fluxcd/pkg/auth and changes nothing for the other tests' FleetClusters, which use Secrets.
	if err := controllers.SetFeatureGates("ObjectLevelWorkloadIdentity=true"); err != nil {
		t.Fatal(err)
	}
	ownFleetSlot(t) // before the deadline: the fleet of its own starts within it
	ctx, cancel := testContext(t, 8*time.Minute)
	defer cancel()
	// identity makes, in the fleet's namespace, ServiceAccount sa and the ConfigMap that reaches m
	// with its tokens for audience; a member trusts sa when trusted.
	identity := func(f *localfleet.Fleet, m *localfleet.Member, sa, audience string, trusted bool) *meta.KubeConfigReference {
		t.Helper()
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: m.Name + "-" + sa, Namespace: f.Namespace},
			Data: map[string]string{
				meta.KubeConfigKeyProvider:           "generic",
				meta.KubeConfigKeyAddress:            m.Config.Host,
				meta.KubeConfigKeyCACert:             string(m.Config.CAData),
				meta.KubeConfigKeyServiceAccountName: sa,
				meta.KubeConfigKeyAudiences:          audience,
			},
		}
		for _, o := range []client.Object{&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: f.Namespace}}, cm} {
			if err := f.Hub.Create(ctx, o); client.IgnoreAlreadyExists(err) != nil {
				t.Fatal(err)
			}
		}
		if trusted {
			crb := &rbacv1.ClusterRoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: "hub-" + sa},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
				Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: localfleet.HubTokenUser(f.Namespace, sa)}},
			}
			if err := m.Client.Create(ctx, crb); client.IgnoreAlreadyExists(err) != nil {
				t.Fatal(err)
			}
		}
		return &meta.KubeConfigReference{ConfigMapRef: &meta.LocalObjectReference{Name: cm.Name}}
	}
	s, first := newFleetSetupReaching(t, 2, demoPackage("v1"), localfleet.Options{
		MembersTrustHubTokens:   true,
		KustomizeControllerArgs: []string{"--feature-gates=ObjectLevelWorkloadIdentity=true"},
	}, func(f *localfleet.Fleet, m *localfleet.Member) *meta.KubeConfigReference {
		if err := f.Hub.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: m.KubeConfigSecret, Namespace: f.Namespace}}); client.IgnoreNotFound(err) != nil {
			t.Fatal(err)
		}
		return identity(f, m, "deployer", localfleet.HubTokenAudience, true)
	})
	var secrets corev1.SecretList
	if err := s.f.Hub.List(ctx, &secrets, client.InNamespace(s.ns)); err != nil {
		t.Fatal(err)
	}
	if len(secrets.Items) != 0 {
		t.Fatalf("the fleet's namespace should hold no Secret: %d", len(secrets.Items))
	}
	// The controller's binary reaches members through workload identity with fluxcd/pkg/auth; so
	// does this test's (cmd/tidegate-controller).
	startTidegate(t, s, controllers.Options{Members: controllers.MemberOptions{WorkloadIdentity: authutils.GetRESTConfig}})
	for _, m := range s.members {
		s.waitClusterReachable(ctx, t, m.Name, metav1.ConditionTrue)
	}

	rev1 := s.repo.Revision(first)
	s.createRollout(ctx, t, twoWaveRollout(s.ns), rev1, nil)
	rev2 := s.commitVersion(t, "v2")
	fr := s.waitPhase(ctx, t, "web", v1alpha1.PhaseCompleted, rev2)
	for _, m := range s.members {
		if got := s.memberVersion(ctx, m.Name); got != "v2" {
			t.Errorf("%s runs %q, want v2", m.Name, got)
		}
		ks := s.kustomization(t, "web", m.Name)
		if ks == nil || ks.Spec.KubeConfig == nil || ks.Spec.KubeConfig.ConfigMapRef == nil || ks.Spec.KubeConfig.SecretRef != nil {
			t.Errorf("%s's Kustomization should reach it through its workload identity ConfigMap: %+v", m.Name, ks)
		}
	}
	for _, gate := range v1alpha1.Gates {
		if !conditions.IsTrue(fr, gate) {
			t.Errorf("%s should have passed on the evidence gathered through workload identity: %+v", gate, conditions.Get(fr, gate))
		}
	}
	if err := s.f.Hub.List(ctx, &secrets, client.InNamespace(s.ns)); err != nil {
		t.Fatal(err)
	}
	if len(secrets.Items) != 0 {
		t.Errorf("the rollout left Secrets in the fleet's namespace: %d", len(secrets.Items))
	}

	// Tokens for an audience no member accepts: the member refuses them.
	m := s.members[0]
	wrong := &v1alpha1.FleetCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "wrong-audience", Namespace: s.ns, Labels: map[string]string{"tidegate.dev/test": "not-selected"}},
		Spec:       v1alpha1.FleetClusterSpec{KubeConfig: identity(s.f, m, "elsewhere", "someone-else", true)},
	}
	if err := s.f.Hub.Create(ctx, wrong); err != nil {
		t.Fatal(err)
	}
	fc := s.waitClusterReachable(ctx, t, wrong.Name, metav1.ConditionFalse)
	c := conditions.Get(fc, v1alpha1.ReachableCondition)
	if c.Reason != v1alpha1.KubeConfigErrorReason || !strings.Contains(c.Message, "refused the credentials of workload identity ConfigMap "+s.ns+"/"+m.Name+"-elsewhere") {
		t.Errorf("the refused tokens should be said so, naming the ConfigMap: %s: %s", c.Reason, c.Message)
	}
}

// waitClusterReachable waits until FleetCluster name's Reachable condition has status.
func (s *fleetSetup) waitClusterReachable(ctx context.Context, t *testing.T, name string, status metav1.ConditionStatus) *v1alpha1.FleetCluster {
	t.Helper()
	var fc v1alpha1.FleetCluster
	eventually(ctx, t, fmt.Sprintf("fleetcluster %s Reachable=%s", name, status), func() (bool, string) {
		if err := s.f.Hub.Get(ctx, types.NamespacedName{Namespace: s.ns, Name: name}, &fc); err != nil {
			return false, err.Error()
		}
		c := conditions.Get(&fc, v1alpha1.ReachableCondition)
		return c != nil && c.Status == status, fmt.Sprintf("%+v", c)
	})
	return &fc
}
