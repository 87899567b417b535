package controllers

import (
	"sync"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/engine"
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

// kustomizationView is what the engine reads of a per-cluster Kustomization (engine.Observe):
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

// kustomizationViewOf is the view of a member: a Kustomization, or a HelmRelease, whose applied
// revision is the digest of its latest release and which has no Healthy condition (its Ready says
// its health: engine.Observe).
func kustomizationViewOf(o client.Object) kustomizationView {
	switch m := o.(type) {
	case *kustomizev1.Kustomization:
		return kustomizationView{
			generation: m.Generation, observedGeneration: m.Status.ObservedGeneration, lastApplied: m.Status.LastAppliedRevision,
			ready: conditionOf(m, meta.ReadyCondition), healthy: conditionOf(m, meta.HealthyCondition),
		}
	case *helmv2.HelmRelease:
		return kustomizationView{
			generation: m.Generation, observedGeneration: m.Status.ObservedGeneration, lastApplied: engine.Observe(m).LastApplied,
			ready: conditionOf(m, meta.ReadyCondition),
		}
	}
	return kustomizationView{}
}

// settled tells whether kustomize-controller is done with the Kustomization for now: Ready is True
// or False, and its health checks, if it has a Healthy condition, are not in progress.
func (v kustomizationView) settled() bool {
	ready := v.ready.status == string(metav1.ConditionTrue) || v.ready.status == string(metav1.ConditionFalse)
	return ready && v.healthy.status != string(metav1.ConditionUnknown)
}

// moved tells whether what a Kustomization applies changed between two views: its spec, the
// generation kustomize-controller observed, or the revision it applied.
func (v kustomizationView) moved(from kustomizationView) bool {
	return v.generation != from.generation || v.observedGeneration != from.observedGeneration || v.lastApplied != from.lastApplied
}

// kustomizationChanges passes the Kustomization events a rollout acts on, and not the status writes
// of kustomize-controller's periodic reconcile, which at every interval turns Ready (and Healthy)
// Unknown and back to where it was: at 1,000 clusters, several events a second that change nothing.
//
// It passes creates, deletes and generic events; an update that changes the spec, the observed
// generation or the applied revision; and an update that leaves the Kustomization settled (Ready True
// or False, health checks not in progress) in a view (kustomizationView) other than the last settled
// one it saw of that Kustomization. An update into or within a transient state (Ready or Healthy
// Unknown) of the same revision passes nothing: what comes after it is judged against what came
// before it. A rollout that waits on a transient state (a noDisruption decision, say) comes back by
// its own requeue, not by this watch.
//
// It remembers one view per Kustomization, seeded by its create event (the informer's first list
// after a start), forgotten on delete. One per controller: newKustomizationChanges.
type kustomizationChanges struct {
	mu      sync.Mutex
	settled map[types.NamespacedName]kustomizationView
}

func newKustomizationChanges() *kustomizationChanges {
	return &kustomizationChanges{settled: map[types.NamespacedName]kustomizationView{}}
}

func (p *kustomizationChanges) Create(e event.CreateEvent) bool {
	p.remember(e.Object, kustomizationViewOf(e.Object))
	return true
}

func (p *kustomizationChanges) Delete(e event.DeleteEvent) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.settled, client.ObjectKeyFromObject(e.Object))
	return true
}

func (p *kustomizationChanges) Generic(event.GenericEvent) bool { return true }

func (p *kustomizationChanges) Update(e event.UpdateEvent) bool {
	if e.ObjectOld == nil || e.ObjectNew == nil {
		return false
	}
	old, now := kustomizationViewOf(e.ObjectOld), kustomizationViewOf(e.ObjectNew)
	if old == now {
		return false
	}
	moved := now.moved(old)
	if !now.settled() {
		return moved
	}
	key := client.ObjectKeyFromObject(e.ObjectNew)
	p.mu.Lock()
	defer p.mu.Unlock()
	last, ok := p.settled[key]
	if !ok {
		last = old
	}
	p.settled[key] = now
	return moved || last != now
}

func (p *kustomizationChanges) remember(o client.Object, v kustomizationView) {
	if !v.settled() {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.settled[client.ObjectKeyFromObject(o)] = v
}

// sourceView is what the engine reads of a Flux source: its artifact, whether it is Ready and
// whether its artifact was verified.
type sourceView struct {
	revision, digest, url string
	ready, verified       conditionView
	generation            int64
}

// sourceChanged passes a source update that changes its artifact, its Ready or SourceVerified
// condition or its spec, as kustomize-controller's SourceRevisionChangePredicate does for the
// artifact.
var sourceChanged = viewChanged[sourceView]{view: func(o client.Object) sourceView {
	v := sourceView{generation: o.GetGeneration()}
	if src, ok := o.(sourcev1.Source); ok {
		if a := src.GetArtifact(); a != nil {
			v.revision, v.digest, v.url = a.Revision, a.Digest, a.URL
		}
	}
	if g, ok := o.(conditions.Getter); ok {
		v.ready = conditionOf(g, meta.ReadyCondition)
		v.verified = conditionOf(g, sourcev1.SourceVerifiedCondition)
	}
	return v
}}

// fleetClusterView is what the plan reads of a FleetCluster (fleets.InventoryFrom): its spec, labels
// and reachability; not serverVersion or lastObservedTime.
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
