package verdict

import (
	"embed"
	"io/fs"
	"sort"
)

// schemaFS holds the evidence schemas and #Settings (package schema), added to every policy.
//
//go:embed schema/*.cue
var schemaFS embed.FS

// examplesFS holds one complete evidence document per gate: every optional field present and
// every list non-empty, so that evaluating a policy over it reaches every constraint.
//
//go:embed schema/examples/*.json
var examplesFS embed.FS

// ExampleEvidence returns a complete evidence document for a gate (JSON), nil for an unknown gate.
// It passes the default policy; policy checks use it to reach every constraint a policy has.
func ExampleEvidence(gate string) []byte {
	b, err := fs.ReadFile(examplesFS, "schema/examples/"+gate+".json")
	if err != nil {
		return nil
	}
	return b
}

// defaultPolicyFS holds the built-in default policy (package policy).
//
//go:embed policy/*.cue
var defaultPolicyFS embed.FS

// embeddedFiles returns the .cue files of dir in fsys by base name.
func embeddedFiles(fsys embed.FS, dir string) map[string][]byte {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		panic("cue: embedded " + dir + " is unreadable: " + err.Error())
	}
	files := make(map[string][]byte, len(entries))
	for _, e := range entries {
		b, err := fs.ReadFile(fsys, dir+"/"+e.Name())
		if err != nil {
			panic("cue: embedded " + dir + "/" + e.Name() + " is unreadable: " + err.Error())
		}
		files[e.Name()] = b
	}
	return files
}

// SchemaFiles returns the evidence schema files by name, for documentation and for tools that
// want to vet a policy with the cue command (copy them next to the policy, with its package name).
func SchemaFiles() map[string][]byte { return embeddedFiles(schemaFS, "schema") }

func sortedNames(files map[string][]byte) []string {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// DefaultPolicyFiles returns the built-in default policy's files by name: the starting point for
// writing a policy of one's own.
func DefaultPolicyFiles() map[string][]byte { return embeddedFiles(defaultPolicyFS, "policy") }
