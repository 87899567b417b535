package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/controllers"
	"github.com/tidegate/tidegate/internal/localfleet"
	"github.com/tidegate/tidegate/verdict"
)

const serviceMonitorYAML = `apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata:
  name: web
  namespace: demo
spec:
  selector:
    matchLabels: {app: web}
`

// installServiceMonitorCRD creates the ServiceMonitor CRD on a member.
func (s *fleetSetup) installServiceMonitorCRD(ctx context.Context, t *testing.T, cluster string) {
	t.Helper()
	preserve := true
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "servicemonitors.monitoring.coreos.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "monitoring.coreos.com",
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "servicemonitors", Singular: "servicemonitor", Kind: "ServiceMonitor", ListKind: "ServiceMonitorList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: &preserve}}}},
		},
	}
	raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(crd)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: raw}
	u.SetAPIVersion("apiextensions.k8s.io/v1")
	u.SetKind("CustomResourceDefinition")
	if err := s.f.Member(cluster).Client.Create(ctx, u); err != nil {
		t.Fatal(err)
	}
}

// One member of the last wave lacks the CRD of an object the new revision adds. The first wave's
// deploySafe preflights every wave's targets, so with no failure budget it fails before the canary
// runs the revision, naming the member and the object. With maxFailures 1 on the last wave the
// rollout completes: that member is held back at the known-good, listed in the wave's status and in
// the receipts' evidence, and never switched; the last wave's own deploySafe checked it again.
func TestE2EDeploySafePreflightsTheFleet(t *testing.T) {
	parallel(t)
	// A fleet of its own: it installs a CRD, cluster-wide, on some members and not others.
	s, first := newFleetSetupWith(t, 3, demoPackage("v1"), localfleet.Options{})
	startTidegate(t, s, controllers.Options{})
	ctx, cancel := testContext(t, 8*time.Minute)
	defer cancel()
	rev1 := s.repo.Revision(first)
	s.createRollout(ctx, t, twoWaveRollout(s.ns), rev1, nil)
	fr := s.rollout(t, "web")
	canary, rest := fr.Status.Waves[0].Clusters[0], fr.Status.Waves[1].Clusters
	if len(rest) != 2 {
		t.Fatalf("rest = %v", rest)
	}
	having, lacking := rest[0], rest[1]
	s.installServiceMonitorCRD(ctx, t, canary)
	s.installServiceMonitorCRD(ctx, t, having)
	rev2 := s.commitFiles(t, "v2 with a ServiceMonitor", withFiles("v2", map[string]string{"app/monitor.yaml": serviceMonitorYAML}))

	// No budget: the canary's deploySafe fails on the last wave's member, and nothing moves.
	s.waitGate(ctx, t, "web", v1alpha1.GateDeploySafe, metav1.ConditionFalse)
	rc := latestReceipt(s.receiptsOf(ctx, t, "web", rev2), v1alpha1.GateDeploySafe, "canary")
	if rc == nil || rc.Spec.Result != v1alpha1.ResultFail {
		t.Fatalf("the canary's deploySafe should fail: %+v", rc)
	}
	if !reasonsContain(rc, "deploySafe.preflight.laterWaves", "rest", lacking, "ServiceMonitor "+s.ns+"/web") {
		t.Errorf("reasons should name wave rest, %s and the ServiceMonitor: %q", lacking, rc.Spec.Reasons)
	}
	if reasonsContain(rc, having) {
		t.Errorf("%s has the CRD: %q", having, rc.Spec.Reasons)
	}
	s.nothingApplied(ctx, t, "web", rev2, "v2")

	// A budget of one on the last wave: the rollout completes without the member that lacks the CRD.
	one := int32(1)
	s.patchRollout(ctx, t, "web", func(fr *v1alpha1.FleetRollout) { fr.Spec.Waves[1].MaxFailures = &one })
	fr = s.waitPhase(ctx, t, "web", v1alpha1.PhaseCompleted, rev2)
	wv := fr.Status.Waves[1]
	if len(wv.HeldBack) != 1 || wv.HeldBack[0].Cluster != lacking || !strings.Contains(wv.HeldBack[0].Reason, "ServiceMonitor") {
		t.Fatalf("wave rest should hold back %s for the ServiceMonitor: %+v", lacking, wv.HeldBack)
	}
	if wv.Updated != 1 || wv.Healthy != 1 {
		t.Errorf("wave rest: updated %d, healthy %d; want 1 and 1", wv.Updated, wv.Healthy)
	}
	for c, want := range map[string]string{canary: "v2", having: "v2", lacking: "v1"} {
		if got := s.memberVersion(ctx, c); got != want {
			t.Errorf("%s runs %q, want %q", c, got, want)
		}
	}
	if ks := s.kustomization(t, "web", lacking); ks == nil || ks.Annotations[v1alpha1.RevisionAnnotation] != rev1 {
		t.Errorf("%s's Kustomization should stay at %s: %+v", lacking, rev1, ks)
	}

	receipts := s.receiptsOf(ctx, t, "web", rev2)
	var ds verdict.DeploySafeEvidence
	rc = latestReceipt(receipts, v1alpha1.GateDeploySafe, "rest")
	if rc == nil || rc.Spec.Result != v1alpha1.ResultPass {
		t.Fatalf("the rest's own deploySafe should pass within its budget: %+v", rc)
	}
	evidenceOf(t, rc, &ds)
	if ds.Preflight.MaxFailures != 1 || len(ds.Preflight.Failed) != 1 || ds.Preflight.Failed[0] != lacking || len(ds.Preflight.LaterWaves) != 0 {
		t.Errorf("the rest's deploySafe preflights its own members: %+v", ds.Preflight)
	}
	rc = latestReceipt(receipts, v1alpha1.GateDeploySafe, "canary")
	ds = verdict.DeploySafeEvidence{}
	evidenceOf(t, rc, &ds)
	if rc.Spec.Result != v1alpha1.ResultPass || len(ds.Preflight.LaterWaves) != 1 || strings.Join(ds.Preflight.LaterWaves[0].Failed, ",") != lacking {
		t.Errorf("the canary's deploySafe preflighted the rest: %s %+v", rc.Spec.Result, ds.Preflight.LaterWaves)
	}
	var nd verdict.NoDisruptionEvidence
	rc = latestReceipt(receipts, v1alpha1.GateNoDisruption, "rest")
	evidenceOf(t, rc, &nd)
	if rc.Spec.Result != v1alpha1.ResultPass || len(nd.HeldBack) != 1 || nd.HeldBack[0].Name != lacking || len(nd.Clusters) != 1 {
		t.Errorf("the rest's noDisruption lists %s held back and judges %s: %s %+v %+v", lacking, having, rc.Spec.Result, nd.HeldBack, nd.Clusters)
	}

	// Completed, the held-back member stays where it was.
	s.nothingApplied(ctx, t, "web", rev2, "v2", lacking)
}
