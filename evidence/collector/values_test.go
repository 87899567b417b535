package collector

import (
	"context"
	"slices"
	"strings"
	"testing"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/evidence"
	"github.com/tidegate/tidegate/evidence/preflight"
	"github.com/tidegate/tidegate/verdict"
)

const tenantSchema = `package install

values: {
	namespace: =~"^team-[a-z]+$"
	region?:   "eu" | "us"
}
protected: ["image"]
`

func tenantRollout() *v1alpha1.FleetRollout {
	fr := &v1alpha1.FleetRollout{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "fleet"}}
	fr.Spec.Template.PostBuild = &kustomizev1.PostBuild{Substitute: map[string]string{"region": "eu"}}
	return fr
}

func tenants(values map[string]map[string]string) map[string]*v1alpha1.FleetCluster {
	out := map[string]*v1alpha1.FleetCluster{}
	for name, v := range values {
		out[name] = &v1alpha1.FleetCluster{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.FleetClusterSpec{Values: v}}
	}
	return out
}

// Each target that sets values of its own is checked with them merged over the rollout's, and
// named when they are refused; the rollout's values alone are checked for the targets that set
// none.
func TestInstallValuesAreCheckedPerCluster(t *testing.T) {
	clusters := tenants(map[string]map[string]string{
		"plain":  nil,
		"team-a": {"namespace": "team-a"},
		"team-c": {"namespace": "Team_C"},
		"team-d": {"namespace": "team-d", "image": "evil:latest", "region": "mars"},
	})
	targets := []string{"plain", "team-a", "team-c", "team-d"}
	got := valuesOf(tenantRollout(), targets, clusters).check([]byte(tenantSchema))
	if !got.Schema || !slices.Equal(got.Violations, []string{"namespace: required install-time value is missing"}) || got.UnknownKeys != nil || got.ProtectedKeys != nil {
		t.Errorf("the rollout's values, for the target that sets none: %+v", got)
	}
	if len(got.Clusters) != 2 || got.Clusters[0].Name != "team-c" || got.Clusters[1].Name != "team-d" {
		t.Fatalf("clusters with findings: %+v, want team-c and team-d", got.Clusters)
	}
	if v := got.Clusters[0].Violations; len(v) != 1 || !strings.HasPrefix(v[0], `namespace: invalid value "Team_C"`) {
		t.Errorf("team-c: %+v", got.Clusters[0])
	}
	if d := got.Clusters[1]; !slices.Equal(d.ProtectedKeys, []string{"image"}) || len(d.Violations) != 1 || !strings.HasPrefix(d.Violations[0], "region: ") {
		t.Errorf("team-d: %+v", d)
	}

	// Every target sets its own: the rollout's values alone (without a namespace) are not judged.
	got = valuesOf(tenantRollout(), []string{"team-a", "team-c"}, clusters).check([]byte(tenantSchema))
	if got.Violations != nil || len(got.Clusters) != 1 || got.Clusters[0].Name != "team-c" {
		t.Errorf("every target with values of its own: %+v", got)
	}

	// The default policy fails the gate naming the cluster.
	ev := verdict.DeploySafeEvidence{Evidence: verdict.Evidence{Rollout: "fleet/web", Candidate: verdict.Revision{Revision: "main@sha1:abc", Digest: "sha256:" + strings.Repeat("a", 64)},
		Targets: []string{"team-a", "team-c"}}, Render: verdict.RenderEvidence{OK: true}, Install: got}
	ev.Preflight.WavePreflight = verdict.NewWavePreflight("", 0, []verdict.ClusterPreflight{
		{Name: "team-a", Reachable: true, ServerVersion: "v1.37.2"}, {Name: "team-c", Reachable: true, ServerVersion: "v1.37.2"}})
	d, err := verdict.Evaluate(verdict.DefaultPolicy(), v1alpha1.GateDeploySafe, ev)
	if err != nil {
		t.Fatal(err)
	}
	if d.Pass || len(d.Reasons) != 1 || !strings.Contains(d.Reasons[0], "deploySafe.install.clusters.0.violations.0") || !strings.Contains(d.Reasons[0], "clusters.0: team-c") {
		t.Errorf("the default policy: pass %v, reasons %q; want a failure naming team-c", d.Pass, d.Reasons)
	}

	// No schema: nothing is checked; a schema that does not compile is one violation.
	if got := valuesOf(tenantRollout(), targets, clusters).check(nil); got.Schema || len(got.Clusters)+len(got.Violations) != 0 {
		t.Errorf("no schema: %+v", got)
	}
	if got := valuesOf(tenantRollout(), targets, clusters).check([]byte("values: {")); !got.Schema || len(got.Violations) != 1 || len(got.Clusters) != 0 {
		t.Errorf("a broken schema: %+v", got)
	}
}

// A target that sets values of its own is preflighted with the package substituted with them.
func TestPreflightObjectsPerCluster(t *testing.T) {
	pkg := renderedDocs(t, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\n  namespace: ${namespace:=web}\ndata:\n  region: ${region}\n")
	clusters := tenants(map[string]map[string]string{"plain": nil, "team-a": {"namespace": "team-a"}})
	targets := []preflight.Target{{Name: "plain"}, {Name: "team-a"}, {Name: "gone"}}
	substituteOwnValues(tenantRollout(), clusters, targets, pkg)
	if targets[0].Objects != nil || targets[2].Objects != nil {
		t.Errorf("targets without values of their own get the shared objects")
	}
	objs, err := targets[1].Objects()
	if err != nil || len(objs) != 1 {
		t.Fatalf("team-a's objects: %v, %v", objs, err)
	}
	if ns, region := objs[0].GetNamespace(), objs[0].Object["data"].(map[string]any)["region"]; ns != "team-a" || region != "eu" {
		t.Errorf("team-a's ConfigMap in %q with region %q, want team-a and the rollout's eu", ns, region)
	}
	if got := pkg.Build.Objects[0].GetNamespace(); got != "${namespace:=web}" {
		t.Errorf("the rendered object was changed: %s", got)
	}
}

// rollbackSafe classifies with each distinct postBuild of the targets: a claim whose size only a
// cluster's own values change is found, once, and the rollout's values alone find nothing.
func TestClassifyEachClusterValues(t *testing.T) {
	claim := "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: data\n  namespace: web\nspec:\n  resources:\n    requests:\n      storage: ${size:=1Gi}\n"
	good := renderedDocs(t, claim)
	cand := renderedDocs(t, strings.Replace(claim, "${size:=1Gi}", "${newsize:=1Gi}", 1))
	fr := tenantRollout()
	clusters := tenants(map[string]map[string]string{"plain": nil, "big-1": {"newsize": "5Gi"}, "big-2": {"newsize": "5Gi"}})

	got, err := (&Collector{}).classifyEach(context.Background(), fr, fr, []string{"plain"}, clusters, good, cand)
	if err != nil || len(got.ChangedStateful) != 0 || got.FirstRollout {
		t.Fatalf("the rollout's values: %+v, %v; want no finding", got, err)
	}
	got, err = (&Collector{}).classifyEach(context.Background(), fr, fr, []string{"plain", "big-1", "big-2"}, clusters, good, cand)
	if err != nil || len(got.ChangedStateful) != 1 || got.ChangedStateful[0].Field != "spec.resources" {
		t.Fatalf("with clusters' own values: %+v, %v; want the claim's resources, once", got.ChangedStateful, err)
	}
	if got, err := (&Collector{}).classifyEach(context.Background(), fr, fr, []string{"big-1"}, clusters, nil, cand); err != nil || !got.FirstRollout {
		t.Errorf("no known-good: %+v, %v; want a first rollout", got, err)
	}
}

// renderedDocs is a package of docs, rendered as the collector renders a revision.
func renderedDocs(t *testing.T, docs string) *renderedPackage {
	t.Helper()
	fsys := filesys.MakeFsInMemory()
	if err := fsys.WriteFile("/app/objects.yaml", []byte(docs)); err != nil {
		t.Fatal(err)
	}
	r, err := evidence.Render(fsys, kustomizev1.KustomizationSpec{Path: "./app"})
	if err != nil {
		t.Fatal(err)
	}
	return &renderedPackage{Build: r}
}
