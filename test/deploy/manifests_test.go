package deploy

import (
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const (
	nameLabel = "app.kubernetes.io/name"
	image     = "ghcr.io/tidegate/tidegate-controller:latest"
)

// TestDeployManifestsBuild checks what config/default builds to, without an API server: the objects,
// their labels, the RBAC's shape and the controller's Deployment.
func TestDeployManifestsBuild(t *testing.T) {
	objs := mustBuild(t)

	var got []string
	for _, o := range objs {
		got = append(got, describe(o))
		if v := o.GetLabels()[nameLabel]; v != "tidegate" {
			t.Errorf("%s: label %s is %q, want tidegate", describe(o), nameLabel, v)
		}
	}
	want := []string{
		"Namespace " + namespace,
		"CustomResourceDefinition fleetclusters.tidegate.dev",
		"CustomResourceDefinition fleetrollouts.tidegate.dev",
		"CustomResourceDefinition gatereceipts.tidegate.dev",
		"CustomResourceDefinition rolloutledgers.tidegate.dev",
		"ServiceAccount " + namespace + "/" + serviceAccount,
		"ClusterRole tidegate-controller",
		"ClusterRoleBinding tidegate-controller",
		"Namespace " + defaultFleet,
		"ClusterRole " + memberCredentials,
		"RoleBinding " + defaultFleet + "/" + memberCredentials,
		"ClusterRole tidegate-view",
		"ClusterRole tidegate-edit",
		"Role " + namespace + "/tidegate-controller",
		"RoleBinding " + namespace + "/tidegate-controller",
		"Service " + namespace + "/tidegate-controller-metrics",
		"Deployment " + namespace + "/" + deploymentName,
		"ValidatingAdmissionPolicy " + recordsPolicy,
		"ValidatingAdmissionPolicyBinding " + recordsPolicy,
		"ValidatingAdmissionPolicy " + approvalsPolicy,
		"ValidatingAdmissionPolicyBinding " + approvalsPolicy,
	}
	sort.Strings(got)
	sort.Strings(want)
	if !slices.Equal(got, want) {
		t.Errorf("config/default builds%s\nwant%s", joinLines(got), joinLines(want))
	}

	var ns corev1.Namespace
	fromUnstructured(t, find(t, objs, "Namespace", namespace), &ns)
	if v := ns.Labels["pod-security.kubernetes.io/enforce"]; v != "restricted" {
		t.Errorf("namespace %s enforces Pod Security Standard %q, want restricted", namespace, v)
	}

	checkRBACShape(t, objs)
	checkDeployment(t, objs)

	var svc corev1.Service
	fromUnstructured(t, find(t, objs, "Service", "tidegate-controller-metrics"), &svc)
	var dep appsv1.Deployment
	fromUnstructured(t, find(t, objs, "Deployment", deploymentName), &dep)
	for k, v := range svc.Spec.Selector {
		if dep.Spec.Template.Labels[k] != v {
			t.Errorf("the metrics Service selects %s=%s, which the controller's pods do not carry", k, v)
		}
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 8080 || svc.Spec.Ports[0].TargetPort != intstr.FromString("http-metrics") {
		t.Errorf("the metrics Service's ports are %+v, want 8080 to the container's http-metrics port", svc.Spec.Ports)
	}
}

// The CRDs install apart from the controller: config/crd holds only them, config/controller none of
// them and no fleet namespace (so `kubectl delete -k config/controller` never deletes a CRD or a
// fleet namespace, and with them every rollout, cluster and receipt), and config/default is exactly
// the two, the admission policies and the fleet namespace `fleet`. The CRDs and that namespace tell
// Flux's kustomize-controller never to prune them, for an install through a Flux Kustomization.
func TestDeployCRDsApartFromTheController(t *testing.T) {
	crds, err := buildConfig("crd")
	if err != nil {
		t.Fatal(err)
	}
	controller, err := buildConfig("controller")
	if err != nil {
		t.Fatal(err)
	}
	var parts []string
	for _, o := range crds {
		parts = append(parts, describe(o))
		if o.GetKind() != "CustomResourceDefinition" {
			t.Errorf("config/crd builds %s: it must hold only CRDs", describe(o))
		}
		if v := o.GetAnnotations()["kustomize.toolkit.fluxcd.io/prune"]; v != "disabled" {
			t.Errorf("%s: annotation kustomize.toolkit.fluxcd.io/prune is %q, want disabled", describe(o), v)
		}
		if v := o.GetLabels()[nameLabel]; v != "tidegate" {
			t.Errorf("%s: label %s is %q, want tidegate", describe(o), nameLabel, v)
		}
	}
	if len(crds) != 4 {
		t.Errorf("config/crd builds %d objects, want the 4 CRDs", len(crds))
	}
	for _, o := range controller {
		parts = append(parts, describe(o))
		if o.GetKind() == "CustomResourceDefinition" {
			t.Errorf("config/controller builds %s: uninstalling the controller would delete every object of that kind", describe(o))
		}
		if o.GetKind() == "Namespace" && o.GetName() != namespace {
			t.Errorf("config/controller builds %s: uninstalling the controller would delete every object in it", describe(o))
		}
	}
	admission, err := buildConfig("admission")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range admission {
		parts = append(parts, describe(o))
		if o.GetNamespace() != "" {
			t.Errorf("config/admission builds %s: a cluster-scoped object with a namespace", describe(o))
		}
	}
	var whole []string
	for _, o := range mustBuild(t) {
		whole = append(whole, describe(o))
		if o.GetKind() == "Namespace" && o.GetName() == defaultFleet {
			parts = append(parts, describe(o)) // config/default's own
			if v := o.GetAnnotations()["kustomize.toolkit.fluxcd.io/prune"]; v != "disabled" {
				t.Errorf("%s: annotation kustomize.toolkit.fluxcd.io/prune is %q, want disabled", describe(o), v)
			}
		}
	}
	sort.Strings(parts)
	sort.Strings(whole)
	if !slices.Equal(parts, whole) {
		t.Errorf("config/crd, config/controller, config/admission and Namespace fleet build%s\nconfig/default builds%s", joinLines(parts), joinLines(whole))
	}
}

// checkRBACShape checks that the roles grant nothing by wildcard and nothing that lets the controller
// grant itself more, and that the bindings bind exactly the controller's roles to its ServiceAccount.
func checkRBACShape(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	for _, o := range objs {
		var rules []rbacv1.PolicyRule
		switch o.GetKind() {
		case "ClusterRole":
			var r rbacv1.ClusterRole
			fromUnstructured(t, o, &r)
			rules = r.Rules
			if r.AggregationRule != nil {
				t.Errorf("%s aggregates other roles", describe(o))
			}
		case "Role":
			var r rbacv1.Role
			fromUnstructured(t, o, &r)
			rules = r.Rules
		case "ClusterRoleBinding", "RoleBinding":
			var ref rbacv1.RoleRef
			var subjects []rbacv1.Subject
			if o.GetKind() == "ClusterRoleBinding" {
				var b rbacv1.ClusterRoleBinding
				fromUnstructured(t, o, &b)
				ref, subjects = b.RoleRef, b.Subjects
			} else {
				var b rbacv1.RoleBinding
				fromUnstructured(t, o, &b)
				ref, subjects = b.RoleRef, b.Subjects
			}
			wantKind := strings.TrimSuffix(o.GetKind(), "Binding")
			if ref.Name == memberCredentials || (ref.Name == workloadIdentity && o.GetNamespace() != namespace) {
				wantKind = "ClusterRole" // bound by a RoleBinding per fleet namespace, or cluster-wide
			}
			if ref.Kind != wantKind || !slices.Contains([]string{"tidegate-controller", memberCredentials, workloadIdentity}, ref.Name) {
				t.Errorf("%s binds %s %s, want %s tidegate-controller, %s or %s (never cluster-admin or another built-in role)",
					describe(o), ref.Kind, ref.Name, wantKind, memberCredentials, workloadIdentity)
			}
			want := []rbacv1.Subject{{Kind: "ServiceAccount", Name: serviceAccount, Namespace: namespace}}
			if !slices.Equal(subjects, want) {
				t.Errorf("%s binds %+v, want only %+v", describe(o), subjects, want)
			}
		}
		for _, r := range rules {
			for _, list := range [][]string{r.APIGroups, r.Resources, r.Verbs, r.ResourceNames} {
				if slices.Contains(list, "*") {
					t.Errorf("%s has a wildcard rule: %+v", describe(o), r)
				}
			}
			for _, v := range []string{"escalate", "bind", "impersonate"} {
				if slices.Contains(r.Verbs, v) {
					t.Errorf("%s grants %q: %+v", describe(o), v, r)
				}
			}
			if len(r.NonResourceURLs) > 0 {
				t.Errorf("%s grants non-resource URLs: %+v", describe(o), r)
			}
		}
	}
}

// checkDeployment checks the controller's Deployment: image, flags, probes, resources and a
// restricted security context.
func checkDeployment(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	var dep appsv1.Deployment
	fromUnstructured(t, find(t, objs, "Deployment", deploymentName), &dep)
	pod := dep.Spec.Template.Spec
	if pod.ServiceAccountName != serviceAccount {
		t.Errorf("the controller runs as ServiceAccount %q, want %s", pod.ServiceAccountName, serviceAccount)
	}
	sel, err := metav1.LabelSelectorAsSelector(dep.Spec.Selector)
	if err != nil || sel.Empty() || !sel.Matches(labelSet(dep.Spec.Template.Labels)) {
		t.Errorf("the Deployment's selector %v does not select its pod template's labels %v (%v)", dep.Spec.Selector, dep.Spec.Template.Labels, err)
	}
	if dep.Spec.Template.Labels[nameLabel] != "tidegate" {
		t.Errorf("the controller's pods are not labelled %s=tidegate", nameLabel)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("the controller's pod has %d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	if c.Image != image {
		t.Errorf("the controller's image is %q, want %q (set by config/manager's images)", c.Image, image)
	}
	for _, a := range []string{"--enable-leader-election", "--metrics-addr=:8080", "--health-addr=:8081"} {
		if !slices.Contains(c.Args, a) {
			t.Errorf("the controller's args %v lack %s", c.Args, a)
		}
	}
	podNamespace := false
	for _, e := range c.Env {
		if e.Name == "POD_NAMESPACE" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace" {
			podNamespace = true
		}
	}
	if !podNamespace {
		t.Errorf("the controller has no POD_NAMESPACE from metadata.namespace (the leader election Lease's namespace)")
	}
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if ports["http-metrics"] != 8080 || ports["healthz"] != 8081 {
		t.Errorf("the controller's ports are %v, want http-metrics 8080 and healthz 8081", ports)
	}
	for name, probe := range map[string]*corev1.Probe{"/healthz": c.LivenessProbe, "/readyz": c.ReadinessProbe} {
		if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != name || probe.HTTPGet.Port != intstr.FromString("healthz") {
			t.Errorf("the controller's probe of %s is %+v, want an HTTP GET of %s on port healthz", name, probe, name)
		}
	}
	for _, list := range []corev1.ResourceList{c.Resources.Requests, c.Resources.Limits} {
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			if _, ok := list[r]; !ok {
				t.Errorf("the controller's resources %+v do not set %s requests and limits", c.Resources, r)
			}
		}
	}
	psc, sc := pod.SecurityContext, c.SecurityContext
	switch {
	case psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot:
		t.Errorf("the controller's pod does not set runAsNonRoot")
	case psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Errorf("the controller's pod does not set the RuntimeDefault seccomp profile")
	}
	switch {
	case sc == nil:
		t.Errorf("the controller's container has no security context")
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Errorf("the controller's container does not set allowPrivilegeEscalation: false")
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Errorf("the controller's container does not set readOnlyRootFilesystem: true")
	case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0:
		t.Errorf("the controller's container capabilities are %+v, want drop ALL and add none", sc.Capabilities)
	}
}

type labelSet map[string]string

func (l labelSet) Has(k string) bool   { _, ok := l[k]; return ok }
func (l labelSet) Get(k string) string { return l[k] }
func (l labelSet) Lookup(k string) (string, bool) {
	v, ok := l[k]
	return v, ok
}

// TestDeployManifestsApply installs config/default on a real kube-apiserver as `kubectl apply
// --server-side` does: (a) every object passes a server-side dry-run and the dry-run creates nothing,
// (b) every object applies and exists, with no warning from the API server (no deprecated API, no
// PodSecurity "warn" violation), and applying again changes nothing.
func TestDeployManifestsApply(t *testing.T) {
	objs, err := installed(t)
	if err != nil {
		t.Fatal(err)
	}
	ctx := hub(t, time.Minute)
	if len(dryRunWarnings) > 0 {
		t.Errorf("the API server warned during the dry-run:%s", joinLines(dryRunWarnings))
	}
	if len(applyWarnings) > 0 {
		t.Errorf("the API server warned during the apply:%s", joinLines(applyWarnings))
	}
	versions := map[string]string{}
	for _, o := range objs {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(o.GroupVersionKind())
		if err := admin.Get(ctx, client.ObjectKeyFromObject(o), got); err != nil {
			t.Errorf("%s after the apply: %v", describe(o), err)
			continue
		}
		versions[describe(o)] = got.GetResourceVersion()
	}
	// Applying again is a no-op: no field fights with the API server's defaults.
	for _, o := range objs {
		if err := applyObj(ctx, o); err != nil {
			t.Errorf("applying again: %v", err)
			continue
		}
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(o.GroupVersionKind())
		if err := admin.Get(ctx, client.ObjectKeyFromObject(o), got); err != nil {
			t.Errorf("%s after applying again: %v", describe(o), err)
		} else if rv := got.GetResourceVersion(); rv != versions[describe(o)] {
			t.Errorf("applying %s again changed it (resourceVersion %s → %s)", describe(o), versions[describe(o)], rv)
		}
	}
}

// TestDeployManifestsPodSecurity checks that the controller's pods are admitted in tidegate-system,
// whose namespace enforces the "restricted" Pod Security Standard, by a server-side dry-run of a Pod
// made from the Deployment's template; a pod without the security context is refused there, which
// shows the standard is enforced.
func TestDeployManifestsPodSecurity(t *testing.T) {
	objs := mustBeInstalled(t)
	ctx := hub(t, time.Minute)

	var ns corev1.Namespace
	if err := admin.Get(ctx, client.ObjectKey{Name: namespace}, &ns); err != nil {
		t.Fatal(err)
	}
	if v := ns.Labels["pod-security.kubernetes.io/enforce"]; v != "restricted" {
		t.Fatalf("namespace %s on the hub enforces %q, want restricted", namespace, v)
	}

	var dep appsv1.Deployment
	fromUnstructured(t, find(t, objs, "Deployment", deploymentName), &dep)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: deploymentName + "-", Namespace: namespace, Labels: dep.Spec.Template.Labels},
		Spec:       *dep.Spec.Template.Spec.DeepCopy(),
	}
	n := warnings.count()
	if err := admin.Create(ctx, pod, client.DryRunAll); err != nil {
		t.Errorf("the controller's pod is not admitted in %s: %v", namespace, err)
	}
	if w, _ := warnings.since(n); len(w) > 0 {
		t.Errorf("the API server warned about the controller's pod:%s", joinLines(w))
	}

	loose := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: deploymentName + "-", Namespace: namespace},
		Spec:       *dep.Spec.Template.Spec.DeepCopy(),
	}
	loose.Spec.SecurityContext = nil
	loose.Spec.Containers[0].SecurityContext = nil
	err := admin.Create(ctx, loose, client.DryRunAll)
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "violates PodSecurity") {
		t.Errorf("a pod without a security context in %s: got %v, want it refused by PodSecurity", namespace, err)
	}
}
