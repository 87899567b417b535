package engine

import (
	"reflect"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/kustomize"
	"github.com/fluxcd/pkg/apis/meta"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/evidence"
)

// templateField is how tidegate handles one field of v1alpha1.KustomizationTemplate.
type templateField struct {
	// set gives the field a value that is not its zero.
	set func(*v1alpha1.KustomizationTemplate)
	// build is true for a field that shapes what Flux applies: it is part of a candidate's build
	// (v1alpha1.Build), of the spec the gates render with (BuildSpec, PostBuild) and of the
	// Kustomization's build hash, so a change of it reaches a cluster only through a wave. false:
	// it says how, when or as whom Flux applies, and none of those change with it.
	build bool
}

// templateFields lists every field of KustomizationTemplate. TestEveryTemplateFieldIsHandled fails
// for a field that is not here: a new one must be written to the Kustomizations, and said to be a
// build field (which the gates render) or not.
var templateFields = map[string]templateField{
	"Interval":      {set: func(t *v1alpha1.KustomizationTemplate) { t.Interval = &metav1.Duration{Duration: 3 * time.Minute} }},
	"RetryInterval": {set: func(t *v1alpha1.KustomizationTemplate) { t.RetryInterval = &metav1.Duration{Duration: 7 * time.Second} }},
	"Timeout":       {set: func(t *v1alpha1.KustomizationTemplate) { t.Timeout = &metav1.Duration{Duration: 9 * time.Second} }},
	"Prune":         {set: func(t *v1alpha1.KustomizationTemplate) { f := false; t.Prune = &f }},
	"Wait":          {set: func(t *v1alpha1.KustomizationTemplate) { f := false; t.Wait = &f }},
	"Force":         {set: func(t *v1alpha1.KustomizationTemplate) { t.Force = true }},
	"HealthChecks": {set: func(t *v1alpha1.KustomizationTemplate) {
		t.HealthChecks = []meta.NamespacedObjectKindReference{{Kind: "Deployment", Name: "web"}}
	}},
	"HealthCheckExprs": {set: func(t *v1alpha1.KustomizationTemplate) {
		t.HealthCheckExprs = []kustomize.CustomHealthCheck{certificateReady}
	}},
	"TargetNamespace": {build: true, set: func(t *v1alpha1.KustomizationTemplate) { t.TargetNamespace = "team-a" }},
	"Patches":         {build: true, set: func(t *v1alpha1.KustomizationTemplate) { t.Patches = []kustomize.Patch{{Patch: "[]"}} }},
	"Images":          {build: true, set: func(t *v1alpha1.KustomizationTemplate) { t.Images = []kustomize.Image{{Name: "web", NewTag: "v2"}} }},
	"PostBuild": {build: true, set: func(t *v1alpha1.KustomizationTemplate) {
		t.PostBuild = &kustomizev1.PostBuild{Substitute: map[string]string{"region": "eu"}}
	}},
	"Components": {build: true, set: func(t *v1alpha1.KustomizationTemplate) { t.Components = []string{"../components/tls"} }},
	"CommonMetadata": {build: true, set: func(t *v1alpha1.KustomizationTemplate) {
		t.CommonMetadata = &kustomizev1.CommonMetadata{Labels: map[string]string{"team": "a"}}
	}},
	"Decryption": {build: true, set: func(t *v1alpha1.KustomizationTemplate) {
		t.Decryption = &v1alpha1.Decryption{SecretRef: meta.LocalObjectReference{Name: "sops-age"}}
	}},
	"ServiceAccountName": {set: func(t *v1alpha1.KustomizationTemplate) { t.ServiceAccountName = "tenant-a" }},
	"DependsOn": {set: func(t *v1alpha1.KustomizationTemplate) {
		t.DependsOn = []meta.LocalObjectReference{{Name: "platform"}}
	}},
}

// Every field of the template is written to the Kustomizations, and is either a build field (in
// the candidate's build, in what the gates render with, in the build hash, and restored from a
// recorded build) or none of those; what the gates render with is a spec the render applies
// whole: a field added to the template without a decision here fails.
func TestEveryTemplateFieldIsHandled(t *testing.T) {
	typ := reflect.TypeOf(v1alpha1.KustomizationTemplate{})
	fields := map[string]bool{}
	for i := range typ.NumField() {
		fields[typ.Field(i).Name] = true
		if _, ok := templateFields[typ.Field(i).Name]; !ok {
			t.Errorf("KustomizationTemplate.%s is not in templateFields: write it in DesiredKustomization, decide whether it shapes what Flux applies (v1alpha1.Build, BuildSpec, the render), and list it", typ.Field(i).Name)
		}
	}
	for name := range templateFields {
		if !fields[name] {
			t.Errorf("templateFields lists %s, which KustomizationTemplate does not have", name)
		}
	}

	base := &v1alpha1.FleetRollout{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "fleet"}}
	base.Spec.SourceRef = v1alpha1.SourceReference{Kind: "GitRepository", Name: "fleet"}
	fc := &v1alpha1.FleetCluster{ObjectMeta: metav1.ObjectMeta{Name: "eu-1"}}
	tg := Target{Source: "web-abc", Revision: "main@sha1:abc", Wave: "canary"}
	zero := DesiredKustomization(base, fc, tg)
	zeroBuild, err := buildHash(zero)
	if err != nil {
		t.Fatal(err)
	}
	for name, f := range templateFields {
		fr := base.DeepCopy()
		f.set(&fr.Spec.Template)
		ks := DesiredKustomization(fr, fc, tg)
		if equality.Semantic.DeepEqual(ks.Spec, zero.Spec) {
			t.Errorf("%s: the Kustomization is the same with it set: DesiredKustomization does not write it", name)
		}
		hash, err := buildHash(ks)
		if err != nil {
			t.Fatal(err)
		}
		renders := !equality.Semantic.DeepEqual(fr.BuildSpec(), base.BuildSpec()) || fr.PostBuild(nil) != nil
		inBuild := v1alpha1.HashBuild(fr.SpecBuild()) != v1alpha1.HashBuild(base.SpecBuild())
		if f.build != (hash != zeroBuild) || f.build != renders || f.build != inBuild {
			t.Errorf("%s: a build field is %v, but it changes the build hash %v, what the gates render with %v, the candidate's build %v",
				name, f.build, hash != zeroBuild, renders, inBuild)
		}
		if u, err := evidence.UnrenderedFields(fr.BuildSpec()); err != nil || len(u) > 0 {
			t.Errorf("%s: the gates' render does not apply %v of what it renders with (%v)", name, u, err)
		}
		if f.build {
			// A candidate's build brings it back: a cluster runs the field as the candidate had it.
			built := base.Built(fr.SpecBuild())
			if !equality.Semantic.DeepEqual(DesiredKustomization(built, fc, tg).Spec, ks.Spec) {
				t.Errorf("%s: the Kustomization of a candidate that recorded it is not the one of the spec that set it: Built does not restore it", name)
			}
		}
	}
}

// The template's decryption, service account and dependencies are every Kustomization's: the
// decryption Secret and the service account as named (kustomize-controller reads and impersonates
// them in the Kustomization's namespace, the rollout's), each dependency as the Kustomization of
// that rollout on the same cluster.
func TestDesiredKustomizationSurface(t *testing.T) {
	fr := &v1alpha1.FleetRollout{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "fleet"}}
	fr.Spec.SourceRef = v1alpha1.SourceReference{Kind: "GitRepository", Name: "fleet"}
	fr.Spec.Template.Decryption = &v1alpha1.Decryption{SecretRef: meta.LocalObjectReference{Name: "sops-age"}}
	fr.Spec.Template.ServiceAccountName = "tenant-a"
	fr.Spec.Template.DependsOn = []meta.LocalObjectReference{{Name: "platform"}, {Name: "a-rollout-whose-name-is-long-enough-to-be-cut-short"}}
	fr.Spec.Template.Components = []string{"../components/tls"}
	fr.Spec.Template.CommonMetadata = &kustomizev1.CommonMetadata{Labels: map[string]string{"team": "a"}, Annotations: map[string]string{"owner": "a"}}
	tg := Target{Source: "web-abc", Revision: "main@sha1:abc", Wave: "canary"}
	for _, cluster := range []string{"eu-1", "us-1"} {
		ks := DesiredKustomization(fr, &v1alpha1.FleetCluster{ObjectMeta: metav1.ObjectMeta{Name: cluster}}, tg)
		if d := ks.Spec.Decryption; d == nil || d.Provider != "sops" || d.SecretRef == nil || d.SecretRef.Name != "sops-age" {
			t.Errorf("%s: decryption %+v, want sops with the Secret sops-age", cluster, d)
		}
		if ks.Spec.ServiceAccountName != "tenant-a" {
			t.Errorf("%s: serviceAccountName %q", cluster, ks.Spec.ServiceAccountName)
		}
		want := []kustomizev1.DependencyReference{
			{Name: v1alpha1.KustomizationName("platform", cluster)},
			{Name: v1alpha1.KustomizationName("a-rollout-whose-name-is-long-enough-to-be-cut-short", cluster)},
		}
		if !reflect.DeepEqual(ks.Spec.DependsOn, want) {
			t.Errorf("%s: dependsOn %+v, want %+v", cluster, ks.Spec.DependsOn, want)
		}
		if !reflect.DeepEqual(ks.Spec.Components, fr.Spec.Template.Components) || !reflect.DeepEqual(ks.Spec.CommonMetadata, fr.Spec.Template.CommonMetadata) {
			t.Errorf("%s: components %v and commonMetadata %+v, want the template's", cluster, ks.Spec.Components, ks.Spec.CommonMetadata)
		}
		if !ks.Spec.Wait {
			t.Errorf("%s: wait is false; the template leaves it to its default, true", cluster)
		}
	}
	// The build hash of a Kustomization without commonMetadata is the one it had before the
	// field existed, so upgrading tidegate does not make every cluster look changed.
	plain := DesiredKustomization(&v1alpha1.FleetRollout{ObjectMeta: fr.ObjectMeta, Spec: v1alpha1.FleetRolloutSpec{SourceRef: fr.Spec.SourceRef}},
		&v1alpha1.FleetCluster{ObjectMeta: metav1.ObjectMeta{Name: "eu-1"}}, tg)
	s := &plain.Spec
	old, err := contentHash(s.SourceRef, s.Path, s.TargetNamespace, s.NamePrefix, s.NameSuffix, s.Patches, s.Images, s.Components,
		s.Decryption, s.PostBuild, s.KubeConfig)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := buildHash(plain); got != old {
		t.Errorf("build hash %s of a Kustomization without commonMetadata, want the earlier %s", got, old)
	}
}
