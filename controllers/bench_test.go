package controllers

import (
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/engine"
)

// BenchmarkNotOurSpec1000Clusters is what telling a Kustomization whose spec someone else changed
// costs a reconcile of 1,000 clusters (notOurSpec: the desired spec built and compared for each).
func BenchmarkNotOurSpec1000Clusters(b *testing.B) {
	fr := &v1alpha1.FleetRollout{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "fleet"},
		Spec: v1alpha1.FleetRolloutSpec{SourceRef: v1alpha1.SourceReference{Kind: "GitRepository", Name: "fleet"}}}
	w := &engine.World{Rollout: fr, Clusters: map[string]*v1alpha1.FleetCluster{}}
	objects := map[string]engine.Object{}
	for i := range 1000 {
		fc := &v1alpha1.FleetCluster{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cluster-%04d", i), Namespace: fr.Namespace}}
		w.Clusters[fc.Name] = fc
		objects[fc.Name] = engine.DesiredKustomization(fr, fc, engine.Target{Source: "web-2", Revision: "main@sha1:2", Wave: "rest"})
	}
	p := &pass{World: w}
	p.Observe(objects)
	b.ReportAllocs()
	for b.Loop() {
		notOurSpec(p)
	}
}
