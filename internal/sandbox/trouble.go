package sandbox

import (
	"context"
	"fmt"
	"sort"
	"strings"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// describeTrouble lists, one line each, the objects of the sandbox that are not Ready, with their
// Ready condition: the Flux sources, Kustomizations and HelmReleases (--helm) of every namespace,
// and the FleetClusters and FleetRollouts of ns. What cannot be listed is said too.
func describeTrouble(ctx context.Context, c client.Client, ns string) string {
	var lines []string
	add := func(kind string, obj client.Object, conds []metav1.Condition, extra string) {
		ready := apimeta.FindStatusCondition(conds, v1alpha1.ReadyCondition)
		if ready != nil && ready.Status == metav1.ConditionTrue {
			return
		}
		lines = append(lines, fmt.Sprintf("%s %s/%s%s: Ready=%s", kind, obj.GetNamespace(), obj.GetName(), extra, conditionText(ready)))
	}
	listErr := func(what string, err error) {
		lines = append(lines, fmt.Sprintf("cannot list %s: %v", what, err))
	}

	var srcs sourcev1.GitRepositoryList
	if err := c.List(ctx, &srcs); err != nil {
		listErr("GitRepositories", err)
	}
	for i := range srcs.Items {
		add("GitRepository", &srcs.Items[i], srcs.Items[i].Status.Conditions, "")
	}
	var ocis sourcev1.OCIRepositoryList
	if err := c.List(ctx, &ocis); err != nil {
		listErr("OCIRepositories", err)
	}
	for i := range ocis.Items {
		add("OCIRepository", &ocis.Items[i], ocis.Items[i].Status.Conditions, "")
	}
	// Listed unstructured: the hub's client knows no helm-controller types. Only a sandbox with
	// --helm has their CRD.
	hrs := &unstructured.UnstructuredList{}
	hrs.SetGroupVersionKind(helmReleaseList)
	if err := c.List(ctx, hrs); err != nil && !apimeta.IsNoMatchError(err) {
		listErr("HelmReleases", err)
	}
	for i := range hrs.Items {
		add("HelmRelease", &hrs.Items[i], unstructuredConditions(&hrs.Items[i]), "")
	}
	var kss kustomizev1.KustomizationList
	if err := c.List(ctx, &kss); err != nil {
		listErr("Kustomizations", err)
	}
	for i := range kss.Items {
		add("Kustomization", &kss.Items[i], kss.Items[i].Status.Conditions, "")
	}
	var fcs v1alpha1.FleetClusterList
	if err := c.List(ctx, &fcs, client.InNamespace(ns)); err != nil {
		listErr("FleetClusters", err)
	}
	for i := range fcs.Items {
		add("FleetCluster", &fcs.Items[i], fcs.Items[i].Status.Conditions, "")
	}
	var frs v1alpha1.FleetRolloutList
	if err := c.List(ctx, &frs, client.InNamespace(ns)); err != nil {
		listErr("FleetRollouts", err)
	}
	for i := range frs.Items {
		fr := &frs.Items[i]
		extra := " (phase " + fr.Status.Phase
		if g := failedGates(fr); g != noGateFailed {
			extra += "; " + g
		}
		add("FleetRollout", fr, fr.Status.Conditions, extra+")")
	}
	sort.Strings(lines)
	if len(lines) == 0 {
		return ""
	}
	return strings.Join(lines, "\n") + "\n"
}

var helmReleaseList = schema.GroupVersionKind{Group: "helm.toolkit.fluxcd.io", Version: "v2", Kind: "HelmReleaseList"}

// unstructuredConditions are the status.conditions of o; none when they cannot be read.
func unstructuredConditions(o *unstructured.Unstructured) []metav1.Condition {
	raw, _, _ := unstructured.NestedSlice(o.Object, "status", "conditions")
	var conds []metav1.Condition
	for _, r := range raw {
		m, ok := r.(map[string]any)
		var c metav1.Condition
		if ok && runtime.DefaultUnstructuredConverter.FromUnstructured(m, &c) == nil {
			conds = append(conds, c)
		}
	}
	return conds
}
