package evidence

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

const (
	configMapA = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  k: v\n"
	configMapB = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\n"
	deployment = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: "web:1.0"}]
`
	namespace = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: apps\n"
)

// renderPath renders the package at p without a template.
func renderPath(fsys filesys.FileSystem, p string) ([]*unstructured.Unstructured, error) {
	r, err := Render(fsys, kustomizev1.KustomizationSpec{Path: p})
	if err != nil {
		return nil, err
	}
	return r.Objects, nil
}

// refs renders objects as "apiVersion kind namespace/name" lines, for comparing order and set.
func refs(s Summary) string {
	var b strings.Builder
	for _, r := range s.Objects {
		b.WriteString(r.APIVersion + " " + r.Kind + " " + r.Namespace + "/" + r.Name + "\n")
	}
	return b.String()
}

func TestRenderWithKustomization(t *testing.T) {
	fsys := memFS(t, map[string]string{
		"app/kustomization.yaml":  "namespace: apps\nresources: [deploy.yaml, ../base, ns.yaml]\nimages: [{name: web, newTag: \"2.0\"}]\n",
		"app/deploy.yaml":         deployment,
		"app/ns.yaml":             namespace,
		"base/kustomization.yaml": "resources: [cm.yaml]\n",
		"base/cm.yaml":            configMapB + "---\n" + configMapA,
	})
	objs, err := renderPath(fsys, "./app")
	if err != nil {
		t.Fatalf("Render: %v", err)
	}
	want := "apps/v1 Deployment apps/web\nv1 ConfigMap apps/a\nv1 ConfigMap apps/b\nv1 Namespace /apps\n"
	if got := refs(Summarize(objs, 100)); got != want {
		t.Errorf("rendered\n%s\nwant\n%s", got, want)
	}
	image := objs[0].Object["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)["image"]
	if image != "web:2.0" {
		t.Errorf("image %v: the kustomization's images transformer was not applied", image)
	}
}

func TestRenderGeneratesKustomization(t *testing.T) {
	fsys := memFS(t, map[string]string{
		"app/b.yaml":                     configMapB,
		"app/a.yml":                      configMapA,
		"app/nested/deploy.yaml":         deployment,
		"app/README.md":                  "not a manifest",
		"app/values.json":                "{}",
		"app/sub/kustomization.yaml":     "namespace: sub\nresources: [ns.yaml]\n",
		"app/sub/ns.yaml":                namespace,
		"app/sub/not-listed.yaml":        configMapA,
		"elsewhere/ignored.yaml":         configMapA,
		"app/nested/deeper/another.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n",
	})
	for range 2 { // a second render of the same filesystem must agree
		objs, err := renderPath(fsys, "app")
		if err != nil {
			t.Fatalf("Render: %v", err)
		}
		if fsys.Exists("/app/kustomization.yaml") {
			t.Errorf("the generated kustomization.yaml was left in the filesystem")
		}
		// sub/ is listed as a directory: its own kustomization decides (renaming the Namespace,
		// leaving not-listed.yaml out); elsewhere/ is outside the path.
		want := "apps/v1 Deployment /web\nv1 ConfigMap /a\nv1 ConfigMap /b\nv1 ConfigMap /c\nv1 Namespace /sub\n"
		if got := refs(Summarize(objs, 100)); got != want {
			t.Errorf("rendered\n%s\nwant\n%s", got, want)
		}
	}
}

func TestRenderRoot(t *testing.T) {
	for _, p := range []string{"", ".", "./", "/"} {
		objs, err := renderPath(memFS(t, map[string]string{"cm.yaml": configMapA}), p)
		if err != nil || len(objs) != 1 {
			t.Errorf("Render(%q): %d objects, %v", p, len(objs), err)
		}
	}
}

func TestRenderEmptyDirectory(t *testing.T) {
	fsys := memFS(t, map[string]string{"app/README.md": "nothing to apply"})
	objs, err := renderPath(fsys, "./app")
	if err != nil || len(objs) != 0 {
		t.Fatalf("Render of a directory without manifests: %d objects, %v; want none and no error, as kustomize-controller", len(objs), err)
	}
}

func TestRenderErrors(t *testing.T) {
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		_, _ = w.Write([]byte(configMapA))
	}))
	defer srv.Close()

	marker := filepath.Join(t.TempDir(), "ran")
	script := filepath.Join(t.TempDir(), "fn.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\ntouch "+marker+"\ncat\n"), 0o755); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name  string
		files map[string]string
		path  string
		want  []string
	}{
		{name: "missing path", files: map[string]string{"app/cm.yaml": configMapA}, path: "./x",
			want: []string{"path ./x not found in the artifact"}},
		{name: "path is a file", files: map[string]string{"app/cm.yaml": configMapA}, path: "./app/cm.yaml",
			want: []string{"path ./app/cm.yaml is a file"}},
		{name: "path climbs out", files: map[string]string{"app/cm.yaml": configMapA}, path: "../app",
			want: []string{"path ../app leads outside the artifact"}},
		{name: "missing resource", files: map[string]string{"app/kustomization.yaml": "resources: [gone.yaml]\n"}, path: "./app",
			want: []string{"kustomize build of path ./app failed", "gone.yaml"}},
		{name: "duplicate object", files: map[string]string{"app/kustomization.yaml": "resources: [a.yaml, b.yaml]\n", "app/a.yaml": configMapA, "app/b.yaml": configMapA}, path: "./app",
			want: []string{"kustomize build of path ./app failed"}},
		{name: "invalid kustomization", files: map[string]string{"app/kustomization.yaml": "resourcez: [a.yaml]\n"}, path: "./app",
			want: []string{"path ./app", "app/kustomization.yaml", "resourcez"}},
		{name: "manifest that is not YAML", files: map[string]string{"app/bad.yaml": "kind: [unclosed"}, path: "./app",
			want: []string{"no kustomization file", "failed to decode Kubernetes YAML from app/bad.yaml"}},
		{name: "remote git base", files: map[string]string{"app/kustomization.yaml": "resources: [\"github.com/org/repo//deploy?ref=v1\"]\n"}, path: "./app",
			want: []string{"app/kustomization.yaml refers to", "remote"}},
		{name: "remote file", files: map[string]string{"app/kustomization.yaml": "resources: [" + srv.URL + "/cm.yaml]\n"}, path: "./app",
			want: []string{"remote"}},
		{name: "remote base in a nested kustomization", files: map[string]string{
			"app/kustomization.yaml":  "resources: [../base]\n",
			"base/kustomization.yaml": "resources: [\"git@github.com:org/repo.git\"]\n",
		}, path: "./app", want: []string{"base/kustomization.yaml refers to", "remote"}},
		{name: "remote patch", files: map[string]string{"app/kustomization.yaml": "resources: [cm.yaml]\npatches: [{path: \"" + srv.URL + "/p.yaml\"}]\n", "app/cm.yaml": configMapA}, path: "./app",
			want: []string{"remote"}},
		{name: "exec function", files: map[string]string{
			"app/kustomization.yaml": "resources: [cm.yaml]\ntransformers: [fn.yaml]\n",
			"app/cm.yaml":            configMapA,
			"app/fn.yaml":            "apiVersion: example.com/v1\nkind: Fn\nmetadata:\n  name: fn\n  annotations:\n    config.kubernetes.io/function: |\n      exec:\n        path: " + script + "\n",
		}, path: "./app", want: []string{"kustomize build of path ./app failed"}},
		{name: "helm", files: map[string]string{
			"app/kustomization.yaml": "helmCharts: [{name: x, repo: \"oci://example.com/charts\", version: 1.0.0}]\n",
		}, path: "./app", want: []string{"kustomize build of path ./app failed", "enable-helm"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := renderPath(memFS(t, tc.files), tc.path)
			if err == nil {
				t.Fatalf("Render succeeded, want an error mentioning %q", tc.want)
			}
			for _, s := range tc.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
		})
	}
	if n := requests.Load(); n != 0 {
		t.Errorf("rendering made %d HTTP requests; remote files must never be fetched", n)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("a KRM exec function ran during a render")
	}
}

func TestArtifactRender(t *testing.T) {
	a, err := Extract(tarGz(t,
		file("app/cm.yaml", configMapA),
		file("app/docs/notes (1).md", "left out, harmless"),
		file("other/cm.yaml", configMapA),
		file("other/my app.yaml", configMapB),
	), 10, 1<<20)
	if err != nil {
		t.Fatalf("Extract: %v", err)
	}
	r, err := a.Render(kustomizev1.KustomizationSpec{Path: "./app"})
	if err != nil || len(r.Objects) != 1 {
		t.Fatalf("Render(./app): %v; a skipped non-manifest must not matter", err)
	}
	_, err = a.Render(kustomizev1.KustomizationSpec{Path: "./other"})
	if err == nil || !strings.Contains(err.Error(), "other/my app.yaml") {
		t.Fatalf("Render(./other): %v; want an error naming the manifest that could not be held", err)
	}
}

func TestSummarize(t *testing.T) {
	objs := objects(t, configMapB, namespace, deployment, configMapA)
	s := Summarize(objs, 2)
	if s.Total != 4 || s.Truncated != 2 || len(s.Objects) != 2 {
		t.Fatalf("summary %+v: want 2 of 4 listed, 2 truncated", s)
	}
	if got, want := refs(s), "apps/v1 Deployment /web\nv1 ConfigMap /a\n"; got != want {
		t.Errorf("listed\n%s\nwant the first two in order\n%s", got, want)
	}
	if s := Summarize(objs, 10); s.Truncated != 0 || len(s.Objects) != 4 {
		t.Errorf("summary under the bound: %+v", s)
	}
	if s := Summarize(nil, 10); s.Objects == nil {
		t.Errorf("an empty summary must list [] rather than null for policies")
	}
}

func TestRenderConcurrently(t *testing.T) {
	errs := make(chan error, 8)
	for range 8 {
		fsys := memFS(t, map[string]string{"app/cm.yaml": configMapA, "app/deploy.yaml": deployment})
		go func() {
			objs, err := renderPath(fsys, "./app")
			if err == nil && len(objs) != 2 {
				err = fmt.Errorf("rendered %d objects, want 2", len(objs))
			}
			errs <- err
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
