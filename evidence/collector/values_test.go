package collector

import (
	"slices"
	"strings"
	"testing"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tidegate/tidegate/api/v1alpha1"
	tgcue "github.com/tidegate/tidegate/cue"
	"github.com/tidegate/tidegate/evidence/preflight"
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
	ev := tgcue.DeploySafeEvidence{Evidence: tgcue.Evidence{Rollout: "fleet/web", Candidate: tgcue.Revision{Revision: "main@sha1:abc", Digest: "sha256:" + strings.Repeat("a", 64)},
		Targets: []string{"team-a", "team-c"}}, Render: tgcue.RenderEvidence{OK: true}, Install: got}
	ev.Preflight.WavePreflight = tgcue.NewWavePreflight("", 0, []tgcue.ClusterPreflight{
		{Name: "team-a", Reachable: true, ServerVersion: "v1.37.2"}, {Name: "team-c", Reachable: true, ServerVersion: "v1.37.2"}})
	d, err := tgcue.Evaluate(tgcue.DefaultPolicy(), v1alpha1.GateDeploySafe, ev)
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
	cm := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "web", "namespace": "${namespace:=web}"},
		"data":     map[string]any{"region": "${region}"},
	}}
	clusters := tenants(map[string]map[string]string{"plain": nil, "team-a": {"namespace": "team-a"}})
	targets := []preflight.Target{{Name: "plain"}, {Name: "team-a"}, {Name: "gone"}}
	substituteOwnValues(tenantRollout(), clusters, targets, []*unstructured.Unstructured{cm})
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
	if cm.GetNamespace() != "${namespace:=web}" {
		t.Errorf("the rendered object was changed: %s", cm.GetNamespace())
	}
}
