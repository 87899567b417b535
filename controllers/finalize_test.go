package controllers

import (
	"context"
	"fmt"
	"slices"
	"testing"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/engine"
)

// The finalizer carries out spec.deletionPolicy on the rollout's Kustomizations before the rollout
// goes, against a real API server (no garbage collector, no kustomize-controller: the end-to-end
// test TestE2EDeletingARollout has both). Orphan: every Kustomization is set to Flux's
// deletionPolicy Orphan, the one that said Flux's default included, and the rollout goes at once.
// Delete: every Kustomization is set to Delete and deleted, and the rollout stays until the last
// is gone (here one holds kustomize-controller's finalizer, as while it prunes).
func TestFinalizerCarriesOutTheDeletionPolicy(t *testing.T) {
	hub := startTestHub(t)
	hub.manager(t, &requestCounter{}, func(mgr ctrl.Manager) error {
		return Setup(mgr, hub.cfg, Options{SkipNameValidation: true})
	})
	ctx := context.Background()

	// owned makes the rollout's Kustomizations for clusters c0 and c1 as tidegate writes them, the
	// second edited back to Flux's default (no deletionPolicy: MirrorPrune, with prune true).
	owned := func(fr *v1alpha1.FleetRollout, finalizers ...string) []*kustomizev1.Kustomization {
		t.Helper()
		controller := true
		var out []*kustomizev1.Kustomization
		for i := range 2 {
			fc := &v1alpha1.FleetCluster{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("c%d", i), Namespace: fr.Namespace}}
			ks := engine.DesiredKustomization(fr, fc, engine.Target{Source: "app-0123456789ab", Revision: "main@sha1:1", Wave: "all"})
			if i == 1 {
				ks.Spec.DeletionPolicy = ""
			}
			ks.Finalizers = finalizers
			ks.OwnerReferences = []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: v1alpha1.FleetRolloutKind,
				Name: fr.Name, UID: fr.UID, Controller: &controller, BlockOwnerDeletion: &controller}}
			if err := hub.admin.Create(ctx, ks); err != nil {
				t.Fatal(err)
			}
			out = append(out, ks)
		}
		return out
	}
	withFinalizer := func(fr *v1alpha1.FleetRollout) {
		t.Helper()
		eventually(t, "the finalizer on the rollout", func() (bool, string) {
			if err := hub.admin.Get(ctx, client.ObjectKeyFromObject(fr), fr); err != nil {
				return false, err.Error()
			}
			return slices.Contains(fr.Finalizers, v1alpha1.Finalizer), fmt.Sprint(fr.Finalizers)
		})
	}
	gone := func(what string, obj client.Object) {
		t.Helper()
		eventually(t, what+" gone", func() (bool, string) {
			err := hub.admin.Get(ctx, client.ObjectKeyFromObject(obj), obj)
			return apierrors.IsNotFound(err), fmt.Sprintf("%v, deletionTimestamp %v, finalizers %v", err, obj.GetDeletionTimestamp(), obj.GetFinalizers())
		})
	}

	// Orphan, the default.
	fr, _ := hub.rollout(t, "orphan", false)
	withFinalizer(fr)
	if fr.Spec.DeletionPolicy != v1alpha1.DeletionPolicyOrphan {
		t.Errorf("spec.deletionPolicy %q, want the default Orphan", fr.Spec.DeletionPolicy)
	}
	kss := owned(fr)
	if err := hub.admin.Delete(ctx, fr); err != nil {
		t.Fatal(err)
	}
	gone("the rollout with deletionPolicy Orphan", fr)
	for _, ks := range kss {
		if err := hub.admin.Get(ctx, client.ObjectKeyFromObject(ks), ks); err != nil {
			t.Fatal(err)
		}
		if ks.Spec.DeletionPolicy != kustomizev1.DeletionPolicyOrphan {
			t.Errorf("Kustomization %s says deletionPolicy %q once its rollout is gone, want Orphan", ks.Name, ks.Spec.DeletionPolicy)
		}
		if !ks.DeletionTimestamp.IsZero() {
			t.Errorf("Kustomization %s is being deleted by tidegate; with Orphan the garbage collector deletes it", ks.Name)
		}
	}

	// Delete.
	fr, _ = hub.rollout(t, "delete", false)
	withFinalizer(fr)
	patch := client.MergeFrom(fr.DeepCopy())
	fr.Spec.DeletionPolicy = v1alpha1.DeletionPolicyDelete
	if err := hub.admin.Patch(ctx, fr, patch); err != nil {
		t.Fatal(err)
	}
	kss = owned(fr, kustomizev1.KustomizationFinalizer)
	if err := hub.admin.Delete(ctx, fr); err != nil {
		t.Fatal(err)
	}
	for _, ks := range kss {
		eventually(t, "Kustomization "+ks.Name+" deleted with deletionPolicy Delete", func() (bool, string) {
			if err := hub.admin.Get(ctx, client.ObjectKeyFromObject(ks), ks); err != nil {
				return false, err.Error()
			}
			return !ks.DeletionTimestamp.IsZero() && ks.Spec.DeletionPolicy == kustomizev1.DeletionPolicyDelete,
				fmt.Sprintf("deletionTimestamp %v, deletionPolicy %q", ks.DeletionTimestamp, ks.Spec.DeletionPolicy)
		})
	}
	// kustomize-controller prunes one member, then the other; the rollout waits for both.
	unfinalize := func(ks *kustomizev1.Kustomization) {
		t.Helper()
		body := []byte(`{"metadata":{"finalizers":null}}`)
		if err := hub.admin.Patch(ctx, ks, client.RawPatch(types.MergePatchType, body)); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		gone("Kustomization "+ks.Name, ks)
	}
	unfinalize(kss[0])
	if err := hub.admin.Get(ctx, client.ObjectKeyFromObject(fr), fr); err != nil {
		t.Fatalf("the rollout with deletionPolicy Delete went while a Kustomization was still pruning: %v", err)
	}
	unfinalize(kss[1])
	gone("the rollout with deletionPolicy Delete, its Kustomizations gone", fr)
}
