package install

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/tidegate/tidegate/verdict"
)

// FuzzCheck checks arbitrary install-time values against an arbitrary schema, as deploySafe checks
// a package's tidegate/install.cue from its artifact: it never panics (not even inside CUE, which
// Check would recover from), a schema error names the schema file and leaves nothing checked, the
// lists are sorted, unique, about the values given and never both unknown and protected, values
// are taken literally (the same values decide the same way however many sets are checked at once),
// and a schema that declares nothing knows no value.
func FuzzCheck(f *testing.F) {
	for _, schema := range []string{
		example, "", "package install\n", "values: {...}", `values: [string]: =~"^[a-z]+$"`,
		"values: {a!: string, b?: int}", "protected: [1]", "protected: [\"a\"]\nvalues: a?: string",
		"values: {\n\tregion: \"eu\" |\n}\n", `import "struct"` + "\nvalues: struct.MaxFields(1)", "other: 1", "values: {a: b}\nb: 1",
		`import "strings"` + "\nvalues: a?: strings.MinRunes(3)", "values: _|_", "\x00",
	} {
		f.Add(schema, "region", "eu", "feature_x", "on")
		f.Add(schema, "replicas", `"; values: {x: 1} //`, "image", "${IMAGE}")
		f.Add(schema, "a", "", "a ", "\xff")
	}
	f.Fuzz(func(t *testing.T, schema, k1, v1, k2, v2 string) {
		values := map[string]string{k1: v1, k2: v2}
		ev, err := Check([]byte(schema), values)
		if err != nil {
			if strings.Contains(err.Error(), "internal error evaluating the schema") {
				t.Fatalf("CUE panicked on this schema: %v", err)
			}
			if !strings.HasPrefix(err.Error(), SchemaPath+": ") {
				t.Fatalf("a schema error that does not name %s: %v", SchemaPath, err)
			}
			if !reflect.DeepEqual(ev, verdict.InstallEvidence{Schema: true}) {
				t.Fatalf("a schema error with findings: %+v", ev)
			}
			return
		}
		if !ev.Schema {
			t.Fatal("a schema was checked, and the evidence says there is none")
		}
		for what, list := range map[string][]string{"unknownKeys": ev.UnknownKeys, "protectedKeys": ev.ProtectedKeys, "violations": ev.Violations} {
			if !slices.IsSorted(list) || len(slices.Compact(slices.Clone(list))) != len(list) {
				t.Fatalf("%s is not sorted and unique: %q", what, list)
			}
		}
		for _, k := range append(slices.Clone(ev.UnknownKeys), ev.ProtectedKeys...) {
			if _, given := values[k]; !given {
				t.Fatalf("key %q was not given: %+v", k, ev)
			}
			if slices.Contains(ev.UnknownKeys, k) && slices.Contains(ev.ProtectedKeys, k) {
				t.Fatalf("key %q is both unknown and protected", k)
			}
		}
		for _, v := range ev.Violations {
			if len(v) > maxMessage+len(k1)+len(k2)+len("values: ")+64 {
				t.Fatalf("a violation of %d bytes: %.80q…", len(v), v)
			}
		}
		// One set among others, the same values decide the same way.
		evs, err := CheckEach([]byte(schema), []map[string]string{{"other": "x"}, values, {}})
		if err != nil || !reflect.DeepEqual(evs[1], ev) {
			t.Fatalf("checked with other sets: %+v (%v), alone: %+v", evs[1], err, ev)
		}
		if strings.TrimSpace(schema) == "" && len(ev.UnknownKeys) != len(values) {
			t.Fatalf("an empty schema knows %v of %v", ev.UnknownKeys, values)
		}
	})
}
