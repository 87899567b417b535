package engine

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// SpecHashAnnotation records a hash of what tidegate last wrote to a member (a Kustomization or a HelmRelease), so a reconcile
// that would write the same thing again makes no API call at all.
const SpecHashAnnotation = "tidegate.dev/spec-hash"

// BuildHashAnnotation records a hash of the fields of what tidegate last wrote to a member
// that shape what Flux applies (buildHash): a change of them reaches the cluster only through a
// wave.
const BuildHashAnnotation = "tidegate.dev/build-hash"

// Template defaults, as documented on KustomizationTemplate.
const (
	defaultKustomizationInterval = 10 * time.Minute
	defaultKustomizationTimeout  = 5 * time.Minute
)

// DesiredKustomization is the Kustomization that makes cluster fc run t: the revision pinned by
// t.Source, built with t.Build (the candidate's or the known-good's: spec.path and the template's
// build fields as they were when it started; nil, the spec's), with the cluster's own install-time
// values (spec.values) merged over the build's postBuild substitutions. The template's other
// fields (interval, timeout, wait, prune, force, healthChecks, healthCheckExprs,
// serviceAccountName, dependsOn) are the spec's: they change how, when and as whom Flux applies
// and checks, not what. dependsOn names, for each FleetRollout it lists, that rollout's
// Kustomization on the same cluster.
func DesiredKustomization(fr *v1alpha1.FleetRollout, fc *v1alpha1.FleetCluster, tg Target) *kustomizev1.Kustomization {
	fr = fr.Built(tg.Build)
	source := tg.Source
	t := fr.Spec.Template
	ks := &kustomizev1.Kustomization{
		TypeMeta:   metav1.TypeMeta{APIVersion: kustomizev1.GroupVersion.String(), Kind: kustomizev1.KustomizationKind},
		ObjectMeta: memberMeta(fr, fc, tg),
		Spec: kustomizev1.KustomizationSpec{
			Interval:        durationOr(t.Interval, defaultKustomizationInterval),
			RetryInterval:   retryInterval(t),
			Timeout:         &metav1.Duration{Duration: durationOr(t.Timeout, defaultKustomizationTimeout).Duration},
			Path:            fr.Spec.Path,
			Prune:           boolOr(t.Prune, true),
			Wait:            boolOr(t.Wait, true),
			Force:           t.Force,
			TargetNamespace: t.TargetNamespace,
			HealthChecks:    t.HealthChecks,
			Patches:         t.Patches,
			Images:          t.Images,
			PostBuild:       fr.PostBuild(fc),
			Components:      t.Components,
			CommonMetadata:  t.CommonMetadata,
			Decryption:      t.Decryption.Flux(),
			// kustomize-controller reads the decryption Secret, and impersonates the service
			// account, in the Kustomization's namespace: the rollout's.
			ServiceAccountName: t.ServiceAccountName,
			DependsOn:          dependsOn(t, fc.Name),
			SourceRef:          kustomizev1.CrossNamespaceSourceReference{Kind: fr.Spec.SourceRef.Kind, Name: source},
			KubeConfig:         fc.Spec.KubeConfig,
			// kustomize-controller's health checks use them, and so do noDisruption's samples
			// (availability.WorkloadsFromInventory): both read them from the Kustomization.
			HealthCheckExprs: t.HealthCheckExprs,
			// What deleting this Kustomization does to its member, however it is deleted (finalize.go).
			DeletionPolicy: fr.GetDeletionPolicy(),
		},
	}
	if fc.Spec.KubeConfig != nil {
		ks.Spec.KubeConfig = fc.Spec.KubeConfig.DeepCopy()
	}
	return ks
}

// memberMeta is the metadata of cluster fc's member running tg, either kind: its name, namespace,
// labels (shard, rollout, cluster, wave) and the revision it runs.
func memberMeta(fr *v1alpha1.FleetRollout, fc *v1alpha1.FleetCluster, tg Target) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:      v1alpha1.KustomizationName(fr.Name, fc.Name),
		Namespace: fr.Namespace,
		Labels: fr.ShardLabels(map[string]string{
			v1alpha1.RolloutLabel: fr.Name,
			v1alpha1.ClusterLabel: fc.Name,
			v1alpha1.WaveLabel:    tg.Wave,
		}),
		Annotations: map[string]string{v1alpha1.RevisionAnnotation: tg.Revision},
	}
}

// dependsOn is the spec.dependsOn of cluster's Kustomization: the Kustomization on that cluster of
// each rollout t depends on, named as tidegate names it, in the rollout's namespace. Such a
// Kustomization may not exist yet (that rollout has not reached the cluster): kustomize-controller
// then waits for it as for one not Ready (DependencyNotReady), and so does the wave.
func dependsOn(t v1alpha1.KustomizationTemplate, cluster string) []kustomizev1.DependencyReference {
	if len(t.DependsOn) == 0 {
		return nil
	}
	out := make([]kustomizev1.DependencyReference, 0, len(t.DependsOn))
	for _, d := range t.DependsOn {
		out = append(out, kustomizev1.DependencyReference{Name: v1alpha1.KustomizationName(d.Name, cluster)})
	}
	return out
}

// defaultRetryInterval is how soon kustomize-controller retries a failed apply when the template
// sets no retryInterval: a member's 503 or a webhook's timeout at the moment of a switch is
// retried within the wave's deadline, not an interval (10 m) later.
const defaultRetryInterval = time.Minute

// retryInterval is the template's retryInterval, else defaultRetryInterval, or the interval when
// that is shorter.
func retryInterval(t v1alpha1.KustomizationTemplate) *metav1.Duration {
	if t.RetryInterval != nil {
		return t.RetryInterval
	}
	return &metav1.Duration{Duration: min(defaultRetryInterval, durationOr(t.Interval, defaultKustomizationInterval).Duration)}
}

// SpecKept reports whether existing's spec still has every field desired sets, as desired sets it
// (fields the API server defaulted, such as a substituteFrom's optional, are not desired's). Both
// are members of one kind (a Kustomization or a HelmRelease).
func SpecKept(desired, existing Object) (bool, error) {
	ds, err := memberSpec(desired)
	if err != nil {
		return false, err
	}
	es, err := memberSpec(existing)
	if err != nil {
		return false, err
	}
	want, err := runtime.DefaultUnstructuredConverter.ToUnstructured(ds)
	if err != nil {
		return false, err
	}
	have, err := runtime.DefaultUnstructuredConverter.ToUnstructured(es)
	if err != nil {
		return false, err
	}
	return within(want, have), nil
}

// within reports whether want is in have: every key of a map with a value within have's, lists
// of the same length item by item, anything else equal.
func within(want, have any) bool {
	switch w := want.(type) {
	case map[string]any:
		h, ok := have.(map[string]any)
		if !ok {
			return false
		}
		for k, v := range w {
			if !within(v, h[k]) {
				return false
			}
		}
		return true
	case []any:
		h, ok := have.([]any)
		if !ok || len(h) != len(w) {
			return false
		}
		for i := range w {
			if !within(w[i], h[i]) {
				return false
			}
		}
		return true
	}
	return equality.Semantic.DeepEqual(want, have)
}

// SpecHash is the hash tidegate records on a member it writes (SpecHashAnnotation), over what it
// writes: its labels, its annotations (before the hash is added) and its spec.
func SpecHash(obj Object) (string, error) {
	spec, err := memberSpec(obj)
	if err != nil {
		return "", err
	}
	return contentHash(obj.GetLabels(), obj.GetAnnotations(), spec)
}

// StampHashes records on obj, a member about to be written, its spec hash and its build hash.
func StampHashes(obj Object, spec string) error {
	build, err := buildHash(obj)
	if err != nil {
		return err
	}
	a := obj.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a[SpecHashAnnotation] = spec
	a[BuildHashAnnotation] = build
	obj.SetAnnotations(a)
	return nil
}

// buildHash is the hash of the fields of a member that shape what Flux applies to its cluster, and
// where. Of a Kustomization: the source and path, what kustomize builds with (targetNamespace, name
// prefix and suffix, patches, images, components, decryption), the postBuild substitution (the
// template's and the cluster's values), the kubeconfig and the commonMetadata set on every object.
// The rest (interval, timeout, retries, prune, wait, health checks, service account, dependencies,
// deletion policy, labels) says how, when and as whom Flux applies and checks it, not what. Of a
// HelmRelease: helmReleaseBuild.
func buildHash(obj Object) (string, error) {
	if hr, ok := obj.(*helmv2.HelmRelease); ok {
		return contentHash(helmReleaseBuild(hr)...)
	}
	ks, ok := obj.(*kustomizev1.Kustomization)
	if !ok {
		return "", fmt.Errorf("%T is not a member tidegate writes (a Kustomization or a HelmRelease)", obj)
	}
	s := &ks.Spec
	parts := []any{s.SourceRef, s.Path, s.TargetNamespace, s.NamePrefix, s.NameSuffix, s.Patches, s.Images, s.Components,
		s.Decryption, s.PostBuild, s.KubeConfig}
	if s.CommonMetadata != nil {
		// Only when set: the hash of every Kustomization written before commonMetadata was a
		// template field stays what it was, so none of them looks changed to sameBuild.
		parts = append(parts, s.CommonMetadata)
	}
	return contentHash(parts...)
}

func contentHash(parts ...any) (string, error) {
	b, err := json.Marshal(parts)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:16], nil
}

func durationOr(d *metav1.Duration, def time.Duration) metav1.Duration {
	if d != nil && d.Duration > 0 {
		return *d
	}
	return metav1.Duration{Duration: def}
}

func boolOr(b *bool, def bool) bool {
	if b != nil {
		return *b
	}
	return def
}
