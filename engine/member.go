package engine

import (
	"encoding/json"
	"fmt"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/kustomize"
	"github.com/fluxcd/pkg/apis/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// A member is the Flux object tidegate writes on the hub for one cluster of a rollout: a
// Kustomization, or, for a rollout of a Helm chart (spec.chart), a HelmRelease. Either has the same
// name (v1alpha1.KustomizationName), labels, annotations and owner, and points at the pinned source
// of the revision it runs; the engine reads either through the functions of this file and
// Observe, so that no decision depends on which it is.

// Object is a member as the engine reads it: an object with metadata, the method set of
// controller-runtime's client.Object, which the engine does not link (it does no I/O); any
// client.Object is one, and the other way round.
type Object interface {
	metav1.Object
	runtime.Object
}

// ObjectList is a list of members: the method set of controller-runtime's client.ObjectList.
type ObjectList interface {
	metav1.ListInterface
	runtime.Object
}

// MemberKind is the kind of fr's members: HelmRelease for a chart, else Kustomization.
func MemberKind(fr *v1alpha1.FleetRollout) string {
	if fr.IsChart() {
		return helmv2.HelmReleaseKind
	}
	return kustomizev1.KustomizationKind
}

// NewMemberList is an empty list of fr's members' kind, to list them into (MemberItems).
func NewMemberList(fr *v1alpha1.FleetRollout) ObjectList {
	if fr.IsChart() {
		return &helmv2.HelmReleaseList{}
	}
	return &kustomizev1.KustomizationList{}
}

// MemberItems are the members of a list NewMemberList made, each its own pointer into the list.
func MemberItems(list ObjectList) []Object {
	var out []Object
	switch l := list.(type) {
	case *kustomizev1.KustomizationList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *helmv2.HelmReleaseList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	}
	return out
}

// NewMember is an empty object of fr's members' kind, to read one into.
func NewMember(fr *v1alpha1.FleetRollout) Object {
	if fr.IsChart() {
		return &helmv2.HelmRelease{}
	}
	return &kustomizev1.Kustomization{}
}

// DesiredMember is what makes cluster fc run t: DesiredHelmRelease for a chart, else
// DesiredKustomization.
func DesiredMember(fr *v1alpha1.FleetRollout, fc *v1alpha1.FleetCluster, tg Target) (Object, error) {
	if fr.IsChart() {
		return DesiredHelmRelease(fr, fc, tg)
	}
	return DesiredKustomization(fr, fc, tg), nil
}

// absent tells whether obj is no member: nil, or a nil pointer of either kind.
func absent(obj Object) bool {
	switch m := obj.(type) {
	case *kustomizev1.Kustomization:
		return m == nil
	case *helmv2.HelmRelease:
		return m == nil
	}
	return obj == nil
}

// MemberSource is the name of the source a member points at: a Kustomization's sourceRef, a
// HelmRelease's chartRef (or its chart template's sourceRef). "" for no member.
func MemberSource(obj Object) string {
	_, _, name := MemberSourceRef(obj)
	return name
}

// MemberSourceRef is the source a member points at (MemberSource), with its kind and its
// namespace, "" for the member's own.
func MemberSourceRef(obj Object) (kind, namespace, name string) {
	if absent(obj) {
		return "", "", ""
	}
	switch m := obj.(type) {
	case *kustomizev1.Kustomization:
		r := m.Spec.SourceRef
		return r.Kind, r.Namespace, r.Name
	case *helmv2.HelmRelease:
		switch {
		case m.Spec.ChartRef != nil:
			r := m.Spec.ChartRef
			return r.Kind, r.Namespace, r.Name
		case m.Spec.Chart != nil:
			r := m.Spec.Chart.Spec.SourceRef
			return r.Kind, r.Namespace, r.Name
		}
	}
	return "", "", ""
}

// MemberSuspended tells whether someone suspended the member (spec.suspend): Flux applies nothing
// there until it is resumed.
func MemberSuspended(obj Object) bool {
	if absent(obj) {
		return false
	}
	switch m := obj.(type) {
	case *kustomizev1.Kustomization:
		return m.Spec.Suspend
	case *helmv2.HelmRelease:
		return m.Spec.Suspend
	}
	return false
}

// memberKubeConfig is the kubeconfig the member reaches its cluster with.
func memberKubeConfig(obj Object) *meta.KubeConfigReference {
	if absent(obj) {
		return nil
	}
	switch m := obj.(type) {
	case *kustomizev1.Kustomization:
		return m.Spec.KubeConfig
	case *helmv2.HelmRelease:
		return m.Spec.KubeConfig
	}
	return nil
}

// memberValues are the values of its cluster a member was written with: a Kustomization's postBuild
// substitutions (the template's with the cluster's merged over them: merged over the template's
// again, they give back what it had), a HelmRelease's ClusterValuesAnnotation.
func memberValues(obj Object) map[string]string {
	if absent(obj) {
		return nil
	}
	switch m := obj.(type) {
	case *kustomizev1.Kustomization:
		if m.Spec.PostBuild != nil {
			return m.Spec.PostBuild.Substitute
		}
	case *helmv2.HelmRelease:
		var values map[string]string
		if raw := m.Annotations[ClusterValuesAnnotation]; raw != "" && json.Unmarshal([]byte(raw), &values) == nil {
			return values
		}
	}
	return nil
}

// memberSpec is the spec of a member, as SpecHash and SpecKept compare it.
func memberSpec(obj Object) (any, error) {
	switch m := obj.(type) {
	case *kustomizev1.Kustomization:
		if m != nil {
			return &m.Spec, nil
		}
	case *helmv2.HelmRelease:
		if m != nil {
			return &m.Spec, nil
		}
	}
	return nil, fmt.Errorf("%T is not a member tidegate writes (a Kustomization or a HelmRelease)", obj)
}

// MemberInventory is what Flux last applied to the member's cluster (status.inventory), as a
// Kustomization's inventory (a HelmRelease's has the same entries), and the health check expressions
// it judges them by: what noDisruption samples (availability.WorkloadsFromInventory). nil when it
// has none.
func MemberInventory(obj Object) (*kustomizev1.ResourceInventory, []kustomize.CustomHealthCheck) {
	if absent(obj) {
		return nil, nil
	}
	switch m := obj.(type) {
	case *kustomizev1.Kustomization:
		return m.Status.Inventory, m.Spec.HealthCheckExprs
	case *helmv2.HelmRelease:
		if m.Status.Inventory == nil {
			return nil, m.Spec.HealthCheckExprs
		}
		inv := &kustomizev1.ResourceInventory{Entries: make([]kustomizev1.ResourceRef, len(m.Status.Inventory.Entries))}
		for i, e := range m.Status.Inventory.Entries {
			inv.Entries[i] = kustomizev1.ResourceRef{ID: e.ID, Version: e.Version}
		}
		return inv, m.Spec.HealthCheckExprs
	}
	return nil, nil
}

// Members is m, members of one kind by cluster, as World.Objects holds them. A nil pointer in m
// stays in it: every function of this package reads it as no member.
func Members[M Object](m map[string]M) map[string]Object {
	if m == nil {
		return nil
	}
	out := make(map[string]Object, len(m))
	for c, obj := range m {
		out[c] = obj
	}
	return out
}
