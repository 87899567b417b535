package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sversion "k8s.io/apimachinery/pkg/version"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/tidegate/tidegate/config"
)

// checksOf runs tidegate check -o json with args and returns what it found.
func checksOf(ctx context.Context, t *testing.T, wantExit int, args ...string) map[string]checkResult {
	t.Helper()
	r := tidegate(ctx, append(append([]string{}, args...), "check", "-o", "json")...)
	var v checkView
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || r.code != wantExit {
		t.Fatalf("check %s: exit %d (want %d), %v\n%s%s", strings.Join(args, " "), r.code, wantExit, err, r.stdout, r.stderr)
	}
	if v.Passed != (wantExit == exitOK) {
		t.Errorf("check %s: passed %v with exit %d", strings.Join(args, " "), v.Passed, r.code)
	}
	byName := map[string]checkResult{}
	for _, ch := range v.Checks {
		byName[ch.Name] = ch
	}
	return byName
}

func expectCheck(t *testing.T, checks map[string]checkResult, name, status, message string) {
	t.Helper()
	ch, ok := checks[name]
	if !ok || ch.Status != status || !strings.Contains(ch.Message, message) {
		t.Errorf("check %q: %+v, want %s with %q", name, ch, status, message)
	}
	if status != checkOK && ch.Fix == "" && ok {
		t.Errorf("check %q %s without saying what to do", name, status)
	}
}

// check --pre checks only the Kubernetes version and Flux's CRDs, which the test hub has, but for
// helm-controller's HelmRelease: that one only informs that it is not installed.
func TestCheckPre(t *testing.T) {
	ctx := hub(t)
	r := tidegate(ctx, "check", "--pre")
	want := []string{
		"► checking prerequisites",
		"✔ kubernetes: v1.",
		"✔ crd kustomizations.kustomize.toolkit.fluxcd.io: serves ",
		"✔ crd gitrepositories.source.toolkit.fluxcd.io: serves ",
		"✔ crd ocirepositories.source.toolkit.fluxcd.io: serves ",
		"✔ crd helmreleases.helm.toolkit.fluxcd.io: not installed; a rollout of a Helm chart (spec.chart) needs it: install helm-controller",
		"✔ all checks passed",
	}
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if r.code != exitOK || len(lines) != len(want) {
		t.Fatalf("check --pre: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("line %d: %q, want it to start with %q", i+1, lines[i], w)
		}
	}
}

// check fails without the controller and its RBAC, saying what to install, and passes once they
// are there; a user who may not create SubjectAccessReviews gets a warning about the RBAC instead.
func TestCheckController(t *testing.T) {
	ctx := hub(t)
	checks := checksOf(ctx, t, exitNo)
	for _, name := range tidegateCRDs {
		expectCheck(t, checks, "crd "+name, checkOK, "serves v1alpha1, with this tidegate's schema")
	}
	expectCheck(t, checks, "controller", checkFailed, "no tidegate controller Deployment")
	expectCheck(t, checks, "controller RBAC", checkFailed, "system:serviceaccount:tidegate-system:tidegate-controller may do none of the ")
	if fix := checks["controller RBAC"].Fix; !strings.Contains(fix, "kubectl apply --server-side -k config/controller") {
		t.Errorf("the RBAC check's fix: %q", fix)
	}

	dep := installController(ctx, t)
	// Without leases, leader election fails: the check names what is missing.
	lease := &rbacv1.Role{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: controllerNamespace, Name: "tidegate-controller"}, lease); err != nil {
		t.Fatal(err)
	}
	rules := lease.Rules
	lease.Rules = slices.DeleteFunc(slices.Clone(rules), func(r rbacv1.PolicyRule) bool { return slices.Contains(r.Resources, "leases") })
	if err := k8s.Update(ctx, lease); err != nil {
		t.Fatal(err)
	}
	leases := authorizationv1.ResourceAttributes{Namespace: controllerNamespace, Verb: "create", Group: "coordination.k8s.io", Resource: "leases"}
	waitAuthorized(ctx, t, controllerUser, nil, leases, false)
	checks = checksOf(ctx, t, exitNo)
	expectCheck(t, checks, "controller RBAC", checkFailed, "tidegate-controller may not create leases.coordination.k8s.io in tidegate-system, get leases.coordination.k8s.io in tidegate-system, update leases.coordination.k8s.io in tidegate-system")
	lease.Rules = rules
	if err := k8s.Update(ctx, lease); err != nil {
		t.Fatal(err)
	}
	waitAuthorized(ctx, t, controllerUser, nil, leases, true)
	expectCheck(t, checks, "controller tidegate-system/tidegate-controller", checkFailed, "0/1 replicas ready (ghcr.io/tidegate/tidegate-controller:v0.3.0)")
	dep.Status = appsv1.DeploymentStatus{ObservedGeneration: dep.Generation, Replicas: 1, ReadyReplicas: 1, AvailableReplicas: 1, UpdatedReplicas: 1}
	if err := k8s.Status().Update(ctx, dep); err != nil {
		t.Fatal(err)
	}
	checks = checksOf(ctx, t, exitOK)
	expectCheck(t, checks, "controller tidegate-system/tidegate-controller", checkOK, "1/1 replicas ready")
	expectCheck(t, checks, "controller tidegate-system/tidegate-controller version", checkOK, "development build")
	expectCheck(t, checks, "controller RBAC", checkOK, "system:serviceaccount:tidegate-system:tidegate-controller may do the ")

	// A user who may read CRDs and Deployments, but not ask what others may do.
	checker := userKubeconfig(ctx, t, "checker", rbacv1.PolicyRule{APIGroups: []string{"apiextensions.k8s.io"}, Resources: []string{"customresourcedefinitions"}, Verbs: []string{"get"}},
		rbacv1.PolicyRule{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"list"}})
	checks = checksOf(ctx, t, exitOK, "--kubeconfig", checker)
	expectCheck(t, checks, "controller RBAC", checkWarning, "not checked: you may not create subjectaccessreviews")

	// A user who may read nothing of it fails the checks that read, after the version of the hub.
	checks = checksOf(ctx, t, exitNo, "--context", "nobody")
	expectCheck(t, checks, "kubernetes", checkOK, "or later")
	if ch := checks["crd kustomizations.kustomize.toolkit.fluxcd.io"]; ch.Status != checkFailed || !strings.Contains(ch.Message, "forbidden") ||
		ch.Fix != "ask for the permission to get customresourcedefinitions (kubectl auth can-i get customresourcedefinitions)" {
		t.Errorf("the Flux CRD check of a user who may not read CRDs: %+v", ch)
	}
	if ch := checks["crd helmreleases.helm.toolkit.fluxcd.io"]; ch.Status != checkWarning || !strings.Contains(ch.Message, "forbidden") ||
		!strings.Contains(ch.Message, "a rollout of a Helm chart (spec.chart) needs it") {
		t.Errorf("the HelmRelease CRD check of a user who may not read CRDs warns, and does not fail: %+v", ch)
	}
}

// check of a hub that does not answer fails on one line, with what to look at.
func TestCheckNoHub(t *testing.T) {
	unreachable := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(unreachable, []byte(`apiVersion: v1
kind: Config
clusters: [{name: hub, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: me, user: {token: x}}]
contexts: [{name: hub, context: {cluster: hub, user: me}}]
current-context: hub
`), 0o600); err != nil {
		t.Fatal(err)
	}
	r := tidegate(t.Context(), "--kubeconfig", unreachable, "check")
	if r.code != exitNo || !strings.HasPrefix(r.stdout, "► checking prerequisites\n✗ kubernetes: the hub at https://127.0.0.1:1 does not answer: ") ||
		!strings.Contains(r.stdout, "; check --kubeconfig and --context") || !strings.HasSuffix(r.stdout, "✗ 1 of 1 checks failed\n") {
		t.Errorf("check of a hub that does not answer: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

type serverVersion string

func (v serverVersion) ServerVersion() (*k8sversion.Info, error) {
	return &k8sversion.Info{GitVersion: string(v)}, nil
}

// The checks that the test hub cannot fail: an old Kubernetes, a CRD that is not established or
// not served at the version needed, tidegate CRDs of another version, image tags.
func TestCheckVerdicts(t *testing.T) {
	if r := checkKubernetes(serverVersion("v1.33.4"), "hub"); r.Status != checkFailed || r.Message != "v1.33.4 is older than "+minKubernetes {
		t.Errorf("Kubernetes v1.33.4: %+v", r)
	}
	if r := checkKubernetes(serverVersion("v1.34.1-eks-1"), "hub"); r.Status != checkOK {
		t.Errorf("Kubernetes v1.34.1-eks-1: %+v", r)
	}

	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "ocirepositories.source.toolkit.fluxcd.io"},
		Spec:       apiextensionsv1.CustomResourceDefinitionSpec{Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1beta2", Served: true, Storage: true}}},
	}
	r := checkResult{Name: "crd " + crd.Name}
	if got := checkCRD(r, crd, "v1", "upgrade Flux"); got.Status != checkFailed || !strings.Contains(got.Message, "not established") {
		t.Errorf("a CRD that is not established: %+v", got)
	}
	crd.Status.Conditions = []apiextensionsv1.CustomResourceDefinitionCondition{{Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionTrue}}
	if got := checkCRD(r, crd, "v1", "upgrade Flux"); got.Status != checkFailed || got.Message != "serves v1beta2, not v1" || got.Fix != "upgrade Flux" {
		t.Errorf("a CRD that serves v1beta2 only: %+v", got)
	}

	embedded, err := config.CRDs()
	if err != nil {
		t.Fatal(err)
	}
	hubs := embedded[0].DeepCopy()
	hubs.Status.Conditions = crd.Status.Conditions
	cv := crdVersion{Name: hubs.Name, Installed: true, crd: hubs}
	if got := checkTidegateCRD(cv, embedded, nil); got.Status != checkOK {
		t.Errorf("the CRD this tidegate embeds: %+v", got)
	}
	hubs.Spec.Versions[0].Schema.OpenAPIV3Schema.Description = "an older version"
	if got := checkTidegateCRD(cv, embedded, nil); got.Status != checkFailed || !strings.Contains(got.Message, "schema is not that of this tidegate") {
		t.Errorf("a CRD of another version: %+v", got)
	}

	for image, tag := range map[string]string{
		"ghcr.io/tidegate/tidegate-controller:v0.3.0":    "v0.3.0",
		"localhost:5000/tidegate-controller":             "",
		"tidegate-controller@sha256:0123456789abcdef":    "",
		"localhost:5000/tidegate-controller:v1@sha256:0": "v1",
	} {
		if got := imageTag(image); got != tag {
			t.Errorf("imageTag(%q) = %q, want %q", image, got, tag)
		}
	}
}

// controllerUser is the controller ServiceAccount's user name.
const controllerUser = "system:serviceaccount:" + controllerNamespace + ":" + controllerServiceAccount

// installController creates the controller's Deployment (not ready: envtest runs no Deployment
// controller), ServiceAccount and RBAC as config/controller does, removed when the test ends.
func installController(ctx context.Context, t *testing.T) *appsv1.Deployment {
	t.Helper()
	if err := namespace(ctx, controllerNamespace); err != nil {
		t.Fatal(err)
	}
	cluster, namespaced, err := config.ControllerRules()
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app.kubernetes.io/name": "tidegate", "app.kubernetes.io/component": "controller"}
	subject := []rbacv1.Subject{{Kind: "ServiceAccount", Name: controllerServiceAccount, Namespace: controllerNamespace}}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "tidegate-controller", Namespace: controllerNamespace, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{ServiceAccountName: controllerServiceAccount,
					Containers: []corev1.Container{{Name: "manager", Image: "ghcr.io/tidegate/tidegate-controller:v0.3.0"}}},
			},
		},
	}
	objs := []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: controllerServiceAccount, Namespace: controllerNamespace}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "tidegate-controller"}, Rules: cluster},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "tidegate-controller"}, Subjects: subject,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "tidegate-controller"}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "tidegate-controller", Namespace: controllerNamespace}, Rules: namespaced},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "tidegate-controller", Namespace: controllerNamespace}, Subjects: subject,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "tidegate-controller"}},
		dep,
	}
	for _, o := range objs {
		if err := k8s.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k8s.Delete(context.Background(), o) })
	}
	// Both bindings seen by the hub's authorizer before anything asks what the controller may do.
	waitAuthorized(ctx, t, controllerUser, nil, authorizationv1.ResourceAttributes{Verb: "list", Group: "tidegate.dev", Resource: "fleetrollouts"}, true)
	waitAuthorized(ctx, t, controllerUser, nil, authorizationv1.ResourceAttributes{Namespace: controllerNamespace, Verb: "get", Group: "coordination.k8s.io", Resource: "leases"}, true)
	return dep
}

// userKubeconfig writes a kubeconfig of a new user of the hub who may do what rules allow,
// cluster-wide, until the test ends.
func userKubeconfig(ctx context.Context, t *testing.T, name string, rules ...rbacv1.PolicyRule) string {
	t.Helper()
	u, err := env.AddUser(envtest.User{Name: name}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := u.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "test-" + name}, Rules: rules}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "test-" + name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: name}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name}}
	for _, o := range []client.Object{role, binding} {
		if err := k8s.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k8s.Delete(context.Background(), o) })
	}
	r := rules[0]
	waitAuthorized(ctx, t, name, nil, authorizationv1.ResourceAttributes{Verb: r.Verbs[0], Group: r.APIGroups[0], Resource: r.Resources[0]}, true)
	return path
}
