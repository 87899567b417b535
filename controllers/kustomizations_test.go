package controllers

import (
	"maps"
	"reflect"
	"testing"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/kustomize"
	"github.com/fluxcd/pkg/apis/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/engine"
)

// The evidence renders with the rollout's BuildSpec and each cluster's PostBuild: every field of
// the Kustomization that changes what kustomize-controller builds must come from them, or the
// gates judge objects Flux does not apply. A new field of the Kustomization fails this test until
// it is either set from BuildSpec or listed here as one that does not change the build.
func TestTheEvidenceRendersWhatTheKustomizationBuilds(t *testing.T) {
	fr := &v1alpha1.FleetRollout{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "fleet"}}
	fr.Spec.SourceRef = v1alpha1.SourceReference{Kind: "GitRepository", Name: "fleet"}
	fr.Spec.Path = "./apps/web"
	fr.Spec.Template = v1alpha1.KustomizationTemplate{
		TargetNamespace: "web",
		Patches:         []kustomize.Patch{{Patch: "- op: add\n  path: /metadata/labels/x\n  value: y", Target: &kustomize.Selector{Kind: "Deployment"}}},
		Images:          []kustomize.Image{{Name: "web", NewTag: "2.0"}},
		PostBuild:       &kustomizev1.PostBuild{Substitute: map[string]string{"region": "eu"}},
		HealthChecks:    []meta.NamespacedObjectKindReference{{Kind: "Deployment", Name: "web", Namespace: "web"}},
		Force:           true,
	}
	fc := &v1alpha1.FleetCluster{ObjectMeta: metav1.ObjectMeta{Name: "eu-1"},
		Spec: v1alpha1.FleetClusterSpec{Values: map[string]string{"size": "large"}}}
	got := engine.DesiredKustomization(fr, fc, engine.Target{Source: "web-abc", Revision: "main@sha1:abc", Wave: "canary"}).Spec
	if !reflect.DeepEqual(got.PostBuild, fr.PostBuild(fc)) {
		t.Errorf("postBuild %+v, the evidence substitutes %+v", got.PostBuild, fr.PostBuild(fc))
	}
	// What does not change the build: scheduling, applying, health, where it is applied, deletion.
	got.Interval, got.RetryInterval, got.Timeout = metav1.Duration{}, nil, nil
	got.Prune, got.Wait, got.Force, got.DeletionPolicy = false, false, false, ""
	got.HealthChecks, got.SourceRef, got.KubeConfig, got.PostBuild = nil, kustomizev1.CrossNamespaceSourceReference{}, nil, nil
	if want := fr.BuildSpec(); !reflect.DeepEqual(got, want) {
		t.Errorf("the Kustomization builds with\n%+v\nthe evidence renders with\n%+v", got, want)
	}
}

// What kustomize-controller says of a spec someone else changed (a path edited by hand that fails
// to build) is not about what tidegate applies: the cluster's observation is not current, so it
// neither fails nor passes the wave until tidegate's spec is back. A field tidegate leaves to others
// (suspend) keeps the observation current.
func TestObservationOfASpecNotOursIsNotCurrent(t *testing.T) {
	fr := &v1alpha1.FleetRollout{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "fleet"}}
	fr.Spec.SourceRef = v1alpha1.SourceReference{Kind: "GitRepository", Name: "fleet"}
	fr.Spec.Path = "./app"
	fc := &v1alpha1.FleetCluster{ObjectMeta: metav1.ObjectMeta{Name: "eu-1"}}
	desired := engine.DesiredKustomization(fr, fc, engine.Target{Source: "web-abc", Revision: "main@sha1:abc", Wave: "canary"})
	for _, tc := range []struct {
		name    string
		edit    func(*kustomizev1.Kustomization)
		current bool
	}{
		{"as written", func(*kustomizev1.Kustomization) {}, true},
		{"suspended", func(ks *kustomizev1.Kustomization) { ks.Spec.Suspend = true }, true},
		{"path changed", func(ks *kustomizev1.Kustomization) { ks.Spec.Path = "./elsewhere" }, false},
	} {
		ks := desired.DeepCopy()
		tc.edit(ks)
		ks.Generation, ks.Status.ObservedGeneration = 2, 2
		ks.Status.Conditions = []metav1.Condition{{Type: meta.ReadyCondition, Status: metav1.ConditionFalse, Reason: meta.ArtifactFailedReason,
			Message: "kustomization path not found", ObservedGeneration: 2}}
		p := &pass{World: &engine.World{Rollout: fr, Clusters: map[string]*v1alpha1.FleetCluster{"eu-1": fc}}}
		p.Observe(map[string]engine.Object{"eu-1": ks})
		notOurSpec(p)
		o := p.Kustomizations["eu-1"]
		if o.Current != tc.current || o.FailedAt("web-abc", "main@sha1:abc") != tc.current {
			t.Errorf("%s: current %v, failed at the revision %v; want both %v", tc.name, o.Current, o.FailedAt("web-abc", "main@sha1:abc"), tc.current)
		}
	}
}

// A pass that follows a write before the cache shows it sees what was written, not the copy the
// write replaced (so it writes nothing again); once the cache moves on, it sees the cache.
func TestWritesTheCacheHasNotShownYet(t *testing.T) {
	fr := &v1alpha1.FleetRollout{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "fleet", UID: "u1"}}
	other := &v1alpha1.FleetRollout{ObjectMeta: metav1.ObjectMeta{Name: "api", Namespace: "fleet", UID: "u2"}}
	old := &kustomizev1.Kustomization{ObjectMeta: metav1.ObjectMeta{Name: "web-a", ResourceVersion: "10"}}
	written := &kustomizev1.Kustomization{ObjectMeta: metav1.ObjectMeta{Name: "web-a", Annotations: map[string]string{"revision": "r2"}}}
	created := &kustomizev1.Kustomization{ObjectMeta: metav1.ObjectMeta{Name: "web-b"}}
	var b writeBackoff
	b.wrote(fr, "a", old, written)
	b.wrote(fr, "b", nil, created)

	stale := map[string]engine.Object{"a": old}
	b.overlay(other, stale)
	if stale["a"] != old || stale["b"] != nil {
		t.Fatalf("another rollout's writes were overlaid: %v", stale)
	}
	b.overlay(fr, stale)
	if stale["a"] != written || stale["b"] != created {
		t.Fatalf("before the cache shows the writes, the pass sees them: %v", stale)
	}

	fresh := map[string]engine.Object{
		"a": &kustomizev1.Kustomization{ObjectMeta: metav1.ObjectMeta{Name: "web-a", ResourceVersion: "11"}},
		"b": &kustomizev1.Kustomization{ObjectMeta: metav1.ObjectMeta{Name: "web-b", ResourceVersion: "12"}},
	}
	want := maps.Clone(fresh)
	b.overlay(fr, fresh)
	if !maps.Equal(fresh, want) {
		t.Fatalf("once the cache shows the writes, the pass sees the cache: %v", fresh)
	}
	if len(b.unseen) != 0 {
		t.Errorf("writes the cache shows are forgotten: %v", b.unseen)
	}
}
