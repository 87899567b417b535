package main

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// complete runs cobra's hidden __complete command, as the shell scripts of tidegate completion
// do, against the hub, and returns the completions it printed (without the directive line).
func complete(ctx context.Context, t *testing.T, args ...string) []string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	e := &cliEnv{now: func() time.Time { return fixedNow }, pollInterval: 50 * time.Millisecond}
	// The shell puts __complete first and the command line, flags included, after it.
	full := append([]string{cobra.ShellCompRequestCmd, "--kubeconfig", kubeconfig}, args...)
	if code := runContext(ctx, e, full, strings.NewReader(""), &stdout, &stderr); code != exitOK {
		t.Fatalf("tidegate %s: exit %d\n%s%s", strings.Join(full, " "), code, stdout.String(), stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if len(lines) == 0 || !strings.HasPrefix(lines[len(lines)-1], ":") {
		t.Fatalf("tidegate %s printed no directive:\n%s", strings.Join(full, " "), stdout.String())
	}
	var names []string
	for _, l := range lines[:len(lines)-1] {
		name, _, _ := strings.Cut(l, "\t") // a completion may carry a description
		names = append(names, name)
	}
	return names
}

// The commands that take a rollout, cluster or receipt complete the names on the hub, in the
// namespace of -n or of the kubeconfig context; -o completes the formats of the command.
func TestCompletionNames(t *testing.T) {
	ctx := hub(t)
	newRollout(ctx, t, "comp-alpha", nil)
	newRollout(ctx, t, "comp-beta", nil)
	for _, tc := range []struct {
		args []string
		want []string
	}{
		// The kubeconfig context's namespace is fleet.
		{[]string{"status", ""}, []string{"api", "auth", "cache", "web"}},
		{[]string{"get", "rollouts", ""}, []string{"api", "auth", "cache", "web"}},
		{[]string{"get", "clusters", ""}, []string{"ap-1", "eu-1", "eu-2", "us-1", "us-2"}},
		{[]string{"get", "clusters", "eu"}, []string{"eu-1", "eu-2"}},
		{[]string{"hold", "-n", writesNS, "comp-"}, []string{"comp-alpha", "comp-beta"}},
		{[]string{"-n", writesNS, "approve", "comp-a"}, []string{"comp-alpha"}},
		// One rollout at a time: nothing after the first.
		{[]string{"tree", "web", ""}, nil},
		{[]string{"get", "receipts", "--rollout", "w"}, []string{"web"}},
		{[]string{"get", "rollouts", "-o", ""}, []string{"table", "wide", "name", "json", "yaml", "jsonpath="}},
		{[]string{"status", "web", "-o", ""}, []string{"table", "json", "yaml", "jsonpath="}},
		{[]string{"completion", ""}, []string{"bash", "fish", "powershell", "zsh"}},
	} {
		got := complete(ctx, t, tc.args...)
		if !slices.Equal(got, tc.want) {
			t.Errorf("completing tidegate %q: %q, want %q", tc.args, got, tc.want)
		}
	}

	// Receipts complete from their namespace; those already named are not offered again.
	got := complete(ctx, t, "receipts", "verify", "-n", "audit", audit.good, "")
	if len(got) == 0 || slices.Contains(got, audit.good) || !slices.Contains(got, audit.tampered) {
		t.Errorf("completing receipts verify -n audit %s: %q, want the other receipts of audit", audit.good, got)
	}
	// A user who may read nothing completes nothing, and the command still succeeds.
	if got := complete(ctx, t, "--context", "nobody", "status", ""); len(got) != 0 {
		t.Errorf("completing as a user who may list nothing: %q", got)
	}
}

// tidegate completion is shown in the help and writes a script for each shell.
func TestCompletionCommand(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"--help"}, strings.NewReader(""), &stdout, &stderr); code != exitOK || !strings.Contains(stdout.String(), "\n  completion ") {
		t.Errorf("tidegate --help: exit %d, no completion command:\n%s", code, stdout.String())
	}
	for shell, want := range map[string]string{"bash": "# bash completion V2 for tidegate", "zsh": "#compdef tidegate", "fish": "# fish completion for tidegate", "powershell": "# powershell completion for tidegate"} {
		stdout.Reset()
		if code := run([]string{"completion", shell}, strings.NewReader(""), &stdout, &stderr); code != exitOK || !strings.Contains(stdout.String(), want) {
			t.Errorf("tidegate completion %s: exit %d, no %q in\n%.300s", shell, code, want, stdout.String())
		}
	}
}

// Every command with -o completes its formats, and every command that takes a name of the hub's
// objects completes it: a command added without its entry in completions fails here.
func TestCompletionsCoverEveryCommand(t *testing.T) {
	root := newRootCommand(defaultEnv())
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
		}
		path := commandPath(c)
		if strings.HasPrefix(path, "sandbox") || strings.HasPrefix(path, "completion") {
			return // the sandbox's commands are its own; cobra's completion completes itself
		}
		comp, ok := completions[path]
		if f := c.Flags().Lookup("output"); f != nil && (!ok || len(comp.outputs) == 0) {
			t.Errorf("tidegate %s has -o but completes no formats for it: add it to completions", path)
		}
		if use := strings.Fields(c.Use); len(use) > 1 && use[1] == "ROLLOUT" && (!ok || comp.kind != v1alpha1.FleetRolloutKind) {
			t.Errorf("tidegate %s takes a ROLLOUT but does not complete rollout names: add it to completions", path)
		}
	}
	walk(root)
	for path := range completions {
		if c, _, err := root.Find(strings.Fields(path)); err != nil || commandPath(c) != path {
			t.Errorf("completions has an entry for %q, which is no command", path)
		}
	}
}
