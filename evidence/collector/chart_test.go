package collector

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/engine"
	"github.com/tidegate/tidegate/evidence/boundedrender"
	"github.com/tidegate/tidegate/internal/localfleet"
	"github.com/tidegate/tidegate/internal/worker"
	"github.com/tidegate/tidegate/verdict"
)

// webChart is a chart of a ConfigMap whose region and namespace are values (a values.schema.json
// allows two regions), which ships the install schema of its FleetClusters' values.
var webChart = map[string]string{
	"Chart.yaml":  "apiVersion: v2\nname: web\nversion: 0.1.0\n",
	"values.yaml": "region: eu\nnamespace: \"\"\n",
	"values.schema.json": `{"type": "object", "properties": {
		"region": {"type": "string", "enum": ["eu", "us"]}, "namespace": {"type": "string"}}}`,
	"templates/config.yaml": `apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-config
  {{- with .Values.namespace }}
  namespace: {{ . }}
  {{- end }}
data:
  region: {{ .Values.region | quote }}
`,
	"tidegate/install.cue": "package install\n\nvalues: {\n\tregion?: string\n\tnamespace?: string\n}\nprotected: [\"owner\"]\n",
}

// packageChart packages the chart of files (paths relative to the chart's directory) as helm
// package does, as the fleet's registry serves it.
func packageChart(t testing.TB, files map[string]string) []byte {
	t.Helper()
	c, err := localfleet.PackageChartFiles("the test's chart", maps.Clone(files), "", "")
	if err != nil {
		t.Fatal(err)
	}
	return c.Archive
}

// servedChart serves archive as source-controller serves an OCIRepository's artifact that selects
// a chart's layer (the .tgz itself), and returns the state of a pinned source serving it at
// revision <version>@sha256:<manifest digest>.
func servedChart(t testing.TB, name, version string, archive []byte) engine.SourceState {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(archive) }))
	t.Cleanup(srv.Close)
	sum := sha256.Sum256(archive)
	manifest := sha256.Sum256([]byte(name + version))
	return engine.SourceState{Name: name, Exists: true, Ready: true, Revision: version + "@sha256:" + hex.EncodeToString(manifest[:]),
		Digest: "sha256:" + hex.EncodeToString(sum[:]), URL: srv.URL + "/" + name + ".tgz"}
}

// chartWorld is newWorld's rollout made a rollout of a chart from an OCIRepository, its release
// installed in a namespace no member has yet (helm-controller creates it), with the candidate
// served from archive.
func chartWorld(t testing.TB, n int, archive []byte, now time.Time) *world {
	t.Helper()
	w := newWorld(t, n, time.Second, time.Minute, 2*time.Minute, now)
	fr := w.scope.Rollout
	fr.Spec.SourceRef.Kind, fr.Spec.Path = sourcev1.OCIRepositoryKind, ""
	fr.Spec.Chart = &v1alpha1.ChartSpec{Values: &apiextensionsv1.JSON{Raw: []byte(`{"region": "eu"}`)}}
	fr.Spec.Template.TargetNamespace = w.ns + "-apps"
	src := servedChart(t, "web-0-1-0", "0.1.0", archive)
	fr.Status.Candidate = &v1alpha1.RevisionStatus{Revision: src.Revision, Source: src.Name, Digest: src.Digest}
	w.scope.Candidate = src
	return w
}

// deploySafe of a chart renders it as helm-controller renders the rollout's HelmReleases: the
// release's objects in its namespace (which the preflight takes as one the package creates), the
// chart's name and its version with the artifact's digest in the evidence, and each cluster's
// values set over the rollout's, in the objects its member dry-runs. A cluster whose values the
// chart's values.schema.json refuses fails, named, and the others do not; a value the chart's
// tidegate/install.cue protects is refused, naming the cluster and the key.
func TestDeploySafeRendersAChartWithEachClustersValues(t *testing.T) {
	now := time.Now().UTC().Truncate(time.Second)
	w := chartWorld(t, 5, packageChart(t, webChart), now)
	for name, values := range map[string]map[string]string{
		"member-2": {"region": "us"},
		"member-3": {"region": "mars"},
		"member-4": {"owner": "someone"},
		"member-5": {"namespace": w.ns + "-nowhere"},
	} {
		w.scope.Clusters[name].Spec.Values = values
	}
	c := newCollector(t, nil)
	dec := w.decision(t, now)
	if got := dec.Rollout.Status.Waves[1].Clusters; !slices.Equal(got, []string{"member-2", "member-3", "member-4", "member-5"}) {
		t.Fatalf("the rest wave: %v", got)
	}
	out, err := c.Collect(context.Background(), dec, v1alpha1.GateDeploySafe, 1)
	if err != nil {
		t.Fatal(err)
	}
	ev := out.Evidence.(verdict.DeploySafeEvidence)
	wantVersion := "0.1.0+" + strings.TrimPrefix(w.scope.Candidate.Revision, "0.1.0@sha256:")[:12]
	if !ev.Render.OK || ev.Render.Chart == nil || ev.Render.Chart.Name != "web" || ev.Render.Chart.Version != wantVersion {
		t.Fatalf("render %+v (chart %+v), want the chart web %s", ev.Render, ev.Render.Chart, wantVersion)
	}
	if want := []verdict.ObjectRef{{APIVersion: "v1", Kind: "ConfigMap", Namespace: w.ns + "-apps", Name: "web-config"}}; !slices.Equal(ev.Render.Objects, want) {
		t.Errorf("rendered objects %+v, want %+v", ev.Render.Objects, want)
	}
	failed := map[string]string{}
	for _, r := range ev.Preflight.Clusters {
		if !r.Reachable {
			t.Errorf("%s: unreachable: %s", r.Name, r.Unreachable)
		}
		if len(r.DryRunErrors)+len(r.MissingAPIs) > 0 {
			failed[r.Name] = strings.Join(r.DryRunErrors, "; ")
		}
	}
	if len(failed) != 2 || !strings.Contains(failed["member-3"], "does not render with the cluster's values") || !strings.Contains(failed["member-3"], "region") ||
		!strings.Contains(failed["member-5"], w.ns+"-nowhere") {
		t.Errorf("preflight failures %q; want member-3 (its region refused by values.schema.json) and member-5 (its namespace, which does not exist)", failed)
	}
	if cl := ev.Install.Clusters; !ev.Install.Schema || len(cl) != 1 || cl[0].Name != "member-4" || !slices.Equal(cl[0].ProtectedKeys, []string{"owner"}) {
		t.Errorf("install %+v; want member-4's protected owner refused", ev.Install)
	}
	d, err := verdict.Evaluate(verdict.DefaultPolicy(), verdict.GateDeploySafe, ev)
	if err != nil || d.Pass || d.Inconclusive {
		t.Errorf("the built-in policy: %+v (%v), want a failure", d, err)
	}

	// The objects of a cluster are the chart rendered with its values over the rollout's.
	pkg, err := c.renderRevision(context.Background(), dec.Rollout, dec.Candidate, dec.Candidate.Digest, "the candidate", false)
	if err != nil || pkg.Chart == nil || pkg.RenderErr != nil {
		t.Fatalf("the candidate: %+v, %v", pkg, err)
	}
	for name, want := range map[string]string{"member-1": "eu", "member-2": "us"} {
		objs, err := c.objectsOf(context.Background(), dec.Rollout, dec.Clusters[name], pkg)
		if err != nil || len(objs) != 1 || objs[0].Object["data"].(map[string]any)["region"] != want {
			t.Errorf("%s's objects: %v (%v), want region %s", name, objs, err, want)
		}
	}

	// Without the clusters that fail, the gate passes: the release's namespace does not exist on
	// the member, and the chart creates it.
	dec.Rollout.Status.Waves[1].Clusters = []string{"member-2"}
	out, err = c.Collect(context.Background(), dec, v1alpha1.GateDeploySafe, 1)
	if err != nil {
		t.Fatal(err)
	}
	ev = out.Evidence.(verdict.DeploySafeEvidence)
	if d, err := verdict.Evaluate(verdict.DefaultPolicy(), verdict.GateDeploySafe, ev); err != nil || !d.Pass {
		t.Errorf("member-2 alone: %+v (%v); preflight %+v", d, err, ev.Preflight.Clusters)
	}
}

// A chart of a HelmChart (a HelmRepository's chart) is rendered with its own version, as
// helm-controller renders it: it appends the source's digest for an OCIRepository alone. Its
// revision, "<version>@<digest of the archive>", is fetched and checked as an OCIRepository's.
func TestDeploySafeRendersAHelmChartsChartAtItsVersion(t *testing.T) {
	now := time.Now().UTC().Truncate(time.Second)
	archive := packageChart(t, webChart)
	w := chartWorld(t, 1, archive, now)
	fr := w.scope.Rollout
	fr.Spec.SourceRef.Kind = sourcev1.HelmChartKind
	w.scope.Candidate.Revision = "0.1.0@" + w.scope.Candidate.Digest
	fr.Status.Candidate.Revision = w.scope.Candidate.Revision
	out, err := newCollector(t, nil).Collect(context.Background(), w.decision(t, now), v1alpha1.GateDeploySafe, 0)
	if err != nil {
		t.Fatal(err)
	}
	ev := out.Evidence.(verdict.DeploySafeEvidence)
	if !ev.Render.OK || ev.Render.Chart == nil || ev.Render.Chart.Name != "web" || ev.Render.Chart.Version != "0.1.0" {
		t.Fatalf("render %+v (chart %+v), want the chart web 0.1.0", ev.Render, ev.Render.Chart)
	}
}

// A chart whose render passes the render budget in its worker leaves deploySafe unobserved, as a
// kustomize package's does: the built-in policy decides it Inconclusive.
func TestAChartOverTheRenderBudgetIsInconclusive(t *testing.T) {
	now := time.Now().UTC().Truncate(time.Second)
	heavy := packageChart(t, map[string]string{
		"Chart.yaml":            "apiVersion: v2\nname: web\nversion: 0.1.0\n",
		"templates/config.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: heavy\ndata:\n  n: {{ len (until 50000000) | quote }}\n",
	})
	w := chartWorld(t, 2, heavy, now)
	c := newCollector(t, nil)
	c.RenderBudget = &boundedrender.Renderer{Budget: worker.Budget{Time: 10 * time.Second, Memory: 128 << 20}}
	out, err := c.Collect(context.Background(), w.decision(t, now), v1alpha1.GateDeploySafe, 1)
	if err != nil {
		t.Fatal(err)
	}
	ev := out.Evidence.(verdict.DeploySafeEvidence)
	const reason = "rendering the candidate exceeded the render budget of "
	if ev.Render.OK || len(ev.Unobserved) != 1 || !strings.HasPrefix(ev.Unobserved[0].Reason, reason) {
		t.Fatalf("render %+v, unobserved %+v", ev.Render, ev.Unobserved)
	}
	if d, err := verdict.Evaluate(verdict.DefaultPolicy(), verdict.GateDeploySafe, ev); err != nil || d.Pass || !d.Inconclusive {
		t.Errorf("the built-in policy: %+v (%v), want Inconclusive", d, err)
	}
}

// gadgetCRD is a CRD of a chart's crds/ directory.
const gadgetCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gadgets.example.tidegate.dev}
spec:
  group: example.tidegate.dev
  names: {kind: Gadget, listKind: GadgetList, plural: gadgets, singular: gadget}
  scope: Namespaced
  versions: [{name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}]
`

// deploySafe of a chart with a crds/ directory dry-runs its CRDs with the release, and lists its
// hooks as not dry-run. rollbackSafe of a chart classifies the known-good's and the candidate's
// releases as a kustomize package's: a claim the candidate adds asks for an approval. It adds what Helm does not undo: a
// CRD the candidate's crds/ directory adds is irreversible, and asks for an approval too; the
// hooks of the charts, which run again going back, are a limit. An approval of the candidate
// passes the gate. rollbackSucceeds fetches the known-good chart again and renders it.
func TestRollbackSafeOfAChart(t *testing.T) {
	now := time.Now().UTC().Truncate(time.Second)
	candidate := maps.Clone(webChart)
	candidate["Chart.yaml"] = "apiVersion: v2\nname: web\nversion: 0.2.0\n"
	candidate["crds/gadgets.yaml"] = gadgetCRD
	candidate["templates/gadget.yaml"] = "apiVersion: example.tidegate.dev/v1\nkind: Gadget\nmetadata:\n  name: web\n"
	candidate["templates/claim.yaml"] = "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: data\nspec:\n  accessModes: [ReadWriteOnce]\n  resources:\n    requests:\n      storage: 1Gi\n"
	candidate["templates/migrate.yaml"] = "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: migrate\n  annotations:\n    helm.sh/hook: pre-upgrade\nspec:\n  template:\n    spec:\n      restartPolicy: Never\n      containers: [{name: m, image: example.com/migrate:v1}]\n"
	w := chartWorld(t, 2, packageChart(t, webChart), now)
	good := w.scope.Candidate
	cand := servedChart(t, "web-0-2-0", "0.2.0", packageChart(t, candidate))
	fr := w.scope.Rollout
	fr.Status.LastKnownGood = &v1alpha1.RevisionStatus{Revision: good.Revision, Source: good.Name, Digest: good.Digest}
	fr.Status.Candidate = &v1alpha1.RevisionStatus{Revision: cand.Revision, Source: cand.Name, Digest: cand.Digest}
	w.scope.Candidate, w.scope.KnownGood = cand, good
	c := newCollector(t, nil)

	// deploySafe preflights the CRD of crds/ with the release's objects, so the Gadget's API is not
	// missing, and lists the hook, which it does not dry-run.
	out, err := c.Collect(context.Background(), w.decision(t, now), v1alpha1.GateDeploySafe, 1)
	if err != nil {
		t.Fatal(err)
	}
	ds := out.Evidence.(verdict.DeploySafeEvidence)
	if d, err := verdict.Evaluate(verdict.DefaultPolicy(), verdict.GateDeploySafe, ds); err != nil || !d.Pass || ds.Render.Total != 4 {
		t.Errorf("deploySafe: %+v (%v); render %+v, preflight %+v", d, err, ds.Render, ds.Preflight.Clusters)
	}
	if !hasLimit(ds.Limits, "the chart's hooks run at install and upgrade and are not dry-run: Job migrate (pre-upgrade)") {
		t.Errorf("deploySafe's limits %q; want the hook", ds.Limits)
	}

	collect := func() verdict.RollbackSafeEvidence {
		t.Helper()
		out, err := c.Collect(context.Background(), w.decision(t, now), v1alpha1.GateRollbackSafe, 1)
		if err != nil {
			t.Fatal(err)
		}
		return out.Evidence.(verdict.RollbackSafeEvidence)
	}
	ev := collect()
	if ev.FirstRollout || len(ev.CRDChanges) != 1 || ev.CRDChanges[0].Name != "gadgets.example.tidegate.dev" || ev.CRDChanges[0].Change != verdict.ChangeAdded ||
		!strings.Contains(ev.CRDChanges[0].Reason, "Helm never deletes a chart's crds/ CRDs") {
		t.Errorf("CRD changes %+v; want the Gadget CRD the candidate's crds/ adds", ev.CRDChanges)
	}
	if len(ev.PrunedStateful) != 1 || ev.PrunedStateful[0].Kind != "PersistentVolumeClaim" || ev.PrunedStateful[0].Namespace != w.ns+"-apps" || ev.PrunedStateful[0].Change != verdict.ChangeAdded {
		t.Errorf("pruned stateful %+v; want the claim the candidate adds, in the release's namespace", ev.PrunedStateful)
	}
	if !hasLimit(ev.Limits, "the candidate chart's hooks run when it installs or upgrades") || !strings.Contains(strings.Join(ev.Limits, "\n"), "Job migrate (pre-upgrade)") {
		t.Errorf("limits %q; want the candidate's hook", ev.Limits)
	}
	d, err := verdict.Evaluate(verdict.DefaultPolicy(), verdict.GateRollbackSafe, ev)
	if err != nil || d.Pass || len(d.Reasons) != 2 {
		t.Errorf("the built-in policy: %+v (%v); want a failure asking for approvals of the CRD and the claim", d, err)
	}

	fr.Spec.Approvals = []v1alpha1.Approval{{Revision: cand.Revision, Irreversible: true, By: "ops"}}
	if d, err := verdict.Evaluate(verdict.DefaultPolicy(), verdict.GateRollbackSafe, collect()); err != nil || !d.Pass {
		t.Errorf("approved: %+v (%v)", d, err)
	}

	out, err = c.Collect(context.Background(), w.decision(t, now), v1alpha1.GateRollbackSucceeds, 1)
	if err != nil {
		t.Fatal(err)
	}
	if src := out.Evidence.(verdict.RollbackSucceedsEvidence).KnownGoodSource; src == nil || !src.Renders {
		t.Errorf("rollbackSucceeds' known-good: %+v; want it fetched and rendered", src)
	}
	// A known-good whose source serves what is no chart does not render: the way back is gone.
	notChart, digest := tarball(t, map[string]string{"web/values.yaml": "region: eu\n"}, w.ns)
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) { _, _ = rw.Write(notChart) }))
	t.Cleanup(srv.Close)
	fr.Status.LastKnownGood.Digest, w.scope.KnownGood.Digest, w.scope.KnownGood.URL = digest, digest, srv.URL+"/web.tgz"
	if out, err = c.Collect(context.Background(), w.decision(t, now), v1alpha1.GateRollbackSucceeds, 1); err != nil {
		t.Fatal(err)
	}
	if src := out.Evidence.(verdict.RollbackSucceedsEvidence).KnownGoodSource; src == nil || src.Renders || !strings.Contains(src.RenderError, "Chart.yaml") {
		t.Errorf("a known-good that is no chart: %+v; want it not rendered", src)
	}
}
