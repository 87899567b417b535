package controllers

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	"github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/engine"
	"github.com/tidegate/tidegate/internal/scheme"
	"github.com/tidegate/tidegate/internal/testbin"
)

// A chart rollout, against a real API server with helm-controller's CRD (no helm-controller runs):
// its members are HelmReleases, one per cluster of the wave, each named as its Kustomization would
// be, pointing at the candidate's pinned OCIRepository (chartRef), which copies the tracked one's
// layerSelector so that it serves the chart's archive; installed through the cluster's kubeconfig
// as the rollout's release in its namespace, with the chart's values and the cluster's over them. A pass over them as written writes nothing. Deleting the rollout with
// deletionPolicy Orphan suspends them (helm-controller then uninstalls nothing); with Delete, they
// are deleted. On a hub that does not serve HelmReleases, and for a chart from a GitRepository, the
// rollout says what to do, and writes nothing.
func TestChartRolloutWritesHelmReleases(t *testing.T) {
	hub := startTestHub(t)
	ctx := context.Background()
	mgr, err := ctrl.NewManager(hub.cfg, ctrl.Options{Scheme: scheme.New(), Metrics: ManagerOptions(ManagerConfig{}).Metrics})
	if err != nil {
		t.Fatal(err)
	}
	if served, err := helmReleasesServed(mgr.GetRESTMapper()); err != nil || served {
		t.Fatalf("a hub without helm-controller's CRD serves HelmReleases: %v, %v", served, err)
	}
	_, crds, err := testbin.HelmController()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := envtest.InstallCRDs(hub.cfg, envtest.CRDInstallOptions{Paths: []string{crds}, ErrorIfPathMissing: true}); err != nil {
		t.Fatal(err)
	}
	if mgr, err = ctrl.NewManager(hub.cfg, ctrl.Options{Scheme: scheme.New(), Metrics: ManagerOptions(ManagerConfig{}).Metrics}); err != nil {
		t.Fatal(err)
	}
	if served, err := helmReleasesServed(mgr.GetRESTMapper()); err != nil || !served {
		t.Fatalf("the hub with helm-controller's CRD does not serve HelmReleases: %v, %v", served, err)
	}

	counter := &requestCounter{}
	counted, err := client.New(counter.wrap(hub.cfg), client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	r := &FleetRolloutReconciler{Client: counted, APIReader: counted, HelmReleases: true}
	const rev = chartRevision
	fr := chartRollout(ctx, t, hub, "charts", v1alpha1.DeletionPolicyOrphan, sourcev1.OCIRepositoryKind)
	run := func(fr *v1alpha1.FleetRollout) outcome {
		t.Helper()
		p := &pass{World: &engine.World{Rollout: fr, Now: time.Now()}}
		for _, sub := range []func(context.Context, *pass) outcome{r.resolveTarget, r.plan, r.act} {
			if o := sub(ctx, p); o.kind != proceed {
				return o
			}
		}
		return proceeding()
	}
	if o := run(fr); o.kind != proceed {
		t.Fatalf("the pass ended: %+v", o)
	}
	if len(fr.Status.WriteFailures) != 0 {
		t.Fatalf("write failures: %+v", fr.Status.WriteFailures)
	}

	var pin sourcev1.OCIRepository
	if err := hub.admin.Get(ctx, client.ObjectKey{Namespace: fr.Namespace, Name: fr.Status.Candidate.Source}, &pin); err != nil {
		t.Fatal(err)
	}
	if ls := pin.Spec.LayerSelector; ls == nil || ls.MediaType != helmChartMediaType || ls.Operation != sourcev1.OCILayerCopy || pin.Spec.Reference.Digest != rev[6:] {
		t.Errorf("the pinned source does not serve the chart's archive at the digest: %+v", pin.Spec)
	}
	for _, c := range []string{"a", "b"} {
		var hr helmv2.HelmRelease
		if err := hub.admin.Get(ctx, client.ObjectKey{Namespace: fr.Namespace, Name: v1alpha1.KustomizationName(fr.Name, c)}, &hr); err != nil {
			t.Fatalf("cluster %s: %v", c, err)
		}
		s := hr.Spec
		if s.ChartRef == nil || s.ChartRef.Kind != sourcev1.OCIRepositoryKind || s.ChartRef.Name != pin.Name {
			t.Errorf("cluster %s: chartRef %+v, want the pinned source %s", c, s.ChartRef, pin.Name)
		}
		if s.KubeConfig == nil || s.KubeConfig.SecretRef.Name != c+"-kubeconfig" {
			t.Errorf("cluster %s: kubeConfig %+v", c, s.KubeConfig)
		}
		if s.ReleaseName != "web" || s.TargetNamespace != "apps" || s.StorageNamespace != "apps" || s.Install == nil || !s.Install.CreateNamespace {
			t.Errorf("cluster %s: release %s in %s (stored in %s), install %+v", c, s.ReleaseName, s.TargetNamespace, s.StorageNamespace, s.Install)
		}
		var values map[string]any
		if err := json.Unmarshal(s.Values.Raw, &values); err != nil {
			t.Fatal(err)
		}
		ingress, _ := values["ingress"].(map[string]any)
		if values["host"] != c+".example" || ingress["class"] != "nginx" || values["replicas"] != float64(2) {
			t.Errorf("cluster %s: values %v, want the chart's with the cluster's host", c, values)
		}
		if !metav1.IsControlledBy(&hr, fr) || hr.Annotations[engine.SpecHashAnnotation] == "" || hr.Annotations[engine.BuildHashAnnotation] == "" ||
			hr.Annotations[v1alpha1.RevisionAnnotation] != rev || hr.Annotations[engine.ClusterValuesAnnotation] != `{"host":"`+c+`.example"}` {
			t.Errorf("cluster %s: owners %+v, annotations %v", c, hr.OwnerReferences, hr.Annotations)
		}
	}

	before := counter.snapshot()
	if o := run(fr); o.kind != proceed {
		t.Fatalf("the idle pass ended: %+v", o)
	}
	for k := range counter.since(before) {
		if !strings.HasPrefix(k, "GET ") {
			t.Errorf("a pass over the HelmReleases as written wrote: %s", k)
		}
	}

	// Deleted with deletionPolicy Orphan: the HelmReleases are suspended, so that helm-controller
	// leaves the release installed when they go.
	if _, err := r.finalize(ctx, fr); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"a", "b"} {
		var hr helmv2.HelmRelease
		if err := hub.admin.Get(ctx, client.ObjectKey{Namespace: fr.Namespace, Name: v1alpha1.KustomizationName(fr.Name, c)}, &hr); err != nil || !hr.Spec.Suspend {
			t.Errorf("cluster %s after an Orphan deletion: %v, suspended %v", c, err, hr.Spec.Suspend)
		}
	}
	// Deleted with deletionPolicy Delete: the HelmReleases are deleted (helm-controller would
	// uninstall the release), and the finalizer stays until they are gone.
	del := chartRollout(ctx, t, hub, "charts-delete", v1alpha1.DeletionPolicyDelete, sourcev1.OCIRepositoryKind)
	if o := run(del); o.kind != proceed {
		t.Fatalf("the pass ended: %+v", o)
	}
	if res, err := r.finalize(ctx, del); err != nil || res.RequeueAfter == 0 {
		t.Fatalf("finalize with Delete: %+v, %v; want it to wait for the HelmReleases to go", res, err)
	}
	for _, c := range []string{"a", "b"} {
		var hr helmv2.HelmRelease
		if err := hub.admin.Get(ctx, client.ObjectKey{Namespace: del.Namespace, Name: v1alpha1.KustomizationName(del.Name, c)}, &hr); !apierrors.IsNotFound(err) {
			t.Errorf("cluster %s after a Delete deletion: %v, want its HelmRelease gone", c, err)
		}
	}

	// A hub without helm-controller, and a chart from a GitRepository: nothing is written, and
	// Ready says why.
	missing := &FleetRolloutReconciler{Client: hub.admin, APIReader: hub.admin}
	p := &pass{World: &engine.World{Rollout: fr, Now: time.Now()}}
	if o := missing.resolveTarget(ctx, p); o.kind != stalling || o.reason != HelmControllerMissingReason || !strings.Contains(o.message, "install helm-controller") {
		t.Errorf("a chart rollout on a hub without HelmReleases: %+v", o)
	}
	git := fr.DeepCopy()
	git.Spec.SourceRef.Kind = sourcev1.GitRepositoryKind
	p = &pass{World: &engine.World{Rollout: git, Now: time.Now()}}
	if o := r.resolveTarget(ctx, p); o.kind != stalling || o.reason != v1alpha1.InvalidSpecReason || !strings.Contains(o.message, "OCIRepository") {
		t.Errorf("a chart from a GitRepository: %+v", o)
	}

	// A chart of a HelmChart (of a HelmRepository): the candidate's pinned source is a copy of the
	// HelmChart asking for exactly the revision's chart version, and each HelmRelease's chartRef
	// names it. A HelmChart of a GitRepository follows the branch: the rollout is refused, naming
	// the fix, before anything is pinned or written.
	hc := chartRollout(ctx, t, hub, "charts-helm", v1alpha1.DeletionPolicyOrphan, sourcev1.HelmChartKind)
	if o := run(hc); o.kind != proceed {
		t.Fatalf("the pass of a HelmChart's chart ended: %+v", o)
	}
	var pinned sourcev1.HelmChart
	if err := hub.admin.Get(ctx, client.ObjectKey{Namespace: hc.Namespace, Name: hc.Status.Candidate.Source}, &pinned); err != nil {
		t.Fatal(err)
	}
	if s := pinned.Spec; s.Chart != "web" || s.Version != "0.2.0" || s.SourceRef.Kind != sourcev1.HelmRepositoryKind || s.SourceRef.Name != "charts" ||
		s.Verify == nil || s.Verify.Provider != "cosign" || s.Interval.Duration != pinnedSourceInterval {
		t.Errorf("the pinned HelmChart: %+v, want chart web at version 0.2.0 of HelmRepository charts, verified with cosign", s)
	}
	for _, c := range []string{"a", "b"} {
		var hr helmv2.HelmRelease
		if err := hub.admin.Get(ctx, client.ObjectKey{Namespace: hc.Namespace, Name: v1alpha1.KustomizationName(hc.Name, c)}, &hr); err != nil ||
			hr.Spec.ChartRef == nil || hr.Spec.ChartRef.Kind != sourcev1.HelmChartKind || hr.Spec.ChartRef.Name != pinned.Name {
			t.Errorf("cluster %s: %v, chartRef %+v; want the pinned HelmChart %s", c, err, hr.Spec.ChartRef, pinned.Name)
		}
	}
	fromGit := &sourcev1.HelmChart{ObjectMeta: metav1.ObjectMeta{Name: "git-chart", Namespace: hc.Namespace}, Spec: sourcev1.HelmChartSpec{
		Chart: "./charts/web", SourceRef: sourcev1.LocalHelmChartSourceReference{Kind: sourcev1.GitRepositoryKind, Name: "apps"},
		Interval: metav1.Duration{Duration: time.Minute}}}
	if err := hub.admin.Create(ctx, fromGit); err != nil {
		t.Fatal(err)
	}
	git = hc.DeepCopy()
	git.Spec.SourceRef.Name = fromGit.Name
	p = &pass{World: &engine.World{Rollout: git, Now: time.Now()}}
	if o := r.resolveTarget(ctx, p); o.kind != stalling || o.reason != v1alpha1.InvalidSpecReason ||
		!strings.Contains(o.message, "HelmChart git-chart takes its chart from GitRepository apps") || !strings.Contains(o.message, "HelmRepository") {
		t.Errorf("a chart of a HelmChart of a GitRepository: %+v", o)
	}
}

// chartRevision is the revision of the chart the rollouts of these tests roll out.
const chartRevision = "0.2.0@sha256:1a2b3c4d5e6f00112233445566778899aabbccddeeff00112233445566778899"

// helmChartMediaType is the media type of a Helm chart's layer in an OCI artifact.
const helmChartMediaType = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"

// trackedChart is the source "web-chart" of a chart, of kind (OCIRepository, or HelmChart of the
// HelmRepository "charts"), in namespace ns.
func trackedChart(kind, ns string) client.Object {
	objMeta := metav1.ObjectMeta{Name: "web-chart", Namespace: ns}
	if kind == sourcev1.HelmChartKind {
		return &sourcev1.HelmChart{ObjectMeta: objMeta, Spec: sourcev1.HelmChartSpec{Chart: "web", Version: ">=0.1.0",
			SourceRef: sourcev1.LocalHelmChartSourceReference{Kind: sourcev1.HelmRepositoryKind, Name: "charts"},
			Interval:  metav1.Duration{Duration: time.Minute}, Verify: &sourcev1.HelmChartVerification{Provider: "cosign"}}}
	}
	return &sourcev1.OCIRepository{ObjectMeta: objMeta,
		Spec: sourcev1.OCIRepositorySpec{URL: "oci://registry.example/charts/web", Interval: metav1.Duration{Duration: time.Minute},
			Reference:     &sourcev1.OCIRepositoryRef{Tag: "0.2.0"},
			LayerSelector: &sourcev1.OCILayerSelector{MediaType: helmChartMediaType, Operation: sourcev1.OCILayerCopy}}}
}

// chartRollout makes namespace ns with a tracked source of a chart of kind (trackedChart),
// FleetClusters a and b (each with a kubeconfig Secret's name and a value host) and a chart
// rollout with deletionPolicy policy whose first wave, of both, is switching to a candidate.
func chartRollout(ctx context.Context, t *testing.T, hub *testHub, ns, policy, kind string) *v1alpha1.FleetRollout {
	t.Helper()
	const rev = chartRevision
	objs := []client.Object{&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, trackedChart(kind, ns)}
	for _, c := range []string{"a", "b"} {
		objs = append(objs, &v1alpha1.FleetCluster{ObjectMeta: metav1.ObjectMeta{Name: c, Namespace: ns}, Spec: v1alpha1.FleetClusterSpec{
			KubeConfig: &meta.KubeConfigReference{SecretRef: &meta.SecretKeyReference{Name: c + "-kubeconfig", Key: "value"}},
			Values:     map[string]string{"host": c + ".example"},
		}})
	}
	fr := &v1alpha1.FleetRollout{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns, Finalizers: []string{v1alpha1.Finalizer}},
		Spec: v1alpha1.FleetRolloutSpec{
			SourceRef:      v1alpha1.SourceReference{Kind: kind, Name: "web-chart"},
			Revision:       rev,
			Chart:          &v1alpha1.ChartSpec{ReleaseName: "web", Values: &apiextensionsv1.JSON{Raw: []byte(`{"ingress":{"class":"nginx"},"replicas":2}`)}},
			Template:       v1alpha1.KustomizationTemplate{TargetNamespace: "apps"},
			DeletionPolicy: policy,
		},
	}
	for _, o := range append(objs, fr) {
		if err := hub.admin.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	started := metav1.NewTime(time.Now().Add(-time.Minute))
	build := fr.SpecBuild()
	fr.Status = v1alpha1.FleetRolloutStatus{
		Phase:     v1alpha1.PhaseProgressing,
		Candidate: &v1alpha1.RevisionStatus{Revision: rev, Source: v1alpha1.PinnedSourceName(fr.Name, rev), Build: build, BuildHash: v1alpha1.HashBuild(build)},
		Waves:     []v1alpha1.WaveStatus{{Name: "all", Phase: v1alpha1.WaveProgressing, Clusters: []string{"a", "b"}, StartedAt: &started}},
	}
	if err := hub.admin.Status().Update(ctx, fr); err != nil {
		t.Fatal(err)
	}
	return fr
}
