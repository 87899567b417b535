package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestPluginDisplayName(t *testing.T) {
	for argv0, want := range map[string]string{
		"/home/me/.fluxcd/plugins/flux-fleet": "flux fleet",
		"flux-fleet":                          "flux fleet",
		"/usr/local/bin/tidegate":             "",
		"tidegate.test":                       "",
		"/tmp/flux-":                          "",
		"/tmp/flux-cli/bin/tidegate":          "",
	} {
		if got := pluginDisplayName(argv0); got != want {
			t.Errorf("pluginDisplayName(%q) = %q, want %q", argv0, got, want)
		}
	}
}

// Run as the Flux CLI plugin, usage lines and errors name `flux fleet`, the command people typed.
func TestPluginUsageName(t *testing.T) {
	env := defaultEnv()
	env.displayName = "flux fleet"
	var out, errOut bytes.Buffer
	if code := runContext(context.Background(), env, []string{"status", "--help"}, nil, &out, &errOut); code != exitOK {
		t.Fatalf("status --help: exit %d: %s", code, errOut.String())
	}
	if !strings.Contains(out.String(), "flux fleet status ROLLOUT [flags]") || !strings.Contains(out.String(), "  flux fleet status web -n fleet") || strings.Contains(out.String(), "tidegate status") {
		t.Errorf("status --help does not use the plugin's name:\n%s", out.String())
	}
	out.Reset()
	errOut.Reset()
	if code := runContext(context.Background(), env, []string{"statu"}, nil, &out, &errOut); code != exitUsage {
		t.Fatalf("statu: exit %d, want %d", code, exitUsage)
	}
	if !strings.Contains(errOut.String(), "Run 'flux fleet --help' for usage.") {
		t.Errorf("an unknown command does not point at flux fleet --help:\n%s", errOut.String())
	}
}
