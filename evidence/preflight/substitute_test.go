package preflight

import (
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

const substituted = `
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: NS
  labels:
    env: ${env:=dev}
spec:
  replicas: ${replicas}
  template:
    spec:
      containers:
      - name: web
        image: example.com/web:${tag:=v1}
        args: ["--region=${region}", "--cost=$$5", "${replicas}"]
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: script
  namespace: NS
  annotations:
    kustomize.toolkit.fluxcd.io/substitute: disabled
data:
  run.sh: echo ${replicas} ${HOME}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: labelled
  namespace: NS
  labels:
    kustomize.toolkit.fluxcd.io/substitute: disabled
data:
  count: ${replicas}
`

// The substitution is made in YAML, as kustomize-controller makes it: a variable's value takes the
// YAML type it reads as where the expression stood, so "replicas: ${replicas}" becomes a number, and
// so does "${replicas}" in a list of strings. (kustomize-controller keeps an expression that was
// double-quoted in the package's source a string: a rendered object no longer knows that.)
func TestSubstitute(t *testing.T) {
	objs := objects(t, "demo", substituted)
	before := deepCopies(objs)
	got, err := Substitute(objs, map[string]string{"replicas": "3", "tag": "v2\n"})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(objs, before) {
		t.Errorf("Substitute modified its objects")
	}
	want := objects(t, "demo", `
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
        args: ["--region=", "--cost=$5", 3]
`)
	want = append(want, objs[1], objs[2])
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got\n%v\nwant\n%v", dump(got), dump(want))
	}
	if n, _, _ := unstructured.NestedInt64(got[0].Object, "spec", "replicas"); n != 3 {
		t.Errorf("replicas is %v, want the number 3", got[0].Object["spec"].(map[string]any)["replicas"])
	}
	for i := range got {
		if got[i] == objs[i] {
			t.Errorf("object %d is not a new object", i)
		}
	}
}

func TestSubstituteWithoutVariables(t *testing.T) {
	objs := objects(t, "demo", substituted)
	for _, vars := range []map[string]string{nil, {}} {
		got, err := Substitute(objs, vars)
		if err != nil || !reflect.DeepEqual(got, objs) {
			t.Errorf("vars %v: got %v, %v; want the objects unchanged", vars, dump(got), err)
		}
	}
	if got, err := Substitute(nil, map[string]string{"a": "b"}); err != nil || len(got) != 0 {
		t.Errorf("no objects: %v, %v", got, err)
	}
}

func TestSubstituteErrors(t *testing.T) {
	objs := objects(t, "demo", substituted)
	if _, err := Substitute(objs, map[string]string{"not-a-name": "x"}); err == nil ||
		err.Error() != `'not-a-name' var name is invalid, must match '^[_[:alpha:]][_[:alpha:][:digit:]]*$'` {
		t.Errorf("an invalid variable name: %v", err)
	}
	bad := objects(t, "demo", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bad\ndata:\n  a: ${unclosed\n")
	if _, err := Substitute(bad, map[string]string{"a": "b"}); err == nil ||
		!strings.HasPrefix(err.Error(), "post build failed for '/v1, Kind=ConfigMap/bad': envsubst error: variable substitution failed: ") {
		t.Errorf("an expression that does not parse: %v", err)
	}
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
