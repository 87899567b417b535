// Package helm tests the ground Helm charts as packages stand on, with real parts: a chart
// pushed to the local fleet's OCI registry and signed, source-controller serving it from an
// OCIRepository, helm-controller on the hub installing it on a member through the member's
// kubeconfig Secret, and tidegate's render of the chart (evidence/chart) against what
// helm-controller installed.
package helm

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
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
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/evidence"
	"github.com/tidegate/tidegate/evidence/chart"
	"github.com/tidegate/tidegate/internal/localfleet"
	"github.com/tidegate/tidegate/internal/simulator"
)

const demoChart = "../../testdata/charts/demo"

// A HelmRelease on the hub, its chart an OCIRepository of a signed chart in the fleet's registry
// and its kubeConfig a member's Secret, installs the chart on the member (the simulator makes the
// Deployment available, and the HelmRelease becomes Ready), upgrades it when the OCIRepository
// moves to the chart's next version, and rolls it back when it moves back. tidegate's render of
// the chart, from the archive source-controller serves and the values composed from the hub, is
// what helm-controller installed: the same objects, the same image and values, the same labels.
func TestHelmReleaseInstallsUpgradesAndRollsBackOnAMember(t *testing.T) {
	f := localfleet.StartForTest(t, localfleet.Options{Members: 1, HelmController: true})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := f.StartHelmController(ctx); err == nil {
		t.Error("a second helm-controller started on the same fleet")
	}
	hub := hubClient(t, f)
	member := f.Members[0]
	sim := simulator.New(map[string]client.Client{member.Name: member.Client}, simulator.Options{})
	sim.Start(ctx)
	defer sim.Stop()

	src, hr := createDemoRelease(ctx, t, f, hub, member)

	waitReleased(ctx, t, hub, hr, "0.1.0")
	checkDeployment(ctx, t, member, "registry.example/demo:1.0.0")
	compareRender(ctx, t, hub, member, src, hr, false)

	setTag(ctx, t, hub, src, "0.2.0")
	waitReleased(ctx, t, hub, hr, "0.2.0")
	checkDeployment(ctx, t, member, "registry.example/demo:2.0.0")
	compareRender(ctx, t, hub, member, src, hr, true)

	setTag(ctx, t, hub, src, "0.1.0")
	waitReleased(ctx, t, hub, hr, "0.1.0")
	checkDeployment(ctx, t, member, "registry.example/demo:1.0.0")
	compareRender(ctx, t, hub, member, src, hr, true)
	if hr.Status.History[0].Version != 3 {
		t.Errorf("history after going back to 0.1.0: %+v; want a third release of the chart", hr.Status.History)
	}
}

// createDemoRelease pushes the demo chart, signed, at 0.1.0 (app 1.0.0) and 0.2.0 (app 2.0.0), and
// creates on the hub an OCIRepository of it at 0.1.0, verified with the signing key, and a
// HelmRelease of it for member, its values from a ConfigMap and spec.values.
func createDemoRelease(ctx context.Context, t *testing.T, f *localfleet.Fleet, hub client.Client, member *localfleet.Member) (*sourcev1.OCIRepository, *helmv2.HelmRelease) {
	t.Helper()
	key, err := localfleet.NewCosignKey()
	if err != nil {
		t.Fatal(err)
	}
	push := func(version, appVersion string) {
		c, err := localfleet.PackageChart(demoChart, version, appVersion)
		if err != nil {
			t.Fatal(err)
		}
		a, err := localfleet.PushChart(f.Registry.Host+"/charts", c)
		if err != nil {
			t.Fatal(err)
		}
		if err := localfleet.Sign(a, key); err != nil {
			t.Fatal(err)
		}
	}
	push("", "")
	push("0.2.0", "2.0.0")

	ns := f.Namespace
	pub := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "charts-cosign", Namespace: ns}, Data: map[string][]byte{"cosign.pub": key.PublicPEM}}
	// A values layer from the hub, under spec.values: both reach the member as helm-controller
	// composes them, and tidegate's render composes them the same way.
	vals := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "demo-values", Namespace: ns},
		Data: map[string]string{"values.yaml": "greeting: from-the-hub\nreplicaCount: 1\n"}}
	src := &sourcev1.OCIRepository{
		ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: ns},
		Spec: sourcev1.OCIRepositorySpec{
			URL:       f.Registry.URL("charts/demo"),
			Reference: &sourcev1.OCIRepositoryRef{Tag: "0.1.0"},
			// The chart's layer as it is: the .tgz helm-controller loads.
			LayerSelector: &sourcev1.OCILayerSelector{MediaType: string(localfleet.HelmChartMediaType), Operation: sourcev1.OCILayerCopy},
			Insecure:      true,
			Interval:      metav1.Duration{Duration: 2 * time.Second},
			Verify:        &sourcev1.OCIRepositoryVerification{Provider: "cosign", SecretRef: &meta.LocalObjectReference{Name: pub.Name}},
		},
	}
	hr := &helmv2.HelmRelease{
		ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: ns},
		Spec: helmv2.HelmReleaseSpec{
			ChartRef:   &helmv2.CrossNamespaceSourceReference{Kind: sourcev1.OCIRepositoryKind, Name: src.Name},
			Interval:   metav1.Duration{Duration: time.Minute},
			KubeConfig: &meta.KubeConfigReference{SecretRef: &meta.SecretKeyReference{Name: member.KubeConfigSecret, Key: "value"}},
			// The release and its storage in one namespace of the member, which the install
			// creates: the HelmRelease's own namespace is the hub's, which the member need not have.
			TargetNamespace:  "apps",
			StorageNamespace: "apps",
			Install:          &helmv2.Install{CreateNamespace: true},
			ValuesFrom:       []helmv2.ValuesReference{{Kind: "ConfigMap", Name: vals.Name}},
			Values:           &apiextensionsv1.JSON{Raw: []byte(`{"service":{"port":8080}}`)},
		},
	}
	for _, o := range []client.Object{pub, vals, src, hr} {
		if err := hub.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	return src, hr
}

// hubClient is a client of the hub that knows helm-controller's types, which the fleet's scheme
// (tidegate's) does not.
func hubClient(t *testing.T, f *localfleet.Fleet) client.Client {
	t.Helper()
	s := localfleet.NewScheme()
	if err := helmv2.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(f.HubConfig, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// waitReleased waits until hr is Ready for the latest generation with its last release of the
// chart at version, and leaves it in hr.
func waitReleased(ctx context.Context, t *testing.T, hub client.Client, hr *helmv2.HelmRelease, version string) {
	t.Helper()
	seen := ""
	err := wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if err := hub.Get(ctx, client.ObjectKeyFromObject(hr), hr); err != nil {
			seen = err.Error()
			return false, nil
		}
		ready := conditions.Get(hr, meta.ReadyCondition)
		seen = fmt.Sprintf("Ready %+v, history %+v", ready, hr.Status.History)
		if ready == nil || ready.Status != metav1.ConditionTrue || hr.Status.ObservedGeneration != hr.Generation || len(hr.Status.History) == 0 {
			return false, nil
		}
		// helm-controller records the version with the OCI artifact's digest: "0.1.0+<12 hex>".
		released, _, _ := strings.Cut(hr.Status.History[0].ChartVersion, "+")
		return released == version, nil
	})
	if err != nil {
		t.Fatalf("HelmRelease %s did not release chart %s: %v; last seen: %s", hr.Name, version, err, seen)
	}
}

func setTag(ctx context.Context, t *testing.T, hub client.Client, src *sourcev1.OCIRepository, tag string) {
	t.Helper()
	if err := hub.Get(ctx, client.ObjectKeyFromObject(src), src); err != nil {
		t.Fatal(err)
	}
	src.Spec.Reference.Tag = tag
	if err := hub.Update(ctx, src); err != nil {
		t.Fatal(err)
	}
}

// checkDeployment checks the release's Deployment on the member: its image, and available, as
// the simulator made it.
func checkDeployment(ctx context.Context, t *testing.T, member *localfleet.Member, image string) {
	t.Helper()
	var d appsv1.Deployment
	if err := member.Client.Get(ctx, client.ObjectKey{Namespace: "apps", Name: "apps-demo"}, &d); err != nil {
		t.Fatalf("the release's Deployment on %s: %v", member.Name, err)
	}
	if got := d.Spec.Template.Spec.Containers[0].Image; got != image {
		t.Errorf("the Deployment on %s runs %s, want %s", member.Name, got, image)
	}
	if d.Status.AvailableReplicas != *d.Spec.Replicas {
		t.Errorf("the Deployment on %s has %d of %d replicas available", member.Name, d.Status.AvailableReplicas, *d.Spec.Replicas)
	}
}

// compareRender renders the chart source-controller serves for src, for hr with the values
// composed from the hub, and compares it with what helm-controller installed on member: the
// objects of its inventory; on the member, every object's labels and annotations, and the
// Deployment's replicas, image and greeting.
func compareRender(ctx context.Context, t *testing.T, hub client.Client, member *localfleet.Member, src *sourcev1.OCIRepository, hr *helmv2.HelmRelease, upgrade bool) {
	t.Helper()
	if err := hub.Get(ctx, client.ObjectKeyFromObject(src), src); err != nil {
		t.Fatal(err)
	}
	archive, err := evidence.FetchArtifact(ctx, http.DefaultClient, src.Status.Artifact.URL, src.Status.Artifact.Digest, 10<<20)
	if err != nil {
		t.Fatal(err)
	}
	values, err := chart.ComposeValues(ctx, hub, hr)
	if err != nil {
		t.Fatal(err)
	}
	r, err := chart.Render(ctx, archive, hr, values, chart.Options{SourceRevision: src.Status.Artifact.Revision, Upgrade: upgrade})
	if err != nil {
		t.Fatal(err)
	}
	last := hr.Status.History[0]
	if r.Version != last.ChartVersion || r.ReleaseName != last.Name || r.Namespace != last.Namespace {
		t.Errorf("rendered chart %s as release %s/%s; helm-controller released %s as %s/%s", r.Version, r.Namespace, r.ReleaseName, last.ChartVersion, last.Namespace, last.Name)
	}
	if hr.Status.Inventory == nil {
		t.Fatal("the HelmRelease has no inventory")
	}
	var rendered, installed []string
	for _, o := range r.Objects {
		// As helm-controller's inventory names an object: <namespace>_<name>_<group>_<kind>.
		gvk := o.GroupVersionKind()
		rendered = append(rendered, strings.Join([]string{o.GetNamespace(), o.GetName(), gvk.Group, gvk.Kind}, "_"))
	}
	for _, e := range hr.Status.Inventory.Entries {
		installed = append(installed, e.ID)
	}
	slices.Sort(rendered)
	slices.Sort(installed)
	if !slices.Equal(rendered, installed) {
		t.Errorf("rendered %v, helm-controller installed %v", rendered, installed)
	}
	for _, o := range r.Objects {
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(o.GroupVersionKind())
		if err := member.Client.Get(ctx, client.ObjectKeyFromObject(o), live); err != nil {
			t.Errorf("%s %s/%s rendered, not on %s: %v", o.GetKind(), o.GetNamespace(), o.GetName(), member.Name, err)
			continue
		}
		same(t, o.GetKind()+" labels", o.GetLabels(), live.GetLabels())
		same(t, o.GetKind()+" annotations", o.GetAnnotations(), live.GetAnnotations())
		if o.GetKind() == "Deployment" {
			if want, got := deploymentSummary(o), deploymentSummary(live); want != got {
				t.Errorf("the Deployment rendered %s, on %s %s", want, member.Name, got)
			}
		}
	}
}

// same fails unless live has what was rendered, no more and no less.
func same(t *testing.T, what string, rendered, live map[string]string) {
	t.Helper()
	if !maps.Equal(rendered, live) {
		t.Errorf("%s: rendered %v, on the member %v", what, rendered, live)
	}
}

// deploymentSummary is what the chart's values decide of its Deployment.
func deploymentSummary(d *unstructured.Unstructured) string {
	replicas, _, _ := unstructured.NestedInt64(d.Object, "spec", "replicas")
	containers, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	if len(containers) == 0 {
		return "no container"
	}
	c, _ := containers[0].(map[string]any)
	env, _, _ := unstructured.NestedSlice(c, "env")
	return fmt.Sprintf("replicas %d, image %v, env %v", replicas, c["image"], env)
}
