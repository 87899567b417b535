package sandboxcmd

import (
	"os"
	"path/filepath"
	"testing"
)

// The hints the sandbox prints run when pasted: the binary by name only when that name on PATH is
// this very binary, else by the path it was started by.
func TestInvokedAs(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	t.Setenv("PATH", dir)
	if got := InvokedAs("tidegate"); got != os.Args[0] {
		t.Errorf("not on PATH: %q, want the path it was started by, %q", got, os.Args[0])
	}
	other := filepath.Join(dir, "tidegate")
	if err := os.WriteFile(other, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := InvokedAs("tidegate"); got != os.Args[0] {
		t.Errorf("another tidegate on PATH: %q, want %q", got, os.Args[0])
	}
	if err := os.Remove(other); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(self, other); err != nil {
		t.Fatal(err)
	}
	if got := InvokedAs("tidegate"); got != "tidegate" {
		t.Errorf("this binary on PATH: %q, want tidegate", got)
	}
}
