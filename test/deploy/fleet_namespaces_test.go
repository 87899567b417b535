package deploy

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/tidegate/tidegate/internal/testbin"
)

// memberCredentials is the ClusterRole of what the controller reads to reach members.
const memberCredentials = "tidegate-member-credentials"

// config/fleet-namespaces: the member credentials (Secrets, workload identity ConfigMaps,
// ServiceAccount tokens) are readable only in the fleet namespaces it lists, and the controller is
// told so. Applied to an API server of its own (the shared one has config/default, which binds them
// cluster-wide), with SubjectAccessReviews for the controller's ServiceAccount: it may read them in
// `fleet`, not in another namespace nor across namespaces, and everything else it does stays
// allowed.
func TestDeployFleetNamespacesOverlay(t *testing.T) {
	objs, err := buildConfig("fleet-namespaces")
	if err != nil {
		t.Fatal(err)
	}
	checkRBACShape(t, objs)
	for _, o := range objs {
		if o.GetKind() == "ClusterRoleBinding" && o.GetName() == memberCredentials {
			t.Errorf("%s binds the member credentials cluster-wide", describe(o))
		}
	}
	rb := find(t, objs, "RoleBinding", memberCredentials)
	if rb.GetNamespace() != "fleet" {
		t.Errorf("%s should be in namespace fleet", describe(rb))
	}
	var dep appsv1.Deployment
	fromUnstructured(t, find(t, objs, "Deployment", deploymentName), &dep)
	if args := dep.Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--fleet-namespaces=fleet") {
		t.Errorf("the controller should be told its fleet namespaces: %v", args)
	}

	e, err := testbin.NewEnvironment("", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Start(); err != nil {
		_ = e.Stop()
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Stop() })
	user, err := e.AddUser(envtest.User{Name: "overlay-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(user.Config(), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, ns := range []string{"fleet", "other"} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	// Namespaces first, as kubectl apply orders them.
	slices.SortStableFunc(objs, func(a, b *unstructured.Unstructured) int {
		return boolInt(b.GetKind() == "Namespace") - boolInt(a.GetKind() == "Namespace")
	})
	for _, o := range objs {
		switch o.GetKind() {
		case "Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
			if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(o.DeepCopy()), client.FieldOwner(fieldManager), client.ForceOwnership); err != nil {
				t.Fatalf("applying %s: %v", describe(o), err)
			}
		}
	}
	may := func(a access) bool {
		t.Helper()
		st, err := reviewAccess(ctx, c, saUser, saGroups, a)
		if err != nil {
			t.Fatal(err)
		}
		return st.Allowed
	}
	// The RBAC authorizer learns of new bindings through its informers, a moment after they are
	// written: every allowed request is waited for first, and only then is anything expected denied,
	// so that a denial is the overlay's and not a binding not yet seen.
	var deny []access
	for _, a := range allowed {
		if a.namespace == fleetNS {
			a.namespace = "fleet"
		}
		if isMemberCredential(a) {
			across, other := a, a
			other.namespace = "other"
			if a.namespace == "" {
				// Across namespaces: only in each fleet namespace now.
				a.namespace = "fleet"
				deny = append(deny, across)
			}
			deny = append(deny, other)
		}
		waitFor(ctx, t, time.Minute, fmt.Sprintf("the controller may %s, which it does: %s", a, a.why), func() (bool, string) {
			return may(a), "denied"
		})
	}
	for _, a := range deny {
		if may(a) {
			t.Errorf("the controller may %s outside its fleet namespaces: the overlay binds member credentials per namespace", a)
		}
	}
}

// isMemberCredential tells the uses config/rbac/member_credentials.yaml grants.
func isMemberCredential(a access) bool {
	switch a.resource {
	case "secrets", "serviceaccounts":
		return true
	case "configmaps":
		return a.verb != "create"
	}
	return false
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
