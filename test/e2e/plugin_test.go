package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/controllers"
	"github.com/tidegate/tidegate/internal/testbin"
	"github.com/tidegate/tidegate/test/testenv"
)

// The tidegate CLI installed as the Flux CLI plugin flux-fleet runs as `flux fleet ...` under the
// real Flux CLI (v2.9, built by `make testbin`), and `flux get kustomizations` with the rollout's
// label shows what each member cluster applied.
func TestE2EFluxPlugin(t *testing.T) {
	t.Parallel()
	flux, err := testbin.FluxCLI()
	if err != nil {
		t.Fatal(err)
	}
	// Build before the fleet starts, so the compiler does not compete with the API servers.
	plugins := t.TempDir()
	buildFluxPlugin(t, filepath.Join(plugins, "flux-fleet"))

	s, first := newFleetSetup(t, 3, demoPackage("v1"))
	startTidegate(t, s.f, controllers.Options{})
	ctx, cancel := testContext(6 * time.Minute)
	defer cancel()
	rev1 := s.repo.Revision(first)
	s.createRollout(ctx, t, twoWaveRollout(s.ns), rev1, nil)
	rev2 := s.commitVersion(t, "v2")
	fr := s.waitPhase(ctx, t, "web", v1alpha1.PhaseCompleted, rev2)

	kubeconfig := s.f.HubKubeConfigPath
	runFlux := func(args ...string) string {
		t.Helper()
		out, stderr, err := runFluxCLI(ctx, flux, plugins, args...)
		if err != nil {
			t.Fatalf("flux %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, out, stderr)
		}
		return out
	}

	// The Flux CLI lists the plugin it found in $FLUXCD_PLUGINS.
	if out := runFlux("plugin", "list"); !hasLineWithFields(out, "fleet", "manual", filepath.Join(plugins, "flux-fleet")) {
		t.Errorf("flux plugin list does not show flux-fleet:\n%s", out)
	}

	// flux fleet status: the rollout, its candidate, and one row per wave with the wave's phase.
	out := runFlux("fleet", "status", "web", "-n", s.ns, "--kubeconfig", kubeconfig)
	t.Logf("flux fleet status web:\n%s", out)
	for _, want := range []string{"fleetrollout " + s.ns + "/web", "phase:       " + v1alpha1.PhaseCompleted, "candidate:   " + rev2} {
		if !strings.Contains(out, want) {
			t.Errorf("flux fleet status does not show %q:\n%s", want, out)
		}
	}
	if len(fr.Status.Waves) != 2 {
		t.Fatalf("want the waves canary and rest: %s", describe(fr))
	}
	for _, w := range fr.Status.Waves {
		if !hasLineWithFields(out, w.Name, w.Phase, fmt.Sprint(len(w.Clusters))) {
			t.Errorf("flux fleet status has no row for wave %s (%s, %d members):\n%s", w.Name, w.Phase, len(w.Clusters), out)
		}
	}

	// Usage and help name the command people typed.
	if out := runFlux("fleet", "status", "--help"); !strings.Contains(out, "flux fleet status ROLLOUT") {
		t.Errorf("flux fleet status --help does not name `flux fleet status`:\n%s", out)
	}

	// flux fleet tree: every member's Kustomization under the candidate's pinned source.
	out = runFlux("fleet", "tree", "web", "-n", s.ns, "--kubeconfig", kubeconfig)
	for _, m := range s.f.Members {
		want := fmt.Sprintf("Kustomization/%s/%s (wave ", s.ns, v1alpha1.KustomizationName("web", m.Name))
		if !hasLineContaining(out, want, rev2+", Ready=True)") {
			t.Errorf("flux fleet tree does not show %s at %s, Ready:\n%s", want, rev2, out)
		}
	}

	// flux get kustomizations, selected by the rollout's label: each member's Kustomization applied
	// the candidate and is Ready. flux get shortens every SHA to its first 8 hex digits.
	short1, short2 := shortRevision(rev1), shortRevision(rev2)
	if short1 == short2 {
		t.Fatalf("the two commits %s and %s have the same short form: cannot tell them apart in flux get", rev1, rev2)
	}
	out = runFlux("get", "kustomizations", "-n", s.ns, "-l", v1alpha1.RolloutLabel+"=web", "--kubeconfig", kubeconfig)
	t.Logf("flux get kustomizations -l %s=web:\n%s", v1alpha1.RolloutLabel, out)
	for _, m := range s.f.Members {
		name := v1alpha1.KustomizationName("web", m.Name)
		if !hasLineWithFields(out, name, short2, "False", "True", "Applied", "revision:", short2) {
			t.Errorf("flux get kustomizations has no line %s %s False True Applied revision: %s:\n%s", name, short2, short2, out)
		}
	}
	if n := len(nonEmptyLines(out)); n != len(s.f.Members)+1 {
		t.Errorf("flux get kustomizations -l %s=web shows %d lines, want a header and %d Kustomizations:\n%s", v1alpha1.RolloutLabel, n, len(s.f.Members), out)
	}
}

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
