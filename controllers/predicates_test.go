package controllers

import (
	"testing"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// TestWatchPredicates: the status writes Flux and the FleetCluster controller make on every
// reconcile trigger no rollout reconcile; what the engine acts on does.
func TestWatchPredicates(t *testing.T) {
	ks := func(edit func(*kustomizev1.Kustomization)) client.Object {
		k := &kustomizev1.Kustomization{ObjectMeta: metav1.ObjectMeta{Name: "web-a", Generation: 2}}
		k.Status.ObservedGeneration = 2
		k.Status.LastAppliedRevision = "main@sha1:1"
		k.Status.Conditions = []metav1.Condition{{Type: meta.ReadyCondition, Status: metav1.ConditionTrue, Reason: meta.ReconciliationSucceededReason, Message: "Applied revision: main@sha1:1", ObservedGeneration: 2}}
		if edit != nil {
			edit(k)
		}
		return k
	}
	git := func(edit func(*sourcev1.GitRepository)) client.Object {
		g := &sourcev1.GitRepository{ObjectMeta: metav1.ObjectMeta{Name: "fleet", Generation: 1}}
		g.Status.Artifact = &meta.Artifact{Revision: "main@sha1:1", Digest: "sha256:1", URL: "http://source/1.tar.gz"}
		g.Status.Conditions = []metav1.Condition{{Type: meta.ReadyCondition, Status: metav1.ConditionTrue, Reason: meta.SucceededReason, Message: "stored artifact"}}
		if edit != nil {
			edit(g)
		}
		return g
	}
	fc := func(edit func(*v1alpha1.FleetCluster)) client.Object {
		c := &v1alpha1.FleetCluster{ObjectMeta: metav1.ObjectMeta{Name: "a", Generation: 1, Labels: map[string]string{"env": "prod"}}}
		c.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ReachableCondition, Status: metav1.ConditionTrue, Reason: v1alpha1.ReachableReason}}
		if edit != nil {
			edit(c)
		}
		return c
	}
	now := metav1.Now()
	for _, tc := range []struct {
		name     string
		pass     bool
		old, new client.Object
		update   func(event.UpdateEvent) bool
	}{
		{"kustomization: a new message and timestamp", false, ks(nil), ks(func(k *kustomizev1.Kustomization) {
			k.Status.Conditions[0].Message, k.Status.LastHandledReconcileAt = "Applied revision: main@sha1:1 again", "now"
		}), kustomizationChanged.Update},
		{"kustomization: the spec changed", true, ks(nil), ks(func(k *kustomizev1.Kustomization) { k.Generation = 3 }), kustomizationChanged.Update},
		{"kustomization: a new revision applied", true, ks(nil), ks(func(k *kustomizev1.Kustomization) { k.Status.LastAppliedRevision = "main@sha1:2" }), kustomizationChanged.Update},
		{"kustomization: Ready failed", true, ks(nil), ks(func(k *kustomizev1.Kustomization) {
			k.Status.Conditions[0].Status, k.Status.Conditions[0].Reason = metav1.ConditionFalse, meta.HealthCheckFailedReason
		}), kustomizationChanged.Update},
		{"source: a new artifact", true, git(nil), git(func(g *sourcev1.GitRepository) { g.Status.Artifact.Revision = "main@sha1:2" }), sourceChanged.Update},
		{"source: only the message", false, git(nil), git(func(g *sourcev1.GitRepository) { g.Status.Conditions[0].Message = "stored artifact again" }), sourceChanged.Update},
		{"source: Ready lost", true, git(nil), git(func(g *sourcev1.GitRepository) { g.Status.Conditions[0].Status = metav1.ConditionFalse }), sourceChanged.Update},
		{"fleetcluster: a probe's lastObservedTime", false, fc(nil), fc(func(c *v1alpha1.FleetCluster) { c.Status.LastObservedTime = &now }), fleetClusterChanged.Update},
		{"fleetcluster: unreachable", true, fc(nil), fc(func(c *v1alpha1.FleetCluster) { c.Status.Conditions[0].Status = metav1.ConditionFalse }), fleetClusterChanged.Update},
		{"fleetcluster: relabelled", true, fc(nil), fc(func(c *v1alpha1.FleetCluster) { c.Labels["env"] = "staging" }), fleetClusterChanged.Update},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.update(event.UpdateEvent{ObjectOld: tc.old, ObjectNew: tc.new}); got != tc.pass {
				t.Errorf("passes = %v, want %v", got, tc.pass)
			}
		})
	}
}
