package evidence

import (
	"reflect"
	"strings"
	"testing"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

const substituted = `
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: demo
  labels:
    env: ${env:=dev}
spec:
  replicas: ${replicas}
  template:
    spec:
      containers:
      - name: web
        image: example.com/web:${tag:=v1}
        args:
        - --region=${region}
        - --cost=$$5
        - "${replicas}"
        - ${replicas}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: script
  namespace: demo
  annotations:
    kustomize.toolkit.fluxcd.io/substitute: disabled
data:
  run.sh: echo ${replicas} ${HOME}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: labelled
  namespace: demo
  labels:
    kustomize.toolkit.fluxcd.io/substitute: disabled
data:
  count: ${replicas}
`

// renderDocs builds docs as the package at ./app.
func renderDocs(t testing.TB, docs string) *Rendered {
	t.Helper()
	r, err := Render(memFS(t, map[string]string{"app/objects.yaml": docs}), kustomizev1.KustomizationSpec{Path: "./app"})
	if err != nil {
		t.Fatalf("Render: %v", err)
	}
	return r
}

func postBuild(vars map[string]string) *kustomizev1.PostBuild {
	return &kustomizev1.PostBuild{Substitute: vars}
}

// The substitution is made in kustomize's YAML of each built object, as kustomize-controller makes
// it: a variable's value takes the YAML type it reads as where the expression stood, so
// "replicas: ${replicas}" becomes a number, and so does "${replicas}" double-quoted in the package
// (kustomize writes a string without the quotes the package had).
func TestSubstitute(t *testing.T) {
	r := renderDocs(t, substituted)
	before := deepCopies(r.Objects)
	got, err := r.Substitute(postBuild(map[string]string{"replicas": "3", "tag": "v2\n"}))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(r.Objects, before) {
		t.Errorf("Substitute modified the build")
	}
	want := objects(t, `
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: demo
  labels:
    env: dev
spec:
  replicas: 3
  template:
    spec:
      containers:
      - name: web
        image: example.com/web:v2
        args: ["--region=", "--cost=$5", 3, 3]
`)
	// Sorted: the Deployment, then the ConfigMaps labelled and script, unchanged.
	want = append(want, r.Objects[1], r.Objects[2])
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got\n%v\nwant\n%v", dump(got), dump(want))
	}
	if n, _, _ := unstructured.NestedInt64(got[0].Object, "spec", "replicas"); n != 3 {
		t.Errorf("replicas is %v, want the number 3", got[0].Object["spec"].(map[string]any)["replicas"])
	}
	for i := range got {
		if got[i] == r.Objects[i] {
			t.Errorf("object %d is not a new object", i)
		}
	}
}

// kustomize-controller substitutes nothing without a postBuild or without variables, unless the
// strategy is Always, which evaluates defaults.
func TestSubstituteWithoutVariables(t *testing.T) {
	r := renderDocs(t, substituted)
	for _, pb := range []*kustomizev1.PostBuild{nil, postBuild(nil), postBuild(map[string]string{})} {
		got, err := r.Substitute(pb)
		if err != nil || !reflect.DeepEqual(got, r.Objects) {
			t.Errorf("postBuild %+v: got %v, %v; want the objects unchanged", pb, dump(got), err)
		}
	}
	got, err := r.Substitute(&kustomizev1.PostBuild{SubstituteStrategy: kustomizev1.SubstituteStrategyAlways})
	if err != nil {
		t.Fatal(err)
	}
	if env := got[0].GetLabels()["env"]; env != "dev" {
		t.Errorf("with the strategy Always, env is %q, want the default dev", env)
	}
	empty, err := Render(memFS(t, map[string]string{"app/README.md": "no manifests"}), kustomizev1.KustomizationSpec{Path: "./app"})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := empty.Substitute(postBuild(map[string]string{"a": "b"})); err != nil || len(got) != 0 {
		t.Errorf("no objects: %v, %v", got, err)
	}
}

func TestSubstituteErrors(t *testing.T) {
	r := renderDocs(t, substituted)
	if _, err := r.Substitute(postBuild(map[string]string{"not-a-name": "x"})); err == nil ||
		!strings.HasSuffix(err.Error(), `'not-a-name' var name is invalid, must match '^[_[:alpha:]][_[:alpha:][:digit:]]*$'`) {
		t.Errorf("an invalid variable name: %v", err)
	}
	bad := renderDocs(t, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bad\ndata:\n  a: ${unclosed\n")
	if _, err := bad.Substitute(postBuild(map[string]string{"a": "b"})); err == nil ||
		!strings.HasPrefix(err.Error(), "post build failed for 'ConfigMap.v1.[noGrp]/bad': envsubst error: variable substitution failed: ") {
		t.Errorf("an expression that does not parse: %v", err)
	}
}

func deepCopies(objs []*unstructured.Unstructured) []*unstructured.Unstructured {
	out := make([]*unstructured.Unstructured, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.DeepCopy())
	}
	return out
}

func dump(objs []*unstructured.Unstructured) string {
	var b strings.Builder
	for _, o := range objs {
		j, _ := o.MarshalJSON()
		b.Write(j)
		b.WriteString("\n")
	}
	return b.String()
}
