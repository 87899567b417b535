package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// specHashAnnotation records a hash of what tidegate last wrote to a Kustomization, so a reconcile
// that would write the same thing again makes no API call at all.
const specHashAnnotation = "tidegate.dev/spec-hash"

// Template defaults, as documented on KustomizationTemplate.
const (
	defaultKustomizationInterval = 10 * time.Minute
	defaultKustomizationTimeout  = 5 * time.Minute
)

// desiredKustomization is the Kustomization that makes cluster run the revision pinned by source,
// with the cluster's own install-time values (spec.values) merged over the template's postBuild
// substitutions. A change of either changes the Kustomization at the revision it is at, as any
// template change does.
func desiredKustomization(fr *v1alpha1.FleetRollout, fc *v1alpha1.FleetCluster, source, revision, wave string) *kustomizev1.Kustomization {
	t := fr.Spec.Template
	ks := &kustomizev1.Kustomization{
		TypeMeta: metav1.TypeMeta{APIVersion: kustomizev1.GroupVersion.String(), Kind: kustomizev1.KustomizationKind},
		ObjectMeta: metav1.ObjectMeta{
			Name:      v1alpha1.KustomizationName(fr.Name, fc.Name),
			Namespace: fr.Namespace,
			Labels: map[string]string{
				v1alpha1.RolloutLabel: fr.Name,
				v1alpha1.ClusterLabel: fc.Name,
				v1alpha1.WaveLabel:    wave,
			},
			Annotations: map[string]string{v1alpha1.RevisionAnnotation: revision},
		},
		Spec: kustomizev1.KustomizationSpec{
			Interval:        durationOr(t.Interval, defaultKustomizationInterval),
			RetryInterval:   t.RetryInterval,
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
			SourceRef:       kustomizev1.CrossNamespaceSourceReference{Kind: fr.Spec.SourceRef.Kind, Name: source},
			KubeConfig:      fc.Spec.KubeConfig,
			// What deleting this Kustomization does to its member, however it is deleted (finalize.go).
			DeletionPolicy: fr.GetDeletionPolicy(),
		},
	}
	if fc.Spec.KubeConfig != nil {
		ks.Spec.KubeConfig = fc.Spec.KubeConfig.DeepCopy()
	}
	return ks
}

// applyKustomization writes ks with server-side apply under tidegate's field manager, unless the
// existing object already carries the same content hash and still has the spec tidegate gave it.
// A spec field tidegate sets that someone else changed (spec.path, spec.interval, …) is written
// back, as kustomize-controller corrects drift in what it applies; a field tidegate leaves unset,
// spec.suspend among them, stays the other writer's. beforeWrite runs just before a write (the
// crash-point hook). It reports whether it wrote.
func applyKustomization(ctx context.Context, c client.Client, fr *v1alpha1.FleetRollout, ks, existing *kustomizev1.Kustomization, beforeWrite func() error) (bool, error) {
	hash, err := contentHash(ks.Labels, ks.Annotations, ks.Spec)
	if err != nil {
		return false, err
	}
	if existing != nil && existing.Annotations[specHashAnnotation] == hash {
		kept, err := specKept(ks, existing)
		if err != nil || kept {
			return false, err
		}
	}
	if err := beforeWrite(); err != nil {
		return false, err
	}
	ks.Annotations[specHashAnnotation] = hash
	controller := true
	ks.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: v1alpha1.GroupVersion.String(), Kind: v1alpha1.FleetRolloutKind,
		Name: fr.Name, UID: fr.UID, Controller: &controller, BlockOwnerDeletion: &controller,
	}}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(ks)
	if err != nil {
		return false, err
	}
	delete(u, "status")
	unstructured.RemoveNestedField(u, "metadata", "creationTimestamp")
	obj := &unstructured.Unstructured{Object: u}
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), client.FieldOwner(v1alpha1.FieldManager), client.ForceOwnership); err != nil {
		return false, fmt.Errorf("applying kustomization %s/%s: %w", ks.Namespace, ks.Name, err)
	}
	return true, nil
}

// specKept reports whether existing's spec still has every field desired sets, as desired sets it
// (fields the API server defaulted, such as a substituteFrom's optional, are not desired's).
func specKept(desired, existing *kustomizev1.Kustomization) (bool, error) {
	want, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&desired.Spec)
	if err != nil {
		return false, err
	}
	have, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&existing.Spec)
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
