package evidence

import (
	"os"
	"reflect"
	"strings"
	"testing"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// billionLaughs is a manifest whose aliases expand, level by level, to 9^levels strings.
func billionLaughs(levels int) string {
	var b strings.Builder
	b.WriteString("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: lol\nlaughs:\n  l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n")
	for i := 1; i <= levels; i++ {
		p := "*l" + string(rune('0'+i-1))
		b.WriteString("  l" + string(rune('0'+i)) + ": &l" + string(rune('0'+i)) + " [" + strings.Repeat(p+", ", 8) + p + "]\n")
	}
	return b.String()
}

// fileContents are the files of fsys by path.
func fileContents(t *testing.T, fsys filesys.FileSystem) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := fsys.Walk("/", func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		data, err := fsys.ReadFile(p)
		files[p] = string(data)
		return err
	})
	if err != nil {
		t.Fatalf("walking the artifact: %v", err)
	}
	return files
}

// FuzzRender renders a package of the fuzzer's (app/kustomization.yaml, none when empty, beside
// app/res.yaml; a base it may list, and a directory that lists it back) at a spec.path, targetNamespace and namePrefix of the
// fuzzer's. A render never panics, and an error is returned; the artifact is only read; no error
// names the render's working copy; every object has an apiVersion, kind and name, in the order of
// their references; the same render twice is the same build (digest and objects). Among the seeds:
// a kustomization that lists itself, two that list each other, aliases that multiply (a billion
// laughs) and deep nesting, both cut to a size a render gets through in a fraction of a second.
func FuzzRender(f *testing.F) {
	for _, s := range []struct{ kustomization, resource, path, targetNamespace, namePrefix string }{
		{"resources: [res.yaml, ../base]\n", configMapA, "app", "", ""},
		{"", deployment, "./app", "apps", "p-"},
		{"resources: [res.yaml]\nimages: [{name: web, newTag: \"2.0\"}]\n", deployment, "app", "", ""},
		{"resources: [res.yaml]\n", configMapB + "---\n" + configMapA, "/app/", "ns", ""},
		{"", "kind: [unclosed", "app", "", ""},
		{"resources: [gone.yaml]\n", "", "app", "", ""},
		{"", configMapA, "../app", "", ""},
		{"", configMapA, "app/res.yaml", "", ""},
		{"", configMapA, "", "Not_A_Namespace", "UPPER"},
		{"resources: [\"github.com/org/repo//x?ref=v1\"]\n", "", "app", "", ""},
		// Cycles: a kustomization that lists its own directory, and two that list each other.
		{"resources: [., res.yaml]\n", configMapA, "app", "", ""},
		{"resources: [../cycle]\n", configMapA, "app", "", ""},
		// Exhaustion, cut to the size a fuzz input may take: aliases that multiply (9^3 strings), and
		// nesting 300 deep in a manifest and in a kustomization. At full size a render is unbounded:
		// 6 levels of aliases (a 400-byte file) take 64 s and 10 GB, 5,000 levels of nesting 15 s
		// (docs/testing.md, FuzzRender); a render's budget is what bounds them.
		{"", billionLaughs(3), "app", "", ""},
		{"resources: [res.yaml]\n", configMapA + "x: " + strings.Repeat("[", 300) + strings.Repeat("]", 300) + "\n", "app", "", ""},
		{"patches: " + strings.Repeat("[", 300) + strings.Repeat("]", 300) + "\n", "", "app", "", ""},
		{"resources: [res.yaml]\n", configMapA + "y: " + strings.Repeat("{a: ", 300) + "1" + strings.Repeat("}", 300) + "\n", "app", "", ""},
	} {
		f.Add(s.kustomization, s.resource, s.path, s.targetNamespace, s.namePrefix)
	}
	f.Fuzz(func(t *testing.T, kustomization, resource, path, targetNamespace, namePrefix string) {
		files := map[string]string{
			"app/res.yaml":            resource,
			"base/kustomization.yaml": "resources: [cm.yaml]\n",
			"base/cm.yaml":            configMapB,
			// A cycle when the package lists it: it lists the package back.
			"cycle/kustomization.yaml": "resources: [../app]\n",
		}
		if kustomization != "" {
			files["app/kustomization.yaml"] = kustomization
		}
		fsys := memFS(t, files)
		before := fileContents(t, fsys)
		spec := kustomizev1.KustomizationSpec{Path: path, TargetNamespace: targetNamespace, NamePrefix: namePrefix}
		r, err := Render(fsys, spec)
		if after := fileContents(t, fsys); !reflect.DeepEqual(after, before) {
			t.Fatalf("the render changed the artifact: %v, was %v", after, before)
		}
		if err != nil {
			if strings.Contains(err.Error(), "tidegate-render-") {
				t.Fatalf("an error names the render's working copy: %v", err)
			}
			return
		}
		for i, o := range r.Objects {
			if o.GetAPIVersion() == "" || o.GetKind() == "" || o.GetName() == "" {
				t.Fatalf("rendered an object without apiVersion, kind or name: %v", o.Object)
			}
			if i > 0 && RefOf(o).less(RefOf(r.Objects[i-1])) {
				t.Fatalf("objects out of order: %v before %v", RefOf(r.Objects[i-1]), RefOf(o))
			}
		}
		again, err := Render(fsys, spec)
		if err != nil {
			t.Fatalf("the same render again fails: %v", err)
		}
		if again.Digest() != r.Digest() || !reflect.DeepEqual(again.Objects, r.Objects) {
			t.Fatalf("the same render twice gives builds %s and %s", r.Digest(), again.Digest())
		}
	})
}
