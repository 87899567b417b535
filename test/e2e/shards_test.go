package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/controllers"
)

// Two controller shards run against one hub, as two Deployments with --watch-label-selector
// sharding.fluxcd.io/key=shard1 and =shard2 would, each electing its leader on a Lease of its own.
// The rollout labelled shard1 (on member-1) completes while only shard1 runs, and the one labelled
// shard2 (on member-2) is left untouched, as is member-2's FleetCluster, labelled shard2 too: no
// status, no Kustomization. Once shard2 starts, its rollout completes. Neither shard wrote the
// other's Kustomizations, and the objects each rollout made carry its shard's label, so that Flux's
// shards reconcile them beside it.
func TestE2EShards(t *testing.T) {
	parallel(t)
	s, first := newFleetSetup(t, 2, demoPackage("v1"))
	ctx, cancel := testContext(t, 6*time.Minute)
	defer cancel()
	rev := s.repo.Revision(first)
	shards := []string{"shard1", "shard2"}
	for i, shard := range shards {
		s.labelCluster(ctx, t, s.members[i].Name, shard)
	}

	shard1 := s.startShard(ctx, t, shards[0])
	for i, shard := range shards {
		fr := twoWaveRollout(s.ns)
		fr.Name = shard
		fr.Labels = map[string]string{controllers.ShardLabel: shard}
		fr.Spec.ClusterSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"index": fmt.Sprint(i + 1)}}
		fr.Spec.Waves = []v1alpha1.Wave{{Name: "all", Selector: &metav1.LabelSelector{}, Soak: fr.Spec.Waves[0].Soak}}
		if err := s.f.Hub.Create(ctx, fr); err != nil {
			t.Fatal(err)
		}
	}
	s.waitPhase(ctx, t, shards[0], v1alpha1.PhaseCompleted, rev)
	if fr := s.rollout(t, shards[1]); fr.Status.ObservedGeneration != 0 || fr.Status.Phase != "" {
		t.Errorf("shard1 reconciled shard2's rollout: %s", describe(fr))
	}
	if s.kustomization(t, shards[1], s.members[1].Name) != nil {
		t.Errorf("shard1 wrote the Kustomization of shard2's rollout")
	}
	var fc v1alpha1.FleetCluster
	if err := s.f.Hub.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: s.members[1].Name}, &fc); err != nil {
		t.Fatal(err)
	}
	if fc.Status.ObservedGeneration != 0 {
		t.Errorf("shard1 probed shard2's FleetCluster: %+v", fc.Status)
	}

	shard2 := s.startShard(ctx, t, shards[1])
	s.waitPhase(ctx, t, shards[1], v1alpha1.PhaseCompleted, rev)
	for i, shard := range shards {
		if v := s.memberVersion(ctx, s.members[i].Name); v != "v1" {
			t.Errorf("%s runs %q, want v1", s.members[i].Name, v)
		}
		s.expectShardLabels(ctx, t, shard)
	}
	for i, h := range []*shardHandle{shard1, shard2} {
		other := s.members[1-i].Name
		for _, point := range h.writes() {
			if strings.HasSuffix(point, ":"+other) {
				t.Errorf("%s wrote for %s, a cluster of the other shard's rollout: %s", shards[i], other, point)
			}
		}
	}
	var leases coordinationv1.LeaseList
	if err := s.f.Hub.List(ctx, &leases, client.InNamespace(s.ns)); err != nil {
		t.Fatal(err)
	}
	if len(leases.Items) != 2 {
		t.Errorf("%d Leases in %s, want one per shard", len(leases.Items), s.ns)
	}
}

// shardHandle is a running shard and the points at which it wrote (controllers.Options.TestHook).
type shardHandle struct {
	*controllerHandle
	mu     sync.Mutex
	points []string
}

func (h *shardHandle) writes() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.points...)
}

// startShard starts a controller with --watch-label-selector=sharding.fluxcd.io/key=shard and leader
// election in the scenario's namespace, and waits until it leads.
func (s *fleetSetup) startShard(ctx context.Context, t *testing.T, shard string) *shardHandle {
	t.Helper()
	sel, err := labels.Parse(controllers.ShardLabel + "=" + shard)
	if err != nil {
		t.Fatal(err)
	}
	h := &shardHandle{}
	record := func(point string) error {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.points = append(h.points, point)
		return nil
	}
	cfg := controllers.ManagerConfig{
		LeaderElection: true, LeaderElectionNamespace: s.ns, WatchSelector: sel,
		LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond,
	}
	h.controllerHandle = startTidegateWith(t, s, s.f.HubConfig, cfg, controllers.Options{Shard: sel, TestHook: record})
	select {
	case <-h.elected:
	case <-ctx.Done():
		t.Fatalf("%s was never elected: it shares its Lease with another shard", shard)
	}
	return h
}

// labelCluster puts the FleetCluster name in shard.
func (s *fleetSetup) labelCluster(ctx context.Context, t *testing.T, name, shard string) {
	t.Helper()
	var fc v1alpha1.FleetCluster
	if err := s.f.Hub.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: name}, &fc); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(fc.DeepCopy())
	fc.Labels[controllers.ShardLabel] = shard
	if err := s.f.Hub.Patch(ctx, &fc, patch); err != nil {
		t.Fatal(err)
	}
}

// expectShardLabels checks that the Kustomizations and pinned sources of rollout carry its shard.
func (s *fleetSetup) expectShardLabels(ctx context.Context, t *testing.T, rollout string) {
	t.Helper()
	owned := []client.ListOption{client.InNamespace(s.ns), client.MatchingLabels{v1alpha1.RolloutLabel: rollout}}
	var kss kustomizev1.KustomizationList
	var pins sourcev1.GitRepositoryList
	if err := s.f.Hub.List(ctx, &kss, owned...); err != nil {
		t.Fatal(err)
	}
	if err := s.f.Hub.List(ctx, &pins, owned...); err != nil {
		t.Fatal(err)
	}
	if len(kss.Items) != 1 || len(pins.Items) == 0 {
		t.Fatalf("rollout %s made %d Kustomizations and %d pinned sources, want 1 and some", rollout, len(kss.Items), len(pins.Items))
	}
	objs := []client.Object{&kss.Items[0]}
	for i := range pins.Items {
		objs = append(objs, &pins.Items[i])
	}
	for _, o := range objs {
		if got := o.GetLabels()[controllers.ShardLabel]; got != rollout {
			t.Errorf("%T %s is labelled %s=%q, want its rollout's %q", o, o.GetName(), controllers.ShardLabel, got, rollout)
		}
	}
}
