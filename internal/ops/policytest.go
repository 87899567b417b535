package ops

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/verdict"
)

// A policy's fixtures are the files of one directory (DIR/tests by default), each one gate decision
// with its expected outcome, as YAML or JSON:
//
//	gate: noDisruption
//	evidenceFile: evidence/ring-1.json   # relative to the fixture; or the document inline as evidence
//	expect:
//	  result: Fail                       # Pass, Fail or Inconclusive (any case)
//	  reasons:                           # each must be part of some reason
//	    - "minAvailableRatio: invalid value 0.5"
//
// Only the directory's .yaml, .yml and .json files are fixtures; evidence files go in a
// subdirectory of it.

// fixtureFile is a fixture as written.
type fixtureFile struct {
	Gate         string          `json:"gate"`
	Evidence     json.RawMessage `json:"evidence,omitempty"`
	EvidenceFile string          `json:"evidenceFile,omitempty"`
	Expect       *Expectation    `json:"expect"`
}

// Expectation is a fixture's expected outcome.
type Expectation struct {
	// Result is Pass, Fail or Inconclusive, as receipts record it.
	Result string `json:"result"`
	// Reasons must each be a substring of one of the decision's reasons.
	Reasons []string `json:"reasons,omitempty"`
}

// Fixture is one evidence document and the decision a policy is expected to make over it.
type Fixture struct {
	// Name is the fixture's file name in its directory.
	Name string
	Gate string
	// Evidence is the JSON document; nil for none (the gate fails).
	Evidence []byte
	Expect   Expectation
}

// FixtureResult is a fixture's decision against its expectation.
type FixtureResult struct {
	Fixture  string `json:"fixture"`
	Gate     string `json:"gate"`
	Expected string `json:"expected"`
	// Got is the decision's result, or Error when no decision could be made (Error says why).
	Got string `json:"got"`
	OK  bool   `json:"ok"`
	// Missing are the expected reasons that no reason of the decision contains.
	Missing []string `json:"missing,omitempty"`
	Reasons []string `json:"reasons,omitempty"`
	Error   string   `json:"error,omitempty"`
}

// PolicyTest is the outcome of a policy's fixtures.
type PolicyTest struct {
	PolicyDigest string `json:"policyDigest"`
	Fixtures     int    `json:"fixtures"`
	Failed       int    `json:"failed"`
	// Errors counts the fixtures no decision could be made over: the policy cannot decide their
	// evidence (it leaves a value open), or the evidence is too large.
	Errors int             `json:"errors"`
	Items  []FixtureResult `json:"items"`
}

// resultError is FixtureResult.Got when no decision could be made.
const resultError = "Error"

// ReadFixtures reads the fixtures of dir, sorted by file name. An unreadable or malformed fixture
// is an Invalid error that names its file and the fix.
func ReadFixtures(dir string) ([]Fixture, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, Errorf(CodeInvalid, nil, "reading the fixtures: %w (give --fixtures DIR, or put them in the policy's tests directory)", err)
	}
	var fixtures []Fixture
	for _, e := range entries {
		switch filepath.Ext(e.Name()) {
		case ".yaml", ".yml", ".json":
		default:
			continue
		}
		if e.IsDir() {
			continue
		}
		f, err := readFixture(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		fixtures = append(fixtures, f)
	}
	if len(fixtures) == 0 {
		return nil, Errorf(CodeInvalid, nil, "%s has no fixtures: add a .yaml or .json file per decision, with gate, evidence or evidenceFile, and expect.result (docs/policy.md, Testing a policy change)", dir)
	}
	return fixtures, nil
}

func readFixture(path string) (Fixture, error) {
	bad := func(format string, args ...any) error {
		return Errorf(CodeInvalid, nil, "fixture %s: "+format, append([]any{path}, args...)...)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return Fixture{}, Errorf(CodeInvalid, nil, "reading fixture %s: %w", path, err)
	}
	var ff fixtureFile
	if err := yaml.UnmarshalStrict(b, &ff); err != nil {
		return Fixture{}, bad("%v; a fixture has the fields gate, evidence or evidenceFile, and expect: {result, reasons}", err)
	}
	f := Fixture{Name: filepath.Base(path), Gate: ff.Gate}
	if !slices.Contains(verdict.Gates, ff.Gate) {
		return Fixture{}, bad("gate %q: set gate to one of %s", ff.Gate, strings.Join(verdict.Gates, ", "))
	}
	switch {
	case ff.Evidence != nil && ff.EvidenceFile != "":
		return Fixture{}, bad("has both evidence and evidenceFile: keep one")
	case ff.EvidenceFile != "":
		ef := ff.EvidenceFile
		if !filepath.IsAbs(ef) {
			ef = filepath.Join(filepath.Dir(path), ef)
		}
		if f.Evidence, err = readBounded(ef); err != nil {
			return Fixture{}, bad("evidenceFile: %v", err)
		}
		if !json.Valid(f.Evidence) && len(f.Evidence) <= verdict.MaxEvidenceBytes {
			return Fixture{}, bad("evidenceFile %s is not JSON: give the document as tidegate receipts evidence prints it", ef)
		}
	case ff.Evidence != nil:
		f.Evidence = ff.Evidence
	default:
		return Fixture{}, bad("no evidence: give the document as evidence, or its file as evidenceFile (evidence: null tests missing evidence)")
	}
	if ff.Expect == nil {
		return Fixture{}, bad("no expect: say what the gate should decide, expect: {result: Pass}")
	}
	f.Expect = *ff.Expect
	if f.Expect.Result = resultNamed(ff.Expect.Result); f.Expect.Result == "" {
		return Fixture{}, bad("expect.result %q: set it to Pass, Fail or Inconclusive", ff.Expect.Result)
	}
	if f.Expect.Result == v1alpha1.ResultPass && len(f.Expect.Reasons) > 0 {
		return Fixture{}, bad("expect.reasons with result Pass: a gate that passes has no reasons; remove them or expect Fail")
	}
	return f, nil
}

// readBounded reads a file up to one byte past verdict.MaxEvidenceBytes: enough for Evaluate to say
// the evidence is too large.
func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, verdict.MaxEvidenceBytes+1))
}

// resultNamed is the receipt result s names, in any case; "" for none.
func resultNamed(s string) string {
	for _, r := range []string{v1alpha1.ResultPass, v1alpha1.ResultFail, v1alpha1.ResultInconclusive} {
		if strings.EqualFold(s, r) {
			return r
		}
	}
	return ""
}

// resultOf is the result a receipt records for d, as the controller's gates decide it.
func resultOf(d verdict.Decision) string {
	switch {
	case d.Pass:
		return v1alpha1.ResultPass
	case d.Inconclusive:
		return v1alpha1.ResultInconclusive
	}
	return v1alpha1.ResultFail
}

// TestPolicy decides each fixture with p and compares the decision with what the fixture expects.
func TestPolicy(p *verdict.Policy, fixtures []Fixture) PolicyTest {
	t := PolicyTest{PolicyDigest: p.Digest(), Fixtures: len(fixtures), Items: make([]FixtureResult, 0, len(fixtures))}
	for _, f := range fixtures {
		r := FixtureResult{Fixture: f.Name, Gate: f.Gate, Expected: f.Expect.Result}
		// No evidence, or JSON null, is missing evidence to Evaluate: the gate fails.
		d, err := verdict.Evaluate(p, f.Gate, f.Evidence)
		if err != nil {
			r.Got, r.Error = resultError, err.Error()
			t.Errors++
			t.Items = append(t.Items, r)
			continue
		}
		r.Got, r.Reasons = resultOf(d), d.Reasons
		for _, want := range f.Expect.Reasons {
			if !slices.ContainsFunc(d.Reasons, func(reason string) bool { return strings.Contains(reason, want) }) {
				r.Missing = append(r.Missing, want)
			}
		}
		r.OK = r.Got == r.Expected && len(r.Missing) == 0
		if !r.OK {
			t.Failed++
		}
		t.Items = append(t.Items, r)
	}
	return t
}

// String summarises the outcome: "7 fixtures, 1 failed".
func (t PolicyTest) String() string {
	s := fmt.Sprintf("%d fixtures, %d failed", t.Fixtures, t.Failed)
	if t.Errors > 0 {
		s += fmt.Sprintf(", %d could not be decided", t.Errors)
	}
	return s
}
