package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// specHashAnnotation records a hash of what tidegate last wrote to a Kustomization, so a reconcile
// that would write the same thing again makes no API call at all.
const specHashAnnotation = "tidegate.dev/spec-hash"

// buildHashAnnotation records a hash of the fields of what tidegate last wrote to a Kustomization
// that shape what Flux applies (buildHash): a change of them reaches the cluster only through a
// wave.
const buildHashAnnotation = "tidegate.dev/build-hash"

// Template defaults, as documented on KustomizationTemplate.
const (
	defaultKustomizationInterval = 10 * time.Minute
	defaultKustomizationTimeout  = 5 * time.Minute
)

// desiredKustomization is the Kustomization that makes cluster fc run t: the revision pinned by
// t.Source, built with t.Build (the candidate's or the known-good's: spec.path and the template's
// build fields as they were when it started; nil, the spec's), with the cluster's own install-time
// values (spec.values) merged over the build's postBuild substitutions. The template's other
// fields (interval, timeout, wait, prune, force, healthChecks) are the spec's: they change how
// Flux applies, not what.
func desiredKustomization(fr *v1alpha1.FleetRollout, fc *v1alpha1.FleetCluster, tg target) *kustomizev1.Kustomization {
	fr = fr.Built(tg.Build)
	source, revision, wave := tg.Source, tg.Revision, tg.Wave
	t := fr.Spec.Template
	ks := &kustomizev1.Kustomization{
		TypeMeta: metav1.TypeMeta{APIVersion: kustomizev1.GroupVersion.String(), Kind: kustomizev1.KustomizationKind},
		ObjectMeta: metav1.ObjectMeta{
			Name:      v1alpha1.KustomizationName(fr.Name, fc.Name),
			Namespace: fr.Namespace,
			Labels: withShard(fr, map[string]string{
				v1alpha1.RolloutLabel: fr.Name,
				v1alpha1.ClusterLabel: fc.Name,
				v1alpha1.WaveLabel:    wave,
			}),
			Annotations: map[string]string{v1alpha1.RevisionAnnotation: revision},
		},
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

// applyKustomization writes ks with server-side apply under tidegate's field manager, unless the
// existing object already carries the same content hash and still has the spec tidegate gave it.
// A spec field tidegate sets that someone else changed (spec.path, spec.interval, …) is written
// back, as kustomize-controller corrects drift in what it applies; a field tidegate leaves unset,
// spec.suspend among them, stays the other writer's. beforeWrite runs just before a write (the
// crash-point hook). It reports whether it wrote.
func applyKustomization(ctx context.Context, c client.Client, fr *v1alpha1.FleetRollout, ks, existing *kustomizev1.Kustomization, beforeWrite func() error) (bool, error) {
	hash, err := specHash(ks)
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
	if err := stampHashes(ks, hash); err != nil {
		return false, err
	}
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
		return false, &writeError{reason: writeReason(err), ks: client.ObjectKeyFromObject(ks), err: err}
	}
	return true, nil
}

// writeKustomization writes cluster's Kustomization ks (applyKustomization) unless an object of its
// name exists that the rollout does not own: another rollout's, or one a person or another tool
// made. That one is never taken over: it is a *writeError (NameTaken). A Kustomization not in the
// cache yet is read from the API server, so a write just made is not mistaken for someone else's.
func (r *FleetRolloutReconciler) writeKustomization(ctx context.Context, fr *v1alpha1.FleetRollout, ks, existing *kustomizev1.Kustomization, beforeWrite func() error) (bool, error) {
	if existing == nil {
		found := &kustomizev1.Kustomization{}
		switch err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(ks), found); {
		case apierrors.IsNotFound(err):
		case err != nil:
			return false, &writeError{reason: writeReason(err), ks: client.ObjectKeyFromObject(ks), err: err}
		case !metav1.IsControlledBy(found, fr):
			return false, &writeError{reason: v1alpha1.WriteNameTaken, ks: client.ObjectKeyFromObject(ks), owner: ownerOf(found)}
		default:
			existing = found
		}
	}
	return applyKustomization(ctx, r.Client, fr, ks, existing, beforeWrite)
}

// writeError is a Kustomization write that failed for one cluster.
type writeError struct {
	reason string // v1alpha1.WriteRefused, WriteNameTaken or WriteFailed
	ks     client.ObjectKey
	owner  string // NameTaken: who owns the object, "" for nobody
	err    error
}

func (e *writeError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("kustomization %s exists and is not the rollout's (%s)", e.ks, e.owner)
	}
	return fmt.Sprintf("writing kustomization %s: %v", e.ks, e.err)
}

func (e *writeError) Unwrap() error { return e.err }

// maxWriteFailureMessage bounds a write failure's message in status.
const maxWriteFailureMessage = 512

// failure is what status records of the failure for cluster: the error and what fixes it.
func (e *writeError) failure(cluster string, now time.Time) v1alpha1.WriteFailure {
	var msg string
	switch e.reason {
	case v1alpha1.WriteNameTaken:
		owner := "owned by nothing"
		if e.owner != "" {
			owner = "owned by " + e.owner
		}
		msg = fmt.Sprintf("cluster %s: Kustomization %s, the name of its Kustomization, exists and is not this rollout's (%s): "+
			"rename or delete that Kustomization, or rename the FleetCluster or the FleetRollout", cluster, e.ks, owner)
	case v1alpha1.WriteRefused:
		msg = fmt.Sprintf("cluster %s: the hub refused Kustomization %s: %v; fix what refuses it (an admission policy, a quota, the rollout's template); it is tried again with backoff",
			cluster, e.ks, e.err)
	default:
		msg = fmt.Sprintf("cluster %s: writing Kustomization %s failed: %v; it is tried again with backoff", cluster, e.ks, e.err)
	}
	if len(msg) > maxWriteFailureMessage {
		msg = msg[:maxWriteFailureMessage-3] + "..."
	}
	t := metav1.NewTime(now.Truncate(time.Second))
	return v1alpha1.WriteFailure{Cluster: cluster, Reason: e.reason, Message: msg, Since: &t}
}

// writeReason classifies a failed write: what the hub refuses needs a fix (Refused); anything else
// (unavailable, throttled, timed out, a conflict) may pass when tried again (Failed).
func writeReason(err error) string {
	switch {
	case apierrors.IsInvalid(err), apierrors.IsForbidden(err), apierrors.IsBadRequest(err),
		apierrors.IsRequestEntityTooLargeError(err), apierrors.IsMethodNotSupported(err), apierrors.IsNotAcceptable(err),
		apierrors.IsUnsupportedMediaType(err), apierrors.IsUnauthorized(err):
		return v1alpha1.WriteRefused
	case apierrors.IsAlreadyExists(err):
		return v1alpha1.WriteNameTaken
	}
	return v1alpha1.WriteFailed
}

// ownerOf names the controller of obj, "" when it has none.
func ownerOf(obj metav1.Object) string {
	if ref := metav1.GetControllerOf(obj); ref != nil {
		return ref.Kind + " " + ref.Name
	}
	return ""
}

// setWriteFailures records the failed writes, by cluster name, bounded.
func setWriteFailures(st *v1alpha1.FleetRolloutStatus, failures map[string]v1alpha1.WriteFailure) {
	st.WriteFailureCount = int32(len(failures))
	st.WriteFailures = nil
	for _, c := range slices.Sorted(maps.Keys(failures)) {
		if len(st.WriteFailures) == maxWriteFailuresInStatus {
			break
		}
		st.WriteFailures = append(st.WriteFailures, failures[c])
	}
}

// maxWriteFailuresInStatus bounds status.writeFailures; status.writeFailureCount has the total.
const maxWriteFailuresInStatus = 100

// Backoff of a cluster's failed Kustomization writes: 5s after the first failure, doubling up to 5m.
const (
	writeBackoffBase = 5 * time.Second
	writeBackoffMax  = 5 * time.Minute
)

// writeBackoff remembers, per rollout and cluster, when a Kustomization write that failed is tried
// again. It lives in memory: after a restart every failed write is tried at once, and fails again
// into status if it must.
type writeBackoff struct {
	mu   sync.Mutex
	next map[writeKey]backoffEntry
	// unseen are the writes the manager's cache has not shown yet: what was written, and the
	// resourceVersion of the copy it replaced ("" for a create).
	unseen map[writeKey]unseenWrite
}

type unseenWrite struct {
	replaced string
	written  *kustomizev1.Kustomization
}

// wrote remembers that cluster's Kustomization was written as written, over cached (nil: created).
func (b *writeBackoff) wrote(fr *v1alpha1.FleetRollout, cluster string, cached, written *kustomizev1.Kustomization) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.unseen == nil {
		b.unseen = map[writeKey]unseenWrite{}
	}
	w := unseenWrite{written: written}
	if cached != nil {
		w.replaced = cached.ResourceVersion
	}
	b.unseen[writeKey{fr.UID, cluster}] = w
}

// overlay puts into existing (the rollout's Kustomizations by cluster, from the cache) each one the
// rollout wrote while the cache still holds the copy that write replaced (none, for a create), so
// that a pass that follows a write closely neither writes it again nor counts the cluster as not
// switched. A write the cache shows (its copy moved on) is forgotten.
func (b *writeBackoff) overlay(fr *v1alpha1.FleetRollout, existing map[string]*kustomizev1.Kustomization) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for k, w := range b.unseen {
		if k.rollout != fr.UID {
			continue
		}
		if resourceVersionOf(existing[k.cluster]) != w.replaced {
			delete(b.unseen, k)
			continue
		}
		existing[k.cluster] = w.written
	}
}

func resourceVersionOf(ks *kustomizev1.Kustomization) string {
	if ks == nil {
		return ""
	}
	return ks.ResourceVersion
}

type writeKey struct {
	rollout types.UID
	cluster string
}

type backoffEntry struct {
	failures int
	at       time.Time
}

// due tells whether cluster's write may be tried now.
func (b *writeBackoff) due(fr *v1alpha1.FleetRollout, cluster string, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.next[writeKey{fr.UID, cluster}]
	return !ok || !now.Before(e.at)
}

func (b *writeBackoff) failed(fr *v1alpha1.FleetRollout, cluster string, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.next == nil {
		b.next = map[writeKey]backoffEntry{}
	}
	k := writeKey{fr.UID, cluster}
	e := b.next[k]
	e.failures++
	d := writeBackoffBase << min(e.failures-1, 10)
	e.at = now.Add(min(d, writeBackoffMax))
	b.next[k] = e
}

func (b *writeBackoff) succeeded(fr *v1alpha1.FleetRollout, cluster string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.next, writeKey{fr.UID, cluster})
}

// nextRetry is how long until the rollout's next failed write is due; zero when none waits.
func (b *writeBackoff) nextRetry(fr *v1alpha1.FleetRollout, now time.Time) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	var next time.Duration
	for k, e := range b.next {
		if k.rollout != fr.UID {
			continue
		}
		if d := max(e.at.Sub(now), time.Second); next == 0 || d < next {
			next = d
		}
	}
	return next
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

// specHash is the hash tidegate records on a Kustomization it writes (specHashAnnotation), over
// what it writes: its labels, its annotations (before the hash is added) and its spec.
func specHash(ks *kustomizev1.Kustomization) (string, error) {
	return contentHash(ks.Labels, ks.Annotations, ks.Spec)
}

// stampHashes records on ks, about to be written, its spec hash and its build hash.
func stampHashes(ks *kustomizev1.Kustomization, spec string) error {
	build, err := buildHash(ks)
	if err != nil {
		return err
	}
	ks.Annotations[specHashAnnotation] = spec
	ks.Annotations[buildHashAnnotation] = build
	return nil
}

// buildHash is the hash of the fields of a Kustomization that shape what Flux applies to its
// cluster, and where: the source and path, what kustomize builds with (targetNamespace, name prefix
// and suffix, patches, images, components, decryption), the postBuild substitution (the template's
// and the cluster's values) and the kubeconfig. The rest (interval, timeout, retries, prune, wait,
// health checks, deletion policy, labels) says how Flux applies and checks it, not what.
func buildHash(ks *kustomizev1.Kustomization) (string, error) {
	s := &ks.Spec
	return contentHash(s.SourceRef, s.Path, s.TargetNamespace, s.NamePrefix, s.NameSuffix, s.Patches, s.Images, s.Components,
		s.Decryption, s.PostBuild, s.KubeConfig)
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
