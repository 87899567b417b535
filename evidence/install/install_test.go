package install

import (
	"reflect"
	"strings"
	"testing"

	"github.com/tidegate/tidegate/verdict"
)

// example is the schema of the package documentation.
const example = `package install

// values are the install-time values the package accepts.
values: {
	replicas?: =~"^[0-9]+$"
	region:    "eu" | "us"
	logLevel?: *"info" | "debug" | "info" | "warn"
	[=~"^feature_"]: "on" | "off"
}
// protected lists settings the package fixes at build time.
protected: ["image", "namespace"]
`

func TestCheck(t *testing.T) {
	tests := []struct {
		name   string
		schema *string // nil: the package ships no schema
		values map[string]string
		want   verdict.InstallEvidence
		err    string // the exact error, "" for none
	}{
		{
			name:   "no schema",
			values: map[string]string{"anything": "goes", "image": "x"},
			want:   verdict.InstallEvidence{},
		},
		{
			name:   "all good",
			schema: s(example),
			values: map[string]string{"replicas": "3", "region": "eu", "logLevel": "debug"},
			want:   verdict.InstallEvidence{Schema: true},
		},
		{
			name:   "empty schema declares nothing",
			schema: s(""),
			values: map[string]string{"region": "eu"},
			want:   verdict.InstallEvidence{Schema: true, UnknownKeys: []string{"region"}},
		},
		{
			name:   "any package name, and no values given",
			schema: s("package foo\nvalues: {a?: string}"),
			want:   verdict.InstallEvidence{Schema: true},
		},
		{
			name:   "unknown key",
			schema: s(example),
			values: map[string]string{"region": "us", "regoin": "us"},
			want:   verdict.InstallEvidence{Schema: true, UnknownKeys: []string{"regoin"}},
		},
		{
			name:   "protected key",
			schema: s(example),
			values: map[string]string{"region": "us", "image": "evil:latest"},
			want:   verdict.InstallEvidence{Schema: true, ProtectedKeys: []string{"image"}},
		},
		{
			name:   "protected wins over a pattern",
			schema: s(`values: {[=~"^feature_"]: "on" | "off"}` + "\n" + `protected: ["feature_core"]`),
			values: map[string]string{"feature_core": "on", "feature_x": "off"},
			want:   verdict.InstallEvidence{Schema: true, ProtectedKeys: []string{"feature_core"}},
		},
		{
			name:   "violation: value not matching",
			schema: s(example),
			values: map[string]string{"region": "asia", "replicas": "three"},
			want: verdict.InstallEvidence{Schema: true, Violations: []string{
				`region: 2 errors in empty disjunction: conflicting values "eu" and "asia"; conflicting values "us" and "asia"`,
				`replicas: invalid value "three" (out of bound =~"^[0-9]+$")`,
			}},
		},
		{
			name:   "missing required",
			schema: s(example),
			values: map[string]string{"replicas": "2"},
			want:   verdict.InstallEvidence{Schema: true, Violations: []string{"region: required install-time value is missing"}},
		},
		{
			name:   "missing required marked !, even with a default",
			schema: s(`values: {a!: string, b!: *"x" | "y", c?: string}`),
			values: map[string]string{"c": "z"},
			want: verdict.InstallEvidence{Schema: true, Violations: []string{
				"a: required install-time value is missing",
				"b: required install-time value is missing",
			}},
		},
		{
			name:   "pattern-declared key",
			schema: s(example),
			values: map[string]string{"region": "eu", "feature_a": "on", "feature_b": "maybe", "featurex": "on"},
			want: verdict.InstallEvidence{
				Schema:      true,
				UnknownKeys: []string{"featurex"},
				Violations: []string{
					`feature_b: 2 errors in empty disjunction: conflicting values "off" and "maybe"; conflicting values "on" and "maybe"`,
				},
			},
		},
		{
			name:   "open struct declares every name",
			schema: s(`values: {a?: "x", ...}`),
			values: map[string]string{"a": "y", "b": "anything"},
			want:   verdict.InstallEvidence{Schema: true, Violations: []string{`a: conflicting values "y" and "x"`}},
		},
		{
			name:   "default used when missing",
			schema: s(`values: {level: *"info" | "debug", fixed: "x", opt?: *"a" | "b"}`),
			values: map[string]string{},
			want:   verdict.InstallEvidence{Schema: true},
		},
		{
			name:   "default overridden",
			schema: s(`values: {level: *"info" | "debug"}`),
			values: map[string]string{"level": "trace"},
			want: verdict.InstallEvidence{Schema: true, Violations: []string{
				`level: 2 errors in empty disjunction: conflicting values "debug" and "trace"; conflicting values "info" and "trace"`,
			}},
		},
		{
			name: "comprehension makes a field required",
			schema: s(`values: {
	tier: *"small" | "large"
	replicas?: =~"^[0-9]+$"
	if tier == "large" {replicas!: _}
}`),
			values: map[string]string{"tier": "large"},
			want:   verdict.InstallEvidence{Schema: true, Violations: []string{"replicas: required install-time value is missing"}},
		},
		{
			name:   "validator on the whole struct",
			schema: s("import \"struct\"\nvalues: {a?: string, b?: string} & struct.MaxFields(1)"),
			values: map[string]string{"a": "1", "b": "2"},
			want: verdict.InstallEvidence{Schema: true, Violations: []string{
				`values: invalid value {a:"1",b:"2"} (does not satisfy struct.MaxFields(1))`,
			}},
		},
		{
			name: "definitions and hidden fields are helpers",
			schema: s(`#Region: "eu" | "us"
_levels: ["info", "debug"]
#Values: {
	region: #Region
	level?: or(_levels)
}
values: #Values`),
			values: map[string]string{"region": "us", "level": "trace", "#Region": "eu", "_levels": "x"},
			want: verdict.InstallEvidence{
				Schema:      true,
				UnknownKeys: []string{"#Region", "_levels"},
				Violations: []string{
					`level: 2 errors in empty disjunction: conflicting values "debug" and "trace"; conflicting values "info" and "trace"`,
				},
			},
		},
		{
			name:   "validator on the whole struct, satisfied",
			schema: s(`values: {a?: string, b?: string} & matchN(<=1, [{a!: _}, {b!: _}])`),
			values: map[string]string{"a": "1"},
			want:   verdict.InstallEvidence{Schema: true},
		},
		{
			name:   "validator on the whole struct, violated",
			schema: s(`values: {a?: string, b?: string} & matchN(<=1, [{a!: _}, {b!: _}])`),
			values: map[string]string{"a": "1", "b": "2"},
			want: verdict.InstallEvidence{Schema: true, Violations: []string{
				`values: invalid value {a:"1",b:"2"} (does not satisfy matchN)`,
			}},
		},
		{
			name: "odd keys and values are taken literally",
			schema: s(`import "strings"
values: {
	"a.b"?:   string
	"x\"y"?:  =~"^[a-z]+$"
	"#h"?:    string
	"${x}"?:  "${y}"
	msg?:     strings.MaxRunes(40)
	#hidden:  string
	_private: string
}`),
			values: map[string]string{
				"a.b":      `"} & {a: 1`,
				"x\"y":     `\(x)${y}"`,
				"#h":       "line\nbreak",
				"${x}":     "${y}",
				"msg":      `say "hi" ${USER} \(1+1)`,
				"#hidden":  "x",
				"_private": "x",
				"":         "",
				"a b":      "c",
				"ünï":      "ok",
			},
			want: verdict.InstallEvidence{
				Schema:      true,
				UnknownKeys: []string{"", "#hidden", "_private", "a b", "ünï"},
				Violations:  []string{`x"y: invalid value "\\(x)${y}\"" (out of bound =~"^[a-z]+$")`},
			},
		},
		{
			name: "sorted and de-duplicated",
			schema: s(`values: {b: "1", a: "1", c?: "1", d?: "1"}
protected: ["z", "y", "z", "x"]`),
			values: map[string]string{"z": "", "y": "", "x": "", "q": "", "p": "", "d": "2", "c": "2"},
			want: verdict.InstallEvidence{
				Schema:        true,
				UnknownKeys:   []string{"p", "q"},
				ProtectedKeys: []string{"x", "y", "z"},
				Violations: []string{
					`c: conflicting values "2" and "1"`,
					`d: conflicting values "2" and "1"`,
				},
			},
		},
		{
			name:   "long violation is bounded",
			schema: s(`values: {a?: "x"}`),
			values: map[string]string{"a": strings.Repeat("v", 1000)},
			want: verdict.InstallEvidence{Schema: true, Violations: []string{
				`a: conflicting values "` + strings.Repeat("v", maxMessage-len(`conflicting values "`)-len("…")) + "…",
			}},
		},

		// Schemas that are not valid.
		{
			name:   "schema syntax error",
			schema: s("package install\n\nvalues: {\n\tregion: \"eu\" |\n}\n"),
			want:   verdict.InstallEvidence{Schema: true},
			err:    "tidegate/install.cue: expected operand, found '}' (line 5, column 1)",
		},
		{
			name:   "schema conflict",
			schema: s("values: {\n\tregion!: \"eu\" & \"us\"\n}\n"),
			want:   verdict.InstallEvidence{Schema: true},
			err:    `tidegate/install.cue: values.region: conflicting values "us" and "eu" (line 2, column 11; line 2, column 18)`,
		},
		{
			name:   "values not a struct",
			schema: s("values: [\"region\"]\n"),
			want:   verdict.InstallEvidence{Schema: true},
			err:    "tidegate/install.cue: values: must be a struct of constraints on strings, is list (line 1, column 1)",
		},
		{
			name:   "values a disjunction",
			schema: s("values: {a: string} | {b: string}\n"),
			want:   verdict.InstallEvidence{Schema: true},
			err:    "tidegate/install.cue: values: must be a single struct: non-concrete value struct (line 1, column 1)",
		},
		{
			name:   "value constraint not on a string",
			schema: s("values: {\n\treplicas?: int\n}\n"),
			want:   verdict.InstallEvidence{Schema: true},
			err:    "tidegate/install.cue: values.replicas: must admit a string (postBuild substitutions are strings), admits int (line 2, column 2)",
		},
		{
			name:   "values fail with no value given",
			schema: s("values: {a?: string, b?: string} & matchN(1, [{a!: _}, {b!: _}])\n"),
			want:   verdict.InstallEvidence{Schema: true},
			err: "tidegate/install.cue: values must evaluate without error when no install-time value is given: " +
				"values: invalid value {a?:string,b?:string} (does not satisfy matchN) (line 1, column 36; line 1, column 9; line 1, column 43); " +
				"values.a: field is required but not present (line 1, column 36; line 1, column 48); " +
				"values.b: field is required but not present (line 1, column 36; line 1, column 57)",
		},
		{
			name:   "protected not a list",
			schema: s("protected: \"image\"\n"),
			want:   verdict.InstallEvidence{Schema: true},
			err:    "tidegate/install.cue: protected: must be a list of strings, is string (line 1, column 1)",
		},
		{
			name:   "protected not strings",
			schema: s("protected: [\"image\", 1]\n"),
			want:   verdict.InstallEvidence{Schema: true},
			err:    "tidegate/install.cue: protected.1: must be a string: cannot use value 1 (type int) as string (line 1, column 22)",
		},
		{
			name:   "protected and declared",
			schema: s("values: {\n\timage?: string\n}\nprotected: [\"image\"]\n"),
			want:   verdict.InstallEvidence{Schema: true},
			err:    `tidegate/install.cue: values.image: "image" is also protected: a value cannot be both open at install time and fixed at build time (line 2, column 2)`,
		},
		{
			name:   "unknown top-level field",
			schema: s("values: {}\nprotect: [\"image\"]\n"),
			want:   verdict.InstallEvidence{Schema: true},
			err:    "tidegate/install.cue: protect: unknown field: the schema has only the fields values and protected (line 2, column 1)",
		},
		{
			name:   "not a struct",
			schema: s("\"values\"\n"),
			want:   verdict.InstallEvidence{Schema: true},
			err:    "tidegate/install.cue: the file must be a struct with the fields values and protected, is string (line 1, column 1)",
		},
		{
			name:   "import of a non-builtin package",
			schema: s("import \"example.com/x\"\n\nvalues: {a?: x.A}\n"),
			want:   verdict.InstallEvidence{Schema: true},
			err:    `tidegate/install.cue: package "example.com/x" imported but not defined in (line 1, column 8); values.a: import "example.com/x" not found (line 3, column 14)`,
		},
		{
			name:   "schema too large",
			schema: s("values: {}\n" + strings.Repeat("// padding\n", MaxSchemaBytes/11)),
			want:   verdict.InstallEvidence{Schema: true},
			err:    "tidegate/install.cue: the schema is 262152 bytes, more than the 262144 allowed",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var schema []byte
			if tc.schema != nil {
				schema = []byte(*tc.schema)
			}
			got, err := Check(schema, tc.values)
			if gotErr := errString(err); gotErr != tc.err {
				t.Errorf("error:\n got %s\nwant %s", gotErr, tc.err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("evidence:\n got %#v\nwant %#v", got, tc.want)
			}
		})
	}
}

// TestCheckFresh checks that one call leaves nothing behind for the next.
func TestCheckFresh(t *testing.T) {
	values := map[string]string{"region": "eu", "replicas": "x"}
	first, err := Check([]byte(example), values)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		again, err := Check([]byte(example), values)
		if err != nil || !reflect.DeepEqual(again, first) {
			t.Fatalf("a second Check differs: %#v, %v; first %#v", again, err, first)
		}
	}
	if values["region"] != "eu" || values["replicas"] != "x" || len(values) != 2 {
		t.Errorf("Check changed its values: %v", values)
	}
}

func BenchmarkCheck(b *testing.B) {
	schema := []byte(example)
	values := map[string]string{"replicas": "3", "region": "eu", "logLevel": "debug", "feature_a": "on", "image": "x", "other": "y"}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Check(schema, values); err != nil {
			b.Fatal(err)
		}
	}
}

func s(x string) *string { return &x }

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
