package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/hack/lib/release"
	"github.com/tidegate/tidegate/internal/scheme"
	"github.com/tidegate/tidegate/internal/testbin"
	"github.com/tidegate/tidegate/test/testenv"
)

// applyAll server-side applies objs with c, cluster-scoped objects first, and waits for every CRD
// among them to be established, as `kubectl apply --server-side -f` and `kubectl wait` would.
func applyAll(ctx context.Context, t *testing.T, c client.Client, objs []*unstructured.Unstructured) {
	t.Helper()
	for _, scoped := range []bool{false, true} {
		for _, o := range objs {
			if (o.GetNamespace() != "") != scoped {
				continue
			}
			if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(o.DeepCopy()), client.FieldOwner(fieldManager), client.ForceOwnership); err != nil {
				t.Fatalf("applying %s: %v", describe(o), err)
			}
		}
		for _, o := range objs {
			if o.GetKind() != "CustomResourceDefinition" {
				continue
			}
			if err := waitEstablished(ctx, c, o.GetName()); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// specOf is an object's spec as the API server keeps it, for comparing before and after.
func specOf(ctx context.Context, t *testing.T, c client.Client, gvkOf client.Object) (string, map[string]any) {
	t.Helper()
	u := &unstructured.Unstructured{}
	gvk, err := c.GroupVersionKindFor(gvkOf)
	if err != nil {
		t.Fatal(err)
	}
	u.SetGroupVersionKind(gvk)
	if err := c.Get(ctx, client.ObjectKeyFromObject(gvkOf), u); err != nil {
		t.Fatalf("%s %s after the upgrade: %v", gvk.Kind, gvkOf.GetName(), err)
	}
	spec, _ := u.Object["spec"].(map[string]any)
	return string(u.GetUID()), spec
}

// An install of the previous release (testdata/previous) with a fleet on it upgrades to this one by
// applying install.yaml over it: every object applies, the fleet's objects keep their UIDs and
// specs, and this release's controller reconciles them (their Ready conditions written for their
// generation).
func TestDeployUpgrade(t *testing.T) {
	ctx := hub(t, 5*time.Minute)
	env, err := testbin.NewEnvironment("", testbin.FluxCRDs)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Start(); err != nil {
		_ = env.Stop()
		t.Fatalf("starting the upgrade's hub: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	user, err := env.AddUser(envtest.User{Name: "hub-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(user.Config(), client.Options{Scheme: upgradeScheme(t)})
	if err != nil {
		t.Fatal(err)
	}

	prevYAML, err := os.ReadFile(filepath.Join("testdata", "previous", "install.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	previous := decodeAll(t, "testdata/previous/install.yaml", prevYAML)
	applyAll(ctx, t, c, previous)

	// A fleet, as a platform team would have it on the previous release.
	ns := "fleet-upgrade"
	kubeconfig := `apiVersion: v1
kind: Config
clusters: [{name: m, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]
users: [{name: m, user: {token: not-a-real-token}}]
contexts: [{name: m, context: {cluster: m, user: m}}]
current-context: m
`
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "member-1-kubeconfig", Namespace: ns}, StringData: map[string]string{"value": kubeconfig}},
		&v1alpha1.FleetCluster{
			ObjectMeta: metav1.ObjectMeta{Name: "member-1", Namespace: ns, Labels: map[string]string{"ring": "canary"}},
			Spec:       v1alpha1.FleetClusterSpec{KubeConfig: &meta.KubeConfigReference{SecretRef: &meta.SecretKeyReference{Name: "member-1-kubeconfig"}}},
		},
		&v1alpha1.FleetRollout{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
			Spec: v1alpha1.FleetRolloutSpec{
				SourceRef: v1alpha1.SourceReference{Kind: "GitRepository", Name: "fleet"},
				Path:      "./app",
				Waves:     []v1alpha1.Wave{{Name: "canary", Count: ptrTo(int32(1))}, {Name: "rest", Selector: &metav1.LabelSelector{}}},
			},
		},
	}
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	before := map[string][2]any{}
	for _, o := range objs[2:] {
		uid, spec := specOf(ctx, t, c, o)
		before[o.GetName()] = [2]any{uid, spec}
	}

	// The upgrade: this release's install.yaml over the previous one.
	ref := "ghcr.io/tidegate/tidegate-controller:v9.9.9@sha256:" + fmt.Sprintf("%064x", 1)
	files, err := release.Build(filepath.Join(testenv.RepoRoot(), "config"), ref)
	if err != nil {
		t.Fatal(err)
	}
	next := decodeAll(t, release.Install, files[release.Install])
	applyAll(ctx, t, c, next)
	for _, o := range next {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(o.GroupVersionKind())
		if err := c.Get(ctx, client.ObjectKeyFromObject(o), got); err != nil {
			t.Errorf("%s after the upgrade: %v", describe(o), err)
		}
	}
	var dep appsv1.Deployment
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: deploymentName}, &dep); err != nil {
		t.Fatal(err)
	}
	if img := dep.Spec.Template.Spec.Containers[0].Image; img != ref {
		t.Errorf("after the upgrade the controller's image is %s, want %s", img, ref)
	}
	for _, o := range objs[2:] {
		uid, spec := specOf(ctx, t, c, o)
		if was := before[o.GetName()]; uid != was[0] || !reflect.DeepEqual(spec, was[1]) {
			b, _ := json.Marshal(spec)
			a, _ := json.Marshal(was[1])
			t.Errorf("%T %s changed in the upgrade: uid %s → %s, spec %s → %s", o, o.GetName(), was[0], uid, a, b)
		}
	}

	// This release's controller, run as the Deployment runs it, reconciles what the previous one
	// left.
	dir := t.TempDir()
	bin := buildController(t, dir)
	kc := filepath.Join(dir, "kubeconfig")
	kcBytes, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kc, kcBytes, 0o600); err != nil {
		t.Fatal(err)
	}
	startReplica(t, "upgraded", bin, dir, kc, &dep)
	waitFor(ctx, t, 2*time.Minute, "the upgraded controller to reconcile the fleet", func() (bool, string) {
		var fc v1alpha1.FleetCluster
		var fr v1alpha1.FleetRollout
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "member-1"}, &fc); err != nil {
			return false, err.Error()
		}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, &fr); err != nil {
			return false, err.Error()
		}
		fcReady := apimeta.FindStatusCondition(fc.Status.Conditions, meta.ReadyCondition)
		frReady := apimeta.FindStatusCondition(fr.Status.Conditions, meta.ReadyCondition)
		ok := fcReady != nil && fcReady.ObservedGeneration == fc.Generation && frReady != nil && frReady.ObservedGeneration == fr.Generation
		return ok, fmt.Sprintf("FleetCluster Ready %+v, FleetRollout Ready %+v", fcReady, frReady)
	})
}

func upgradeScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := scheme.New()
	if err := apiextensionsv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}
