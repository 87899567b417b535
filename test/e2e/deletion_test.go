package e2e

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/controllers"
)

// Deleting a FleetRollout on a hub whose garbage collector runs (as every real hub's does): its
// Kustomizations and pinned sources are collected, and what that does to the members is what
// spec.deletionPolicy says.
//
// With the default, Orphan, every member keeps running what it ran: the Kustomization tidegate
// wrote says deletionPolicy Orphan, and the finalizer sets it on one that does not (here: one
// edited back to Flux's default, MirrorPrune with prune true, as a Kustomization written before
// the field was). Without the finalizer that member's package is pruned when the garbage collector
// deletes its Kustomization; without either, every member's is.
//
// With Delete, the package is pruned from every member, and the rollout is gone only once it was.
// The controller is stopped at "finalize:<cluster>" of the second Kustomization, the first deleted:
// the next controller deletes the rest and removes the finalizer.
//
// The rollouts' GateReceipts and RolloutLedgers outlive them either way.
func TestE2EDeletingARollout(t *testing.T) {
	parallel(t)
	s, first := newFleetSetup(t, 2, demoPackage("v1"))
	h := startTidegate(t, s, controllers.Options{})
	ctx, cancel := testContext(t, 8*time.Minute)
	defer cancel()
	rev := s.repo.Revision(first)

	// Orphan, the default.
	s.createRollout(ctx, t, twoWaveRollout(s.ns), rev, nil)
	web := s.rollout(t, "web")
	if web.Spec.DeletionPolicy != v1alpha1.DeletionPolicyOrphan {
		t.Errorf("spec.deletionPolicy defaults to %q, want Orphan", web.Spec.DeletionPolicy)
	}
	if !slices.Contains(web.Finalizers, v1alpha1.Finalizer) {
		t.Errorf("the rollout's finalizers are %v, want %s", web.Finalizers, v1alpha1.Finalizer)
	}
	for _, m := range s.members {
		if ks := s.kustomization(t, "web", m.Name); ks == nil || ks.Spec.DeletionPolicy != kustomizev1.DeletionPolicyOrphan {
			t.Fatalf("the Kustomization of %s does not say deletionPolicy Orphan: %+v", m.Name, ks)
		}
	}
	edited := s.members[1].Name
	stripped := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"deletionPolicy":null}}`))
	if err := s.f.Hub.Patch(ctx, s.kustomization(t, "web", edited), stripped, client.FieldOwner("e2e")); err != nil {
		t.Fatal(err)
	}
	if ks := s.kustomization(t, "web", edited); ks.GetDeletionPolicy() != kustomizev1.DeletionPolicyMirrorPrune || !ks.Spec.Prune {
		t.Fatalf("the Kustomization of %s says deletionPolicy %s, prune %v; want Flux's default, MirrorPrune with prune", edited, ks.GetDeletionPolicy(), ks.Spec.Prune)
	}
	receipts := s.receiptNames(ctx, t, "web")
	if len(receipts) == 0 {
		t.Fatal("the rollout left no receipt")
	}

	s.deleteRollout(ctx, t, "web")
	for _, m := range s.members {
		if v := s.memberVersion(ctx, m.Name); v != "v1" {
			t.Errorf("%s runs %q once the rollout and its Kustomizations are gone, want v1 (orphaned)", m.Name, v)
		}
		if !s.memberDeployment(ctx, t, m.Name) {
			t.Errorf("the web Deployment of %s is gone with the rollout, want it orphaned", m.Name)
		}
	}
	if got := s.receiptNames(ctx, t, "web"); !equalStrings(got, receipts) {
		t.Errorf("receipts after the rollout was deleted: %v, want every one it wrote: %v", got, receipts)
	}

	// Delete: the package is pruned everywhere. The rollout takes over what the first one orphaned.
	again := twoWaveRollout(s.ns)
	again.Name = "again"
	s.createRollout(ctx, t, again, rev, func(fr *v1alpha1.FleetRollout) { fr.Spec.DeletionPolicy = v1alpha1.DeletionPolicyDelete })
	for _, m := range s.members {
		if ks := s.kustomization(t, "again", m.Name); ks == nil || ks.Spec.DeletionPolicy != kustomizev1.DeletionPolicyDelete {
			t.Fatalf("the Kustomization of %s does not say deletionPolicy Delete: %+v", m.Name, ks)
		}
	}
	againReceipts := s.receiptNames(ctx, t, "again")
	// The finalizer deletes the Kustomizations in the order of their names: the crash comes before
	// the second, once the first was deleted.
	order := []string{s.members[0].Name, s.members[1].Name}
	sort.Slice(order, func(i, j int) bool {
		return v1alpha1.KustomizationName("again", order[i]) < v1alpha1.KustomizationName("again", order[j])
	})
	h.Stop(t)
	crash := newCrashAt("finalize:" + order[1])
	h = startTidegate(t, s, controllers.Options{TestHook: crash.hook})
	if err := s.f.Hub.Delete(ctx, s.rollout(t, "again")); err != nil {
		t.Fatal(err)
	}
	crash.wait(ctx, t)
	h.Stop(t)
	if fr := s.rollout(t, "again"); fr.DeletionTimestamp.IsZero() || !slices.Contains(fr.Finalizers, v1alpha1.Finalizer) {
		t.Fatalf("at the crash the rollout should be deleted and keep its finalizer: %v", fr.Finalizers)
	}
	if ks := s.kustomization(t, "again", order[0]); ks != nil && ks.DeletionTimestamp.IsZero() {
		t.Errorf("at the crash the Kustomization of %s should be deleted", order[0])
	}
	if ks := s.kustomization(t, "again", order[1]); ks == nil || !ks.DeletionTimestamp.IsZero() {
		t.Fatalf("the Kustomization of %s was deleted before the crash point", order[1])
	}
	if n := len(s.pinnedSources(ctx, t, "again")); n == 0 {
		t.Errorf("at the crash the rollout's pinned sources are gone while it still exists")
	}
	startTidegate(t, s, controllers.Options{})
	s.rolloutGone(ctx, t, "again")
	// The rollout went only after its Kustomizations, and each of them only after kustomize-controller
	// pruned what it applied: nothing of the package is left by now.
	for _, m := range s.members {
		if v := s.memberVersion(ctx, m.Name); v != "" {
			t.Errorf("%s still runs %q after the rollout with deletionPolicy Delete is gone, want the package pruned", m.Name, v)
		}
		if s.memberDeployment(ctx, t, m.Name) {
			t.Errorf("the web Deployment of %s outlived the rollout with deletionPolicy Delete", m.Name)
		}
	}
	if got := s.receiptNames(ctx, t, "web"); !equalStrings(got, receipts) {
		t.Errorf("receipts of the first rollout at the end: %v, want %v", got, receipts)
	}
	if got := s.receiptNames(ctx, t, "again"); len(got) == 0 || !equalStrings(got, againReceipts) {
		t.Errorf("receipts after the rollout with deletionPolicy Delete was deleted: %v, want every one it wrote: %v", got, againReceipts)
	}
	if l := s.ledger(ctx, t, "again", rev); l.Spec.Outcome != v1alpha1.OutcomeCompleted {
		t.Errorf("the ledger of the deleted rollout ends %q, want Completed", l.Spec.Outcome)
	}
}

// deleteRollout deletes the rollout and waits until it, its Kustomizations and its pinned sources
// are gone: the finalizer was removed and the hub's garbage collector collected what it owned.
func (s *fleetSetup) deleteRollout(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	if err := s.f.Hub.Delete(ctx, s.rollout(t, name)); err != nil {
		t.Fatal(err)
	}
	s.rolloutGone(ctx, t, name)
}

// rolloutGone waits until the deleted rollout, its Kustomizations and its pinned sources are gone.
func (s *fleetSetup) rolloutGone(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	eventually(ctx, t, "rollout "+name+" gone", func() (bool, string) {
		var fr v1alpha1.FleetRollout
		err := s.f.Hub.Get(ctx, keyOf(s.ns, name), &fr)
		return apierrors.IsNotFound(err), fmt.Sprintf("%v, finalizers %v, %s", err, fr.Finalizers, describe(&fr))
	})
	owned := client.MatchingLabels{v1alpha1.RolloutLabel: name}
	eventually(ctx, t, "the Kustomizations and pinned sources of "+name+" collected", func() (bool, string) {
		var ks kustomizev1.KustomizationList
		if err := s.f.Hub.List(ctx, &ks, client.InNamespace(s.ns), owned); err != nil {
			return false, err.Error()
		}
		pins := s.pinnedSources(ctx, t, name)
		return len(ks.Items) == 0 && len(pins) == 0, fmt.Sprintf("%d Kustomizations, %d pinned sources left", len(ks.Items), len(pins))
	})
}

// pinnedSources lists the pinned sources labelled with the rollout's name.
func (s *fleetSetup) pinnedSources(ctx context.Context, t *testing.T, rollout string) []sourcev1.GitRepository {
	t.Helper()
	var pins sourcev1.GitRepositoryList
	if err := s.f.Hub.List(ctx, &pins, client.InNamespace(s.ns), client.MatchingLabels{v1alpha1.RolloutLabel: rollout}); err != nil {
		t.Fatal(err)
	}
	return pins.Items
}

// receiptNames lists the names of the receipts labelled with the rollout's name, sorted.
func (s *fleetSetup) receiptNames(ctx context.Context, t *testing.T, rollout string) []string {
	t.Helper()
	var list v1alpha1.GateReceiptList
	if err := s.f.Hub.List(ctx, &list, client.InNamespace(s.ns), client.MatchingLabels{v1alpha1.RolloutLabel: rollout}); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, rc := range list.Items {
		names = append(names, rc.Name)
	}
	sort.Strings(names)
	return names
}

// memberDeployment tells whether the demo's web Deployment exists on the member.
func (s *fleetSetup) memberDeployment(ctx context.Context, t *testing.T, cluster string) bool {
	t.Helper()
	var d appsv1.Deployment
	err := s.f.Member(cluster).Client.Get(ctx, types.NamespacedName{Namespace: s.ns, Name: "web"}, &d)
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("reading the web Deployment of %s: %v", cluster, err)
	}
	return err == nil && d.DeletionTimestamp.IsZero()
}
