package controllers

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/engine"
	"github.com/tidegate/tidegate/evidence/availability"
)

// TestManagerOptions: every manager reads member credentials (kubeconfig Secrets, workload identity
// ConfigMaps and the ServiceAccounts they name) uncached, watches their metadata only in the fleet
// namespaces when they are given, and never binds :8080 by default.
func TestManagerOptions(t *testing.T) {
	o := ManagerOptions(ManagerConfig{})
	if o.Client.Cache == nil || len(o.Client.Cache.DisableFor) != 4 {
		t.Fatalf("client cache options = %+v, want Secrets, ConfigMaps, ServiceAccounts and GateReceipts read uncached", o.Client.Cache)
	}
	var uncached []string
	for _, obj := range o.Client.Cache.DisableFor {
		uncached = append(uncached, fmt.Sprintf("%T", obj))
	}
	if got := strings.Join(uncached, " "); got != "*v1.Secret *v1.ConfigMap *v1.ServiceAccount *v1alpha1.GateReceipt" {
		t.Errorf("uncached kinds = %s, want *v1.Secret *v1.ConfigMap *v1.ServiceAccount *v1alpha1.GateReceipt", got)
	}
	for obj := range o.Cache.ByObject {
		if _, ok := obj.(*corev1.Secret); ok {
			t.Errorf("without fleet namespaces, Secrets' metadata is watched everywhere: %+v", o.Cache.ByObject[obj])
		}
	}
	scoped := ManagerOptions(ManagerConfig{FleetNamespaces: []string{"fleet-a", "fleet-b"}})
	watched := map[string]bool{}
	for obj, by := range scoped.Cache.ByObject {
		switch obj.(type) {
		case *corev1.Secret, *corev1.ConfigMap:
			var ns []string
			for n := range by.Namespaces {
				ns = append(ns, n)
			}
			slices.Sort(ns)
			if !slices.Equal(ns, []string{"fleet-a", "fleet-b"}) {
				t.Errorf("%T watched in %v, want fleet-a, fleet-b", obj, ns)
			}
			watched[fmt.Sprintf("%T", obj)] = true
		}
	}
	if len(watched) != 2 {
		t.Errorf("with fleet namespaces, Secrets and ConfigMaps should be watched there only: %v", watched)
	}
	if o.Metrics.BindAddress != "0" {
		t.Errorf("metrics bind address = %q, want %q (off)", o.Metrics.BindAddress, "0")
	}
	if o.Scheme == nil || o.Cache.DefaultTransform == nil {
		t.Errorf("scheme or managedFields stripping missing: %+v", o.Cache)
	}
	if on := ManagerOptions(ManagerConfig{LeaderElection: true}); !on.LeaderElection || on.LeaderElectionID != LeaderElectionID {
		t.Errorf("leader election = %v on %q", on.LeaderElection, on.LeaderElectionID)
	}
}

// The manager caches receipts' metadata only: against a real API server, with the controllers as
// the manager runs them, a rollout's first gate is decided and its receipt written, and every list
// and watch of GateReceipts the manager made asked for their metadata alone
// (PartialObjectMetadata), never for receipts whole.
func TestTheManagerCachesReceiptsMetadataOnly(t *testing.T) {
	h := startTestHub(t)
	requests := &requestCounter{}
	h.manager(t, requests, func(mgr ctrl.Manager) error {
		return Setup(mgr, h.cfg, Options{SkipNameValidation: true})
	})
	ctx := context.Background()
	fr := h.vacuousFleet(t, "receipt-cache", []v1alpha1.Wave{{Name: "all", Selector: &metav1.LabelSelector{}}})
	eventually(t, "a gate of the first wave to be decided", func() (bool, string) {
		if err := h.admin.Get(ctx, client.ObjectKeyFromObject(fr), fr); err != nil {
			return false, err.Error()
		}
		h.servePinnedSource(t, fr)
		if len(fr.Status.Waves) == 0 || len(fr.Status.Waves[0].Gates) == 0 {
			return false, fmt.Sprintf("waves %+v", fr.Status.Waves)
		}
		return true, ""
	})
	var receipts v1alpha1.GateReceiptList
	if err := h.admin.List(ctx, &receipts, client.InNamespace(fr.Namespace)); err != nil || len(receipts.Items) == 0 {
		t.Fatalf("%d receipts written (%v), want the decision's", len(receipts.Items), err)
	}
	lists := 0
	for request, accepts := range requests.acceptsOf("/gatereceipts") {
		if !strings.HasPrefix(request, "GET ") && !strings.HasPrefix(request, "WATCH ") {
			continue
		}
		lists++
		for _, a := range accepts {
			if !strings.Contains(a, "as=PartialObjectMetadata") {
				t.Errorf("%s asked for %q: the manager would cache receipts whole", request, a)
			}
		}
	}
	if lists == 0 {
		t.Error("the manager never listed GateReceipts: the decision was not made as a pass makes it")
	}
}

// TestCacheKeepsWhatTidegateReadsOfAKustomization: a Kustomization in the manager's cache has no
// managedFields, no history, and of its inventory only the workloads sampled for availability (and
// an entry that does not parse); everything else tidegate reads is as the API server has it.
func TestCacheKeepsWhatTidegateReadsOfAKustomization(t *testing.T) {
	hub := startTestHub(t)
	mgr := hub.manager(t, &requestCounter{}, nil)
	fr, _ := hub.rollout(t, "trim", true)
	ctx := context.Background()

	fc := &v1alpha1.FleetCluster{ObjectMeta: metav1.ObjectMeta{Name: "c1", Namespace: fr.Namespace}}
	ks := engine.DesiredKustomization(fr, fc, engine.Target{Source: "app-0123456789ab", Revision: "main@sha1:1", Wave: "all"})
	ks.Spec.HealthChecks = []meta.NamespacedObjectKindReference{{Kind: "Deployment", Name: "web", Namespace: "web"}}
	if err := hub.admin.Create(ctx, ks); err != nil {
		t.Fatal(err)
	}
	entries := []kustomizev1.ResourceRef{
		{ID: "_web__Namespace", Version: "v1"},
		{ID: "web_web-config__ConfigMap", Version: "v1"},
		{ID: "web_web_apps_Deployment", Version: "v1"},
		{ID: "web_db_apps_StatefulSet", Version: "v1"},
		{ID: "web_agent_apps_DaemonSet", Version: "v1"},
		{ID: "web_web-rs_apps_ReplicaSet", Version: "v1"},
		{ID: "web_web_networking.k8s.io_Ingress", Version: "v1"},
		{ID: "not-an-id", Version: "v1"},
	}
	for i := range 200 {
		entries = append(entries, kustomizev1.ResourceRef{ID: fmt.Sprintf("web_cm-%d__ConfigMap", i), Version: "v1"})
	}
	ks.Status = kustomizev1.KustomizationStatus{
		ObservedGeneration:    ks.Generation,
		LastAppliedRevision:   "main@sha1:1",
		LastAttemptedRevision: "main@sha1:1",
		Conditions: []metav1.Condition{
			{Type: meta.ReadyCondition, Status: metav1.ConditionTrue, Reason: meta.ReconciliationSucceededReason, Message: "Applied revision: main@sha1:1", LastTransitionTime: metav1.Now(), ObservedGeneration: ks.Generation},
			{Type: meta.HealthyCondition, Status: metav1.ConditionTrue, Reason: meta.SucceededReason, Message: "Health check passed", LastTransitionTime: metav1.Now(), ObservedGeneration: ks.Generation},
		},
		Inventory: &kustomizev1.ResourceInventory{Entries: entries},
		History: meta.History{
			{Digest: "sha256:2", FirstReconciled: metav1.Now(), LastReconciled: metav1.Now(), LastReconciledStatus: meta.ReconciliationSucceededReason, TotalReconciliations: 3, Metadata: map[string]string{"revision": "main@sha1:1"}},
			{Digest: "sha256:1", FirstReconciled: metav1.Now(), LastReconciled: metav1.Now(), LastReconciledStatus: meta.ReconciliationSucceededReason, TotalReconciliations: 1, Metadata: map[string]string{"revision": "main@sha1:0"}},
		},
	}
	if err := hub.admin.Status().Update(ctx, ks); err != nil {
		t.Fatal(err)
	}
	var live kustomizev1.Kustomization
	if err := hub.admin.Get(ctx, client.ObjectKeyFromObject(ks), &live); err != nil {
		t.Fatal(err)
	}
	if len(live.ManagedFields) == 0 {
		t.Fatal("the API server recorded no managedFields: nothing to strip")
	}
	var cached kustomizev1.Kustomization
	eventually(t, "the Kustomization's status in the cache", func() (bool, string) {
		if err := mgr.GetClient().Get(ctx, client.ObjectKeyFromObject(ks), &cached); err != nil {
			return false, err.Error()
		}
		return cached.ResourceVersion == live.ResourceVersion, "resourceVersion " + cached.ResourceVersion
	})

	if len(cached.ManagedFields) != 0 {
		t.Errorf("managedFields %d entries; want none", len(cached.ManagedFields))
	}
	// The latest history entry judges a member in the middle of a reconcile (engine.Observation).
	if len(cached.Status.History) != 1 || !reflect.DeepEqual(cached.Status.History[0], live.Status.History[0]) {
		t.Errorf("cached history %+v, want only the latest of %+v", cached.Status.History, live.Status.History)
	}
	var ids []string
	for _, e := range cached.Status.Inventory.Entries {
		ids = append(ids, e.ID)
	}
	want := []string{"web_web_apps_Deployment", "web_db_apps_StatefulSet", "web_agent_apps_DaemonSet", "not-an-id"}
	if !reflect.DeepEqual(ids, want) {
		t.Errorf("cached inventory = %v, want %v", ids, want)
	}
	// What tidegate reads is the same as from the API server (the unparseable entry an error in both).
	liveWorkloads, liveErr := availability.WorkloadsFromInventory(live.Status.Inventory)
	cachedWorkloads, cachedErr := availability.WorkloadsFromInventory(cached.Status.Inventory)
	if !reflect.DeepEqual(liveWorkloads, cachedWorkloads) || liveErr == nil || cachedErr == nil {
		t.Errorf("workloads from the cache %v (%v), from the API server %v (%v)", cachedWorkloads, cachedErr, liveWorkloads, liveErr)
	}
	if engine.Observe(&live) != engine.Observe(&cached) {
		t.Errorf("observation from the cache %+v, from the API server %+v", engine.Observe(&cached), engine.Observe(&live))
	}
	if !reflect.DeepEqual(live.Spec, cached.Spec) || !reflect.DeepEqual(live.Labels, cached.Labels) || !reflect.DeepEqual(live.Annotations, cached.Annotations) ||
		!reflect.DeepEqual(live.Status.Conditions, cached.Status.Conditions) || !reflect.DeepEqual(live.OwnerReferences, cached.OwnerReferences) {
		t.Error("the cache changed the spec, metadata or conditions")
	}
}
