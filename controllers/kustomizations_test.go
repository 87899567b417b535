package controllers

import (
	"maps"
	"reflect"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/kustomize"
	"github.com/fluxcd/pkg/apis/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// A cluster's values are merged over the template's substitutions in its Kustomization, the
// cluster's winning; the template's substituteFrom is kept; a change of the values changes the
// content hash, so the Kustomization is written again.
func TestDesiredKustomizationMergesClusterValues(t *testing.T) {
	fr := &v1alpha1.FleetRollout{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "fleet"}}
	fr.Spec.SourceRef = v1alpha1.SourceReference{Kind: "GitRepository", Name: "fleet"}
	fr.Spec.Template.PostBuild = &kustomizev1.PostBuild{
		Substitute:     map[string]string{"namespace": "web", "region": "eu"},
		SubstituteFrom: []kustomizev1.SubstituteReference{{Kind: "ConfigMap", Name: "fleet-vars"}},
	}
	plain := &v1alpha1.FleetCluster{ObjectMeta: metav1.ObjectMeta{Name: "eu-1"}}
	own := &v1alpha1.FleetCluster{ObjectMeta: metav1.ObjectMeta{Name: "eu-2"},
		Spec: v1alpha1.FleetClusterSpec{Values: map[string]string{"namespace": "web-eu-2", "size": "large"}}}

	if got := desiredKustomization(fr, plain, target{Source: "web-abc", Revision: "main@sha1:abc", Wave: "canary"}).Spec.PostBuild; got != fr.Spec.Template.PostBuild {
		t.Errorf("a cluster without values gets the template's postBuild: %+v", got)
	}
	pb := desiredKustomization(fr, own, target{Source: "web-abc", Revision: "main@sha1:abc", Wave: "canary"}).Spec.PostBuild
	if want := map[string]string{"namespace": "web-eu-2", "region": "eu", "size": "large"}; !maps.Equal(pb.Substitute, want) {
		t.Errorf("substitute %v, want %v", pb.Substitute, want)
	}
	if len(pb.SubstituteFrom) != 1 || pb.SubstituteFrom[0].Name != "fleet-vars" {
		t.Errorf("substituteFrom %+v, want the template's", pb.SubstituteFrom)
	}
	if fr.Spec.Template.PostBuild.Substitute["namespace"] != "web" || len(fr.Spec.Template.PostBuild.Substitute) != 2 {
		t.Errorf("the template changed: %v", fr.Spec.Template.PostBuild.Substitute)
	}

	hash := func(fc *v1alpha1.FleetCluster) string {
		d := desiredKustomization(fr, fc, target{Source: "web-abc", Revision: "main@sha1:abc", Wave: "canary"})
		h, err := contentHash(d.Labels, d.Annotations, d.Spec)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	before := hash(own)
	if hash(own) != before {
		t.Fatalf("the hash of the same values changes")
	}
	own.Spec.Values["size"] = "small"
	if hash(own) == before {
		t.Errorf("a changed value leaves the content hash as it was: the Kustomization would not be written again")
	}
}

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
	got := desiredKustomization(fr, fc, target{Source: "web-abc", Revision: "main@sha1:abc", Wave: "canary"}).Spec
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

// A Kustomization keeps tidegate's spec while every field tidegate sets is as it set it: fields
// tidegate does not apply (spec.suspend, a spec.force the template leaves false) do not count; a changed
// spec.path or spec.interval, or a dropped health check, does, so it is written back.
func TestSpecKept(t *testing.T) {
	fr := &v1alpha1.FleetRollout{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "fleet"}}
	fr.Spec.SourceRef = v1alpha1.SourceReference{Kind: "GitRepository", Name: "fleet"}
	fr.Spec.Path = "./app"
	fr.Spec.Template.HealthChecks = []meta.NamespacedObjectKindReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", Namespace: "demo"}}
	fr.Spec.Template.PostBuild = &kustomizev1.PostBuild{SubstituteFrom: []kustomizev1.SubstituteReference{{Kind: "ConfigMap", Name: "vars"}}}
	desired := desiredKustomization(fr, &v1alpha1.FleetCluster{ObjectMeta: metav1.ObjectMeta{Name: "eu-1"}}, target{Source: "web-abc", Revision: "main@sha1:abc", Wave: "canary"})
	for _, tc := range []struct {
		name string
		edit func(*kustomizev1.Kustomization)
		kept bool
	}{
		{"as written", func(*kustomizev1.Kustomization) {}, true},
		{"a field tidegate does not apply set", func(ks *kustomizev1.Kustomization) { ks.Spec.Force = true }, true},
		{"suspended", func(ks *kustomizev1.Kustomization) { ks.Spec.Suspend = true }, true},
		{"path changed", func(ks *kustomizev1.Kustomization) { ks.Spec.Path = "./elsewhere" }, false},
		{"interval changed", func(ks *kustomizev1.Kustomization) { ks.Spec.Interval.Duration *= 7 }, false},
		{"health check dropped", func(ks *kustomizev1.Kustomization) { ks.Spec.HealthChecks = nil }, false},
		{"source changed", func(ks *kustomizev1.Kustomization) { ks.Spec.SourceRef.Name = "web-def" }, false},
	} {
		existing := desired.DeepCopy()
		tc.edit(existing)
		kept, err := specKept(desired, existing)
		if err != nil || kept != tc.kept {
			t.Errorf("%s: kept %v (%v), want %v", tc.name, kept, err, tc.kept)
		}
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
	desired := desiredKustomization(fr, fc, target{Source: "web-abc", Revision: "main@sha1:abc", Wave: "canary"})
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
		p := &pass{world: &world{Rollout: fr, Clusters: map[string]*v1alpha1.FleetCluster{"eu-1": fc}}}
		p.Observe(map[string]*kustomizev1.Kustomization{"eu-1": ks})
		notOurSpec(p)
		o := p.Kustomizations["eu-1"]
		if o.Current != tc.current || o.FailedAt("web-abc", "main@sha1:abc") != tc.current {
			t.Errorf("%s: current %v, failed at the revision %v; want both %v", tc.name, o.Current, o.FailedAt("web-abc", "main@sha1:abc"), tc.current)
		}
	}
}

// A failed apply is retried within a minute unless the template says otherwise: a transient error
// at a switch does not wait an interval (10m).
func TestRetryIntervalDefault(t *testing.T) {
	for _, tc := range []struct {
		tpl  v1alpha1.KustomizationTemplate
		want time.Duration
	}{
		{v1alpha1.KustomizationTemplate{}, time.Minute},
		{v1alpha1.KustomizationTemplate{Interval: &metav1.Duration{Duration: 30 * time.Second}}, 30 * time.Second},
		{v1alpha1.KustomizationTemplate{RetryInterval: &metav1.Duration{Duration: 5 * time.Minute}}, 5 * time.Minute},
	} {
		fr := &v1alpha1.FleetRollout{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: v1alpha1.FleetRolloutSpec{Template: tc.tpl}}
		ks := desiredKustomization(fr, &v1alpha1.FleetCluster{ObjectMeta: metav1.ObjectMeta{Name: "eu-1"}}, target{Source: "web-abc", Revision: "main@sha1:abc", Wave: "canary"})
		if ks.Spec.RetryInterval == nil || ks.Spec.RetryInterval.Duration != tc.want {
			t.Errorf("template %+v: retryInterval %v, want %s", tc.tpl, ks.Spec.RetryInterval, tc.want)
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

	stale := map[string]*kustomizev1.Kustomization{"a": old}
	b.overlay(other, stale)
	if stale["a"] != old || stale["b"] != nil {
		t.Fatalf("another rollout's writes were overlaid: %v", stale)
	}
	b.overlay(fr, stale)
	if stale["a"] != written || stale["b"] != created {
		t.Fatalf("before the cache shows the writes, the pass sees them: %v", stale)
	}

	fresh := map[string]*kustomizev1.Kustomization{
		"a": {ObjectMeta: metav1.ObjectMeta{Name: "web-a", ResourceVersion: "11"}},
		"b": {ObjectMeta: metav1.ObjectMeta{Name: "web-b", ResourceVersion: "12"}},
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
