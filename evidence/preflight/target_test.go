package preflight

import (
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Targets with objects of their own (their cluster's values substituted) are dry-run with those,
// the others with the objects CheckAll is given; objects that cannot be made are a dry-run error
// of that target alone.
func TestCheckAllWithObjectsOfTheTargets(t *testing.T) {
	ctx, ns := setup(t)
	templated := strings.Replace(webApp, "replicas: 2", "replicas: ${replicas}", 1)
	shared, err := substitute(t, ns, templated, map[string]string{"replicas": "2"})
	if err != nil {
		t.Fatal(err)
	}
	own := func(values map[string]string) func() ([]*unstructured.Unstructured, error) {
		return func() ([]*unstructured.Unstructured, error) { return substitute(t, ns, templated, values) }
	}
	targets := []Target{
		{Name: "shared", Config: adminConfig},
		{Name: "own-values", Config: adminConfig, Objects: own(map[string]string{"replicas": "3"})},
		{Name: "bad-values", Config: adminConfig, Objects: own(map[string]string{"replicas": "three"})},
		{Name: "no-objects", Config: adminConfig, Objects: func() ([]*unstructured.Unstructured, error) {
			return nil, errors.New("postBuild substitution with the cluster's values (spec.values): broken")
		}},
	}
	got := CheckAll(ctx, targets, shared, Options{}, 2)
	wantReachable(t, got[0], "shared", nil, nil)
	wantReachable(t, got[1], "own-values", nil, nil)
	wantReachable(t, got[2], "bad-values", nil, []string{
		"Deployment " + ns + `/web: failed to create typed patch object (` + ns + `/web; apps/v1, Kind=Deployment): .spec.replicas: expected numeric (int or float), got string`,
	})
	wantReachable(t, got[3], "no-objects", nil, []string{"postBuild substitution with the cluster's values (spec.values): broken"})
	assertAbsent(t, shared[1:]...)
}
