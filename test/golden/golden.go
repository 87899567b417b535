// Package golden compares test output with golden files, or rewrites them when asked.
package golden

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// Check compares got with the file at path byte for byte; with update it writes got there instead.
// rerun is the command that rewrites the golden files, quoted in the failure.
func Check(t testing.TB, path string, got []byte, update bool, rerun string) {
	t.Helper()
	if update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run %s to write it)", err, rerun)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from what the code gives; run %s and review the diff\n--- got\n%s\n--- want\n%s", path, rerun, got, want)
	}
}
