package engine

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

	if got := DesiredKustomization(fr, plain, Target{Source: "web-abc", Revision: "main@sha1:abc", Wave: "canary"}).Spec.PostBuild; got != fr.Spec.Template.PostBuild {
		t.Errorf("a cluster without values gets the template's postBuild: %+v", got)
	}
	pb := DesiredKustomization(fr, own, Target{Source: "web-abc", Revision: "main@sha1:abc", Wave: "canary"}).Spec.PostBuild
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
		d := DesiredKustomization(fr, fc, Target{Source: "web-abc", Revision: "main@sha1:abc", Wave: "canary"})
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

// A Kustomization keeps tidegate's spec while every field tidegate sets is as it set it: fields
// tidegate does not apply (spec.suspend, a spec.force the template leaves false) do not count; a changed
// spec.path or spec.interval, a dropped health check, or a health check expression edited or
// dropped, does, so it is written back.
func TestSpecKept(t *testing.T) {
	fr := &v1alpha1.FleetRollout{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "fleet"}}
	fr.Spec.SourceRef = v1alpha1.SourceReference{Kind: "GitRepository", Name: "fleet"}
	fr.Spec.Path = "./app"
	fr.Spec.Template.HealthChecks = []meta.NamespacedObjectKindReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", Namespace: "demo"}}
	fr.Spec.Template.PostBuild = &kustomizev1.PostBuild{SubstituteFrom: []kustomizev1.SubstituteReference{{Kind: "ConfigMap", Name: "vars"}}}
	fr.Spec.Template.HealthCheckExprs = []kustomize.CustomHealthCheck{certificateReady}
	desired := DesiredKustomization(fr, &v1alpha1.FleetCluster{ObjectMeta: metav1.ObjectMeta{Name: "eu-1"}}, Target{Source: "web-abc", Revision: "main@sha1:abc", Wave: "canary"})
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
		{"health check expression edited", func(ks *kustomizev1.Kustomization) { ks.Spec.HealthCheckExprs[0].Current = "true" }, false},
		{"health check expressions dropped", func(ks *kustomizev1.Kustomization) { ks.Spec.HealthCheckExprs = nil }, false},
		{"health check expression added", func(ks *kustomizev1.Kustomization) {
			ks.Spec.HealthCheckExprs = append(ks.Spec.HealthCheckExprs, kustomize.CustomHealthCheck{APIVersion: "example.com/v1", Kind: "Widget",
				HealthCheckExpressions: kustomize.HealthCheckExpressions{Current: "true"}})
		}, false},
		{"source changed", func(ks *kustomizev1.Kustomization) { ks.Spec.SourceRef.Name = "web-def" }, false},
	} {
		existing := desired.DeepCopy()
		tc.edit(existing)
		kept, err := SpecKept(desired, existing)
		if err != nil || kept != tc.kept {
			t.Errorf("%s: kept %v (%v), want %v", tc.name, kept, err, tc.kept)
		}
	}
}

// certificateReady is a health check expression as Flux's documentation gives it for cert-manager.
var certificateReady = kustomize.CustomHealthCheck{APIVersion: "cert-manager.io/v1", Kind: "Certificate",
	HealthCheckExpressions: kustomize.HealthCheckExpressions{
		InProgress: "status.conditions.filter(e, e.type == 'Issuing').all(e, e.observedGeneration == metadata.generation && e.status == 'True')",
		Failed:     "status.conditions.filter(e, e.type == 'Ready').all(e, e.observedGeneration == metadata.generation && e.status == 'False')",
		Current:    "status.conditions.filter(e, e.type == 'Ready').all(e, e.observedGeneration == metadata.generation && e.status == 'True')",
	}}

// The template's healthCheckExprs are every Kustomization's, as written, and part of what it is
// hashed on: an edit of them in the rollout writes the Kustomizations again. A template without
// them leaves the Kustomizations without them.
func TestDesiredKustomizationCopiesHealthCheckExprs(t *testing.T) {
	fr := &v1alpha1.FleetRollout{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "fleet"}}
	fr.Spec.SourceRef = v1alpha1.SourceReference{Kind: "GitRepository", Name: "fleet"}
	fc := &v1alpha1.FleetCluster{ObjectMeta: metav1.ObjectMeta{Name: "eu-1"}}
	tg := Target{Source: "web-abc", Revision: "main@sha1:abc", Wave: "canary"}
	if got := DesiredKustomization(fr, fc, tg).Spec.HealthCheckExprs; got != nil {
		t.Errorf("a template without healthCheckExprs: %+v", got)
	}
	fr.Spec.Template.HealthCheckExprs = []kustomize.CustomHealthCheck{certificateReady}
	ks := DesiredKustomization(fr, fc, tg)
	if !reflect.DeepEqual(ks.Spec.HealthCheckExprs, fr.Spec.Template.HealthCheckExprs) {
		t.Fatalf("healthCheckExprs %+v, want the template's %+v", ks.Spec.HealthCheckExprs, fr.Spec.Template.HealthCheckExprs)
	}
	before, err := SpecHash(ks)
	if err != nil {
		t.Fatal(err)
	}
	edited := fr.DeepCopy()
	edited.Spec.Template.HealthCheckExprs[0].Failed = ""
	after, err := SpecHash(DesiredKustomization(edited, fc, tg))
	if err != nil {
		t.Fatal(err)
	}
	if after == before {
		t.Error("an edit of the template's healthCheckExprs leaves the spec hash as it was: the Kustomizations would not be written again")
	}
	// They say how Flux checks the package, not what it applies: the build is the same.
	b1, _ := buildHash(ks)
	b2, _ := buildHash(DesiredKustomization(edited, fc, tg))
	if b1 != b2 {
		t.Error("an edit of healthCheckExprs changes the build hash")
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
		ks := DesiredKustomization(fr, &v1alpha1.FleetCluster{ObjectMeta: metav1.ObjectMeta{Name: "eu-1"}}, Target{Source: "web-abc", Revision: "main@sha1:abc", Wave: "canary"})
		if ks.Spec.RetryInterval == nil || ks.Spec.RetryInterval.Duration != tc.want {
			t.Errorf("template %+v: retryInterval %v, want %s", tc.tpl, ks.Spec.RetryInterval, tc.want)
		}
	}
}
