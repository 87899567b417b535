package controllers

import (
	"testing"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/kustomize"
)

// The cache keeps of a Kustomization's inventory the objects the soak samples: the apps workloads,
// and the kinds its healthCheckExprs judge; the rest is dropped.
func TestTheCacheKeepsTheInventoryTheSoakSamples(t *testing.T) {
	entries := []kustomizev1.ResourceRef{
		{ID: "web_web_apps_Deployment", Version: "v1"},
		{ID: "web_db_example.com_Widget", Version: "v1"},
		{ID: "web_web_core_ConfigMap", Version: "v1"},
	}
	for _, tc := range []struct {
		name  string
		exprs []kustomize.CustomHealthCheck
		want  int
	}{
		{"no expressions: the Deployment alone", nil, 1},
		{"an expression for Widget: the Deployment and the widget", []kustomize.CustomHealthCheck{{APIVersion: "example.com/v1", Kind: "Widget",
			HealthCheckExpressions: kustomize.HealthCheckExpressions{Current: "status.ready == true"}}}, 2},
	} {
		ks := &kustomizev1.Kustomization{}
		ks.Spec.HealthCheckExprs = tc.exprs
		ks.Status.Inventory = &kustomizev1.ResourceInventory{Entries: append([]kustomizev1.ResourceRef(nil), entries...)}
		out, err := trimKustomization(ks)
		if err != nil {
			t.Fatal(err)
		}
		if got := out.(*kustomizev1.Kustomization).Status.Inventory.Entries; len(got) != tc.want {
			t.Errorf("%s: kept %v", tc.name, got)
		}
	}
}
