package controllers

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/engine"
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
		}), newKustomizationChanges().Update},
		{"kustomization: the spec changed", true, ks(nil), ks(func(k *kustomizev1.Kustomization) { k.Generation = 3 }), newKustomizationChanges().Update},
		{"kustomization: a new revision applied", true, ks(nil), ks(func(k *kustomizev1.Kustomization) { k.Status.LastAppliedRevision = "main@sha1:2" }), newKustomizationChanges().Update},
		{"kustomization: Ready failed", true, ks(nil), ks(func(k *kustomizev1.Kustomization) {
			k.Status.Conditions[0].Status, k.Status.Conditions[0].Reason = metav1.ConditionFalse, meta.HealthCheckFailedReason
		}), newKustomizationChanges().Update},
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

// TestKustomizationChangesIgnoresPeriodicReconciles: kustomize-controller's reconcile at every
// interval turns Ready and Healthy Unknown and back; a rollout is reconciled when that ends
// somewhere else than it started, or when the revision or spec moves, and not otherwise.
func TestKustomizationChangesIgnoresPeriodicReconciles(t *testing.T) {
	type state struct {
		ready, healthy metav1.ConditionStatus
		reason         string
		applied        string
		generation     int64
		observed       int64
	}
	ks := func(s state) client.Object {
		k := &kustomizev1.Kustomization{}
		k.Name, k.Namespace, k.Generation = "web-a", "fleet", s.generation
		k.Status.ObservedGeneration = s.observed
		k.Status.LastAppliedRevision = s.applied
		k.Status.LastHandledReconcileAt = string(s.ready) + s.reason // changes on every write, as Flux's timestamps do
		if s.ready != "" {
			k.Status.Conditions = append(k.Status.Conditions, metav1.Condition{Type: meta.ReadyCondition, Status: s.ready, Reason: s.reason, ObservedGeneration: s.generation})
		}
		if s.healthy != "" {
			k.Status.Conditions = append(k.Status.Conditions, metav1.Condition{Type: meta.HealthyCondition, Status: s.healthy, Reason: s.reason, ObservedGeneration: s.generation})
		}
		return k
	}
	ready := state{ready: metav1.ConditionTrue, healthy: metav1.ConditionTrue, reason: meta.ReconciliationSucceededReason, applied: "main@sha1:1", generation: 2, observed: 2}
	with := func(s state, edit func(*state)) state { edit(&s); return s }
	progressingFrom := func(from state) state {
		return with(from, func(s *state) {
			s.ready, s.healthy, s.reason = metav1.ConditionUnknown, metav1.ConditionUnknown, meta.ProgressingReason
		})
	}
	progressing := progressingFrom(ready)
	checking := with(ready, func(s *state) { s.healthy, s.reason = metav1.ConditionUnknown, meta.ProgressingReason })
	failed := with(ready, func(s *state) {
		s.ready, s.healthy, s.reason = metav1.ConditionFalse, metav1.ConditionFalse, meta.HealthCheckFailedReason
	})
	newRevision := with(ready, func(s *state) { s.applied = "main@sha1:2" })
	newSpec := with(progressing, func(s *state) { s.generation = 3 })
	fresh := state{generation: 2}

	for _, tc := range []struct {
		name string
		// created is the state of the create event that seeds the predicate; then the updates
		// go through states in turn, and pass says which of them pass.
		created state
		states  []state
		pass    []bool
	}{
		{"a periodic reconcile, several times", ready,
			[]state{progressing, ready, progressing, checking, ready}, []bool{false, false, false, false, false}},
		{"a periodic reconcile that fails", ready,
			[]state{progressing, failed}, []bool{false, true}},
		{"a failure that heals", ready,
			[]state{progressing, failed, progressing, failed, progressing, ready}, []bool{false, true, false, false, false, true}},
		{"a new revision applied", ready,
			[]state{progressing, newRevision, progressingFrom(newRevision), newRevision}, []bool{false, true, false, false}},
		{"a spec change is passed while in progress", ready,
			[]state{newSpec}, []bool{true}},
		{"the first apply of a new Kustomization", fresh,
			[]state{progressingFrom(fresh), ready, progressing, ready}, []bool{false, true, false, false}},
		{"health checks alone going back to passed", ready,
			[]state{checking, ready}, []bool{false, false}},
		{"health checks that fail after passing", ready,
			[]state{checking, with(ready, func(s *state) { s.healthy, s.reason = metav1.ConditionFalse, meta.HealthCheckFailedReason })}, []bool{false, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newKustomizationChanges()
			prev := ks(tc.created)
			if !p.Create(event.CreateEvent{Object: prev}) {
				t.Fatal("a create did not pass")
			}
			for i, s := range tc.states {
				next := ks(s)
				if got := p.Update(event.UpdateEvent{ObjectOld: prev, ObjectNew: next}); got != tc.pass[i] {
					t.Errorf("update %d (to %+v) passes = %v, want %v", i+1, s, got, tc.pass[i])
				}
				prev = next
			}
		})
	}

	t.Run("a deleted and recreated Kustomization starts afresh", func(t *testing.T) {
		p := newKustomizationChanges()
		p.Create(event.CreateEvent{Object: ks(ready)})
		p.Delete(event.DeleteEvent{Object: ks(ready)})
		p.Create(event.CreateEvent{Object: ks(fresh)})
		if !p.Update(event.UpdateEvent{ObjectOld: ks(progressing), ObjectNew: ks(ready)}) {
			t.Error("the recreated Kustomization's first Ready did not pass")
		}
	})
}

// TestIdleKustomizationsTriggerNoRolloutReconcile runs the controllers as the binary does against a
// real API server and plays kustomize-controller's periodic reconciles on a rollout's
// Kustomizations (Ready and Healthy Unknown, then back to True, the timestamps new): they trigger no
// reconcile of the rollout and no request of the manager at all (controller_runtime_reconcile_total
// and a counting transport); a failure, and its healing, each trigger one.
func TestIdleKustomizationsTriggerNoRolloutReconcile(t *testing.T) {
	hub := startTestHub(t)
	var requests requestCounter
	mgr := hub.manager(t, &requests, func(mgr ctrl.Manager) error {
		return Setup(mgr, hub.cfg, Options{SkipNameValidation: true})
	})
	fr, _ := hub.rollout(t, "idle", true)
	ctx := context.Background()

	const clusters = 10
	var objects []*kustomizev1.Kustomization
	controller := true
	for i := range clusters {
		fc := &v1alpha1.FleetCluster{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("c%d", i), Namespace: fr.Namespace}}
		ks := engine.DesiredKustomization(fr, fc, engine.Target{Source: "app-0123456789ab", Revision: "main@sha1:1", Wave: "all"})
		ks.OwnerReferences = []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: v1alpha1.FleetRolloutKind,
			Name: fr.Name, UID: fr.UID, Controller: &controller, BlockOwnerDeletion: &controller}}
		if err := hub.admin.Create(ctx, ks); err != nil {
			t.Fatal(err)
		}
		objects = append(objects, ks)
	}
	// flux writes a Kustomization's status as kustomize-controller does, and waits until the
	// manager's cache has seen it, so that each write is an event of its own.
	round := 0
	flux := func(ks *kustomizev1.Kustomization, ready, healthy metav1.ConditionStatus, reason string) {
		t.Helper()
		round++
		now := metav1.Now()
		ks.Status.ObservedGeneration = ks.Generation
		ks.Status.LastAppliedRevision, ks.Status.LastAttemptedRevision = "main@sha1:1", "main@sha1:1"
		ks.Status.LastHandledReconcileAt = fmt.Sprint(round)
		ks.Status.Conditions = []metav1.Condition{
			{Type: meta.ReadyCondition, Status: ready, Reason: reason, Message: fmt.Sprintf("write %d", round), LastTransitionTime: now, ObservedGeneration: ks.Generation},
			{Type: meta.HealthyCondition, Status: healthy, Reason: reason, Message: fmt.Sprintf("write %d", round), LastTransitionTime: now, ObservedGeneration: ks.Generation},
		}
		if err := hub.admin.Status().Update(ctx, ks); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the status write in the cache", func() (bool, string) {
			var cached kustomizev1.Kustomization
			if err := mgr.GetClient().Get(ctx, client.ObjectKeyFromObject(ks), &cached); err != nil {
				return false, err.Error()
			}
			return cached.ResourceVersion == ks.ResourceVersion, cached.ResourceVersion
		})
	}
	for _, ks := range objects {
		flux(ks, metav1.ConditionTrue, metav1.ConditionTrue, meta.ReconciliationSucceededReason)
	}
	// The first Ready of each passed; let those reconciles run.
	eventually(t, "the rollout reconciled", func() (bool, string) {
		return reconciles(t, "fleetrollout") > 0, "no reconcile yet"
	})
	time.Sleep(time.Second)

	before, quiet := reconciles(t, "fleetrollout"), requests.snapshot()
	for range 3 {
		for _, ks := range objects {
			flux(ks, metav1.ConditionUnknown, metav1.ConditionUnknown, meta.ProgressingReason)
			flux(ks, metav1.ConditionTrue, metav1.ConditionTrue, meta.ReconciliationSucceededReason)
		}
	}
	// A real change: its reconcile runs after every event before it went through the predicate.
	flux(objects[0], metav1.ConditionFalse, metav1.ConditionFalse, meta.HealthCheckFailedReason)
	eventually(t, "a reconcile on Ready=False", func() (bool, string) {
		return reconciles(t, "fleetrollout") > before, "none"
	})
	if got := reconciles(t, "fleetrollout") - before; got != 1 {
		t.Errorf("%d rollout reconciles over %d periodic Flux reconciles and one failure, want 1", got, 3*clusters)
	}
	t.Logf("manager requests over the periodic reconciles and the failure: %v", requests.since(quiet))
	for k, n := range requests.since(quiet) {
		if !strings.HasPrefix(k, "GET /apis/tidegate.dev/v1alpha1/namespaces/idle/fleetrollouts/app") {
			t.Errorf("%d requests %s while idle, want none but the failure's reconcile reading its rollout", n, k)
		}
	}
	healed := reconciles(t, "fleetrollout")
	flux(objects[0], metav1.ConditionUnknown, metav1.ConditionUnknown, meta.ProgressingReason)
	flux(objects[0], metav1.ConditionTrue, metav1.ConditionTrue, meta.ReconciliationSucceededReason)
	eventually(t, "a reconcile on Ready=True after the failure", func() (bool, string) {
		return reconciles(t, "fleetrollout") > healed, "none"
	})
}

// reconciles is controller_runtime_reconcile_total of the named controller, all results.
func reconciles(t *testing.T, controller string) int {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, f := range families {
		if f.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" && l.GetValue() == controller {
					total += m.GetCounter().GetValue()
				}
			}
		}
	}
	return int(total)
}
