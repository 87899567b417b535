package controllers

import (
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// viewChanged passes creates, deletes and generic events (predicate.Funcs' defaults), and the
// updates that change what view extracts from the object. Flux controllers rewrite status on every reconcile; a reconcile of a
// rollout is wanted only when something it acts on changed, so each watch names what that is.
type viewChanged[V comparable] struct {
	predicate.Funcs
	view func(client.Object) V
}

func (p viewChanged[V]) Update(e event.UpdateEvent) bool {
	if e.ObjectOld == nil || e.ObjectNew == nil {
		return false
	}
	return p.view(e.ObjectOld) != p.view(e.ObjectNew)
}

// kustomizationView is what the engine reads of a per-cluster Kustomization (collector.Observe):
// its spec's generation and what kustomize-controller made of it.
type kustomizationView struct {
	generation, observedGeneration int64
	lastApplied                    string
	ready, healthy                 conditionView
}

type conditionView struct {
	status, reason     string
	observedGeneration int64
}

func conditionOf(o conditions.Getter, typ string) conditionView {
	c := conditions.Get(o, typ)
	if c == nil {
		return conditionView{}
	}
	return conditionView{status: string(c.Status), reason: c.Reason, observedGeneration: c.ObservedGeneration}
}

// kustomizationChanged passes a Kustomization update that changes its spec, the revision it
// applied, or its Ready or Healthy condition; not the rest of kustomize-controller's status writes
// (messages, inventory rewrites of the same revision, timestamps).
var kustomizationChanged = viewChanged[kustomizationView]{view: func(o client.Object) kustomizationView {
	ks, ok := o.(*kustomizev1.Kustomization)
	if !ok {
		return kustomizationView{}
	}
	return kustomizationView{
		generation: ks.Generation, observedGeneration: ks.Status.ObservedGeneration, lastApplied: ks.Status.LastAppliedRevision,
		ready: conditionOf(ks, meta.ReadyCondition), healthy: conditionOf(ks, meta.HealthyCondition),
	}
}}

// sourceView is what the engine reads of a Flux source: its artifact and whether it is Ready.
type sourceView struct {
	revision, digest, url string
	ready                 conditionView
	generation            int64
}

// sourceChanged passes a source update that changes its artifact, its Ready condition or its spec,
// as kustomize-controller's SourceRevisionChangePredicate does for the artifact.
var sourceChanged = viewChanged[sourceView]{view: func(o client.Object) sourceView {
	v := sourceView{generation: o.GetGeneration()}
	if src, ok := o.(sourcev1.Source); ok {
		if a := src.GetArtifact(); a != nil {
			v.revision, v.digest, v.url = a.Revision, a.Digest, a.URL
		}
	}
	if g, ok := o.(conditions.Getter); ok {
		v.ready = conditionOf(g, meta.ReadyCondition)
	}
	return v
}}

// fleetClusterView is what the plan reads of a FleetCluster (fleets.InventoryFrom): its spec, labels
// and reachability; not lastObservedTime, which every probe rewrites.
type fleetClusterView struct {
	generation int64
	labels     string
	reachable  conditionView
}

var fleetClusterChanged = viewChanged[fleetClusterView]{view: func(o client.Object) fleetClusterView {
	v := fleetClusterView{generation: o.GetGeneration(), labels: labels.Set(o.GetLabels()).String()}
	if fc, ok := o.(*v1alpha1.FleetCluster); ok {
		v.reachable = conditionOf(fc, v1alpha1.ReachableCondition)
	}
	return v
}}
