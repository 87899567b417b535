package collector

import (
	"testing"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestSameRevision(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"main@sha1:abc", "main@sha1:abc", true},
		{"main@sha1:abc", "sha1:abc", true}, // a source pinned by commit alone
		{"latest@sha256:d1", "sha256:d1", true},
		{"main@sha1:abc", "main@sha1:abd", false},
		{"", "main@sha1:abc", false},
	} {
		if got := SameRevision(tc.a, tc.b); got != tc.want {
			t.Errorf("SameRevision(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

func ks(generation int64, source, applied string, ready metav1.ConditionStatus, reason string, condGen int64) *kustomizev1.Kustomization {
	k := &kustomizev1.Kustomization{ObjectMeta: metav1.ObjectMeta{Generation: generation}}
	k.Spec.SourceRef.Name = source
	k.Status.ObservedGeneration = generation - 1
	k.Status.LastAppliedRevision = applied
	k.Status.Conditions = []metav1.Condition{{Type: meta.ReadyCondition, Status: ready, Reason: reason, ObservedGeneration: condGen}}
	return k
}

func TestObservations(t *testing.T) {
	// kustomize-controller failed the current spec: status.observedGeneration lags, the condition does not.
	failed := Observe(ks(2, "web-2", "main@sha1:1", metav1.ConditionFalse, meta.HealthCheckFailedReason, 2))
	if !failed.FailedAt("web-2") {
		t.Errorf("a health check failure of the current spec is a failure: %+v", failed)
	}
	stale := Observe(ks(2, "web-2", "main@sha1:1", metav1.ConditionFalse, meta.HealthCheckFailedReason, 1))
	if stale.FailedAt("web-2") {
		t.Errorf("a failure written for the previous generation is not this spec's: %+v", stale)
	}
	waiting := Observe(ks(2, "web-2", "", metav1.ConditionFalse, meta.DependencyNotReadyReason, 2))
	if waiting.FailedAt("web-2") {
		t.Errorf("waiting on a dependency is not a failure of the revision")
	}
	// Mid-soak, kustomize-controller re-reconciles the same revision and marks Ready Unknown.
	ok := ks(2, "web-2", "main@sha1:2", metav1.ConditionUnknown, meta.ProgressingReason, 2)
	ok.Status.ObservedGeneration = 2
	o := Observe(ok)
	if o.ReadyAt("web-2", "main@sha1:2") || !o.StillAt("web-2", "main@sha1:2") {
		t.Errorf("Unknown while re-reconciling the applied revision: not newly ready, but still at it: %+v", o)
	}
	if Observe(nil).Exists {
		t.Errorf("a missing Kustomization does not exist")
	}
}

func TestSplitRevision(t *testing.T) {
	for _, tc := range []struct{ in, ref, digest string }{
		{"main@sha1:abc", "main", "sha1:abc"},
		{"refs/heads/release@sha1:abc", "refs/heads/release", "sha1:abc"},
		{"latest@sha256:0123", "latest", "sha256:0123"},
		{"sha1:abc", "", "sha1:abc"},
	} {
		ref, digest, err := SplitRevision(tc.in)
		if err != nil || ref != tc.ref || digest != tc.digest {
			t.Errorf("SplitRevision(%q) = %q, %q, %v; want %q, %q", tc.in, ref, digest, err, tc.ref, tc.digest)
		}
	}
	for _, bad := range []string{"", "main", "main@", "main@sha1:", "main@:abc"} {
		if _, _, err := SplitRevision(bad); err == nil {
			t.Errorf("SplitRevision(%q) should fail", bad)
		}
	}
}
