package evidence

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// tlsComponent is a kustomize Component beside the package, as Flux's spec.components names one.
var tlsComponent = map[string]string{
	"app/kustomization.yaml": "resources: [deployment.yaml]\n",
	"app/deployment.yaml":    deployment,
	"components/tls/kustomization.yaml": `apiVersion: kustomize.config.k8s.io/v1alpha1
kind: Component
resources: [tls.yaml]
patches:
- patch: |-
    - op: add
      path: /metadata/labels
      value: {tls: "on"}
  target: {kind: Deployment}
`,
	"components/tls/tls.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: tls\ndata:\n  mode: strict\n",
}

// The template's components are built into the package as kustomize-controller's generator adds
// them: a component's resources and patches are in the render.
func TestRenderComponents(t *testing.T) {
	r, err := Render(memFS(t, tlsComponent), kustomizev1.KustomizationSpec{Path: "./app", Components: []string{"../components/tls"}})
	if err != nil {
		t.Fatal(err)
	}
	if d := find(t, r.Objects, "Deployment"); d.GetLabels()["tls"] != "on" {
		t.Errorf("deployment labels %v: the component's patch was not applied", d.GetLabels())
	}
	if find(t, r.Objects, "ConfigMap").GetName() != "tls" {
		t.Errorf("the component's ConfigMap is not rendered")
	}
	plain, err := Render(memFS(t, tlsComponent), kustomizev1.KustomizationSpec{Path: "./app"})
	if err != nil {
		t.Fatal(err)
	}
	if plain.Digest() == r.Digest() {
		t.Errorf("the build with a component has the digest of the build without")
	}
}

// A component that is not in the artifact is refused, naming it, as is one whose kustomization
// refers to something remote: the render fetches nothing.
func TestRenderRefusesRemoteComponents(t *testing.T) {
	for _, tc := range []struct {
		name       string
		components []string
		files      map[string]string
		want       string
	}{
		{"a remote component", []string{"../components/tls", "github.com/example/fleet//components/tls?ref=main"}, tlsComponent,
			`spec.template.components names "github.com/example/fleet//components/tls?ref=main", which is remote`},
		{"a component with a remote resource", []string{"../components/tls"}, map[string]string{
			"app/kustomization.yaml":            "resources: [deployment.yaml]\n",
			"app/deployment.yaml":               deployment,
			"components/tls/kustomization.yaml": "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\nresources: [https://example.com/tls.yaml]\n",
		}, `components/tls/kustomization.yaml refers to "https://example.com/tls.yaml", which is remote`},
	} {
		_, err := Render(memFS(t, tc.files), kustomizev1.KustomizationSpec{Path: "./app", Components: tc.components})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}

// commonMetadata is set on every object after the substitution, as kustomize-controller sets it
// on what it applies: a variable in it is not substituted, its labels win over the package's, and
// it is part of the build's digest.
func TestRenderCommonMetadata(t *testing.T) {
	files := map[string]string{
		"app/kustomization.yaml": "resources: [configmap.yaml]\n",
		"app/configmap.yaml":     "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  labels: {team: \"${team}\"}\ndata:\n  k: \"${team}\"\n",
	}
	cm := &kustomizev1.CommonMetadata{Labels: map[string]string{"team": "platform", "tier": "${team}"}, Annotations: map[string]string{"owner": "a"}}
	spec := kustomizev1.KustomizationSpec{Path: "./app", CommonMetadata: cm}
	r, err := Render(memFS(t, files), spec)
	if err != nil {
		t.Fatal(err)
	}
	for _, pb := range []*kustomizev1.PostBuild{nil, postBuild(map[string]string{"team": "web"})} {
		objs, err := r.Substitute(pb)
		if err != nil {
			t.Fatal(err)
		}
		o := objs[0]
		if !reflect.DeepEqual(o.GetLabels(), map[string]string{"team": "platform", "tier": "${team}"}) || o.GetAnnotations()["owner"] != "a" {
			t.Errorf("postBuild %v: labels %v, annotations %v, want commonMetadata's over the package's, unsubstituted", pb, o.GetLabels(), o.GetAnnotations())
		}
		if pb != nil && o.Object["data"].(map[string]any)["k"] != "web" {
			t.Errorf("the data was not substituted: %v", o.Object["data"])
		}
	}
	if len(r.Objects[0].GetAnnotations()) != 0 {
		t.Errorf("the build's own objects changed: %v", r.Objects[0].GetAnnotations())
	}
	plain, err := Render(memFS(t, files), kustomizev1.KustomizationSpec{Path: "./app"})
	if err != nil {
		t.Fatal(err)
	}
	if plain.Digest() == r.Digest() {
		t.Errorf("the build with commonMetadata has the digest of the build without")
	}
	if again := Rebuilt(spec, r.Objects, r.Manifests(), nil); again.Digest() != r.Digest() {
		t.Errorf("a build rebuilt from a worker's answer has digest %s, want %s", again.Digest(), r.Digest())
	}
}

// Every field of Flux's Kustomization spec is one the render applies or one that does not change
// what is built: a field Flux adds fails here until it is sorted, and a spec that sets a field of
// neither (spec.ignore) is refused rather than judged as if it did not.
func TestEveryKustomizationFieldIsSorted(t *testing.T) {
	typ := reflect.TypeOf(kustomizev1.KustomizationSpec{})
	for i := range typ.NumField() {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		in := 0
		for _, list := range [][]string{renderedFields, notBuildFields, refusedFields} {
			if slices.Contains(list, name) {
				in++
			}
		}
		if in != 1 {
			t.Errorf("Kustomization spec.%s is in %d of renderedFields, notBuildFields and refusedFields; want it in one", name, in)
		}
	}
	spec := kustomizev1.KustomizationSpec{Path: "./app", Ignore: []kustomizev1.IgnoreRule{{Paths: []string{"/data"}}}}
	if _, err := Render(memFS(t, tlsComponent), spec); err == nil || !strings.Contains(err.Error(), "the render does not apply [spec.ignore]") {
		t.Errorf("a spec with ignore rules: %v", err)
	}
	spec = kustomizev1.KustomizationSpec{Path: "./app", Interval: metav1.Duration{Duration: time.Minute}, ServiceAccountName: "a", DependsOn: []meta.DependencyReference{{Name: "b"}}}
	if _, err := Render(memFS(t, tlsComponent), spec); err != nil {
		t.Errorf("a spec with fields that do not change the build: %v", err)
	}
}
