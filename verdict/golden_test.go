package verdict

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/tidegate/tidegate/test/golden"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

const (
	policiesDir = "../testdata/policies"
	evidenceDir = "../testdata/evidence"
	goldenDir   = "../testdata/golden"
)

// readPolicyDir reads the .cue files of a directory by base name.
func readPolicyDir(t testing.TB, dir string) map[string][]byte {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.cue"))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		files[filepath.Base(n)] = b
	}
	return files
}

func subdirs(t testing.TB, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out
}

func checkGolden(t *testing.T, path string, got []byte) {
	t.Helper()
	golden.Check(t, path, got, *update, "go test ./verdict -update")
}

// TestDefaultPolicyCopy keeps testdata/policies/default (which the CLI's tests and the docs use)
// the built-in default policy, byte for byte.
func TestDefaultPolicyCopy(t *testing.T) {
	builtin := embeddedFiles(defaultPolicyFS, "policy")
	copyPath := filepath.Join(policiesDir, "default", "policy.cue")
	if *update {
		if err := os.WriteFile(copyPath, builtin["default.cue"], 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got := readPolicyDir(t, filepath.Join(policiesDir, "default"))
	if len(got) != 1 || !bytes.Equal(got["policy.cue"], builtin["default.cue"]) {
		t.Errorf("%s is not verdict/policy/default.cue; run go test ./verdict -update", copyPath)
	}
}

// TestGoldenLoad records what loading each test policy gives: its settings, or its problems.
func TestGoldenLoad(t *testing.T) {
	written := map[string]bool{}
	defer checkNoStaleGolden(t, filepath.Join(goldenDir, "load"), written)
	for _, name := range subdirs(t, policiesDir) {
		t.Run(name, func(t *testing.T) {
			var b bytes.Buffer
			p, err := LoadPolicy(readPolicyDir(t, filepath.Join(policiesDir, name)))
			if err != nil {
				fmt.Fprintf(&b, "error: %s\n", formatError(err))
			} else {
				s, err := p.Settings()
				if err != nil {
					t.Fatalf("a loaded policy's settings: %v", err)
				}
				js, _ := json.MarshalIndent(s, "", "  ")
				fmt.Fprintf(&b, "ok\nsettings: %s\n", js)
			}
			golden := filepath.Join(goldenDir, "load", name+".golden")
			written[golden] = true
			checkGolden(t, golden, b.Bytes())
		})
	}
}

// TestGoldenEvaluate decides every evidence fixture under every test policy that loads. The
// fixtures are named for their outcome under the default policy (pass-*, fail-*), which is
// checked besides the golden output.
func TestGoldenEvaluate(t *testing.T) {
	written := map[string]bool{}
	defer checkNoStaleGolden(t, filepath.Join(goldenDir, "eval"), written)
	for _, name := range subdirs(t, policiesDir) {
		p, err := LoadPolicy(readPolicyDir(t, filepath.Join(policiesDir, name)))
		if err != nil {
			continue // TestGoldenLoad records why.
		}
		for _, gate := range Gates {
			fixtures, _ := filepath.Glob(filepath.Join(evidenceDir, gate, "*.json"))
			if len(fixtures) == 0 {
				t.Fatalf("no evidence fixtures for %s", gate)
			}
			for _, f := range fixtures {
				fixture := strings.TrimSuffix(filepath.Base(f), ".json")
				t.Run(name+"/"+gate+"/"+fixture, func(t *testing.T) {
					data, err := os.ReadFile(f)
					if err != nil {
						t.Fatal(err)
					}
					d, err := Evaluate(p, gate, data)
					got := formatDecision(d, err)
					golden := filepath.Join(goldenDir, "eval", name, gate, fixture+".golden")
					written[golden] = true
					checkGolden(t, golden, got)
					if name == "default" {
						if err != nil {
							t.Fatalf("the default policy errs on %s: %v", f, err)
						}
						if want := strings.HasPrefix(fixture, "pass"); d.Pass != want {
							t.Errorf("default policy: pass=%t for %s, the fixture's name says %t:\n%s", d.Pass, f, want, got)
						}
						if !d.Pass && len(d.Reasons) == 0 {
							t.Errorf("a failed gate without reasons for %s", f)
						}
					}
				})
			}
		}
	}
}

// checkNoStaleGolden fails for golden files under dir that no case wrote: a renamed fixture or
// policy would otherwise leave its old decisions behind, unchecked. Under -update it deletes them.
func checkNoStaleGolden(t *testing.T, dir string, written map[string]bool) {
	if t.Failed() || t.Skipped() {
		return
	}
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || written[path] {
			return err
		}
		if *update {
			return os.Remove(path)
		}
		t.Errorf("%s is stale: no test case writes it (run go test ./verdict -update)", path)
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}

func formatDecision(d Decision, err error) []byte {
	var b bytes.Buffer
	if err != nil {
		fmt.Fprintf(&b, "error: %s\n", formatError(err))
		return b.Bytes()
	}
	result := "Fail"
	switch {
	case d.Pass:
		result = "Pass"
	case d.Inconclusive:
		result = "Inconclusive"
	}
	fmt.Fprintf(&b, "gate: %s\nresult: %s\n", d.Gate, result)
	if len(d.Unobserved) > 0 {
		fmt.Fprintf(&b, "unobserved: %s\n", strings.Join(d.Unobserved, ", "))
	}
	if len(d.Reasons) > 0 {
		b.WriteString("reasons:\n")
		for _, r := range d.Reasons {
			fmt.Fprintf(&b, "  - %s\n", r)
		}
	}
	if len(d.Limits) > 0 {
		b.WriteString("limits:\n")
		for _, l := range d.Limits {
			fmt.Fprintf(&b, "  - %s\n", l)
		}
	}
	return b.Bytes()
}

func formatError(err error) string {
	if pe, ok := err.(*PolicyError); ok {
		var b strings.Builder
		b.WriteString("invalid policy")
		for _, p := range pe.Problems {
			b.WriteString("\n  - " + p)
		}
		return b.String()
	}
	return err.Error()
}
