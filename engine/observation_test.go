package engine

import (
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/verdict"
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
	if !failed.FailedAt("web-2", "main@sha1:2") {
		t.Errorf("a health check failure of the current spec is a failure: %+v", failed)
	}
	stale := Observe(ks(2, "web-2", "main@sha1:1", metav1.ConditionFalse, meta.HealthCheckFailedReason, 1))
	if stale.FailedAt("web-2", "main@sha1:2") {
		t.Errorf("a failure written for the previous generation is not this spec's: %+v", stale)
	}
	waiting := Observe(ks(2, "web-2", "", metav1.ConditionFalse, meta.DependencyNotReadyReason, 2))
	if waiting.FailedAt("web-2", "main@sha1:2") {
		t.Errorf("waiting on a dependency is not a failure of the revision")
	}
	// kustomize-controller's words (v1.9) for a source it waits for, and for a path the revision lacks.
	for msg, want := range map[string]bool{
		`unable to get source 'GitRepository/fleet/web-2': gitrepositories.source.toolkit.fluxcd.io "web-2" not found`: false,
		"Source artifact not found, retrying in 2s":                                              false,
		"Source is not ready, artifact not found, retrying in 2s":                                false,
		"kustomization path not found: stat /tmp/kustomization-1/app: no such file or directory": true,
	} {
		k := ks(2, "web-2", "main@sha1:1", metav1.ConditionFalse, meta.ArtifactFailedReason, 2)
		k.Status.Conditions[0].Message = msg
		if got := Observe(k).FailedAt("web-2", "main@sha1:2"); got != want {
			t.Errorf("ArtifactFailed %q: failed %v, want %v", msg, got, want)
		}
	}
	// A first apply that failed for want of the member's API server (the preflight dry-run found it
	// admissible) is retried and waited for; one the member refused is the revision's failure.
	// kustomize-controller's words (v1.9): "<object> apply failed: <the API server's error>".
	for msg, want := range map[string]bool{
		"Deployment/demo/web apply failed: the server is currently unable to handle the request":                                                                                                            false,
		`Deployment/demo/web dry-run failed: Internal error occurred: failed calling webhook "v.example.com": failed to call webhook: Post "https://v.example.svc:443/validate": context deadline exceeded`: false,
		"Deployment/demo/web apply failed: etcdserver: request timed out":                                                                                                                                   false,
		`Post "https://10.0.0.1:6443/apis/apps/v1/namespaces/demo/deployments/web?fieldManager=kustomize-controller": dial tcp 10.0.0.1:6443: connect: connection refused`:                                  false,
		`Deployment/demo/web dry-run failed: admission webhook "v.example.com" denied the request: replicas must be at most 10`:                                                                             true,
		`Deployment.apps "web" is invalid: spec.selector: Invalid value: field is immutable`:                                                                                                                true,
	} {
		k := ks(2, "web-2", "main@sha1:1", metav1.ConditionFalse, meta.ReconciliationFailedReason, 2)
		k.Status.Conditions[0].Message = msg
		o := Observe(k)
		if got := o.FailedAt("web-2", "main@sha1:2"); got != want || o.MemberUnavailable() == want {
			t.Errorf("ReconciliationFailed %q on a first apply: failed %v, want %v (member unavailable %v)", msg, got, want, o.MemberUnavailable())
		}
		k.Status.Conditions = append(k.Status.Conditions, metav1.Condition{Type: meta.StalledCondition, Status: metav1.ConditionTrue, Reason: meta.ReconciliationFailedReason, ObservedGeneration: 2})
		if !Observe(k).FailedAt("web-2", "main@sha1:2") {
			t.Errorf("ReconciliationFailed %q that kustomize-controller gave up on (Stalled): a failure", msg)
		}
	}
	// Mid-soak, kustomize-controller re-reconciles the same revision and marks Ready Unknown.
	ok := ks(2, "web-2", "main@sha1:2", metav1.ConditionUnknown, meta.ProgressingReason, 2)
	ok.Status.ObservedGeneration = 2
	o := Observe(ok)
	if o.ReadyAt("web-2", "main@sha1:2") || !o.StillAt("web-2", "main@sha1:2") {
		t.Errorf("Unknown while re-reconciling the applied revision, with no history: not known ready, but still at it: %+v", o)
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

// reconciling is a Kustomization of spec generation 2 at source web-2 that kustomize-controller
// reconciled and is reconciling again, as it writes its status: applied is the last applied
// revision, history the latest status.history snapshot ("" for none), then the conditions.
func reconciling(observed int64, applied, history, historyStatus string, conds ...metav1.Condition) *kustomizev1.Kustomization {
	k := &kustomizev1.Kustomization{ObjectMeta: metav1.ObjectMeta{Generation: 2}}
	k.Spec.SourceRef.Name = "web-2"
	k.Spec.Wait = true
	k.Status.ObservedGeneration = observed
	k.Status.LastAppliedRevision = applied
	if history != "" {
		k.Status.History.Upsert("sha256:aa", time.Unix(1000, 0), time.Second, historyStatus, map[string]string{"revision": history})
	}
	for _, c := range conds {
		c.ObservedGeneration = 2
		k.Status.Conditions = append(k.Status.Conditions, c)
	}
	return k
}

func cond(typ string, status metav1.ConditionStatus, reason, msg string) metav1.Condition {
	return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg}
}

// kustomize-controller's transient states are read through, not judged: mid-reconcile, a
// Kustomization is what its last finished reconcile of the current spec says (status.history);
// a retried failure of a revision it applied is waited for; terminal failures stay failures.
func TestTransientObservations(t *testing.T) {
	const src, rev = "web-2", "main@sha1:2"
	inProgress := []metav1.Condition{
		cond(meta.ReadyCondition, metav1.ConditionUnknown, meta.ProgressingReason, "Reconciliation in progress"),
		cond(meta.ReconcilingCondition, metav1.ConditionTrue, meta.ProgressingReason, "Running health checks for revision main@sha1:2 with a timeout of 5m0s"),
		cond(meta.HealthyCondition, metav1.ConditionUnknown, meta.ProgressingReason, "Running health checks for revision main@sha1:2 with a timeout of 5m0s"),
	}
	type want struct {
		ready, failed, retrying, unsettled bool
		health                             string
	}
	for _, tc := range []struct {
		name string
		ks   *kustomizev1.Kustomization
		want want
	}{
		{"the periodic re-reconcile of the applied revision, its last one succeeded",
			reconciling(2, rev, rev, meta.ReconciliationSucceededReason, inProgress...),
			want{ready: true, health: verdict.HealthChecksPassed}},
		{"the same with no history: nothing finished to go by, waited for",
			reconciling(2, rev, "", "", inProgress...),
			want{unsettled: true, health: verdict.HealthChecksProgressing}},
		{"the same with a spec changed since the last success: pending, not settled",
			reconciling(1, rev, rev, meta.ReconciliationSucceededReason, inProgress...),
			want{health: verdict.HealthChecksProgressing}},
		{"re-reconciling after a failed health check: the failure stands",
			reconciling(2, rev, rev, meta.HealthCheckFailedReason, inProgress...),
			want{health: verdict.HealthChecksFailed}},
		{"re-reconciling after a failed apply: waited for",
			reconciling(2, rev, rev, meta.ReconciliationFailedReason, inProgress...),
			want{unsettled: true, health: verdict.HealthChecksUnknown}},
		{"a failed apply of the revision it had applied: retried, not a failure yet",
			reconciling(2, rev, rev, meta.ReconciliationFailedReason,
				cond(meta.ReadyCondition, metav1.ConditionFalse, meta.ReconciliationFailedReason, "Deployment/demo/web dry-run failed: connection refused"),
				cond(meta.HealthyCondition, metav1.ConditionTrue, meta.SucceededReason, "Health check passed in 2s")),
			want{retrying: true, unsettled: true, health: verdict.HealthChecksPassed}},
		{"the same once kustomize-controller gave up: a failure",
			reconciling(2, rev, rev, meta.ReconciliationFailedReason,
				cond(meta.ReadyCondition, metav1.ConditionFalse, meta.ReconciliationFailedReason, "invalid"),
				cond(meta.StalledCondition, metav1.ConditionTrue, meta.ReconciliationFailedReason, "invalid")),
			want{failed: true, health: verdict.HealthChecksUnknown}},
		{"a failed health check of the revision it had applied: a failure at once",
			reconciling(2, rev, rev, meta.HealthCheckFailedReason,
				cond(meta.ReadyCondition, metav1.ConditionFalse, meta.HealthCheckFailedReason, "timeout waiting for: [Deployment/demo/web status: 'InProgress']"),
				cond(meta.HealthyCondition, metav1.ConditionFalse, meta.HealthCheckFailedReason, "timeout")),
			want{failed: true, health: verdict.HealthChecksFailed}},
		{"a failure of an edited spec, written back since: awaited, neither passed nor failed",
			func() *kustomizev1.Kustomization {
				k := reconciling(1, rev, "", "", cond(meta.ReadyCondition, metav1.ConditionFalse, meta.ArtifactFailedReason, "kustomization path not found"))
				k.Generation = 3
				return k
			}(),
			want{unsettled: true, health: verdict.HealthChecksUnknown}},
		{"a failed apply of a revision it never applied: a failure at once",
			reconciling(2, "main@sha1:1", "main@sha1:1", meta.ReconciliationSucceededReason,
				cond(meta.ReadyCondition, metav1.ConditionFalse, meta.ReconciliationFailedReason, "ServiceMonitor/demo/web dry-run failed: no matches for kind")),
			want{failed: true, health: verdict.HealthChecksUnknown}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := Observe(tc.ks)
			ready, health, transient := o.JudgedAt(src, rev)
			got := want{ready: o.ReadyAt(src, rev), failed: o.FailedAt(src, rev), retrying: o.RetryingAt(src, rev), unsettled: o.Unsettled(src, rev), health: health}
			if got != tc.want || ready != got.ready {
				t.Errorf("got %+v (judged ready %v), want %+v; observation %+v", got, ready, tc.want, o)
			}
			between := o.Progressing || got.retrying
			if (transient != "") != between {
				t.Errorf("transient %q, want it said exactly when kustomize-controller is between two outcomes (%v)", transient, between)
			}
		})
	}
}
