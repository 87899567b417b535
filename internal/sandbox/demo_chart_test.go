package sandbox

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/evidence/chart"
	"github.com/tidegate/tidegate/evidence/install"
	"github.com/tidegate/tidegate/internal/localfleet"
)

// chartFleet is the fleet repository as --helm commits it, its hub's objects and its rollout.
func chartFleet(t *testing.T) (map[string]string, []*unstructured.Unstructured, *v1alpha1.FleetRollout) {
	t.Helper()
	files, objs := ociHub(t, "-----BEGIN PUBLIC KEY-----\nMFkw\n-----END PUBLIC KEY-----\n", true)
	var fr v1alpha1.FleetRollout
	if err := yaml.UnmarshalStrict([]byte(files[rolloutFile]), &fr); err != nil {
		t.Fatalf("%s is not a FleetRollout: %v", rolloutFile, err)
	}
	return files, objs, &fr
}

// With --helm the podinfo source is an OCIRepository that follows the chart's versions and serves
// its layer as it is, verified as --oci's is; the rollout installs it as a chart: no path, none of
// the template's Kustomize-only fields (which the API refuses beside spec.chart), the install-time
// value the Kustomize package substitutes given as a chart value, and the release in the namespace
// the package's objects were in.
func TestDemoHubObjectsAsChart(t *testing.T) {
	files, objs, fr := chartFleet(t)
	src := find(t, objs, "OCIRepository", repoPodinfo).Object
	semver, _, _ := unstructured.NestedString(src, "spec", "ref", "semver")
	tag, hasTag, _ := unstructured.NestedString(src, "spec", "ref", "tag")
	media, _, _ := unstructured.NestedString(src, "spec", "layerSelector", "mediaType")
	op, _, _ := unstructured.NestedString(src, "spec", "layerSelector", "operation")
	provider, _, _ := unstructured.NestedString(src, "spec", "verify", "provider")
	if semver != chartRange || hasTag || media != string(localfleet.HelmChartMediaType) || op != "copy" || provider != "cosign" {
		t.Errorf("OCIRepository podinfo: semver %q, tag %q, layer %s (%s), verify %s", semver, tag, media, op, provider)
	}

	s := fr.Spec
	if s.SourceRef.Kind != "OCIRepository" || s.SourceRef.Name != repoPodinfo || s.Path != "" || !fr.IsChart() {
		t.Errorf("the rollout should install the chart of OCIRepository podinfo: %+v", s)
	}
	tpl := s.Template
	if tpl.Force || tpl.PostBuild != nil || tpl.Prune != nil || len(tpl.Patches)+len(tpl.Images)+len(tpl.Components) != 0 {
		t.Errorf("the chart rollout's template keeps Kustomize-only fields: %+v", tpl)
	}
	if fr.ReleaseName() != rolloutName || fr.ReleaseNamespace() != appNamespace || tpl.Interval == nil || tpl.Timeout == nil {
		t.Errorf("release %s in %s, template %+v", fr.ReleaseName(), fr.ReleaseNamespace(), tpl)
	}
	values, err := fr.ChartValues(nil)
	kustomizeValues := hubRollout(t).Spec.Template.PostBuild.Substitute
	if err != nil || len(values) != len(kustomizeValues) || values["logLevel"] != kustomizeValues["logLevel"] {
		t.Errorf("the chart's values %v (%v) should be the Kustomize package's substitutions %v", values, err, kustomizeValues)
	}
	// The rest of the rollout is the Kustomize package's.
	k := hubRollout(t).Spec
	if !equality.Semantic.DeepEqual(k.Waves, s.Waves) || !equality.Semantic.DeepEqual(k.Policy, s.Policy) || !equality.Semantic.DeepEqual(k.Metrics, s.Metrics) {
		t.Errorf("the chart rollout's waves, policy or metrics differ from the Kustomize rollout's")
	}
	// The same edits twice fail: what they replace is gone.
	if err := ociFleet(files, []byte("key"), true); err == nil || !strings.Contains(err.Error(), "update ociFleet") {
		t.Errorf("rewriting a rewritten fleet: %v", err)
	}
}

// The chart is the Kustomize package's workload: at each release (v1; v3 with db's bigger
// volume) it renders, as helm-controller would for the chart rollout's HelmRelease with its
// values, to the objects the package builds to with the Kustomize rollout's substitutions, but
// the Namespace (which the release's install creates) and Helm's own labels and annotations.
// values.schema.json refuses a log level install.cue refuses.
func TestDemoChartIsThePackage(t *testing.T) {
	_, _, fr := chartFleet(t)
	values, err := fr.ChartValues(nil)
	if err != nil {
		t.Fatal(err)
	}
	hr := &helmv2.HelmRelease{}
	hr.Namespace, hr.Name = fleetNamespace, v1alpha1.KustomizationName(rolloutName, "member-1")
	hr.Spec.ReleaseName, hr.Spec.TargetNamespace = fr.ReleaseName(), fr.ReleaseNamespace()

	for _, c := range []struct{ version, storage string }{{"v1", "1Gi"}, {"v3", "2Gi"}} {
		chartFiles, err := embeddedFiles(chartPackage.dir)
		if err != nil {
			t.Fatal(err)
		}
		p := chartPackage
		if chartFiles[p.releaseFile], err = p.setVersion(chartFiles[p.releaseFile], c.version); err == nil && c.storage != "1Gi" {
			chartFiles[p.storageFile], err = p.setStorage(chartFiles[p.storageFile], "1Gi", c.storage)
		}
		if err != nil {
			t.Fatal(err)
		}
		pkg, err := packageChart(filepath.Join(t.TempDir(), "chart"), chartFiles)
		if err != nil {
			t.Fatal(err)
		}
		if pkg.Name != repoPodinfo || pkg.Version != chartVersion(c.version) {
			t.Errorf("%s is chart %s %s, want %s %s", c.version, pkg.Name, pkg.Version, repoPodinfo, chartVersion(c.version))
		}
		got, err := chart.Render(context.Background(), pkg.Archive, hr, values, chart.Options{})
		if err != nil {
			t.Fatalf("%s: rendering the chart: %v", c.version, err)
		}
		want := renderWith(t, podinfoAt(t, c.version, c.storage), "app", hubRollout(t).Spec.Template.PostBuild)
		want = slices.DeleteFunc(want, func(o *unstructured.Unstructured) bool { return o.GetKind() == "Namespace" })
		if g, w := refs(got.Objects), refs(want); !slices.Equal(g, w) {
			t.Fatalf("%s: the chart renders %v, the package %v", c.version, g, w)
		}
		for _, w := range want {
			g := find(t, got.Objects, w.GetKind(), w.GetName())
			if a, b := workloadOf(g), workloadOf(w); !equality.Semantic.DeepEqual(a, b) {
				ja, _ := json.Marshal(a)
				jb, _ := json.Marshal(b)
				t.Errorf("%s: %s %s from the chart is\n%s\nfrom the package\n%s", c.version, w.GetKind(), w.GetName(), ja, jb)
			}
		}

		values["logLevel"] = "verbose"
		if _, err := chart.Render(context.Background(), pkg.Archive, hr, values, chart.Options{}); err == nil || !strings.Contains(err.Error(), "logLevel") {
			t.Errorf("%s: the chart's schema should refuse logLevel verbose: %v", c.version, err)
		}
		values["logLevel"] = "info"
	}
}

// workloadOf is an object without its labels and annotations, which Helm and the two renders
// mark differently.
func workloadOf(o *unstructured.Unstructured) map[string]any {
	c := o.DeepCopy()
	c.SetLabels(nil)
	c.SetAnnotations(nil)
	return c.Object
}

// The chart ships the package's install-time schema for the keys a cluster may set: the rollout's
// values pass it, a refused level and the chart's protected db.storage are found.
func TestDemoChartInstallSchema(t *testing.T) {
	files, err := embeddedFiles(chartPackage.dir)
	if err != nil {
		t.Fatal(err)
	}
	schema := []byte(files["tidegate/install.cue"])
	_, _, fr := chartFleet(t)
	values, err := fr.ChartValues(nil)
	if err != nil {
		t.Fatal(err)
	}
	given := map[string]string{}
	for k, v := range values {
		given[k] = v.(string)
	}
	ev, err := install.Check(schema, given)
	if err != nil || !ev.Schema || len(ev.Violations)+len(ev.UnknownKeys)+len(ev.ProtectedKeys) != 0 {
		t.Errorf("the rollout's values should pass the chart's schema: %+v, %v", ev, err)
	}
	ev, err = install.Check(schema, map[string]string{"logLevel": "verbose", "db.storage": "5Gi"})
	if err != nil || len(ev.Violations) != 1 || !slices.Equal(ev.ProtectedKeys, []string{"db.storage"}) {
		t.Errorf("a refused level and a protected key should be found: %+v, %v", ev, err)
	}
}
