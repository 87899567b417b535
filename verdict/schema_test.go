package verdict

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"cuelang.org/go/cue"
	"cuelang.org/go/cue/format"
)

// TestCUEFilesFormatted is `cue fmt --check` over the embedded files and the test policies.
func TestCUEFilesFormatted(t *testing.T) {
	files := map[string][]byte{}
	for n, b := range SchemaFiles() {
		files["verdict/schema/"+n] = b
	}
	for n, b := range embeddedFiles(defaultPolicyFS, "policy") {
		files["verdict/policy/"+n] = b
	}
	for _, dir := range subdirs(t, policiesDir) {
		if dir == "syntax-error" {
			continue
		}
		for n, b := range readPolicyDir(t, filepath.Join(policiesDir, dir)) {
			files["testdata/policies/"+dir+"/"+n] = b
		}
	}
	for name, src := range files {
		got, err := format.Source(src, format.Simplify())
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if !bytes.Equal(got, src) {
			t.Errorf("%s is not formatted: run cue fmt on it", name)
		}
	}
}

// TestExamplesPassDefaultPolicy: the example evidence is complete (LoadPolicy relies on it to
// reach every constraint) and passes the default policy.
func TestExamplesPassDefaultPolicy(t *testing.T) {
	for _, g := range Gates {
		ex := ExampleEvidence(g)
		if ex == nil {
			t.Fatalf("no example evidence for %s", g)
		}
		d, err := Evaluate(DefaultPolicy(), g, ex)
		if err != nil || !d.Pass {
			t.Errorf("%s example: %+v %v", g, d, err)
		}
	}
	if ExampleEvidence("nope") != nil {
		t.Error("example evidence for an unknown gate")
	}
}

// TestGoTypesMatchSchema keeps the Go evidence types and the CUE schemas one contract: every
// field path of a schema is a JSON field of the Go type and the other way round, and the example
// evidence decodes into the Go type with no field left over.
func TestGoTypesMatchSchema(t *testing.T) {
	types := map[string]reflect.Type{
		GateDeploySafe:       reflect.TypeOf(DeploySafeEvidence{}),
		GateNoDisruption:     reflect.TypeOf(NoDisruptionEvidence{}),
		GateRollbackSafe:     reflect.TypeOf(RollbackSafeEvidence{}),
		GateRollbackSucceeds: reflect.TypeOf(RollbackSucceedsEvidence{}),
	}
	p := DefaultPolicy()
	root, err := p.compile(newContext())
	if err != nil {
		t.Fatal(err)
	}
	for gate, typ := range types {
		def := root.LookupPath(cue.ParsePath(schemaOf[gate]))
		cuePaths := map[string]bool{}
		schemaPaths(def, "", cuePaths)
		goPaths := map[string]bool{}
		goJSONPaths(typ, "", goPaths)
		if missing, extra := diff(cuePaths, goPaths), diff(goPaths, cuePaths); len(missing)+len(extra) > 0 {
			t.Errorf("%s: schema fields without a Go field %q; Go fields without a schema field %q", gate, missing, extra)
		}
		dec := json.NewDecoder(bytes.NewReader(ExampleEvidence(gate)))
		dec.DisallowUnknownFields()
		v := reflect.New(typ).Interface()
		if err := dec.Decode(v); err != nil {
			t.Errorf("%s example into %s: %v", gate, typ, err)
		}
		// And back: what Go writes, the schema takes.
		if d, err := Evaluate(p, gate, v); err != nil || !d.Pass {
			t.Errorf("%s: the example through the Go type: %+v %v", gate, d, err)
		}
	}
}

func schemaPaths(v cue.Value, prefix string, out map[string]bool) {
	if v.IncompleteKind() == cue.ListKind {
		if e := v.LookupPath(cue.MakePath(cue.AnyIndex)); e.Exists() {
			schemaPaths(e, prefix+"[]", out)
		}
		return
	}
	if v.IncompleteKind()&cue.StructKind == 0 {
		return
	}
	it, err := v.Fields(cue.Optional(true))
	if err != nil {
		return
	}
	for it.Next() {
		p := strings.TrimPrefix(prefix+"."+it.Selector().Unquoted(), ".")
		out[p] = true
		schemaPaths(it.Value(), p, out)
	}
}

func goJSONPaths(t reflect.Type, prefix string, out map[string]bool) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() == reflect.Slice {
		goJSONPaths(t.Elem(), prefix+"[]", out)
		return
	}
	if t.Kind() != reflect.Struct || t.PkgPath() == "time" {
		return
	}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name := strings.Split(f.Tag.Get("json"), ",")[0]
		if f.Anonymous && name == "" {
			goJSONPaths(f.Type, prefix, out)
			continue
		}
		p := strings.TrimPrefix(prefix+"."+name, ".")
		out[p] = true
		goJSONPaths(f.Type, p, out)
	}
}

func diff(a, b map[string]bool) []string {
	var out []string
	for k := range a {
		if !b[k] {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// TestSchemaFilesStandalone: the schema files are a CUE package of their own that compiles
// without tidegate's help (the cue command can vet them).
func TestSchemaFilesStandalone(t *testing.T) {
	files := SchemaFiles()
	if len(files) < 5 {
		t.Fatalf("schema files: %v", sortedNames(files))
	}
	for n, b := range files {
		if !bytes.HasPrefix(bytes.TrimLeft(stripComments(b), "\n"), []byte("package schema")) {
			t.Errorf("%s: not package schema", n)
		}
	}
	if _, err := os.Stat("schema/examples"); err != nil {
		t.Fatal(err)
	}
}

func stripComments(b []byte) []byte {
	var out [][]byte
	for _, l := range bytes.Split(b, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(l), []byte("//")) {
			out = append(out, l)
		}
	}
	return bytes.Join(out, []byte("\n"))
}
