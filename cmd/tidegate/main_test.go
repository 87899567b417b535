package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidegate/tidegate/test/golden"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden/cli")

// TestCLIGolden runs the command line in-process against the policies and evidence under
// testdata and compares what it prints, and its exit code, with testdata/golden/cli.
func TestCLIGolden(t *testing.T) {
	t.Chdir("../..") // paths in the golden files are relative to the repository
	tests := []struct {
		name  string
		args  []string
		stdin string
		exit  int
	}{
		{"vet-default", []string{"policy", "vet", "testdata/policies/default"}, "", exitOK},
		{"vet-strict-json", []string{"policy", "vet", "testdata/policies/strict", "-o", "json"}, "", exitOK},
		{"vet-syntax-error", []string{"policy", "vet", "testdata/policies/syntax-error"}, "", exitNo},
		{"vet-not-concrete", []string{"policy", "vet", "testdata/policies/not-concrete"}, "", exitNo},
		{"vet-open-settings-json", []string{"policy", "vet", "testdata/policies/open-settings", "-o", "json"}, "", exitNo},
		{"vet-misfit", []string{"policy", "vet", "testdata/policies/misfit"}, "", exitNo},
		{"vet-missing-dir", []string{"policy", "vet", "testdata/policies/nope"}, "", exitUsage},
		{"vet-no-args", []string{"policy", "vet"}, "", exitUsage},
		{"vet-bad-output", []string{"policy", "vet", "testdata/policies/default", "-o", "yaml"}, "", exitUsage},
		{"eval-pass", []string{"policy", "eval", "testdata/policies/default", "--gate", "noDisruption", "--evidence", "testdata/evidence/noDisruption/pass.json"}, "", exitOK},
		{"eval-fail", []string{"policy", "eval", "testdata/policies/default", "--gate", "noDisruption", "--evidence", "testdata/evidence/noDisruption/fail-availability.json"}, "", exitNo},
		{"eval-fail-json", []string{"policy", "eval", "testdata/policies/default", "--gate", "rollbackSafe", "--evidence", "testdata/evidence/rollbackSafe/fail-pvc-pruned.json", "-o", "json"}, "", exitNo},
		{"eval-strict-fail", []string{"policy", "eval", "testdata/policies/strict", "--gate", "deploySafe", "--evidence", "testdata/evidence/deploySafe/fail-preflight.json"}, "", exitNo},
		{"eval-stdin", []string{"policy", "eval", "testdata/policies/default", "--gate", "rollbackSucceeds", "--evidence", "-"}, `{"rollout": "apps/podinfo", "wave": "", "candidate": {"revision": "v2", "digest": "sha256:00000000000000000000000000000000"}, "collectedAt": "2026-03-01T10:00:00Z", "firstRollout": true}`, exitOK},
		{"eval-invalid-policy", []string{"policy", "eval", "testdata/policies/syntax-error", "--gate", "noDisruption", "--evidence", "testdata/evidence/noDisruption/pass.json"}, "", exitUsage},
		{"eval-unknown-gate", []string{"policy", "eval", "testdata/policies/default", "--gate", "allGood", "--evidence", "testdata/evidence/noDisruption/pass.json"}, "", exitUsage},
		{"eval-no-evidence-flag", []string{"policy", "eval", "testdata/policies/default", "--gate", "noDisruption"}, "", exitUsage},
		{"eval-missing-evidence-file", []string{"policy", "eval", "testdata/policies/default", "--gate", "noDisruption", "--evidence", "testdata/evidence/nope.json"}, "", exitUsage},
		{"eval-empty-evidence", []string{"policy", "eval", "testdata/policies/default", "--gate", "noDisruption", "--evidence", "-"}, "", exitNo},
		{"eval-evidence-not-json", []string{"policy", "eval", "testdata/policies/default", "--gate", "noDisruption", "--evidence", "-"}, `{"soak": `, exitUsage},
		{"test-strict", []string{"policy", "test", "testdata/policies/strict"}, "", exitOK},
		{"test-strict-json", []string{"policy", "test", "testdata/policies/strict", "-o", "json"}, "", exitOK},
		{"test-default-strict-fixtures", []string{"policy", "test", "testdata/policies/default", "--fixtures", "testdata/policies/strict/tests"}, "", exitNo},
		{"test-no-fixtures", []string{"policy", "test", "testdata/policies/default"}, "", exitUsage},
		{"test-syntax-error", []string{"policy", "test", "testdata/policies/syntax-error", "--fixtures", "testdata/policies/strict/tests"}, "", exitUsage},
		{"replay-no-flags", []string{"policy", "replay"}, "", exitUsage},
		{"unknown-flag", []string{"policy", "eval", "--frobnicate"}, "", exitUsage},
		{"unknown-command", []string{"polcy"}, "", exitUsage},
	}
	written := map[string]bool{}
	for _, tt := range tests {
		written[tt.name+".golden"] = true
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(tt.args, strings.NewReader(tt.stdin), &stdout, &stderr)
			if code != tt.exit {
				t.Errorf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tt.exit, stdout.String(), stderr.String())
			}
			var got bytes.Buffer
			fmt.Fprintf(&got, "$ tidegate %s\n", strings.Join(tt.args, " "))
			if tt.stdin != "" {
				fmt.Fprintf(&got, "stdin: %s\n", tt.stdin)
			}
			fmt.Fprintf(&got, "exit: %d\n--- stdout\n%s--- stderr\n%s", code, stdout.String(), stderr.String())
			checkGolden(t, filepath.Join("testdata", "golden", "cli", tt.name+".golden"), got.Bytes())
		})
	}
	entries, err := os.ReadDir(filepath.Join("testdata", "golden", "cli"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		// testdata/golden/cli/kube belongs to the kube tests, which check it themselves.
		if !e.IsDir() && !written[e.Name()] {
			t.Errorf("testdata/golden/cli/%s is stale: no case writes it", e.Name())
		}
	}
}

func TestOversizedEvidenceIsAUsageError(t *testing.T) {
	big := `{"limits": ["` + strings.Repeat("x", 1<<20) + `"]}`
	var stdout, stderr bytes.Buffer
	code := run([]string{"policy", "eval", "../../testdata/policies/default", "--gate", "noDisruption", "--evidence", "-"}, strings.NewReader(big), &stdout, &stderr)
	if code != exitUsage || !strings.Contains(stderr.String(), "evidence larger than") {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
}

func checkGolden(t *testing.T, path string, got []byte) {
	t.Helper()
	golden.Check(t, path, got, *update, "go test ./cmd/tidegate -update")
}
