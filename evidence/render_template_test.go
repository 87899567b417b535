package evidence

import (
	"strings"
	"testing"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/kustomize"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// An unmodified public package: no namespaces anywhere, as charts' and vendors' manifests ship.
var publicPackage = map[string]string{
	"app/deployment.yaml": `apiVersion: apps/v1
kind: Deployment
metadata:
  name: podinfo
spec:
  selector: {matchLabels: {app: podinfo}}
  template:
    metadata: {labels: {app: podinfo}}
    spec:
      containers:
      - name: podinfod
        image: ghcr.io/stefanprodan/podinfo:6.0.0
`,
	"app/service.yaml": `apiVersion: v1
kind: Service
metadata:
  name: podinfo
spec:
  selector: {app: podinfo}
  ports: [{port: 9898}]
`,
	"app/hpa.yaml": `apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  name: podinfo
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: podinfo}
  minReplicas: 2
  maxReplicas: 4
`,
	"app/clusterrole.yaml": `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: podinfo-reader
rules: []
`,
	"app/crd.yaml": `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  names: {kind: Widget, plural: widgets}
  scope: Namespaced
  versions: [{name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object}}}]
`,
}

// targetNamespace puts every namespaced object of a package without namespaces in the target
// namespace, as kustomize-controller's generator does, and leaves cluster-scoped objects
// cluster-scoped; with and without a kustomization.yaml of the package's own.
func TestRenderTargetNamespace(t *testing.T) {
	withKustomization := map[string]string{"app/kustomization.yaml": "resources: [deployment.yaml, service.yaml, hpa.yaml, clusterrole.yaml, crd.yaml]\n"}
	for name, extra := range map[string]map[string]string{"generated kustomization": nil, "own kustomization": withKustomization} {
		t.Run(name, func(t *testing.T) {
			files := map[string]string{}
			for p, c := range publicPackage {
				files[p] = c
			}
			for p, c := range extra {
				files[p] = c
			}
			r, err := Render(memFS(t, files), kustomizev1.KustomizationSpec{Path: "./app", TargetNamespace: "podinfo"})
			if err != nil {
				t.Fatal(err)
			}
			want := "apiextensions.k8s.io/v1 CustomResourceDefinition /widgets.example.com\n" +
				"apps/v1 Deployment podinfo/podinfo\n" +
				"autoscaling/v2 HorizontalPodAutoscaler podinfo/podinfo\n" +
				"rbac.authorization.k8s.io/v1 ClusterRole /podinfo-reader\n" +
				"v1 Service podinfo/podinfo\n"
			if got := refs(Summarize(r.Objects, 100)); got != want {
				t.Errorf("rendered\n%s\nwant\n%s", got, want)
			}
		})
	}
	// Without it, the objects have no namespace: what the issue saw the dry-run refuse.
	r, err := Render(memFS(t, publicPackage), kustomizev1.KustomizationSpec{Path: "./app"})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range r.Objects {
		if o.GetNamespace() != "" {
			t.Errorf("%s %s has namespace %q without a targetNamespace", o.GetKind(), o.GetName(), o.GetNamespace())
		}
	}
}

// The template's patches and images apply over the package's own kustomization, after it, as
// kustomize-controller's generator merges them into it; an image the package already overrides
// takes the template's tag.
func TestRenderPatchesAndImages(t *testing.T) {
	files := map[string]string{
		"app/kustomization.yaml": "resources: [deployment.yaml, service.yaml]\nimages: [{name: ghcr.io/stefanprodan/podinfo, newTag: 6.1.0}]\n",
		"app/deployment.yaml":    publicPackage["app/deployment.yaml"],
		"app/service.yaml":       publicPackage["app/service.yaml"],
	}
	spec := kustomizev1.KustomizationSpec{
		Path:            "./app",
		TargetNamespace: "podinfo",
		Patches: []kustomize.Patch{
			{Patch: "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: podinfo\nspec:\n  replicas: 3\n"},
			{Patch: "- op: add\n  path: /metadata/labels\n  value: {tier: web}\n", Target: &kustomize.Selector{Kind: "Service", Name: "podinfo"}},
		},
		Images: []kustomize.Image{{Name: "ghcr.io/stefanprodan/podinfo", NewTag: "6.2.0"}},
	}
	r, err := Render(memFS(t, files), spec)
	if err != nil {
		t.Fatal(err)
	}
	deploy, svc := find(t, r.Objects, "Deployment"), find(t, r.Objects, "Service")
	if n, _, _ := unstructured.NestedInt64(deploy.Object, "spec", "replicas"); n != 3 {
		t.Errorf("replicas %d: the strategic merge patch was not applied", n)
	}
	containers, _, _ := unstructured.NestedSlice(deploy.Object, "spec", "template", "spec", "containers")
	if image := containers[0].(map[string]any)["image"]; image != "ghcr.io/stefanprodan/podinfo:6.2.0" {
		t.Errorf("image %v: want the template's tag over the package's", image)
	}
	if svc.GetLabels()["tier"] != "web" || svc.GetNamespace() != "podinfo" {
		t.Errorf("service labels %v in %q: the JSON 6902 patch or targetNamespace was not applied", svc.GetLabels(), svc.GetNamespace())
	}

	// A patch that cannot apply fails the render, as it fails kustomize-controller's build.
	spec.Patches = []kustomize.Patch{{Patch: "- op: replace\n  path: /spec/nothing/here\n  value: 1\n", Target: &kustomize.Selector{Kind: "Service"}}}
	if _, err := Render(memFS(t, files), spec); err == nil || !strings.Contains(err.Error(), "kustomize build of path ./app failed") {
		t.Errorf("a patch that does not apply: %v", err)
	}
}

// The build's temporary copy of the artifact never shows in an error: a receipt names files as
// the artifact does.
func TestRenderErrorsNameArtifactFiles(t *testing.T) {
	_, err := Render(memFS(t, map[string]string{"app/kustomization.yaml": "resources: [gone.yaml]\n"}), kustomizev1.KustomizationSpec{Path: "./app"})
	if err == nil || strings.Contains(err.Error(), "tidegate-render-") {
		t.Errorf("error %v names the working copy", err)
	}
}

func find(t *testing.T, objs []*unstructured.Unstructured, kind string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind {
			return o
		}
	}
	t.Fatalf("no %s rendered", kind)
	return nil
}
