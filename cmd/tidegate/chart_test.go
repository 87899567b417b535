package main

import (
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/engine"
	"github.com/tidegate/tidegate/internal/ops"
	"github.com/tidegate/tidegate/internal/scheme"
	"github.com/tidegate/tidegate/internal/testbin"
	"github.com/tidegate/tidegate/test/testenv"
)

// chartGoldenDir holds the golden files of the reads of a rollout of a Helm chart.
var chartGoldenDir = filepath.Join(testenv.RepoRoot(), "testdata", "golden", "cli", "chart")

// chartNS holds the chart rollout web on the hub of TestChartRolloutReads.
const chartNS = "charts"

// The revisions of the chart rollout: an OCIRepository's "<tag>@sha256:<manifest digest>", the
// digest helm-controller records of a release's chart (ociDigest), and the digest of the artifact
// source-controller stores.
var (
	chartCand = chartRevision("0.2.0")
	chartGood = chartRevision("0.1.0")
)

func chartRevision(tag string) *v1alpha1.RevisionStatus {
	r := tag + "@" + digest("web chart manifest "+tag)
	return &v1alpha1.RevisionStatus{Revision: r, Digest: digest("web chart archive " + tag), Source: v1alpha1.PinnedSourceName("web", r)}
}

// ociDigest is the digest of r's revision, as a HelmRelease's release records it.
func ociDigest(r *v1alpha1.RevisionStatus) string {
	_, d, _ := strings.Cut(r.Revision, "@")
	return d
}

// TestChartRolloutReads reads a rollout of a Helm chart, whose members are HelmReleases, on a hub
// with helm-controller's CRD: tree shows each HelmRelease under the pinned OCIRepository it points
// at, with the digest of its latest release and its inventory; revision compares that digest with
// the revision the HelmRelease was switched to (a canary that runs it, a member whose upgrade is
// under way); events shows the HelmReleases' events and not those of a Kustomization of the same
// name; check says the CRD is served; the MCP tool answers what revision prints. On the test hub,
// which has no HelmRelease CRD, the same rollout has no members: its reads answer, and list no
// HelmRelease.
func TestChartRolloutReads(t *testing.T) {
	ctx := hub(t)
	kc, c := startChartHub(ctx, t)
	if err := chartFixtures(ctx, c, chartNS, true); err != nil {
		t.Fatal(err)
	}
	cases := []kubeCase{
		{"tree-web", []string{"tree", "web"}, exitOK},
		{"tree-web-json", []string{"tree", "web", "-o", "json"}, exitOK},
		{"revision-a-json", []string{"revision", "a", "-o", "json"}, exitOK},
		{"revision-b", []string{"revision", "b", "--rollout", "web"}, exitNo},
		{"events-web", []string{"events", "web"}, exitOK},
	}
	written := map[string]bool{}
	runChartCases(ctx, t, kc, cases, written)

	r := tidegateAt(ctx, kc, "check", "--pre", "-o", "json")
	var v checkView
	decodeOut(t, r, &v)
	checks := map[string]checkResult{}
	for _, ch := range v.Checks {
		checks[ch.Name] = ch
	}
	expectCheck(t, checks, "crd helmreleases.helm.toolkit.fluxcd.io", checkOK, "serves v2")

	var cli, viaMCP ops.ClusterRevisions
	decodeOut(t, tidegateAt(ctx, kc, "revision", "b", "-o", "json"), &cli)
	s := mcpStdio(ctx, t, "--kubeconfig", kc, "-n", chartNS)
	if call(ctx, t, s, "get_fleet_cluster_revision", map[string]any{"cluster": "b"}, &viaMCP) || !reflect.DeepEqual(normalized(t, viaMCP), normalized(t, cli)) {
		t.Errorf("get_fleet_cluster_revision b: %+v\nwant %+v", viaMCP, cli)
	}

	// The test hub does not serve HelmReleases.
	const noCRD = "charts-without-helm"
	if err := namespace(ctx, noCRD); err != nil {
		t.Fatal(err)
	}
	if err := chartFixtures(ctx, k8s, noCRD, false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteChartFixtures(k8s, noCRD) })
	runChartCases(ctx, t, kubeconfig, []kubeCase{
		{"no-crd-tree-web", []string{"-n", noCRD, "tree", "web"}, exitOK},
		{"no-crd-revision-a", []string{"-n", noCRD, "revision", "a"}, exitNo},
		{"no-crd-events-web", []string{"-n", noCRD, "events", "web"}, exitOK},
	}, written)

	checkNoStaleGolden(t, chartGoldenDir, written)
}

// runChartCases runs each case with kubeconfig kc, and compares what it printed, and its exit
// code, with testdata/golden/cli/chart; written gets the name of each golden file.
func runChartCases(ctx context.Context, t *testing.T, kc string, cases []kubeCase, written map[string]bool) {
	t.Helper()
	for _, tt := range cases {
		written[tt.name+".golden"] = true
		r := tidegateAt(ctx, kc, tt.args...)
		if r.code != tt.exit {
			t.Errorf("%s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", tt.name, r.code, tt.exit, r.stdout, r.stderr)
		}
		checkGoldenIn(t, chartGoldenDir, tt.name, tt.args, r)
	}
}

// startChartHub starts an API server of its own with tidegate's, Flux's and helm-controller's
// CRDs (the test hub has no HelmRelease CRD, as a hub without helm-controller), and returns a
// kubeconfig file of an administrator in chartNS, and a client.
func startChartHub(ctx context.Context, t *testing.T) (string, client.Client) {
	t.Helper()
	_, crds, err := testbin.HelmController()
	if err != nil {
		t.Fatal(err)
	}
	e, err := testbin.NewEnvironment("", testbin.TidegateCRDs|testbin.FluxCRDs)
	if err != nil {
		t.Fatal(err)
	}
	e.CRDDirectoryPaths = append(e.CRDDirectoryPaths, crds)
	cfg, err := e.Start()
	t.Cleanup(func() { _ = e.Stop() })
	if err != nil {
		t.Fatalf("starting envtest: %v", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	admin, err := e.AddUser(envtest.User{Name: "chart-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := admin.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	kc, err := clientcmd.Load(raw)
	if err != nil {
		t.Fatal(err)
	}
	kc.Contexts[kc.CurrentContext].Namespace = chartNS
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: chartNS}}); err != nil {
		t.Fatal(err)
	}
	return path, c
}

// chartFixtures creates, in ns, the rollout web of a Helm chart at its candidate, its waves canary
// (cluster a) and rest (cluster b), its pinned OCIRepositories, and when members, the HelmReleases
// tidegate writes (engine.DesiredHelmRelease), as helm-controller reports them: a upgraded to the
// candidate, b upgrading from the known-good; and events.
func chartFixtures(ctx context.Context, c client.Client, ns string, members bool) error {
	fr := &v1alpha1.FleetRollout{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: v1alpha1.FleetRolloutSpec{
			SourceRef: v1alpha1.SourceReference{Kind: sourcev1.OCIRepositoryKind, Name: "web-chart"},
			Chart:     &v1alpha1.ChartSpec{Values: &apiextensionsv1.JSON{Raw: []byte(`{"replicas":2}`)}},
			Template:  v1alpha1.KustomizationTemplate{TargetNamespace: "apps"},
		},
	}
	if err := c.Create(ctx, fr); err != nil {
		return err
	}
	fr.Status = v1alpha1.FleetRolloutStatus{
		Phase: v1alpha1.PhaseProgressing, Candidate: chartCand, LastKnownGood: chartGood,
		Waves: []v1alpha1.WaveStatus{
			{Name: "canary", Phase: v1alpha1.WaveSucceeded, Clusters: []string{"a"}, StartedAt: atp(1, 0)},
			{Name: "rest", Phase: v1alpha1.WaveProgressing, Clusters: []string{"b"}, StartedAt: atp(6, 0)},
		},
	}
	if err := c.Status().Update(ctx, fr); err != nil {
		return err
	}
	objs := []client.Object{pinnedChart(ns, chartCand, at(0, 30)), pinnedChart(ns, chartGood, at(0, 10))}
	if members {
		hrs, err := chartMembers(fr)
		if err != nil {
			return err
		}
		objs = append(objs, hrs...)
	}
	for _, o := range objs {
		if err := createWithStatusIn(ctx, c, o); err != nil {
			return err
		}
	}
	ref := func(kind, name string) corev1.ObjectReference { return corev1.ObjectReference{Kind: kind, Name: name} }
	for _, e := range []*corev1.Event{
		coreEvent(ns, "web.1", ref(v1alpha1.FleetRolloutKind, "web"), corev1.EventTypeNormal, "Switched", "HelmRelease "+ns+"/web-a now points at "+chartCand.Source, "tidegate-controller", at(1, 0)),
		coreEvent(ns, "web-a.1", ref(helmv2.HelmReleaseKind, "web-a"), corev1.EventTypeNormal, helmv2.UpgradeSucceededReason, "Helm upgrade succeeded for release apps/web.v2 with chart web@0.2.0", "helm-controller", at(2, 0)),
		coreEvent(ns, "web-b.1", ref(helmv2.HelmReleaseKind, "web-b"), corev1.EventTypeNormal, "Progressing", "Running 'upgrade' action with timeout of 5m0s", "helm-controller", at(6, 5)),
		coreEvent(ns, "web-a.2", ref(kustomizev1.KustomizationKind, "web-a"), corev1.EventTypeNormal, "ReconciliationSucceeded", "a Kustomization of someone else's", "kustomize-controller", at(3, 0)),
		coreEvent(ns, "cand.1", ref(sourcev1.OCIRepositoryKind, chartCand.Source), corev1.EventTypeNormal, "NewArtifact", "stored artifact with revision '"+chartCand.Revision+"'", "source-controller", at(0, 30)),
	} {
		if err := c.Create(ctx, e); err != nil {
			return err
		}
	}
	for _, name := range []string{"a", "b"} {
		if err := c.Create(ctx, &v1alpha1.FleetCluster{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}); err != nil {
			return err
		}
	}
	return nil
}

// deleteChartFixtures deletes what chartFixtures created in ns (the golden tests of -A list every
// namespace).
func deleteChartFixtures(c client.Client, ns string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, list := range []client.ObjectList{&v1alpha1.FleetRolloutList{}, &v1alpha1.FleetClusterList{}, &sourcev1.OCIRepositoryList{}, &corev1.EventList{}} {
		if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
			continue
		}
		items, _ := apimeta.ExtractList(list)
		for _, o := range items {
			_ = c.Delete(ctx, o.(client.Object))
		}
	}
}

// pinnedChart is the OCIRepository tidegate pins r's chart with, as source-controller reports it.
func pinnedChart(ns string, r *v1alpha1.RevisionStatus, fetched metav1.Time) *sourcev1.OCIRepository {
	tag, _, _ := strings.Cut(r.Revision, "@")
	return &sourcev1.OCIRepository{
		ObjectMeta: metav1.ObjectMeta{
			Name: r.Source, Namespace: ns,
			Labels:      map[string]string{v1alpha1.RolloutLabel: "web"},
			Annotations: map[string]string{v1alpha1.RevisionAnnotation: r.Revision},
		},
		Spec: sourcev1.OCIRepositorySpec{
			URL: "oci://registry.example.net/charts/web", Interval: metav1.Duration{Duration: 10 * time.Minute},
			Reference:     &sourcev1.OCIRepositoryRef{Digest: ociDigest(r)},
			LayerSelector: &sourcev1.OCILayerSelector{MediaType: "application/vnd.cncf.helm.chart.content.v1.tar+gzip", Operation: sourcev1.OCILayerCopy},
		},
		Status: sourcev1.OCIRepositoryStatus{
			ObservedGeneration: 1,
			Conditions:         []metav1.Condition{cond(meta.ReadyCondition, metav1.ConditionTrue, meta.SucceededReason, "stored artifact for digest '"+r.Revision+"'", fetched)},
			Artifact: &meta.Artifact{
				Path: "ocirepository/" + ns + "/" + r.Source + "/" + tag + ".tar.gz", URL: "http://source-controller.flux-system.svc/ocirepository/" + ns + "/" + r.Source + "/" + tag + ".tar.gz",
				Revision: r.Revision, Digest: r.Digest, LastUpdateTime: fetched,
			},
		},
	}
}

// chartMembers are fr's HelmReleases, both switched to the candidate: a's upgrade to it succeeded;
// b's is under way, and b still runs the known-good.
func chartMembers(fr *v1alpha1.FleetRollout) ([]client.Object, error) {
	var out []client.Object
	for _, m := range []struct {
		cluster, wave string
		ready         metav1.Condition
		history       helmv2.Snapshots
	}{
		{"a", "canary", cond(meta.ReadyCondition, metav1.ConditionTrue, helmv2.UpgradeSucceededReason, "Helm upgrade succeeded for release apps/web.v2 with chart web@0.2.0", at(2, 0)),
			helmv2.Snapshots{release(2, "0.2.0", "deployed", chartCand, at(2, 0)), release(1, "0.1.0", "superseded", chartGood, at(0, 20))}},
		{"b", "rest", cond(meta.ReadyCondition, metav1.ConditionUnknown, meta.ProgressingReason, "Running 'upgrade' action with timeout of 5m0s", at(6, 5)),
			helmv2.Snapshots{release(1, "0.1.0", "deployed", chartGood, at(0, 20))}},
	} {
		fc := &v1alpha1.FleetCluster{ObjectMeta: metav1.ObjectMeta{Name: m.cluster, Namespace: fr.Namespace}}
		hr, err := engine.DesiredHelmRelease(fr, fc, engine.Target{Source: chartCand.Source, Revision: chartCand.Revision, Wave: m.wave})
		if err != nil {
			return nil, fmt.Errorf("the HelmRelease of cluster %s: %w", m.cluster, err)
		}
		hr.Status = helmv2.HelmReleaseStatus{
			ObservedGeneration:          1,
			Conditions:                  []metav1.Condition{m.ready},
			History:                     m.history,
			LastAttemptedRevisionDigest: ociDigest(chartCand),
			Inventory: &helmv2.ResourceInventory{Entries: []helmv2.ResourceRef{
				{ID: "apps_web__Service", Version: "v1"}, {ID: "apps_web_apps_Deployment", Version: "v1"},
			}},
		}
		out = append(out, hr)
	}
	return out, nil
}

// release is the snapshot helm-controller records of release version of r's chart.
func release(version int, chartVersion, status string, r *v1alpha1.RevisionStatus, when metav1.Time) *helmv2.Snapshot {
	return &helmv2.Snapshot{
		Name: "web", Namespace: "apps", Version: version, Status: status, ChartName: "web", ChartVersion: chartVersion,
		Digest: digest(fmt.Sprintf("release %d", version)), ConfigDigest: digest("values"), FirstDeployed: at(0, 20), LastDeployed: when,
		OCIDigest: ociDigest(r),
	}
}
