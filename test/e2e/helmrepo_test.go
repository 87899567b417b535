package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/controllers"
)

// helmChartSource makes the HelmRepository "charts" of type oci on the fleet's registry, where
// push pushes the scenario's charts, and the HelmChart "demo" of it, which tracks the newest
// version of the demo chart, verified with the scenario's cosign key.
func (s *chartSetup) helmChartSource(ctx context.Context, t *testing.T) {
	t.Helper()
	repo := &sourcev1.HelmRepository{
		ObjectMeta: metav1.ObjectMeta{Name: "charts", Namespace: s.ns},
		Spec: sourcev1.HelmRepositorySpec{
			Type:     sourcev1.HelmRepositoryTypeOCI,
			URL:      "oci://" + s.f.Registry.Host + "/" + s.ns + "/charts",
			Insecure: true,
			Interval: metav1.Duration{Duration: time.Minute},
		},
	}
	chart := &sourcev1.HelmChart{
		ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: s.ns},
		Spec: sourcev1.HelmChartSpec{
			Chart:     "demo",
			Version:   ">=0.1.0",
			SourceRef: sourcev1.LocalHelmChartSourceReference{Kind: sourcev1.HelmRepositoryKind, Name: repo.Name},
			Interval:  metav1.Duration{Duration: 2 * time.Second},
			Verify:    &sourcev1.HelmChartVerification{Provider: "cosign", SecretRef: &meta.LocalObjectReference{Name: "charts-cosign"}},
		},
	}
	for _, o := range []client.Object{repo, chart} {
		if err := s.f.Hub.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
}

// helmChartRevision waits for the HelmChart "demo" to serve version and returns its revision as
// tidegate names it: "<version>@<digest of the chart's archive>".
func (s *chartSetup) helmChartRevision(ctx context.Context, t *testing.T, version string) string {
	t.Helper()
	rev := ""
	eventually(ctx, t, "HelmChart demo serving "+version, func() (bool, string) {
		var hc sourcev1.HelmChart
		if err := s.f.Hub.Get(ctx, keyOf(s.ns, "demo"), &hc); err != nil {
			return false, err.Error()
		}
		if a := hc.Status.Artifact; a != nil && a.Revision == version && a.Digest != "" {
			rev = version + "@" + a.Digest
			return true, ""
		}
		return false, fmt.Sprintf("artifact %+v, conditions %+v", hc.Status.Artifact, hc.Status.Conditions)
	})
	return rev
}

// A chart from a HelmRepository (of type oci, on the fleet's registry) through a HelmChart: the
// first version completes, the next goes through two waves with every gate passing, and each
// member's HelmRelease points at the HelmChart tidegate pinned to that version (chartRef kind
// HelmChart), whose artifact is the tracked one's, and runs the version's image. helm-controller
// gives a HelmChart's chart its own version, and so does deploySafe's render.
func TestE2EChartFromAHelmRepository(t *testing.T) {
	parallel(t)
	s := newChartSetup(t, 2)
	startTidegate(t, s.fleetSetup, controllers.Options{})
	ctx, cancel := testContext(t, 10*time.Minute)
	defer cancel()
	s.helmChartSource(ctx, t)

	s.push(t, "0.1.0", "1.0.0", false)
	v1 := s.helmChartRevision(ctx, t, "0.1.0")
	one := int32(1)
	soak := &metav1.Duration{Duration: testSoak}
	cr := s.chartRollout(
		v1alpha1.Wave{Name: "canary", Count: &one, Soak: soak},
		v1alpha1.Wave{Name: "rest", Selector: &metav1.LabelSelector{}, Soak: soak})
	cr.Spec.SourceRef = v1alpha1.SourceReference{Kind: sourcev1.HelmChartKind, Name: "demo"}
	s.createRollout(ctx, t, cr, v1, nil)

	s.push(t, "0.2.0", "2.0.0", false)
	v2 := s.helmChartRevision(ctx, t, "0.2.0")
	done := s.waitPhase(ctx, t, "web", v1alpha1.PhaseCompleted, v2)
	if n := len(done.Status.Waves); n != 2 {
		t.Fatalf("%d waves, want canary and rest: %s", n, describe(done))
	}
	for _, w := range done.Status.Waves {
		if w.Phase != v1alpha1.WaveSucceeded || len(w.Clusters) != 1 {
			t.Errorf("wave %s: %s over %v, want Succeeded over one cluster", w.Name, w.Phase, w.Clusters)
		}
	}
	receipts := s.receiptsOf(ctx, t, "web", v2)
	for _, wave := range []string{"canary", "rest"} {
		// The canary's receipts are of every gate; a later wave's, of the gates decided again for it.
		for _, gate := range v1alpha1.Gates {
			rc := latestReceipt(receipts, gate, wave)
			if (rc == nil && wave == "canary") || (rc != nil && rc.Spec.Result != v1alpha1.ResultPass) {
				t.Errorf("wave %s's %s: %+v, want a Pass receipt", wave, gate, rc)
			}
		}
		rc := latestReceipt(receipts, v1alpha1.GateDeploySafe, wave)
		if rc == nil {
			t.Errorf("no deploySafe receipt of %s for wave %s", v2, wave)
			continue
		}
		ev := deploySafeEvidence(t, rc)
		if !ev.Render.OK || ev.Render.Chart == nil || ev.Render.Chart.Name != "demo" || ev.Render.Chart.Version != "0.2.0" {
			t.Errorf("deploySafe of wave %s: render %+v, want chart demo 0.2.0", wave, ev.Render)
		}
		if !ev.Source.Verified || ev.Source.Verification != "cosign" {
			t.Errorf("deploySafe of wave %s: source %+v, want verified by cosign", wave, ev.Source)
		}
	}

	pinName := done.Status.LastKnownGood.Source
	var pin sourcev1.HelmChart
	if err := s.f.Hub.Get(ctx, keyOf(s.ns, pinName), &pin); err != nil {
		t.Fatalf("the pinned HelmChart %s: %v", pinName, err)
	}
	if pin.Spec.Version != "0.2.0" || pin.Spec.SourceRef.Name != "charts" || pin.Status.Artifact == nil || "0.2.0@"+pin.Status.Artifact.Digest != v2 {
		t.Errorf("the pinned HelmChart %s: version %s of %s serving %+v, want 0.2.0 of charts serving %s", pinName, pin.Spec.Version, pin.Spec.SourceRef.Name, pin.Status.Artifact, v2)
	}
	for _, m := range s.members {
		hr := s.helmRelease(ctx, t, "web", m.Name)
		if hr == nil || hr.Spec.ChartRef == nil || hr.Spec.ChartRef.Kind != sourcev1.HelmChartKind || hr.Spec.ChartRef.Name != pinName {
			t.Errorf("%s's HelmRelease: %+v, want its chartRef to the pinned HelmChart %s", m.Name, hr, pinName)
			continue
		}
		if !conditions.IsReady(hr) || len(hr.Status.History) == 0 || hr.Status.History.Latest().ChartVersion != "0.2.0" {
			t.Errorf("%s's HelmRelease is not Ready at 0.2.0: %+v", m.Name, hr.Status)
		}
		if image, _, _ := s.release(ctx, m.Name); image != "registry.example/demo:2.0.0" {
			t.Errorf("%s runs %s, want registry.example/demo:2.0.0", m.Name, image)
		}
	}
}
