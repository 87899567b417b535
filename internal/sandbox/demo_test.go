package sandbox

import (
	"maps"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/prometheus/prometheus/promql/parser"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/evidence"
	"github.com/tidegate/tidegate/evidence/install"
	"github.com/tidegate/tidegate/evidence/metrics"
	"github.com/tidegate/tidegate/verdict"
)

// render builds dir of the files with kustomize, as tidegate's gates do.
func render(t *testing.T, files map[string]string, dir string) []*unstructured.Unstructured {
	t.Helper()
	return renderWith(t, files, dir, nil)
}

// renderWith builds dir of the files with kustomize and substitutes pb's values, as tidegate's
// gates do.
func renderWith(t *testing.T, files map[string]string, dir string, pb *kustomizev1.PostBuild) []*unstructured.Unstructured {
	t.Helper()
	fsys := filesys.MakeFsInMemory()
	for p, content := range files {
		if err := fsys.MkdirAll(path.Dir(p)); err != nil {
			t.Fatal(err)
		}
		if err := fsys.WriteFile(p, []byte(content)); err != nil {
			t.Fatal(err)
		}
	}
	r, err := evidence.Render(fsys, kustomizev1.KustomizationSpec{Path: dir})
	if err != nil {
		t.Fatalf("rendering %s: %v", dir, err)
	}
	objs, err := r.Substitute(pb)
	if err != nil {
		t.Fatalf("substituting %s: %v", dir, err)
	}
	return objs
}

func refs(objs []*unstructured.Unstructured) []string {
	var out []string
	for _, o := range objs {
		out = append(out, o.GetKind()+" "+o.GetNamespace()+"/"+o.GetName())
	}
	slices.Sort(out)
	return out
}

func find(t *testing.T, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	t.Fatalf("no %s %s in %v", kind, name, refs(objs))
	return nil
}

func podinfoAt(t *testing.T, version string, storage string) map[string]string {
	t.Helper()
	files, err := repoFiles(repoPodinfo, 3)
	if err != nil {
		t.Fatal(err)
	}
	p := kustomizePackage
	if files[p.releaseFile], err = p.setVersion(files[p.releaseFile], version); err != nil {
		t.Fatal(err)
	}
	if storage != "1Gi" {
		if files[p.storageFile], err = p.setStorage(files[p.storageFile], "1Gi", storage); err != nil {
			t.Fatal(err)
		}
	}
	return files
}

// The package renders to what the story needs: a Deployment whose image tag is the release, a
// ConfigMap reporting it, a StatefulSet with a claim template; the releases differ only there.
func TestDemoPackageRendersEachRelease(t *testing.T) {
	v1 := render(t, podinfoAt(t, "v1", "1Gi"), "app")
	want := []string{"ConfigMap podinfo/podinfo", "Deployment podinfo/web", "Namespace /podinfo", "Service podinfo/db", "Service podinfo/web", "StatefulSet podinfo/db"}
	if got := refs(v1); !slices.Equal(got, want) {
		t.Fatalf("app renders %v, want %v", got, want)
	}
	for _, version := range []string{"v1", "v3"} {
		objs := render(t, podinfoAt(t, version, "1Gi"), "app")
		containers, _, _ := unstructured.NestedSlice(find(t, objs, "Deployment", "web").Object, "spec", "template", "spec", "containers")
		if img := containers[0].(map[string]any)["image"]; img != "ghcr.io/example/podinfo:"+version {
			t.Errorf("%s: web's image is %v", version, img)
		}
		data, _, _ := unstructured.NestedStringMap(find(t, objs, "ConfigMap", "podinfo").Object, "data")
		if data["version"] != version || data["logLevel"] != "${logLevel:=info}" {
			t.Errorf("%s: the ConfigMap has %v", version, data)
		}
	}

	// v1 → v2 is a release rollbackSafe lets through; v2 → v4 changes db's claim template, which
	// needs an approval: the story's blocked first wave.
	v2 := render(t, podinfoAt(t, "v2", "1Gi"), "app")
	if rs := evidence.ClassifyRollback(v1, v2); len(rs.ChangedStateful)+len(rs.PrunedStateful)+len(rs.ImmutableRecreates)+len(rs.CRDChanges)+len(rs.Irreversible) != 0 {
		t.Errorf("v1 → v2 should have no rollbackSafe finding: %+v", rs)
	}
	v4 := render(t, podinfoAt(t, "v4", "2Gi"), "app")
	rs := evidence.ClassifyRollback(v2, v4)
	if len(rs.ChangedStateful) != 1 || rs.ChangedStateful[0].Kind != "StatefulSet" || rs.ChangedStateful[0].Name != "db" {
		t.Errorf("v2 → v4 should change db's volumeClaimTemplates: %+v", rs)
	}
}

// The package's install schema accepts the value the rollout gives and refuses others.
func TestDemoInstallSchema(t *testing.T) {
	files, err := repoFiles(repoPodinfo, 3)
	if err != nil {
		t.Fatal(err)
	}
	schema := []byte(files["app/tidegate/install.cue"])
	rollout := hubRollout(t)
	ev, err := install.Check(schema, rollout.Spec.Template.PostBuild.Substitute)
	if err != nil || !ev.Schema || len(ev.Violations)+len(ev.UnknownKeys)+len(ev.ProtectedKeys) != 0 {
		t.Errorf("the rollout's values should pass the package's schema: %+v, %v", ev, err)
	}
	ev, err = install.Check(schema, map[string]string{"logLevel": "verbose", "image": "evil"})
	if err != nil || len(ev.Violations) != 1 || !slices.Equal(ev.ProtectedKeys, []string{"image"}) {
		t.Errorf("a refused level and a protected key should be found: %+v, %v", ev, err)
	}
}

func hubRollout(t *testing.T) *v1alpha1.FleetRollout {
	t.Helper()
	files, err := repoFiles(repoFleet, 3)
	if err != nil {
		t.Fatal(err)
	}
	var fr v1alpha1.FleetRollout
	if err := yaml.UnmarshalStrict([]byte(files["hub/podinfo.yaml"]), &fr); err != nil {
		t.Fatalf("hub/podinfo.yaml is not a FleetRollout: %v", err)
	}
	return &fr
}

// The hub objects fit together: the rollout's sources are the ones sources.yaml declares, on the
// sandbox's repositories; it selects the FleetClusters; every FleetCluster names the Secret
// localfleet writes.
func TestDemoHubObjects(t *testing.T) {
	files, err := repoFiles(repoFleet, 4)
	if err != nil {
		t.Fatal(err)
	}
	objs := render(t, files, "hub")
	want := []string{"FleetCluster fleet/member-1", "FleetCluster fleet/member-2", "FleetCluster fleet/member-3", "FleetCluster fleet/member-4",
		"FleetRollout fleet/podinfo", "GitRepository fleet/platform-policies", "GitRepository fleet/podinfo"}
	if got := refs(objs); !slices.Equal(got, want) {
		t.Fatalf("hub renders %v, want %v", got, want)
	}
	for _, name := range []string{repoPodinfo, repoPolicies} {
		url, _, _ := unstructured.NestedString(find(t, objs, "GitRepository", name).Object, "spec", "url")
		if url != "${"+gitServerVar+"}/"+name+".git" {
			t.Errorf("GitRepository %s has url %q", name, url)
		}
	}
	fr := hubRollout(t)
	if fr.Name != rolloutName || fr.Namespace != fleetNamespace || fr.Spec.SourceRef.Name != repoPodinfo || fr.Spec.Path != "./app" ||
		fr.Spec.Policy == nil || fr.Spec.Policy.SourceRef.Name != repoPolicies || fr.Spec.Policy.Path != "./podinfo" || !fr.Spec.Template.Force {
		t.Errorf("the rollout does not fit the repositories: %+v", fr.Spec)
	}
	if got := fr.Spec.ClusterSelector.MatchLabels; got[clusterLabel] != clusterLabelValue {
		t.Errorf("the rollout selects %v", got)
	}
	if fr.Spec.Metrics == nil || fr.Spec.Metrics.Prometheus.Address != "${"+prometheusVar+"}" {
		t.Errorf("the rollout should read its metrics from the sandbox's Prometheus, ${%s}: %+v", prometheusVar, fr.Spec.Metrics)
	}
	var fc v1alpha1.FleetCluster
	if err := yaml.UnmarshalStrict([]byte(strings.Split(clustersYAML(1), "---\n")[1]), &fc); err != nil {
		t.Fatalf("clusters.yaml: %v", err)
	}
	if fc.Labels[clusterLabel] != clusterLabelValue || fc.Spec.KubeConfig.SecretRef.Name != "member-1-kubeconfig" {
		t.Errorf("FleetCluster %+v", fc)
	}
	embedded, err := demoFS.ReadFile("demo/fleet/" + clustersFile)
	if err != nil || string(embedded) != clustersYAML(3) {
		t.Errorf("demo/fleet/%s should be what the sandbox writes for 3 clusters (%v):\n%s", clustersFile, err, clustersYAML(3))
	}
}

// With --oci the hub's podinfo source is an OCIRepository of the sandbox's registry that asks
// source-controller to verify cosign signatures with the public key of the Secret beside it, and
// the rollout names it.
func TestDemoHubObjectsOnOCI(t *testing.T) {
	const pub = "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----\n"
	_, objs := ociHub(t, pub, false)
	src := find(t, objs, "OCIRepository", repoPodinfo).Object
	url, _, _ := unstructured.NestedString(src, "spec", "url")
	provider, _, _ := unstructured.NestedString(src, "spec", "verify", "provider")
	secret, _, _ := unstructured.NestedString(src, "spec", "verify", "secretRef", "name")
	tag, _, _ := unstructured.NestedString(src, "spec", "ref", "tag")
	if url != "oci://${"+registryVar+"}/"+repoPodinfo || provider != "cosign" || secret != cosignSecret || tag != ociTag {
		t.Errorf("OCIRepository podinfo: url %q, verify %s with %s, tag %q", url, provider, secret, tag)
	}
	key, _, _ := unstructured.NestedString(find(t, objs, "Secret", cosignSecret).Object, "stringData", "cosign.pub")
	if key != pub {
		t.Errorf("the Secret holds %q, want the public key", key)
	}
	kind, _, _ := unstructured.NestedString(find(t, objs, "FleetRollout", rolloutName).Object, "spec", "sourceRef", "kind")
	if kind != "OCIRepository" {
		t.Errorf("the rollout's source is a %s", kind)
	}
}

// ociHub is the fleet repository for two clusters as --oci (chart false) or --helm commits it with
// the cosign public key pub, and its hub's objects, which it checks are the sources, the Secret of
// the key, the clusters and the rollout.
func ociHub(t *testing.T, pub string, chart bool) (map[string]string, []*unstructured.Unstructured) {
	t.Helper()
	files, err := repoFiles(repoFleet, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := ociFleet(files, []byte(pub), chart); err != nil {
		t.Fatal(err)
	}
	objs := render(t, files, "hub")
	want := []string{"FleetCluster fleet/member-1", "FleetCluster fleet/member-2", "FleetRollout fleet/podinfo",
		"GitRepository fleet/platform-policies", "OCIRepository fleet/podinfo", "Secret fleet/" + cosignSecret}
	if got := refs(objs); !slices.Equal(got, want) {
		t.Fatalf("hub renders %v, want %v", got, want)
	}
	return files, objs
}

// The demo's policy is the built-in default with three settings changed and the demo's metric
// queries added; when the default changes, copy verdict/policy/default.cue to
// demo/platform-policies/podinfo/policy.cue and change them again.
func TestDemoPolicyIsTheDefaultWithSandboxSettings(t *testing.T) {
	files, err := repoFiles(repoPolicies, 3)
	if err != nil {
		t.Fatal(err)
	}
	want := string(verdict.DefaultPolicyFiles()["default.cue"])
	for _, r := range [][2]string{{`soak:           "1m"`, `soak:           "15s"`}, {`sampleInterval: "5s"`, `sampleInterval: "2s"`}, {`onFail:         "Hold"`, `onFail:         "Rollback"`}} {
		if !strings.Contains(want, r[0]) {
			t.Fatalf("the default policy has no %q any more: update the demo's policy and this test", r[0])
		}
		want = strings.Replace(want, r[0], r[1], 1)
	}
	// The metric queries sit between rehearsal and tolerances; the rest is the default's.
	got := files["podinfo/policy.cue"]
	const before, after = "\trehearsal:      false\n", "\ttolerances: {\n"
	i, j := strings.Index(got, before), strings.Index(got, after)
	if i < 0 || j < i || !strings.Contains(got[i:j], "\tmetrics: queries: {\n") {
		t.Fatalf("demo/platform-policies/podinfo/policy.cue should have settings.metrics.queries between rehearsal and tolerances")
	}
	if without := got[:i+len(before)] + got[j:]; without != want {
		t.Fatalf("demo/platform-policies/podinfo/policy.cue is not verdict/policy/default.cue with the sandbox's settings")
	}
	p, err := verdict.LoadPolicy(map[string][]byte{"policy.cue": []byte(got)})
	if err != nil {
		t.Fatal(err)
	}
	s, err := p.Settings()
	if err != nil || s.Soak != 15*time.Second || s.SampleInterval != 2*time.Second || s.OnFail != v1alpha1.OnFailureRollback {
		t.Errorf("settings %+v, %v", s, err)
	}

	// The built-in rules judge queries of these two names; each is PromQL over the demo's
	// workload, grouped by the cluster label, once the rollout's clusters are put in.
	if names := slices.Sorted(maps.Keys(s.Metrics.Queries)); !slices.Equal(names, []string{"errorRatio", "latencyP95"}) {
		t.Fatalf("the demo's metric queries are %v, want errorRatio and latencyP95", names)
	}
	for name, q := range s.Metrics.Queries {
		expr, err := parser.NewParser(parser.Options{}).ParseExpr(metrics.Expand(q, []string{"member-1", "member-2"}))
		if err != nil {
			t.Errorf("query %s is not PromQL: %v", name, err)
			continue
		}
		for _, sel := range parser.ExtractSelectors(expr) {
			labels := map[string]string{}
			for _, m := range sel {
				labels[m.Name] = m.Value
			}
			if labels["namespace"] != appNamespace || labels["workload"] != path.Base(webWorkload) || labels[s.Metrics.ClusterLabel] != "member-1|member-2" {
				t.Errorf("query %s selects %v: want the demo's workload %s in the clusters asked about", name, sel, webWorkload)
			}
		}
		if !strings.Contains(q, "sum by ("+s.Metrics.ClusterLabel) {
			t.Errorf("query %s does not aggregate by the cluster label", name)
		}
	}
}

func TestSetVersionAndStorage(t *testing.T) {
	for _, c := range []struct {
		p    pkgLayout
		want []string // the release lines of v12
		kept string   // a line a release keeps
	}{
		{kustomizePackage, []string{"    newTag: v12\n", "      - version=v12\n"}, "apiVersion: kustomize.config.k8s.io/v1beta1\n"},
		{chartPackage, []string{"\nversion: 0.12.0\n", "\nappVersion: v12\n"}, "apiVersion: v2\n"},
	} {
		files, err := embeddedFiles(c.p.dir)
		if err != nil {
			t.Fatal(err)
		}
		k, err := c.p.setVersion(files[c.p.releaseFile], "v12")
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range append(c.want, c.kept) {
			if !strings.Contains(k, line) {
				t.Errorf("%s: setVersion v12 has no line %q:\n%s", c.p.dir, line, k)
			}
		}
		if strings.Count(k, "12") != 2 || len(k) != len(files[c.p.releaseFile])+2 {
			t.Errorf("%s: setVersion changed more than the two versions:\n%s", c.p.dir, k)
		}
		if _, err := c.p.setVersion("resources: [a.yaml]\n", "v2"); err == nil {
			t.Errorf("%s: setVersion of a file without versions should fail", c.p.dir)
		}
		db, err := c.p.setStorage(files[c.p.storageFile], "1Gi", "2Gi")
		if err != nil || !strings.Contains(db, "storage: 2Gi\n") || strings.Contains(db, "1Gi") {
			t.Errorf("%s: setStorage: %v\n%s", c.p.dir, err, db)
		}
		if _, err := c.p.setStorage(db, "1Gi", "3Gi"); err == nil {
			t.Errorf("%s: setStorage from a size the file does not have should fail", c.p.dir)
		}
	}
}

func TestRepoFilesAreTheEmbeddedRepositories(t *testing.T) {
	for _, repo := range demoRepos {
		files, err := repoFiles(repo, 2)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := files["README.md"]; !ok {
			t.Errorf("repository %s has no README.md: %v", repo, files)
		}
		for p := range files {
			if strings.HasPrefix(p, "demo/") || strings.HasPrefix(p, repo+"/") {
				t.Errorf("repository %s has file %s: paths are relative to the repository", repo, p)
			}
		}
	}
	if _, err := repoFiles("nope", 1); err == nil {
		t.Errorf("an unknown repository should be an error")
	}
}
