package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidegate/tidegate/internal/ops"
)

// runPolicyTest runs `tidegate policy test` with the default policy over the fixtures files (file
// name to content) written into a directory of their own, with its evidence subdirectory.
func runPolicyTest(t *testing.T, files map[string]string, args ...string) (dir string, r cliResult) {
	t.Helper()
	dir = t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "evidence"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var stdout, stderr bytes.Buffer
	code := run(append([]string{"policy", "test", "../../testdata/policies/default", "--fixtures", dir}, args...), strings.NewReader(""), &stdout, &stderr)
	return dir, cliResult{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// TestPolicyTestMalformedFixtures: a fixture that cannot be run is a usage error (exit 2) naming
// its file and saying what to fix; nothing is decided.
func TestPolicyTestMalformedFixtures(t *testing.T) {
	abs, err := filepath.Abs("../../testdata/evidence/noDisruption/pass.json")
	if err != nil {
		t.Fatal(err)
	}
	pass := "evidenceFile: " + abs + "\n"
	for _, tc := range []struct {
		name, fixture, want string
	}{
		{"unknown-field", "gate: noDisruption\n" + pass + "expected: {result: Pass}\n", `unknown field "expected"; a fixture has the fields gate, evidence or evidenceFile, and expect`},
		{"not-yaml", "gate: [noDisruption\n", "a fixture has the fields"},
		{"unknown-gate", "gate: allGood\n" + pass + "expect: {result: Pass}\n", `gate "allGood": set gate to one of deploySafe, rollbackSafe, rollbackSucceeds, noDisruption`},
		{"no-gate", pass + "expect: {result: Pass}\n", `gate "": set gate to one of`},
		{"unknown-result", "gate: noDisruption\n" + pass + "expect: {result: passes}\n", `expect.result "passes": set it to Pass, Fail or Inconclusive`},
		{"no-expect", "gate: noDisruption\n" + pass, "no expect: say what the gate should decide"},
		{"no-evidence", "gate: noDisruption\nexpect: {result: Fail}\n", "no evidence: give the document as evidence, or its file as evidenceFile"},
		{"both-evidence", "gate: noDisruption\n" + pass + "evidence: {}\nexpect: {result: Fail}\n", "has both evidence and evidenceFile: keep one"},
		{"missing-evidence-file", "gate: noDisruption\nevidenceFile: evidence/nope.json\nexpect: {result: Fail}\n", "evidenceFile: open "},
		{"pass-with-reasons", "gate: noDisruption\n" + pass + "expect: {result: Pass, reasons: [ready]}\n", "expect.reasons with result Pass: a gate that passes has no reasons"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, r := runPolicyTest(t, map[string]string{"a.yaml": tc.fixture})
			file := filepath.Join(dir, "a.yaml")
			if r.code != exitUsage || r.stdout != "" || !strings.Contains(r.stderr, "fixture "+file) || !strings.Contains(r.stderr, tc.want) {
				t.Errorf("exit %d, want 2\nstdout: %s\nstderr: %s\nwant it to name %s and say %q", r.code, r.stdout, r.stderr, file, tc.want)
			}
		})
	}
	t.Run("evidence-not-json", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "bad.json"), []byte("{\"soak\": "), 0o644); err != nil {
			t.Fatal(err)
		}
		_, r := runPolicyTest(t, map[string]string{"a.yaml": "gate: noDisruption\nevidenceFile: " + filepath.Join(dir, "bad.json") + "\nexpect: {result: Fail}\n"})
		if r.code != exitUsage || !strings.Contains(r.stderr, "is not JSON: give the document as tidegate receipts evidence prints it") {
			t.Errorf("exit %d, stderr %q", r.code, r.stderr)
		}
	})
	t.Run("no-fixtures", func(t *testing.T) {
		dir, r := runPolicyTest(t, map[string]string{"README.md": "not a fixture"})
		if r.code != exitUsage || !strings.Contains(r.stderr, dir+" has no fixtures: add a .yaml or .json file per decision") {
			t.Errorf("exit %d, stderr %q", r.code, r.stderr)
		}
	})
}

// TestPolicyTestOutcomes: the runner compares result and reasons; a fixture whose decision differs
// in either fails the run (exit 1), and -o json says which reasons are missing. Evidence may be
// inline (YAML or JSON), in a file beside the fixture, or missing (null); a fixture no decision can
// be made over is an Error (exit 2).
func TestPolicyTestOutcomes(t *testing.T) {
	evidence, err := os.ReadFile("../../testdata/evidence/noDisruption/fail-availability.json")
	if err != nil {
		t.Fatal(err)
	}
	abs, err := filepath.Abs("../../testdata/evidence/noDisruption/fail-availability.json")
	if err != nil {
		t.Fatal(err)
	}
	fixtures := map[string]string{
		// An evidence file relative to the fixture, in its evidence subdirectory.
		"availability.yaml":          "gate: noDisruption\nevidenceFile: evidence/availability.json\nexpect:\n  result: fail\n  reasons: [\"minAvailableRatio: invalid value 0.5 (out of bound >=0.9) (clusters.1: member-2)\"]\n",
		"evidence/availability.json": string(evidence),
		"wrong-reason.json":          `{"gate": "noDisruption", "evidence": ` + string(evidence) + `, "expect": {"result": "Fail", "reasons": ["unavailableSeconds", "the cluster is on fire"]}}`,
		"wrong-result.yml":           "gate: noDisruption\nevidenceFile: " + abs + "\nexpect: {result: Pass}\n",
		"missing.yaml":               "gate: rollbackSafe\nevidence: null\nexpect: {result: Fail, reasons: [no evidence was collected]}\n",
		"notes.txt":                  "not a fixture: ignored",
	}
	_, r := runPolicyTest(t, fixtures, "-o", "json")
	var res ops.PolicyTest
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || r.code != exitNo {
		t.Fatalf("exit %d (want 1), %v:\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	if res.Fixtures != 4 || res.Failed != 2 || res.Errors != 0 || len(res.Items) != 4 {
		t.Fatalf("%+v, want 4 fixtures, 2 failed", res)
	}
	want := map[string]struct {
		expected, got string
		ok            bool
		missing       []string
	}{
		"availability.yaml": {"Fail", "Fail", true, nil},
		"missing.yaml":      {"Fail", "Fail", true, nil},
		"wrong-reason.json": {"Fail", "Fail", false, []string{"the cluster is on fire"}},
		"wrong-result.yml":  {"Pass", "Fail", false, nil},
	}
	for _, it := range res.Items {
		w, ok := want[it.Fixture]
		if !ok || it.Expected != w.expected || it.Got != w.got || it.OK != w.ok || strings.Join(it.Missing, "|") != strings.Join(w.missing, "|") || it.Gate == "" {
			t.Errorf("%+v, want %+v", it, w)
		}
		if it.Got == "Fail" && len(it.Reasons) == 0 {
			t.Errorf("%s: a failed decision without its reasons", it.Fixture)
		}
	}

	// The table says the same, and what each failing fixture missed.
	_, r = runPolicyTest(t, fixtures)
	for _, line := range []string{
		"wrong-reason.json   noDisruption   Fail       Fail   FAIL\n",
		"wrong-result.yml    noDisruption   Pass       Fail   FAIL\n",
		"wrong-reason.json: expected Fail, got Fail\n  missing reasons:\n    - the cluster is on fire\n  reasons:\n",
		"\n4 fixtures, 2 failed\n",
	} {
		if !strings.Contains(r.stdout, line) {
			t.Errorf("the table does not say %q:\n%s", line, r.stdout)
		}
	}

	// Evidence larger than a gate takes cannot be decided: exit 2, the table still printed.
	big := `{"limits": ["` + strings.Repeat("x", 1<<20) + `"]}`
	_, r = runPolicyTest(t, map[string]string{"big.json": `{"gate": "noDisruption", "evidence": ` + big + `, "expect": {"result": "Fail"}}`})
	if r.code != exitUsage || !strings.Contains(r.stdout, "big.json   noDisruption   Fail       Error   FAIL") ||
		!strings.Contains(r.stdout, "evidence larger than") || !strings.Contains(r.stderr, "1 fixture could not be decided by the policy") {
		t.Errorf("exit %d, want 2\nstdout: %s\nstderr: %s", r.code, r.stdout[:min(len(r.stdout), 2000)], r.stderr)
	}
}
