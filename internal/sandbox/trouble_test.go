package sandbox

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/internal/scheme"
	"github.com/tidegate/tidegate/internal/testbin"
)

func ready(status metav1.ConditionStatus, reason, msg string) []metav1.Condition {
	return []metav1.Condition{{Type: "Ready", Status: status, Reason: reason, Message: msg}}
}

// A failure report names what is not Ready, with its reason and message, and nothing that is.
func TestDescribeTroubleNamesWhatIsNotReady(t *testing.T) {
	meta := func(ns, name string) metav1.ObjectMeta { return metav1.ObjectMeta{Namespace: ns, Name: name} }
	objs := []client.Object{
		&sourcev1.GitRepository{ObjectMeta: meta("fleet", "podinfo"), Status: sourcev1.GitRepositoryStatus{Conditions: ready("False", "GitOperationFailed", "failed to checkout and determine revision: unable to clone")}},
		&sourcev1.GitRepository{ObjectMeta: meta("flux-system", "fleet"), Status: sourcev1.GitRepositoryStatus{Conditions: ready("True", "Succeeded", "stored artifact")}},
		&kustomizev1.Kustomization{ObjectMeta: meta("fleet", "podinfo-member-1"), Status: kustomizev1.KustomizationStatus{Conditions: ready("False", "HealthCheckFailed", "timeout waiting for: [Deployment/podinfo/web status: 'InProgress']")}},
		&sourcev1.OCIRepository{ObjectMeta: meta("fleet", "charts"), Status: sourcev1.OCIRepositoryStatus{Conditions: ready("False", "VerificationError", "failed to verify the signature")}},
		helmRelease("fleet", "podinfo-member-2", ready("False", "UpgradeFailed", "Helm upgrade failed: field is immutable")),
		helmRelease("fleet", "podinfo-member-3", ready("True", "UpgradeSucceeded", "Helm upgrade succeeded")),
		&v1alpha1.FleetCluster{ObjectMeta: meta("fleet", "member-1")},
		&v1alpha1.FleetRollout{ObjectMeta: meta("fleet", "podinfo"), Status: v1alpha1.FleetRolloutStatus{
			Phase:      v1alpha1.PhaseProgressing,
			Conditions: ready("False", v1alpha1.GateFailedReason, "wave canary is blocked"),
			Waves:      []v1alpha1.WaveStatus{{Name: "canary", Gates: []v1alpha1.GateOutcome{{Gate: "rollbackSafe", Result: "Fail", Receipt: "podinfo-rollbacksafe-1"}}}},
		}},
	}
	c := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(objs...).WithStatusSubresource(objs...).Build()
	got := describeTrouble(context.Background(), c, "fleet")
	for _, want := range []string{
		"GitRepository fleet/podinfo: Ready=False (GitOperationFailed): failed to checkout",
		"Kustomization fleet/podinfo-member-1: Ready=False (HealthCheckFailed): timeout waiting for",
		"OCIRepository fleet/charts: Ready=False (VerificationError): failed to verify the signature",
		"HelmRelease fleet/podinfo-member-2: Ready=False (UpgradeFailed): Helm upgrade failed: field is immutable",
		"FleetCluster fleet/member-1: Ready=no condition yet",
		"FleetRollout fleet/podinfo (phase Progressing; rollbackSafe failed in wave canary (receipt podinfo-rollbacksafe-1)): Ready=False (GateFailed): wave canary is blocked",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the report should say %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "flux-system/fleet") || strings.Contains(got, "podinfo-member-3") {
		t.Errorf("a Ready object is not trouble:\n%s", got)
	}
}

// Without the test binaries, up says how to build them and starts nothing.
func TestUpWithoutTestBinariesSaysHowToBuildThem(t *testing.T) {
	t.Setenv("TIDEGATE_TESTBIN", t.TempDir())
	dir := t.TempDir()
	var out bytes.Buffer
	_, err := up(context.Background(), &out, upOptions{clusters: 1, dir: dir, runArgs: []string{"sandbox", "run"}, cli: "tidegate"})
	var e *Error
	if err == nil || !strings.Contains(err.Error(), "make testbin") || !errors.As(err, &e) || e.Code != 1 {
		t.Fatalf("up without test binaries: %v", err)
	}
	if running(dir) {
		t.Errorf("nothing should run")
	}
}

// Without a Prometheus build, up says how to build it and starts nothing.
func TestUpWithoutPrometheusSaysHowToBuildIt(t *testing.T) {
	if _, err := testbin.Dir(""); err != nil {
		t.Skipf("needs the test binaries, to get as far as Prometheus: %v", err)
	}
	t.Setenv(testbin.PrometheusEnv, filepath.Join(t.TempDir(), "prometheus"))
	dir := t.TempDir()
	var out bytes.Buffer
	_, err := up(context.Background(), &out, upOptions{clusters: 1, dir: dir, runArgs: []string{"sandbox", "run"}, cli: "tidegate"})
	var e *Error
	if err == nil || !strings.Contains(err.Error(), "Prometheus") || !strings.Contains(err.Error(), "hack/prometheus.sh") || !errors.As(err, &e) || e.Code != 1 {
		t.Fatalf("up without Prometheus: %v", err)
	}
	if running(dir) || out.Len() != 0 {
		t.Errorf("nothing should run or be said before the error:\n%s", out.String())
	}
}

// helmRelease is a HelmRelease with conditions, unstructured as describeTrouble lists it.
func helmRelease(ns, name string, conds []metav1.Condition) *unstructured.Unstructured {
	hr := &unstructured.Unstructured{}
	hr.SetGroupVersionKind(helmReleaseList.GroupVersion().WithKind("HelmRelease"))
	hr.SetNamespace(ns)
	hr.SetName(name)
	var raw []any
	for _, c := range conds {
		m, _ := runtime.DefaultUnstructuredConverter.ToUnstructured(&c)
		raw = append(raw, m)
	}
	_ = unstructured.SetNestedSlice(hr.Object, raw, "status", "conditions")
	return hr
}
