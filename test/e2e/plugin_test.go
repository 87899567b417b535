package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/tidegate/tidegate/test/testenv"
)

// buildFluxPlugin builds cmd/tidegate to path. The Go build cache makes it a link step after the
// first build.
func buildFluxPlugin(t *testing.T, path string) {
	t.Helper()
	cmd := exec.Command("go", "build", "-o", path, "./cmd/tidegate")
	cmd.Dir = testenv.RepoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/tidegate: %v\n%s", err, out)
	}
}

// runFluxCLI runs the Flux CLI with plugins as $FLUXCD_PLUGINS and an empty home (no user
// kubeconfig or plugins reach it); it returns stdout and stderr.
func runFluxCLI(ctx context.Context, flux, plugins string, args ...string) (string, string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	home, err := os.MkdirTemp("", "flux-home-")
	if err != nil {
		return "", "", err
	}
	defer os.RemoveAll(home)
	cmd := exec.CommandContext(ctx, flux, args...)
	var env []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "KUBECONFIG" && k != "HOME" && k != "FLUXCD_PLUGINS" {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, "HOME="+home, "FLUXCD_PLUGINS="+plugins)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	return stdout.String(), stderr.String(), err
}

// shortRevision is rev as flux get prints it: main@sha1:<the first 8 hex digits>.
func shortRevision(rev string) string {
	ref, sha, ok := strings.Cut(rev, "@sha1:")
	if !ok || len(sha) < 8 {
		return rev
	}
	return ref + "@sha1:" + sha[:8]
}

// hasLineWithFields reports whether a line of out starts with the given whitespace-separated fields.
func hasLineWithFields(out string, fields ...string) bool {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < len(fields) {
			continue
		}
		match := true
		for i := range fields {
			match = match && f[i] == fields[i]
		}
		if match {
			return true
		}
	}
	return false
}

// hasLineContaining reports whether a line of out contains every part.
func hasLineContaining(out string, parts ...string) bool {
	for _, line := range strings.Split(out, "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			return true
		}
	}
	return false
}

func nonEmptyLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return out
}
