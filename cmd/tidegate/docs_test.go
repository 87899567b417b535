package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidegate/tidegate/test/golden"
	"github.com/tidegate/tidegate/test/testenv"
)

// TestCLIDocIsFresh regenerates docs/cli.md from the command tree, keeping its hand-written preface,
// and fails when the file in the repository differs.
func TestCLIDocIsFresh(t *testing.T) {
	path := filepath.Join(testenv.RepoRoot(), docsFile)
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run `make docs` to write it)", err)
	}
	if !strings.Contains(string(doc), docsMarker) {
		t.Fatalf("%s has lost the line that ends its hand-written preface:\n%s", docsFile, docsMarker)
	}
	got := renderCLIDoc(newRootCommand(defaultEnv()), docsPreface(doc))
	golden.Check(t, path, got, *update, "`make docs` (go run ./cmd/tidegate docs)")
}

// TestDocsKeepsThePreface checks that the generator keeps what precedes the marker and replaces
// what follows it.
func TestDocsKeepsThePreface(t *testing.T) {
	preface := "# Title\n\nHand-written.\n\n" + docsMarker + "\n"
	got := string(renderCLIDoc(newRootCommand(defaultEnv()), docsPreface([]byte(preface+"\nstale generated text\n"))))
	if !strings.HasPrefix(got, preface) || strings.Contains(got, "stale generated text") {
		t.Errorf("the preface was not kept, or the generated part not replaced:\n%s", got[:min(len(got), 400)])
	}
	if got := docsPreface(nil); got != defaultDocsPreface {
		t.Errorf("preface of a missing file: %q", got)
	}
	for _, want := range []string{"## tidegate status", "## tidegate receipts verify", "--watch", "## Global flags", "--kubeconfig"} {
		if !strings.Contains(got, want) {
			t.Errorf("the generated reference lacks %q", want)
		}
	}
	if strings.Contains(got, "## tidegate docs") {
		t.Error("the generated reference documents a hidden command")
	}
	if !strings.Contains(got, "## tidegate completion bash") {
		t.Error("the generated reference lacks the completion command")
	}
}
