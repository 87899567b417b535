package controllers

import (
	"maps"
	"testing"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/engine"
)

// TestShardManagerOptions: a shard caches the FleetRollouts its selector matches and nothing less
// of the rest (FleetClusters, Kustomizations and sources are shared), and elects its leader on a
// Lease of its own, so that shards run side by side.
func TestShardManagerOptions(t *testing.T) {
	all := ManagerOptions(ManagerConfig{LeaderElection: true})
	for obj := range all.Cache.ByObject {
		if _, ok := obj.(*v1alpha1.FleetRollout); ok {
			t.Errorf("without a selector, FleetRollouts are cached by %+v", all.Cache.ByObject[obj])
		}
	}
	selectors := map[string]string{}
	for _, s := range []string{ShardLabel + "=shard1", ShardLabel + "=shard2", ShardLabel + " notin (shard1,shard2)"} {
		sel, err := labels.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		o := ManagerOptions(ManagerConfig{LeaderElection: true, WatchSelector: sel})
		var rollouts labels.Selector
		for obj, by := range o.Cache.ByObject {
			switch obj.(type) {
			case *v1alpha1.FleetRollout:
				rollouts = by.Label
			case *v1alpha1.FleetCluster, *sourcev1.GitRepository, *sourcev1.OCIRepository:
				if by.Label != nil {
					t.Errorf("%s: %T cached by %v, want every one", s, obj, by.Label)
				}
			case *kustomizev1.Kustomization:
				if by.Label.String() != v1alpha1.RolloutLabel {
					t.Errorf("%s: Kustomizations cached by %v, want every tidegate one", s, by.Label)
				}
			}
		}
		if rollouts == nil || rollouts.String() != sel.String() {
			t.Errorf("%s: FleetRollouts cached by %v", s, rollouts)
		}
		if o.LeaderElectionID == LeaderElectionID || selectors[o.LeaderElectionID] != "" {
			t.Errorf("%s: leader election on %q, shared with %q", s, o.LeaderElectionID, selectors[o.LeaderElectionID])
		}
		selectors[o.LeaderElectionID] = s
	}
}

// TestOwnedObjectsCarryTheRolloutsShard: the Kustomizations and pinned sources of a rollout in a shard
// carry its sharding.fluxcd.io/key, so that Flux's shards reconcile them beside it; a rollout
// without the label makes them exactly as before.
func TestOwnedObjectsCarryTheRolloutsShard(t *testing.T) {
	git := &sourcev1.GitRepository{Spec: sourcev1.GitRepositorySpec{URL: "https://git.example/fleet.git"}}
	fc := &v1alpha1.FleetCluster{ObjectMeta: metav1.ObjectMeta{Name: "eu-1"}}
	const revision = "main@sha1:0123456789abcdef0123456789abcdef01234567"
	for _, shard := range []string{"", "shard1"} {
		fr := &v1alpha1.FleetRollout{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "fleet"}}
		fr.Spec.SourceRef = v1alpha1.SourceReference{Kind: sourcev1.GitRepositoryKind, Name: "fleet"}
		want := map[string]string{v1alpha1.RolloutLabel: "web"}
		if shard != "" {
			fr.Labels = map[string]string{ShardLabel: shard}
			want[ShardLabel] = shard
		}
		pin, err := pinnedSource(fr, git, "web-pin", revision)
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(pin.GetLabels(), want) {
			t.Errorf("shard %q: pinned source labels %v, want %v", shard, pin.GetLabels(), want)
		}
		ks := engine.DesiredKustomization(fr, fc, engine.Target{Source: "web-pin", Revision: revision, Wave: "canary"})
		want[v1alpha1.ClusterLabel], want[v1alpha1.WaveLabel] = "eu-1", "canary"
		if !maps.Equal(ks.Labels, want) {
			t.Errorf("shard %q: Kustomization labels %v, want %v", shard, ks.Labels, want)
		}
	}
}
