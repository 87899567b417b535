package deploy

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tgimage "github.com/tidegate/tidegate/hack/lib/image"
	"github.com/tidegate/tidegate/hack/lib/release"
	"github.com/tidegate/tidegate/test/testenv"
)

// decodeAll reads the objects of a multi-document YAML file.
func decodeAll(t *testing.T, name string, b []byte) []*unstructured.Unstructured {
	t.Helper()
	d := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	var objs []*unstructured.Unstructured
	for {
		var raw json.RawMessage
		err := d.Decode(&raw)
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(raw) == 0 || string(raw) == "null" {
			continue
		}
		// Through unstructured's JSON decoding, as buildConfig does: integers stay int64.
		o := &unstructured.Unstructured{}
		if err := o.UnmarshalJSON(raw); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		objs = append(objs, o)
	}
}

// The release manifests (`make release`) are config/ as the tests above check it, the controller's
// image set by tag and digest: install.yaml is config/default object for object but the image,
// crds.yaml holds the CRDs alone, admission.yaml the admission policies and controller.yaml the
// rest but the fleet namespace `fleet` (install.yaml's alone), and the API server accepts them over
// an installed config/default, as an upgrade applies them.
func TestDeployRelease(t *testing.T) {
	ref := tgimage.Repository + ":v9.9.9@sha256:" + strings.Repeat("ab", 32)
	files, err := release.Build(filepath.Join(testenv.RepoRoot(), "config"), ref)
	if err != nil {
		t.Fatal(err)
	}
	crds := decodeAll(t, release.CRDs, files[release.CRDs])
	controller := decodeAll(t, release.Controller, files[release.Controller])
	admission := decodeAll(t, release.Admission, files[release.Admission])
	install := decodeAll(t, release.Install, files[release.Install])

	want := mustBuild(t)
	if len(install) != len(want) {
		t.Fatalf("install.yaml has %d objects, config/default %d", len(install), len(want))
	}
	for i, o := range want {
		o = o.DeepCopy()
		if o.GetKind() == "Deployment" {
			containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
			for _, c := range containers {
				c.(map[string]any)["image"] = ref
			}
			if err := unstructured.SetNestedSlice(o.Object, containers, "spec", "template", "spec", "containers"); err != nil {
				t.Fatal(err)
			}
		}
		if !reflect.DeepEqual(install[i].Object, o.Object) {
			t.Errorf("install.yaml's %s differs from config/default's with the image set to %s", describe(install[i]), ref)
		}
	}
	// kubectl applies a file in order, in one pass: each object must come after its Namespace.
	for name, objs := range map[string][]*unstructured.Unstructured{release.Controller: controller, release.Install: install} {
		seen := map[string]bool{}
		for _, o := range objs {
			if o.GetKind() == "Namespace" {
				seen[o.GetName()] = true
			}
			if ns := o.GetNamespace(); ns != "" && !seen[ns] && hasNamespace(objs, ns) {
				t.Errorf("%s: %s comes before its Namespace %s: kubectl apply -f %s on a new cluster fails on it", name, describe(o), ns, name)
			}
		}
	}
	var parts, whole []string
	for _, o := range crds {
		if o.GetKind() != "CustomResourceDefinition" {
			t.Errorf("crds.yaml holds %s", describe(o))
		}
		parts = append(parts, describe(o))
	}
	for _, o := range controller {
		if o.GetKind() == "CustomResourceDefinition" {
			t.Errorf("controller.yaml holds %s: deleting the controller would delete every object of that kind", describe(o))
		}
		parts = append(parts, describe(o))
	}
	for _, o := range admission {
		parts = append(parts, describe(o))
	}
	for _, o := range install {
		whole = append(whole, describe(o))
		if o.GetKind() == "Namespace" && o.GetName() == defaultFleet {
			parts = append(parts, describe(o))
		}
	}
	sort.Strings(parts)
	sort.Strings(whole)
	if !slices.Equal(parts, whole) {
		t.Errorf("crds.yaml, controller.yaml, admission.yaml and Namespace fleet hold%s\ninstall.yaml%s", joinLines(parts), joinLines(whole))
	}

	mustBeInstalled(t)
	ctx := hub(t, time.Minute)
	n := warnings.count()
	for _, o := range slices.Concat(crds, controller, admission) {
		if err := applyObj(ctx, o, client.DryRunAll); err != nil {
			t.Errorf("the release over config/default: %v", err)
		}
	}
	if w, _ := warnings.since(n); len(w) > 0 {
		t.Errorf("the API server warned:%s", joinLines(w))
	}

	for _, bad := range []string{"", tgimage.Repository + ":latest", tgimage.Repository + "@sha256:" + strings.Repeat("ab", 32), tgimage.Repository + ":v1@sha256:abc"} {
		if _, err := release.Build(filepath.Join(testenv.RepoRoot(), "config"), bad); err == nil || !strings.Contains(err.Error(), "make image") {
			t.Errorf("release.Build with image %q: %v, want an error saying to run make image", bad, err)
		}
	}
}

// hasNamespace is whether objs holds the Namespace ns.
func hasNamespace(objs []*unstructured.Unstructured, ns string) bool {
	for _, o := range objs {
		if o.GetKind() == "Namespace" && o.GetName() == ns {
			return true
		}
	}
	return false
}
