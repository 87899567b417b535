package deploy

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/tidegate/tidegate/internal/testbin"
)

// Where the controller may read member credentials and mint tokens, as each install grants it.
const (
	// memberCredentials is the ClusterRole of what the controller reads to reach members.
	memberCredentials = "tidegate-member-credentials"
	// workloadIdentity is the ClusterRole and the Role config/workload-identity adds.
	workloadIdentity = "tidegate-workload-identity"
	// defaultFleet is the fleet namespace config/default creates and binds member credentials in.
	defaultFleet = "fleet"
	// fleetNamespacesArg is the controller's flag that goes with that binding.
	fleetNamespacesArg = "--fleet-namespaces=" + defaultFleet
)

// elsewhere are namespaces no FleetCluster lives in ("": a request across namespaces).
var elsewhere = []string{"kube-system", "default", ""}

// credentialReads are the reads of member credentials (kubeconfig Secrets, workload identity
// ConfigMaps) in namespace ns, as allowed lists them for the default fleet namespace.
func credentialReads(ns string) []access {
	var out []access
	for _, a := range allowed {
		if a.namespace == defaultFleet && (a.resource == "secrets" || a.resource == "configmaps") {
			a.namespace = ns
			out = append(out, a)
		}
	}
	return out
}

// workloadIdentityAllowed are the requests only workload identity makes (fluxcd/pkg/auth), in the
// default fleet namespace; config/workload-identity grants them, config/default does not.
var workloadIdentityAllowed = []access{
	{"", "serviceaccounts", "", "get", defaultFleet, "object-level workload identity: fluxcd/pkg/auth reads the ConfigMap's serviceAccountName (uncached), for the cloud identity its annotations name"},
	{"", "serviceaccounts", "token", "create", defaultFleet, "object-level workload identity: the token of a ConfigMap's serviceAccountName (generic provider, or a cloud provider's exchange)"},
}

// tokenMints are workloadIdentityAllowed in namespace ns.
func tokenMints(ns string) []access {
	out := slices.Clone(workloadIdentityAllowed)
	for i := range out {
		out[i].namespace = ns
	}
	return out
}

// ownToken is the generic provider's token of the controller's own ServiceAccount (workload
// identity without a serviceAccountName).
func ownToken() authorizationv1.ResourceAttributes {
	return authorizationv1.ResourceAttributes{Namespace: namespace, Verb: "create", Resource: "serviceaccounts", Subresource: "token", Name: serviceAccount}
}

// The default install reads member credentials in the fleet namespace it creates and nowhere else,
// and mints no token: config/default creates the Namespace `fleet`, binds tidegate-member-credentials
// there by a RoleBinding (no ClusterRoleBinding), tells the controller so (--fleet-namespaces=fleet),
// and no role of it grants serviceaccounts/token. On the hub it is installed on, SubjectAccessReviews
// of the controller's ServiceAccount: it may get, list and watch Secrets and ConfigMaps in `fleet`,
// not in kube-system, default or across namespaces, and may create no token, its own included.
func TestDeployDefaultIsLeastPrivilege(t *testing.T) {
	objs := mustBeInstalled(t)
	ctx := hub(t, 2*time.Minute)

	if !hasNamespace(objs, defaultFleet) {
		t.Errorf("config/default does not create the Namespace %s its RoleBinding is in", defaultFleet)
	}
	checkCredentialBinding(t, objs, true)
	if args := controllerArgs(t, objs); !slices.Contains(args, fleetNamespacesArg) {
		t.Errorf("the controller's args %v lack %s", args, fleetNamespacesArg)
	}
	for _, o := range objs {
		for _, r := range rulesOf(t, o) {
			if slices.Contains(r.Resources, "serviceaccounts/token") {
				t.Errorf("%s grants serviceaccounts/token %v: only config/workload-identity may", describe(o), r.Verbs)
			}
		}
	}

	var deny []access
	for _, ns := range elsewhere {
		deny = append(deny, credentialReads(ns)...)
	}
	for _, ns := range slices.Concat(elsewhere, []string{defaultFleet, namespace}) {
		deny = append(deny, tokenMints(ns)...)
	}
	checkGrants(ctx, t, admin, credentialReads(defaultFleet), deny)
	if st, err := reviewAttributes(ctx, admin, saUser, saGroups, ownToken()); err != nil {
		t.Fatal(err)
	} else if st.Allowed {
		t.Errorf("the controller may create a token of its own ServiceAccount: %s", st.Reason)
	}
}

// config/workload-identity: config/default and the tokens workload identity mints, in the fleet
// namespace and, of the controller's own ServiceAccount only, in tidegate-system. Applied to an API
// server of its own: the controller may still do all it does, may read ServiceAccounts and mint
// their tokens in `fleet`, not in kube-system, default or across namespaces, nor of another
// ServiceAccount of tidegate-system, and still reads member credentials in `fleet` only.
func TestDeployWorkloadIdentityOverlay(t *testing.T) {
	t.Parallel()
	objs, c, ctx := applyOverlayRBAC(t, "workload-identity")
	checkCredentialBinding(t, objs, true)
	if args := controllerArgs(t, objs); !slices.Contains(args, fleetNamespacesArg) {
		t.Errorf("the controller's args %v lack %s", args, fleetNamespacesArg)
	}

	deny := slices.Concat(credentialReads("kube-system"), credentialReads(""))
	for _, ns := range elsewhere {
		deny = append(deny, tokenMints(ns)...)
	}
	checkGrants(ctx, t, c, slices.Concat(allowed, workloadIdentityAllowed), deny)
	own := ownToken()
	if st, err := reviewAttributes(ctx, c, saUser, saGroups, own); err != nil {
		t.Fatal(err)
	} else if !st.Allowed {
		t.Errorf("the controller may not create a token of its own ServiceAccount (the generic provider's): %s", st.Reason)
	}
	for _, name := range []string{"default", ""} {
		other := own
		other.Name = name
		if st, err := reviewAttributes(ctx, c, saUser, saGroups, other); err != nil {
			t.Fatal(err)
		} else if st.Allowed {
			t.Errorf("the controller may create tokens of ServiceAccount %q in %s: %s", name, namespace, st.Reason)
		}
	}
}

// config/cluster-wide: config/default with member credentials readable in every namespace, for
// FleetClusters anywhere: the ClusterRole bound by a ClusterRoleBinding instead of the RoleBinding,
// and the controller without --fleet-namespaces. Applied to an API server of its own: the
// controller may read Secrets and ConfigMaps in kube-system, default and across namespaces, still
// does all it does, and still mints no token.
func TestDeployClusterWideOverlay(t *testing.T) {
	t.Parallel()
	objs, c, ctx := applyOverlayRBAC(t, "cluster-wide")
	checkCredentialBinding(t, objs, false)
	for _, a := range controllerArgs(t, objs) {
		if a == fleetNamespacesArg {
			t.Errorf("the controller is still told %s", a)
		}
	}

	allow := slices.Clone(allowed)
	for _, ns := range elsewhere {
		allow = append(allow, credentialReads(ns)...)
	}
	var deny []access
	for _, ns := range slices.Concat(elsewhere, []string{defaultFleet, namespace}) {
		deny = append(deny, tokenMints(ns)...)
	}
	checkGrants(ctx, t, c, allow, deny)
}

// checkCredentialBinding checks how objs bind tidegate-member-credentials: by a RoleBinding in the
// default fleet namespace (inFleet) or by a ClusterRoleBinding, not both.
func checkCredentialBinding(t *testing.T, objs []*unstructured.Unstructured, inFleet bool) {
	t.Helper()
	var bindings []string
	for _, o := range objs {
		if (o.GetKind() == "RoleBinding" || o.GetKind() == "ClusterRoleBinding") && o.GetName() == memberCredentials {
			bindings = append(bindings, describe(o))
		}
	}
	want := []string{"ClusterRoleBinding " + memberCredentials}
	if inFleet {
		want = []string{"RoleBinding " + defaultFleet + "/" + memberCredentials}
	}
	if !slices.Equal(bindings, want) {
		t.Errorf("%s is bound by %v, want %v", memberCredentials, bindings, want)
	}
}

// controllerArgs are the args of the controller's container in objs.
func controllerArgs(t *testing.T, objs []*unstructured.Unstructured) []string {
	t.Helper()
	var dep appsv1.Deployment
	fromUnstructured(t, find(t, objs, "Deployment", deploymentName), &dep)
	return dep.Spec.Template.Spec.Containers[0].Args
}

// rulesOf returns the rules of o when it is a ClusterRole or a Role.
func rulesOf(t *testing.T, o *unstructured.Unstructured) []rbacv1.PolicyRule {
	t.Helper()
	switch o.GetKind() {
	case "ClusterRole":
		var r rbacv1.ClusterRole
		fromUnstructured(t, o, &r)
		return r.Rules
	case "Role":
		var r rbacv1.Role
		fromUnstructured(t, o, &r)
		return r.Rules
	}
	return nil
}

// applyOverlayRBAC builds config/<name>, checks its RBAC's shape, starts an API server of its own
// (RBAC authorization, as the shared hub's) and applies the overlay's Namespaces, ServiceAccount and
// RBAC to it. It returns the objects, an admin client and a context bound to the test.
func applyOverlayRBAC(t *testing.T, name string) ([]*unstructured.Unstructured, client.Client, context.Context) {
	t.Helper()
	objs, err := buildConfig(name)
	if err != nil {
		t.Fatal(err)
	}
	checkRBACShape(t, objs)

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
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	// In kustomize's order, Namespaces first, as kubectl applies them: a RoleBinding in a fleet
	// namespace the overlay did not create would fail here.
	for _, o := range objs {
		switch o.GetKind() {
		case "Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
			if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(o.DeepCopy()), client.FieldOwner(fieldManager), client.ForceOwnership); err != nil {
				t.Fatalf("applying %s: %v", describe(o), err)
			}
		}
	}
	return objs, c, ctx
}

// checkGrants asks the API server c talks to, by SubjectAccessReviews, whether the controller's
// ServiceAccount may make each request of allow and none of deny. The RBAC authorizer learns of new
// bindings through its informers, a moment after they are written: every allowed request is waited
// for first, and only then is anything expected denied, so that a denial is the RBAC's and not a
// binding not yet seen.
func checkGrants(ctx context.Context, t *testing.T, c client.Client, allow, deny []access) {
	t.Helper()
	may := func(a access) (bool, string) {
		t.Helper()
		st, err := reviewAccess(ctx, c, saUser, saGroups, a)
		if err != nil {
			t.Fatal(err)
		}
		return st.Allowed, st.Reason
	}
	for _, a := range allow {
		waitFor(ctx, t, time.Minute, fmt.Sprintf("the controller may %s, which it does: %s", a, a.why), func() (bool, string) {
			ok, _ := may(a)
			return ok, "denied"
		})
	}
	for _, a := range deny {
		if ok, reason := may(a); ok {
			t.Errorf("the controller may %s: %s", a, reason)
		}
	}
}
