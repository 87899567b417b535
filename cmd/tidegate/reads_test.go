package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidegate/tidegate/test/golden"
	"github.com/tidegate/tidegate/test/testenv"
)

// kubeGoldenDir holds the golden files of the commands that read the hub.
var kubeGoldenDir = filepath.Join(testenv.RepoRoot(), "testdata", "golden", "cli", "kube")

type kubeCase struct {
	name string
	args []string
	exit int
}

// TestKubeReadsGolden runs every read command, in each output format, against the fixtures on a
// real kube-apiserver, and compares what it prints, and its exit code, with testdata/golden/cli/kube.
func TestKubeReadsGolden(t *testing.T) {
	ctx := hub(t)
	tests := []kubeCase{
		// get rollouts; the namespace comes from the kubeconfig context (fleet) unless -n or -A.
		{"get-rollouts", []string{"get", "rollouts"}, exitOK},
		{"get-rollouts-json", []string{"get", "rollouts", "-o", "json"}, exitOK},
		{"get-rollouts-yaml", []string{"get", "rollouts", "-n", "fleet", "-o", "yaml"}, exitOK},
		{"get-rollouts-all-namespaces", []string{"get", "rollouts", "-A"}, exitOK},
		{"get-rollout-named", []string{"get", "fro", "auth"}, exitOK},
		{"get-rollouts-empty", []string{"get", "rollouts", "-n", "empty"}, exitOK},
		{"get-rollouts-empty-json", []string{"get", "rollouts", "-n", "empty", "-o", "json"}, exitOK},
		{"get-rollout-not-found", []string{"get", "rollouts", "nope"}, exitUsage},
		{"get-rollouts-forbidden", []string{"--context", "nobody", "get", "rollouts"}, exitUsage},
		{"get-rollouts-bad-output", []string{"get", "rollouts", "-o", "toml"}, exitUsage},
		{"get-rollouts-wide", []string{"get", "rollouts", "-o", "wide"}, exitOK},
		{"get-rollouts-wide-all-namespaces", []string{"get", "rollouts", "-A", "-o", "wide"}, exitOK},
		{"get-unknown-kind", []string{"get", "rolouts"}, exitUsage},
		// get clusters.
		{"get-clusters", []string{"get", "clusters"}, exitOK},
		{"get-clusters-json", []string{"get", "clusters", "-o", "json"}, exitOK},
		{"get-clusters-yaml", []string{"get", "clusters", "-o", "yaml"}, exitOK},
		{"get-clusters-all-namespaces", []string{"get", "clusters", "-A"}, exitOK},
		{"get-clusters-wide", []string{"get", "clusters", "-o", "wide"}, exitOK},
		// get receipts.
		{"get-receipts", []string{"get", "receipts"}, exitOK},
		{"get-receipts-rollout", []string{"get", "receipts", "--rollout", "api"}, exitOK},
		{"get-receipts-wide", []string{"get", "receipts", "--rollout", "web", "-o", "wide"}, exitOK},
		{"get-receipts-json", []string{"get", "receipts", "--rollout", "api", "-o", "json"}, exitOK},
		{"get-receipts-yaml", []string{"get", "receipts", "--rollout", "web", "-o", "yaml"}, exitOK},
		{"get-receipts-rollout-none", []string{"get", "receipts", "--rollout", "auth"}, exitOK},
		// status.
		{"status-web", []string{"status", "web"}, exitOK},
		{"status-web-json", []string{"status", "web", "-o", "json"}, exitOK},
		{"status-web-yaml", []string{"status", "web", "-o", "yaml"}, exitOK},
		{"status-api-blocked", []string{"status", "api"}, exitNo},
		{"status-cache-completed", []string{"status", "cache"}, exitOK},
		{"status-auth-held", []string{"status", "auth"}, exitNo},
		{"status-auth-held-json", []string{"status", "auth", "-o", "json"}, exitNo},
		{"status-staging", []string{"status", "web", "-n", "staging"}, exitOK},
		{"status-not-found", []string{"status", "nope"}, exitUsage},
		{"status-wide", []string{"status", "web", "-o", "wide"}, exitUsage},
		{"status-no-args", []string{"status"}, exitUsage},
		// tree.
		{"tree-web", []string{"tree", "web"}, exitOK},
		{"tree-web-json", []string{"tree", "web", "-o", "json"}, exitOK},
		{"tree-web-yaml", []string{"tree", "web", "-o", "yaml"}, exitOK},
		{"tree-api", []string{"tree", "api"}, exitOK},
		{"tree-not-found", []string{"tree", "nope"}, exitUsage},
		// events.
		{"events-web", []string{"events", "web"}, exitOK},
		{"events-web-json", []string{"events", "web", "-o", "json"}, exitOK},
		{"events-web-yaml", []string{"events", "web", "-o", "yaml"}, exitOK},
		{"events-cache-none", []string{"events", "cache"}, exitOK},
		{"events-not-found", []string{"events", "nope"}, exitUsage},
		// receipts verify.
		{"verify-good", []string{"receipts", "verify", "-n", "audit", audit.good}, exitOK},
		{"verify-tampered", []string{"receipts", "verify", "-n", "audit", audit.tampered}, exitNo},
		{"verify-edited-evidence", []string{"receipts", "verify", "-n", "audit", audit.edited}, exitNo},
		{"verify-digest-only-evidence", []string{"receipts", "verify", "-n", "audit", audit.digestOnly}, exitNo},
		{"verify-compressed-evidence", []string{"receipts", "verify", "-n", "audit", audit.compressed}, exitOK},
		{"evidence-good-yaml", []string{"receipts", "evidence", "-n", "audit", audit.good, "-o", "yaml"}, exitOK},
		{"evidence-digest-only", []string{"receipts", "evidence", "-n", "audit", audit.digestOnly}, exitNo},
		{"evidence-not-found", []string{"receipts", "evidence", "nope"}, exitUsage},
		{"verify-rollout-json", []string{"receipts", "verify", "-n", "audit", "--rollout", "shop", "-o", "json"}, exitNo},
		{"verify-rollout-web", []string{"receipts", "verify", "--rollout", "web"}, exitOK},
		{"verify-not-found", []string{"receipts", "verify", "nope"}, exitUsage},
		{"verify-no-args", []string{"receipts", "verify"}, exitUsage},
		{"verify-names-with-key", []string{"receipts", "verify", "-n", "audit", audit.good, "--key", "../../internal/attest/testdata/ed25519.pub"}, exitUsage},
		// revision, receipts explain.
		{"revision-us-2", []string{"revision", "us-2"}, exitNo},
		{"revision-eu-1-web-json", []string{"revision", "eu-1", "--rollout", "web", "-o", "json"}, exitOK},
		{"revision-not-found", []string{"revision", "nope"}, exitUsage},
		{"explain-api-deploysafe", []string{"receipts", "explain", "--rollout", "api", "--gate", "deploySafe"}, exitNo},
		{"explain-digest-only", []string{"receipts", "explain", "-n", "audit", audit.digestOnly}, exitOK},
	}
	written := map[string]bool{}
	for _, tt := range tests {
		written[tt.name+".golden"] = true
		t.Run(tt.name, func(t *testing.T) {
			r := tidegate(ctx, tt.args...)
			if r.code != tt.exit {
				t.Errorf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, tt.exit, r.stdout, r.stderr)
			}
			checkKubeGolden(t, tt.name, tt.args, r)
		})
	}
	checkNoStaleGolden(t, kubeGoldenDir, written)
}

// checkNoStaleGolden fails for each file of dir that is not written.
func checkNoStaleGolden(t *testing.T, dir string, written map[string]bool) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !written[e.Name()] {
			rel, _ := filepath.Rel(testenv.RepoRoot(), filepath.Join(dir, e.Name()))
			t.Errorf("%s is stale: no case writes it", rel)
		}
	}
}

func checkKubeGolden(t *testing.T, name string, args []string, r cliResult) {
	t.Helper()
	checkGoldenIn(t, kubeGoldenDir, name, args, r)
}

// checkGoldenIn compares what the command line printed for args, and its exit code, with
// dir/name.golden.
func checkGoldenIn(t *testing.T, dir, name string, args []string, r cliResult) {
	t.Helper()
	var got bytes.Buffer
	fmt.Fprintf(&got, "$ tidegate %s\nexit: %d\n--- stdout\n%s--- stderr\n%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	golden.Check(t, filepath.Join(dir, name+".golden"), got.Bytes(), *update, "go test ./cmd/tidegate -update")
}

// TestNoHub checks that a kubeconfig that cannot be read, and an API server that does not answer,
// are API errors: exit code 2 with the reason.
func TestNoHub(t *testing.T) {
	dir := t.TempDir()
	unreachable := filepath.Join(dir, "unreachable")
	if err := os.WriteFile(unreachable, []byte(`apiVersion: v1
kind: Config
clusters: [{name: hub, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: me, user: {token: x}}]
contexts: [{name: hub, context: {cluster: hub, user: me, namespace: fleet}}]
current-context: hub
`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--kubeconfig", filepath.Join(dir, "missing"), "get", "rollouts"}, "error: reading the kubeconfig: "},
		{[]string{"--kubeconfig", unreachable, "get", "rollouts"}, "error: listing fleetrollouts in namespace fleet: "},
		{[]string{"--kubeconfig", unreachable, "status", "web"}, "error: fleetrollout fleet/web: "},
		{[]string{"--kubeconfig", unreachable, "hold", "web", "--reason", "x"}, "error: fleetrollout fleet/web: "},
		{[]string{"--kubeconfig", unreachable, "get", "rollouts", "web", "-A"}, "error: a fleetrollout cannot be read by name across all namespaces"},
	} {
		var stdout, stderr bytes.Buffer
		code := runContext(t.Context(), defaultEnv(), tt.args, strings.NewReader(""), &stdout, &stderr)
		if code != exitUsage || !strings.HasPrefix(stderr.String(), tt.want) || stdout.Len() != 0 {
			t.Errorf("tidegate %s: exit %d, stdout %q, stderr %q; want exit 2 and %q", strings.Join(tt.args, " "), code, stdout.String(), stderr.String(), tt.want)
		}
	}
}
