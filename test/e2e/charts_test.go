package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/controllers"
	"github.com/tidegate/tidegate/internal/localfleet"
	"github.com/tidegate/tidegate/internal/simulator"
)

// demoChartDir is the chart the chart scenarios roll out: a Deployment named after the release,
// and its Service.
const demoChartDir = "../../testdata/charts/demo"

// chartInstallSchema is the install schema the scenarios' chart ships (tidegate/install.cue in
// the chart): a cluster may set its greeting, never the number of replicas or the image.
const chartInstallSchema = `package install

values: {
	greeting?: string
}

protected: ["replicaCount", "image.tag"]
`

// widgetCRD is a CRD a chart version carries in its crds/ directory, which Helm installs and
// never upgrades or deletes.
const widgetCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.charts.example
spec:
  group: charts.example
  names: {kind: Widget, listKind: WidgetList, plural: widgets, singular: widget}
  scope: Namespaced
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
`

// helmOnShared starts helm-controller on the shared fleet once, for the chart scenarios alone.
var helmOnShared struct {
	once sync.Once
	err  error
}

// chartSetup is a chart scenario's part of the shared fleet: helm-controller running, and an
// OCIRepository "demo-chart", verified with cosign, that tracks the newest version of the demo
// chart in the fleet's registry under the scenario's namespace.
type chartSetup struct {
	*fleetSetup
	key *localfleet.CosignKey
}

func newChartSetup(t *testing.T, members int) *chartSetup {
	t.Helper()
	s, _ := newFleetSetup(t, members, demoPackage("v1"))
	helmOnShared.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		helmOnShared.err = s.f.StartHelmController(ctx)
	})
	if helmOnShared.err != nil {
		t.Fatalf("starting helm-controller on the shared fleet: %v", helmOnShared.err)
	}
	key, err := localfleet.NewCosignKey()
	if err != nil {
		t.Fatal(err)
	}
	cs := &chartSetup{fleetSetup: s, key: key}
	pub := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "charts-cosign", Namespace: s.ns}, Data: map[string][]byte{"cosign.pub": key.PublicPEM}}
	src := &sourcev1.OCIRepository{
		ObjectMeta: metav1.ObjectMeta{Name: "demo-chart", Namespace: s.ns},
		Spec: sourcev1.OCIRepositorySpec{
			URL:       s.f.Registry.URL(s.ns + "/charts/demo"),
			Reference: &sourcev1.OCIRepositoryRef{SemVer: ">=0.1.0"},
			// The chart's layer as it is: the .tgz helm-controller loads.
			LayerSelector: &sourcev1.OCILayerSelector{MediaType: string(localfleet.HelmChartMediaType), Operation: sourcev1.OCILayerCopy},
			Insecure:      true,
			Interval:      metav1.Duration{Duration: 2 * time.Second},
			Verify:        &sourcev1.OCIRepositoryVerification{Provider: "cosign", SecretRef: &meta.LocalObjectReference{Name: pub.Name}},
		},
	}
	for _, o := range []client.Object{pub, src} {
		if err := s.f.Hub.Create(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
	return cs
}

// push packages the demo chart at version (its app at appVersion: the image tag), with its install
// schema and, when crds is set, the widget CRD in crds/, pushes it signed and returns its artifact.
func (s *chartSetup) push(t *testing.T, version, appVersion string, crds bool) localfleet.Artifact {
	t.Helper()
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(demoChartDir)); err != nil {
		t.Fatal(err)
	}
	extra := map[string]string{"tidegate/install.cue": chartInstallSchema}
	if crds {
		extra["crds/widgets.yaml"] = widgetCRD
	}
	for name, content := range extra {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c, err := localfleet.PackageChart(dir, version, appVersion)
	if err != nil {
		t.Fatal(err)
	}
	a, err := localfleet.PushChart(s.f.Registry.Host+"/"+s.ns+"/charts", c)
	if err != nil {
		t.Fatal(err)
	}
	if err := localfleet.Sign(a, s.key); err != nil {
		t.Fatal(err)
	}
	return a
}

// chartRollout is the rollout "web" of the demo chart, its release "web" in the scenario's
// namespace of each member, with waves.
func (s *chartSetup) chartRollout(waves ...v1alpha1.Wave) *v1alpha1.FleetRollout {
	return &v1alpha1.FleetRollout{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: s.ns},
		Spec: v1alpha1.FleetRolloutSpec{
			SourceRef: v1alpha1.SourceReference{Kind: sourcev1.OCIRepositoryKind, Name: "demo-chart"},
			Chart: &v1alpha1.ChartSpec{ReleaseName: "web",
				Values: &apiextensionsv1.JSON{Raw: []byte(`{"greeting":"hello-fleet","replicaCount":1}`)}},
			Template: v1alpha1.KustomizationTemplate{
				Interval:        &metav1.Duration{Duration: time.Minute},
				Timeout:         &metav1.Duration{Duration: testHealthTimeout},
				TargetNamespace: s.ns,
			},
			Waves:    waves,
			Interval: &metav1.Duration{Duration: 5 * time.Second},
		},
	}
}

// helmRelease is the rollout's HelmRelease for cluster, nil when there is none.
func (s *chartSetup) helmRelease(ctx context.Context, t *testing.T, rollout, cluster string) *helmv2.HelmRelease {
	t.Helper()
	var hr helmv2.HelmRelease
	if err := s.f.Hub.Get(ctx, keyOf(s.ns, v1alpha1.KustomizationName(rollout, cluster)), &hr); err != nil {
		return nil
	}
	return &hr
}

// release is what the release's Deployment on member runs: its image, its greeting, its replicas
// ("" when there is none).
func (s *chartSetup) release(ctx context.Context, member string) (image, greeting string, replicas int32) {
	var d appsv1.Deployment
	if err := s.f.Member(member).Client.Get(ctx, keyOf(s.ns, "web"), &d); err != nil || len(d.Spec.Template.Spec.Containers) == 0 {
		return "", "", 0
	}
	c := d.Spec.Template.Spec.Containers[0]
	for _, e := range c.Env {
		if e.Name == "GREETING" {
			greeting = e.Value
		}
	}
	if d.Spec.Replicas != nil {
		replicas = *d.Spec.Replicas
	}
	return c.Image, greeting, replicas
}

// A chart from the fleet's OCI registry, cosign-signed, rolls out as a HelmRelease per member,
// which helm-controller installs: the first version through every wave, then the next one through
// three waves, each gate passing with a receipt that names the verified digest and the chart's
// version. A cluster's own values reach its release at their path; a value the chart's install
// schema protects is refused, naming the cluster and the key, and reaches nothing.
func TestE2EChartRollsOutThroughThreeWaves(t *testing.T) {
	parallel(t)
	s := newChartSetup(t, 3)
	startTidegate(t, s.fleetSetup, controllers.Options{})
	ctx, cancel := testContext(t, 10*time.Minute)
	defer cancel()
	greeted := s.members[1].Name
	s.setClusterValues(ctx, t, greeted, map[string]string{"greeting": "bonjour"})

	v1 := s.push(t, "0.1.0", "1.0.0", false)
	one := int32(1)
	soak := &metav1.Duration{Duration: testSoak}
	cr := s.chartRollout(
		v1alpha1.Wave{Name: "canary", Count: &one, Soak: soak},
		v1alpha1.Wave{Name: "ring", Count: &one, Soak: soak},
		v1alpha1.Wave{Name: "rest", Selector: &metav1.LabelSelector{}, Soak: soak})
	s.createRollout(ctx, t, cr, v1.Revision(), nil)
	for _, m := range s.members {
		image, greeting, _ := s.release(ctx, m.Name)
		want := "hello-fleet"
		if m.Name == greeted {
			want = "bonjour"
		}
		if image != "registry.example/demo:1.0.0" || greeting != want {
			t.Errorf("%s runs %s greeting %q, want registry.example/demo:1.0.0 greeting %q", m.Name, image, greeting, want)
		}
	}

	v2 := s.push(t, "0.2.0", "2.0.0", false)
	done := s.waitPhase(ctx, t, "web", v1alpha1.PhaseCompleted, v2.Revision())
	if n := len(done.Status.Waves); n != 3 {
		t.Fatalf("%d waves, want canary, ring and rest: %s", n, describe(done))
	}
	for _, w := range done.Status.Waves {
		if w.Phase != v1alpha1.WaveSucceeded || len(w.Clusters) != 1 {
			t.Errorf("wave %s: %s over %v, want Succeeded over one cluster", w.Name, w.Phase, w.Clusters)
		}
	}
	receipts := s.receiptsOf(ctx, t, "web", v2.Revision())
	for _, gate := range v1alpha1.Gates {
		if rc := latestReceipt(receipts, gate, "canary"); rc == nil || rc.Spec.Result != v1alpha1.ResultPass {
			t.Errorf("the canary's %s: %+v, want a Pass receipt", gate, rc)
		}
	}
	for _, wave := range []string{"canary", "ring", "rest"} {
		rc := latestReceipt(receipts, v1alpha1.GateDeploySafe, wave)
		if rc == nil {
			t.Fatalf("no deploySafe receipt of %s for wave %s", v2.Revision(), wave)
		}
		ev := deploySafeEvidence(t, rc)
		if !ev.Source.Verified || ev.Source.Verification != "cosign" || ev.Source.Revision != v2.Digest.String() {
			t.Errorf("deploySafe of wave %s: source %+v, want verified by cosign at %s", wave, ev.Source, v2.Digest)
		}
		if !ev.Render.OK || ev.Render.Chart == nil || ev.Render.Chart.Name != "demo" || ev.Render.Chart.Version != "0.2.0+"+v2.Digest.Hex[:12] {
			t.Errorf("deploySafe of wave %s: render %+v, want chart demo 0.2.0+%s", wave, ev.Render, v2.Digest.Hex[:12])
		}
	}
	for _, m := range s.members {
		hr := s.helmRelease(ctx, t, "web", m.Name)
		if hr == nil || hr.Spec.ChartRef == nil || hr.Spec.ChartRef.Name != done.Status.LastKnownGood.Source || hr.Spec.KubeConfig == nil ||
			hr.Spec.ReleaseName != "web" || hr.Spec.TargetNamespace != s.ns {
			t.Errorf("%s's HelmRelease: %+v, want the chart of pinned source %s released as web in %s through its kubeconfig", m.Name, hr, done.Status.LastKnownGood.Source, s.ns)
			continue
		}
		if !conditions.IsReady(hr) || len(hr.Status.History) == 0 || !strings.HasPrefix(hr.Status.History.Latest().ChartVersion, "0.2.0+") {
			t.Errorf("%s's HelmRelease is not Ready at 0.2.0: %+v", m.Name, hr.Status)
		}
		if image, _, _ := s.release(ctx, m.Name); image != "registry.example/demo:2.0.0" {
			t.Errorf("%s runs %s, want registry.example/demo:2.0.0", m.Name, image)
		}
	}

	// A value the chart's install schema protects: the catch-up wave that would bring it to the
	// cluster is refused by deploySafe, naming the cluster and the key, and the release keeps the
	// rollout's replicas.
	refused := s.members[2].Name
	s.setClusterValues(ctx, t, refused, map[string]string{"replicaCount": "5"})
	eventually(ctx, t, "deploySafe refusing "+refused+"'s protected replicaCount", func() (bool, string) {
		rc := latestReceipt(s.receiptsOf(ctx, t, "web", v2.Revision()), v1alpha1.GateDeploySafe, "catch-up-1")
		if rc == nil {
			return false, describe(s.rollout(t, "web"))
		}
		return rc.Spec.Result == v1alpha1.ResultFail && reasonsContain(rc, refused, "replicaCount"), fmt.Sprint(rc.Spec.Reasons)
	})
	if _, _, replicas := s.release(ctx, refused); replicas != 1 {
		t.Errorf("%s's release has %d replicas, want the rollout's 1: a protected value reached it", refused, replicas)
	}
}

// A chart version that adds a CRD in crds/ (which Helm never upgrades or removes) asks for an
// approval in rollbackSafe before any cluster takes it, and goes once approved. A later version
// whose workload never becomes available fails on the canary, and the rollout sends the canary's
// HelmRelease back to the known-good chart, which helm-controller installs again.
func TestE2EChartRollbackToTheKnownGoodChart(t *testing.T) {
	parallel(t)
	s := newChartSetup(t, 2)
	startTidegate(t, s.fleetSetup, controllers.Options{})
	ctx, cancel := testContext(t, 10*time.Minute)
	defer cancel()
	one := int32(1)
	soak := &metav1.Duration{Duration: testSoak}
	cr := s.chartRollout(
		v1alpha1.Wave{Name: "canary", Count: &one, Soak: soak},
		v1alpha1.Wave{Name: "rest", Selector: &metav1.LabelSelector{}, Soak: soak})
	cr.Spec.Rollback.OnFailure = v1alpha1.OnFailureRollback
	v1 := s.push(t, "0.1.0", "1.0.0", false)
	s.createRollout(ctx, t, cr, v1.Revision(), nil)

	v2 := s.push(t, "0.2.0", "2.0.0", true)
	eventually(ctx, t, "rollbackSafe asking for an approval of the CRD in crds/", func() (bool, string) {
		fr := s.rollout(t, "web")
		rc := latestReceipt(s.receiptsOf(ctx, t, "web", v2.Revision()), v1alpha1.GateRollbackSafe, "canary")
		return rc != nil && rc.Spec.Result == v1alpha1.ResultFail && len(fr.Status.Waves) > 0 && fr.Status.Waves[0].StartedAt == nil &&
			reasonsContain(rc, "rollbackSafe.crdChanges", "needs an approval of the candidate", "widgets.charts.example"), describe(fr)
	})
	for _, m := range s.members {
		if hr := s.helmRelease(ctx, t, "web", m.Name); hr == nil || hr.Annotations[v1alpha1.RevisionAnnotation] != v1.Revision() {
			t.Fatalf("%s's HelmRelease moved before the approval: %+v", m.Name, hr)
		}
	}
	s.approve(ctx, t, "web", v1alpha1.Approval{Revision: v2.Revision(), Irreversible: true, By: "platform", Reason: "widgets are additive"})
	s.waitPhase(ctx, t, "web", v1alpha1.PhaseCompleted, v2.Revision())
	var crd apiextensionsv1.CustomResourceDefinition
	if err := s.members[0].Client.Get(ctx, client.ObjectKey{Name: "widgets.charts.example"}, &crd); err != nil {
		t.Errorf("the chart's CRD on %s: %v", s.members[0].Name, err)
	}

	for _, m := range s.members {
		s.faults.SetFault(m.Name, simulator.Fault{Workload: "web", Mode: simulator.NeverAvailable, Image: ":3.0.0"})
	}
	v3 := s.push(t, "0.3.0", "3.0.0", true)
	back := s.waitPhase(ctx, t, "web", v1alpha1.PhaseRolledBack, v3.Revision())
	canary := back.Status.Waves[0].Clusters[0]
	eventually(ctx, t, canary+" running the known-good chart again", func() (bool, string) {
		hr := s.helmRelease(ctx, t, "web", canary)
		image, _, _ := s.release(ctx, canary)
		ok := hr != nil && hr.Spec.ChartRef != nil && hr.Spec.ChartRef.Name == back.Status.LastKnownGood.Source && conditions.IsReady(hr) &&
			strings.HasPrefix(hr.Status.History.Latest().ChartVersion, "0.2.0+") && image == "registry.example/demo:2.0.0"
		return ok, fmt.Sprintf("image %s, HelmRelease %+v", image, hr)
	})
	if rest := back.Status.Waves[1]; rest.StartedAt != nil {
		t.Errorf("wave rest started on a version that failed its canary: %s", describe(back))
	}
}

// setClusterValues sets the FleetCluster's spec.values.
func (s *fleetSetup) setClusterValues(ctx context.Context, t *testing.T, cluster string, values map[string]string) {
	t.Helper()
	var fc v1alpha1.FleetCluster
	if err := s.f.Hub.Get(ctx, keyOf(s.ns, cluster), &fc); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(fc.DeepCopy())
	fc.Spec.Values = values
	if err := s.f.Hub.Patch(ctx, &fc, patch); err != nil {
		t.Fatal(err)
	}
}
