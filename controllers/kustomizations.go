package controllers

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/engine"
)

// applyKustomization writes member ks (a Kustomization, or a HelmRelease for a chart) with
// server-side apply under tidegate's field manager, unless the existing object already carries the
// same content hash and still has the spec tidegate gave it. A spec field tidegate sets that someone
// else changed (spec.path, spec.interval, …) is written back, as kustomize-controller corrects drift
// in what it applies; a field tidegate leaves unset, spec.suspend among them, stays the other
// writer's. beforeWrite runs just before a write (the crash-point hook). It reports whether it wrote.
func applyKustomization(ctx context.Context, c client.Client, fr *v1alpha1.FleetRollout, ks, existing client.Object, beforeWrite func() error) (bool, error) {
	hash, err := engine.SpecHash(ks)
	if err != nil {
		return false, err
	}
	if existing != nil && existing.GetAnnotations()[engine.SpecHashAnnotation] == hash {
		kept, err := engine.SpecKept(ks, existing)
		if err != nil || kept {
			return false, err
		}
	}
	if err := beforeWrite(); err != nil {
		return false, err
	}
	if err := engine.StampHashes(ks, hash); err != nil {
		return false, err
	}
	controller := true
	ks.SetOwnerReferences([]metav1.OwnerReference{{
		APIVersion: v1alpha1.GroupVersion.String(), Kind: v1alpha1.FleetRolloutKind,
		Name: fr.Name, UID: fr.UID, Controller: &controller, BlockOwnerDeletion: &controller,
	}})
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(ks)
	if err != nil {
		return false, err
	}
	delete(u, "status")
	unstructured.RemoveNestedField(u, "metadata", "creationTimestamp")
	obj := &unstructured.Unstructured{Object: u}
	kind := engine.MemberKind(fr)
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), client.FieldOwner(v1alpha1.FieldManager), client.ForceOwnership); err != nil {
		return false, &writeError{reason: writeReason(err), kind: kind, ks: client.ObjectKeyFromObject(ks), err: err}
	}
	// ks becomes what the API server answered: the written spec with the status it keeps across a
	// spec write (Flux's of the earlier spec) and the generation it moved, which is what the cache
	// will show of this write.
	written := engine.NewMember(fr)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, written); err != nil {
		return true, fmt.Errorf("reading the answer to the write of %s %s: %w", strings.ToLower(kind), client.ObjectKeyFromObject(ks), err)
	}
	reflect.ValueOf(ks).Elem().Set(reflect.ValueOf(written).Elem())
	return true, nil
}

// writeKustomization writes cluster's member ks (applyKustomization) unless an object of its
// name exists that the rollout does not own: another rollout's, or one a person or another tool
// made. That one is never taken over: it is a *writeError (NameTaken). A member not in the
// cache yet is read from the API server, so a write just made is not mistaken for someone else's.
func (r *FleetRolloutReconciler) writeKustomization(ctx context.Context, fr *v1alpha1.FleetRollout, ks, existing client.Object, beforeWrite func() error) (bool, error) {
	kind := engine.MemberKind(fr)
	if existing == nil {
		found := engine.NewMember(fr)
		switch err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(ks), found); {
		case apierrors.IsNotFound(err):
		case err != nil:
			return false, &writeError{reason: writeReason(err), kind: kind, ks: client.ObjectKeyFromObject(ks), err: err}
		case !metav1.IsControlledBy(found, fr):
			return false, &writeError{reason: v1alpha1.WriteNameTaken, kind: kind, ks: client.ObjectKeyFromObject(ks), owner: ownerOf(found)}
		default:
			existing = found
		}
	}
	return applyKustomization(ctx, r.Client, fr, ks, existing, beforeWrite)
}

// writeError is a member write (a Kustomization's, a HelmRelease's) that failed for one cluster.
type writeError struct {
	reason string // v1alpha1.WriteRefused, WriteNameTaken or WriteFailed
	kind   string // the member's kind: Kustomization or HelmRelease
	ks     client.ObjectKey
	owner  string // NameTaken: who owns the object, "" for nobody
	err    error
}

func (e *writeError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("%s %s exists and is not the rollout's (%s)", strings.ToLower(e.kind), e.ks, e.owner)
	}
	return fmt.Sprintf("writing %s %s: %v", strings.ToLower(e.kind), e.ks, e.err)
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
		msg = fmt.Sprintf("cluster %s: %s %s, the name of its %s, exists and is not this rollout's (%s): "+
			"rename or delete that %s, or rename the FleetCluster or the FleetRollout", cluster, e.kindName(), e.ks, e.kindName(), owner, e.kindName())
	case v1alpha1.WriteRefused:
		msg = fmt.Sprintf("cluster %s: the hub refused %s %s: %v; fix what refuses it (an admission policy, a quota, the rollout's template or values); it is tried again with backoff",
			cluster, e.kindName(), e.ks, e.err)
	default:
		msg = fmt.Sprintf("cluster %s: writing %s %s failed: %v; it is tried again with backoff", cluster, e.kindName(), e.ks, e.err)
	}
	if len(msg) > maxWriteFailureMessage {
		msg = msg[:maxWriteFailureMessage-3] + "..."
	}
	t := metav1.NewTime(now.Truncate(time.Second))
	return v1alpha1.WriteFailure{Cluster: cluster, Reason: e.reason, Message: msg, Since: &t}
}

// kindName is the kind of the member that could not be written, Kustomization when unknown.
func (e *writeError) kindName() string {
	if e.kind == "" {
		return kustomizev1.KustomizationKind
	}
	return e.kind
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
	written  client.Object
}

// wrote remembers that cluster's member was written as written, over cached (nil: created).
func (b *writeBackoff) wrote(fr *v1alpha1.FleetRollout, cluster string, cached, written client.Object) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.unseen == nil {
		b.unseen = map[writeKey]unseenWrite{}
	}
	w := unseenWrite{written: written}
	w.replaced = resourceVersionOf(cached)
	b.unseen[writeKey{fr.UID, cluster}] = w
}

// overlay puts into existing (the rollout's Kustomizations by cluster, from the cache) each one the
// rollout wrote while the cache still holds the copy that write replaced (none, for a create), so
// that a pass that follows a write closely neither writes it again nor counts the cluster as not
// switched. A write the cache shows (its copy moved on) is forgotten.
func (b *writeBackoff) overlay(fr *v1alpha1.FleetRollout, existing map[string]engine.Object) {
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

func resourceVersionOf(obj client.Object) string {
	if obj == nil || reflect.ValueOf(obj).IsNil() {
		return ""
	}
	return obj.GetResourceVersion()
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
