package chart

import (
	"context"
	"slices"
	"strings"
	"testing"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tidegate/tidegate/internal/localfleet"
)

// archive packages the chart testdata/charts/<name> as the fleet's registry serves it.
func archive(t *testing.T, name string) []byte {
	t.Helper()
	c, err := localfleet.PackageChart("../../testdata/charts/"+name, "", "")
	if err != nil {
		t.Fatal(err)
	}
	return c.Archive
}

func helmRelease(namespace, name string) *helmv2.HelmRelease {
	return &helmv2.HelmRelease{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
}

func refs(objs []*unstructured.Unstructured) []string {
	var out []string
	for _, o := range objs {
		out = append(out, o.GetKind()+" "+o.GetNamespace()+"/"+o.GetName())
	}
	return out
}

func field(t *testing.T, o *unstructured.Unstructured, path ...string) any {
	t.Helper()
	v, found, err := unstructured.NestedFieldNoCopy(o.Object, path...)
	if !found || err != nil {
		t.Fatalf("%s %s has no %s: %v", o.GetKind(), o.GetName(), strings.Join(path, "."), err)
	}
	return v
}

// The chart renders as helm-controller installs it for a HelmRelease with a target namespace: the
// release named <targetNamespace>-<name> in the target namespace, the objects without a namespace
// put there, the values given over the chart's, each object labelled with the HelmRelease it comes
// from and marked as the release's; spec.commonMetadata's labels and annotations too, the origin
// labels winning over a common label of the same key.
func TestRenderAsHelmControllerInstalls(t *testing.T) {
	hr := helmRelease("fleet", "demo")
	hr.Spec.TargetNamespace = "apps"
	hr.Spec.CommonMetadata = &helmv2.CommonMetadata{
		Labels:      map[string]string{"team": "payments", "helm.toolkit.fluxcd.io/name": "other"},
		Annotations: map[string]string{"owner": "payments@example.com"},
	}
	values := map[string]any{"greeting": "hi", "image": map[string]any{"tag": "9.9.9"}}
	r, err := Render(context.Background(), archive(t, "demo"), hr, values, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Chart != "demo" || r.Version != "0.1.0" || r.ReleaseName != "apps-demo" || r.Namespace != "apps" {
		t.Errorf("chart %s %s, release %s in %s; want demo 0.1.0, apps-demo in apps", r.Chart, r.Version, r.ReleaseName, r.Namespace)
	}
	if got, want := refs(r.Objects), []string{"Deployment apps/apps-demo", "Service apps/apps-demo"}; !slices.Equal(got, want) {
		t.Fatalf("objects %v, want %v", got, want)
	}
	if len(r.CRDs) != 0 || len(r.Hooks) != 0 {
		t.Errorf("CRDs %v, hooks %v; the chart has neither", refs(r.CRDs), r.Hooks)
	}
	deploy := r.Objects[0]
	container := field(t, deploy, "spec", "template", "spec", "containers").([]any)[0].(map[string]any)
	if container["image"] != "registry.example/demo:9.9.9" {
		t.Errorf("image %v, want the values' tag", container["image"])
	}
	if env := container["env"].([]any)[0].(map[string]any); env["value"] != "hi" {
		t.Errorf("GREETING %v, want the values' greeting", env["value"])
	}
	if replicas := field(t, deploy, "spec", "replicas"); replicas != int64(2) {
		t.Errorf("replicas %v (%T), want the chart's default 2", replicas, replicas)
	}
	for _, o := range r.Objects {
		l, a := o.GetLabels(), o.GetAnnotations()
		for k, want := range map[string]string{
			"helm.toolkit.fluxcd.io/name": "demo", "helm.toolkit.fluxcd.io/namespace": "fleet",
			"app.kubernetes.io/managed-by": "Helm", "team": "payments", "app.kubernetes.io/instance": "apps-demo",
		} {
			if l[k] != want {
				t.Errorf("%s label %s = %q, want %q", o.GetKind(), k, l[k], want)
			}
		}
		for k, want := range map[string]string{
			"meta.helm.sh/release-name": "apps-demo", "meta.helm.sh/release-namespace": "apps", "owner": "payments@example.com",
		} {
			if a[k] != want {
				t.Errorf("%s annotation %s = %q, want %q", o.GetKind(), k, a[k], want)
			}
		}
	}
}

// Without a target namespace the release is named after the HelmRelease and lives in its
// namespace; a name over Helm's 53 characters is shortened as helm-controller shortens it.
func TestReleaseNameAndNamespace(t *testing.T) {
	long := strings.Repeat("a", 50)
	for _, tc := range []struct {
		name, target, releaseName string
		wantName, wantNamespace   string
	}{
		{"demo", "", "", "demo", "fleet"},
		{"demo", "apps", "", "apps-demo", "apps"},
		{"demo", "apps", "mine", "mine", "apps"},
		{long, "", "", long, "fleet"},
		// "apps-" + 50 a's is 55 characters: the first 40, a hyphen, 12 hex digits of the sha256.
		{long, "apps", "", "apps-" + strings.Repeat("a", 35) + "-901c7ca124b4", "apps"},
	} {
		hr := helmRelease("fleet", tc.name)
		hr.Spec.TargetNamespace, hr.Spec.ReleaseName = tc.target, tc.releaseName
		if got := ReleaseName(hr); got != tc.wantName || len(got) > 53 {
			t.Errorf("ReleaseName(%s, target %q, releaseName %q) = %q, want %q", tc.name, tc.target, tc.releaseName, got, tc.wantName)
		}
		if got := ReleaseNamespace(hr); got != tc.wantNamespace {
			t.Errorf("ReleaseNamespace(target %q) = %q, want %q", tc.target, got, tc.wantNamespace)
		}
	}
}

// A chart's crds/ files come back apart from its objects, and its hooks apart too, with their
// events and weight; an object of a kind the chart's CRDs declare namespaced is put in the
// release's namespace, one they declare cluster-scoped is left without, and so is a cluster-scoped
// kind of Kubernetes'. The options stand for what
// helm-controller reads from the member: an upgrade renders as one, and the member's version is
// the templates' .Capabilities.KubeVersion.
func TestRenderSeparatesCRDsAndHooks(t *testing.T) {
	hr := helmRelease("fleet", "widgets")
	r, err := Render(context.Background(), archive(t, "hooks"), hr, nil, Options{Upgrade: true, KubeVersion: "v1.37.2"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"CustomResourceDefinition /widgets.example.tidegate.dev", "CustomResourceDefinition /gadgets.example.tidegate.dev"}
	if got := refs(r.CRDs); !slices.Equal(got, want) {
		t.Errorf("CRDs %v, want %v", got, want)
	}
	want = []string{"Gadget /widgets", "Widget fleet/widgets", "ClusterRole /widgets-widgets", "ConfigMap fleet/widgets-settings"}
	if got := refs(r.Objects); !slices.Equal(got, want) {
		t.Errorf("objects %v, want %v", got, want)
	}
	if len(r.Hooks) != 1 {
		t.Fatalf("hooks %+v, want the migration Job", r.Hooks)
	}
	h := r.Hooks[0]
	if h.Kind != "Job" || h.Name != "widgets-migrate" || !slices.Equal(h.Events, []string{"pre-install", "pre-upgrade"}) || h.Weight != -1 {
		t.Errorf("hook %s %s, events %v, weight %d", h.Kind, h.Name, h.Events, h.Weight)
	}
	if h.Object.GetNamespace() != "fleet" || h.Object.GetLabels()["helm.toolkit.fluxcd.io/name"] != "widgets" {
		t.Errorf("the hook's object: namespace %q, labels %v; want the release's namespace and the origin labels", h.Object.GetNamespace(), h.Object.GetLabels())
	}
	for _, o := range r.Objects {
		if o.GetKind() != "ConfigMap" {
			continue
		}
		if got := field(t, o, "data", "rendered-as"); got != "upgrade" {
			t.Errorf("rendered as %v, want upgrade", got)
		}
		if got := field(t, o, "data", "kube-version"); got != "v1.37.2" {
			t.Errorf(".Capabilities.KubeVersion %v, want the member's", got)
		}
	}
	install, err := Render(context.Background(), archive(t, "hooks"), hr, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range install.Objects {
		if o.GetKind() == "ConfigMap" && field(t, o, "data", "rendered-as") != "install" {
			t.Errorf("a first install rendered as %v", field(t, o, "data", "rendered-as"))
		}
	}
}

// A chart of an OCIRepository renders with the digest of the source's revision in its version, as
// helm-controller renders it, so that .Chart.Version (here in the helm.sh/chart label) is what the
// member gets; a tag naming another version than the chart's is refused, as helm-controller
// refuses it.
func TestRenderWithTheSourceDigestInTheVersion(t *testing.T) {
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, tc := range []struct{ revision, want string }{
		{"", "0.1.0"},
		{"0.1.0@" + digest, "0.1.0+0123456789ab"},
		{"latest@" + digest, "0.1.0+0123456789ab"},
		{digest, "0.1.0+0123456789ab"},
	} {
		r, err := Render(context.Background(), archive(t, "demo"), helmRelease("fleet", "demo"), nil, Options{SourceRevision: tc.revision})
		if err != nil {
			t.Fatalf("revision %q: %v", tc.revision, err)
		}
		label := strings.ReplaceAll("demo-"+tc.want, "+", "_")
		if r.Version != tc.want || r.Objects[0].GetLabels()["helm.sh/chart"] != label {
			t.Errorf("revision %q: version %s, label %q; want %s, %q", tc.revision, r.Version, r.Objects[0].GetLabels()["helm.sh/chart"], tc.want, label)
		}
	}
	for _, revision := range []string{"0.2.0@" + digest, "0.1.0@sha256:0123", "no-digest"} {
		if _, err := Render(context.Background(), archive(t, "demo"), helmRelease("fleet", "demo"), nil, Options{SourceRevision: revision}); err == nil {
			t.Errorf("revision %q rendered", revision)
		}
	}
}

// What Render cannot render as helm-controller would, it refuses: a HelmRelease's kustomize
// post-renderers, and an archive that is no chart.
func TestRenderRefuses(t *testing.T) {
	hr := helmRelease("fleet", "demo")
	hr.Spec.PostRenderers = []helmv2.PostRenderer{{Kustomize: &helmv2.Kustomize{}}}
	if _, err := Render(context.Background(), archive(t, "demo"), hr, nil, Options{}); err == nil || !strings.Contains(err.Error(), "postRenderers") {
		t.Errorf("a HelmRelease with post-renderers: %v", err)
	}
	if _, err := Render(context.Background(), []byte("not a chart"), helmRelease("fleet", "demo"), nil, Options{}); err == nil {
		t.Error("an archive that is no chart rendered")
	}
}

// Values a chart's values.schema.json refuses are refused, with the path Helm names, as Helm's
// install action refuses them when helm-controller installs or upgrades; a HelmRelease that
// disables the validation of the step it renders (spec.install or spec.upgrade) renders them.
func TestRenderValidatesValuesAgainstTheChartsSchema(t *testing.T) {
	c, err := localfleet.PackageChartFiles("strict", map[string]string{
		"Chart.yaml":            "apiVersion: v2\nname: strict\nversion: 1.0.0\n",
		"values.yaml":           "replicas: 1\n",
		"values.schema.json":    `{"type": "object", "properties": {"replicas": {"type": "integer", "maximum": 5}}}`,
		"templates/config.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: strict\ndata:\n  replicas: {{ .Values.replicas | quote }}\n",
	}, "", "")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := Render(ctx, c.Archive, helmRelease("fleet", "strict"), map[string]any{"replicas": float64(3)}, Options{}); err != nil {
		t.Errorf("values the schema allows: %v", err)
	}
	for _, upgrade := range []bool{false, true} {
		_, err := Render(ctx, c.Archive, helmRelease("fleet", "strict"), map[string]any{"replicas": float64(9)}, Options{Upgrade: upgrade})
		if err == nil || !strings.Contains(err.Error(), "/replicas") {
			t.Errorf("upgrade %v: values the schema refuses: %v", upgrade, err)
		}
	}
	hr := helmRelease("fleet", "strict")
	hr.Spec.Upgrade = &helmv2.Upgrade{DisableSchemaValidation: true}
	if _, err := Render(ctx, c.Archive, hr, map[string]any{"replicas": float64(9)}, Options{Upgrade: true}); err != nil {
		t.Errorf("an upgrade without schema validation: %v", err)
	}
	if _, err := Render(ctx, c.Archive, hr, map[string]any{"replicas": float64(9)}, Options{}); err == nil {
		t.Error("an install validates, whatever spec.upgrade says")
	}
}
