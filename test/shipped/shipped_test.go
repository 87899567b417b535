package shipped

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidegate/tidegate/internal/testbin"
	"github.com/tidegate/tidegate/test/testenv"
)

const module = "github.com/tidegate/tidegate"

// testingImporters are the packages of other modules that the binaries may link although they
// import the testing package, and why.
var testingImporters = map[string]string{
	// The render's SOPS decryption (evidence/decrypt), as kustomize-controller's: it only asks
	// testing.Testing() before a hook for its own tests.
	"github.com/getsops/sops/v3/age": "asks testing.Testing()",
	// The gates' chart render (evidence/chart), Helm's v4 SDK as helm-controller links it: both
	// only ask testing.Testing(), for the Kubernetes version Helm assumes in a test binary.
	"helm.sh/helm/v4/internal/version": "asks testing.Testing()",
	"helm.sh/helm/v4/pkg/chart/common": "asks testing.Testing()",
}

// The binaries link no package under test/, and the testing package only through testingImporters.
func TestBinariesLinkNoTestCode(t *testing.T) {
	for _, cmd := range []string{"./cmd/tidegate", "./cmd/tidegate-controller", "./cmd/tidegate-sandbox"} {
		c := exec.Command("go", "list", "-deps", "-f", `{{.ImportPath}} {{join .Imports " "}}`, cmd)
		c.Dir = testenv.RepoRoot()
		out, err := c.Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", cmd, err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			fields := strings.Fields(line)
			pkg := fields[0]
			if strings.HasPrefix(pkg, module+"/test/") {
				t.Errorf("%s links %s: test code must live in test/ and _test.go files, and shipped code must not import it", cmd, pkg)
			}
			if _, allowed := testingImporters[pkg]; slices.Contains(fields[1:], "testing") && !allowed {
				t.Errorf("%s links testing through %s: test code must live in test/ and _test.go files, and shipped code must not import it", cmd, pkg)
			}
		}
	}
}

// The CLI (also the flux fleet plugin and tidegate mcp) links none of the controller, the sandbox
// and its fleet, nor the cloud providers' SDKs: tidegate sandbox runs the binary tidegate-sandbox,
// which links them.
func TestTheCLILinksNeitherTheControllerNorTheSandbox(t *testing.T) {
	c := exec.Command("go", "list", "-deps", "./cmd/tidegate")
	c.Dir = testenv.RepoRoot()
	out, err := c.Output()
	if err != nil {
		t.Fatalf("go list -deps ./cmd/tidegate: %v", err)
	}
	forbidden := []string{module + "/controllers", module + "/internal/localfleet", module + "/internal/sandbox",
		module + "/internal/simulator", module + "/internal/testbin", module + "/test/",
		"github.com/aws/", "github.com/Azure/", "cloud.google.com/"}
	for _, pkg := range strings.Fields(string(out)) {
		for _, f := range forbidden {
			if pkg == f || strings.HasPrefix(pkg, strings.TrimSuffix(f, "/")+"/") {
				t.Errorf("./cmd/tidegate links %s: the CLI must not link the controller, the sandbox or the cloud SDKs", pkg)
			}
		}
	}
}

// The engine, the pure rollout state machine, does no I/O: it links no client, no controller-runtime
// and none of the evidence collector; controllers fills its World and carries out what it records.
// The one controller-runtime package it links is pkg/scheme, a scheme builder over apimachinery
// alone, which Flux's kustomize-controller API (the Kustomization template of a FleetRollout)
// imports.
func TestTheEngineLinksNoClientAndNoCollector(t *testing.T) {
	c := exec.Command("go", "list", "-deps", "./engine")
	c.Dir = testenv.RepoRoot()
	out, err := c.Output()
	if err != nil {
		t.Fatalf("go list -deps ./engine: %v", err)
	}
	forbidden := []string{"sigs.k8s.io/controller-runtime/", "k8s.io/client-go/", module + "/evidence/",
		module + "/controllers/", module + "/internal/"}
	for _, pkg := range strings.Fields(string(out)) {
		if pkg == "sigs.k8s.io/controller-runtime/pkg/scheme" {
			continue
		}
		for _, f := range forbidden {
			if pkg+"/" == f || strings.HasPrefix(pkg, f) {
				t.Errorf("./engine links %s: the engine reads a World and writes status, nothing else", pkg)
			}
		}
	}
}

// The cloud providers' SDKs, which fluxcd/pkg/auth/utils links for workload identity, are linked
// into the controller's binary and into the tests of workload identity only: every other package's
// test binary reaches members without them (member.Clients.WorkloadIdentity is injected), so it
// compiles and links without the AWS, Azure and GCP SDKs, and the race packages never build them.
func TestOnlyTheControllerLinksTheCloudSDKs(t *testing.T) {
	const identity = "github.com/fluxcd/pkg/auth/utils"
	mayLink := map[string]bool{
		module + "/cmd/tidegate-controller": true, // the controller reaches members through workload identity
		module + "/internal/member":         true, // its identity tests
		module + "/test/e2e":                true, // TestE2EMembersThroughWorkloadIdentity
	}
	c := exec.Command("go", "list", "-test", "-deps", "-f", `{{.ImportPath}} {{join .Deps " "}}`, "./...")
	c.Dir = testenv.RepoRoot()
	out, err := c.Output()
	if err != nil {
		t.Fatalf("go list -test -deps ./...: %v", err)
	}
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		// A test binary's package is "<path>.test", and a package built for its tests "<path> [<path>.test]".
		pkg, ok := strings.CutSuffix(fields[0], ".test")
		if !ok || !strings.HasPrefix(pkg, module) {
			continue
		}
		checked++
		if !mayLink[pkg] && slices.Contains(fields[1:], identity) {
			t.Errorf("the test binary of %s links %s and with it the cloud SDKs: inject member.Clients.WorkloadIdentity where workload identity is tested instead", pkg, identity)
		}
	}
	if checked == 0 {
		t.Fatalf("go list found no test binary: %s", out)
	}
}

// binDir holds the binary buildCLI builds, outside the checkout; TestMain removes it.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tidegate-shipped-")
	if err != nil {
		panic(err)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// buildOnce builds cmd/tidegate and cmd/tidegate-sandbox, which tidegate sandbox runs, with
// -trimpath and without cgo, as a release would, side by side into binDir, and returns tidegate's
// path. A -trimpath build shares no compiled package with the others, so the tests build it once,
// with the flags `make image` builds the controller with (TestImage), so that the two share theirs.
var buildOnce = sync.OnceValues(func() (string, error) {
	cmd := exec.Command("go", "build", "-trimpath", "-o", binDir+string(filepath.Separator), "./cmd/tidegate", "./cmd/tidegate-sandbox")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Dir = testenv.RepoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build -trimpath ./cmd/tidegate ./cmd/tidegate-sandbox: %w\n%s", err, out)
	}
	return filepath.Join(binDir, "tidegate"), nil
})

func buildCLI(t *testing.T) string {
	t.Helper()
	bin, err := buildOnce()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// cli runs the binary in a directory outside the checkout, with env added to an environment that
// names no test binaries, and returns its output and exit code.
func cli(ctx context.Context, t *testing.T, bin string, env []string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = t.TempDir()
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, testbin.DirEnv+"=") && !strings.HasPrefix(e, "TIDEGATE_TESTBIN_CACHE=") {
			cmd.Env = append(cmd.Env, e)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if exit, ok := err.(*exec.ExitError); ok {
		return out.String(), exit.ExitCode()
	}
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", bin, strings.Join(args, " "), err, out.String())
	}
	return out.String(), 0
}

// tidegate sandbox without tidegate-sandbox beside the CLI or on PATH says how to build it.
func TestSandboxWithoutItsBinaryNamesTheFix(t *testing.T) {
	b, err := os.ReadFile(buildCLI(t))
	if err != nil {
		t.Fatal(err)
	}
	alone := filepath.Join(t.TempDir(), "tidegate")
	if err := os.WriteFile(alone, b, 0o755); err != nil {
		t.Fatal(err)
	}
	out, code := cli(context.Background(), t, alone, []string{"PATH=" + t.TempDir()}, "sandbox", "status")
	if code != 1 || !strings.Contains(out, "tidegate-sandbox") || !strings.Contains(out, "make build") {
		t.Errorf("tidegate sandbox status without tidegate-sandbox exited %d, want 1 and how to build it:\n%s", code, out)
	}
}

// Without test binaries in its cache, the shipped binary says how to build them, and where it looked.
func TestSandboxWithoutTestBinariesNamesTheFix(t *testing.T) {
	bin := buildCLI(t)
	cache := t.TempDir()
	out, code := cli(context.Background(), t, bin, []string{"TIDEGATE_TESTBIN_CACHE=" + cache},
		"sandbox", "up", "--clusters", "1", "--dir", filepath.Join(t.TempDir(), "sandbox"))
	if code != 1 {
		t.Errorf("sandbox up without test binaries exited %d, want 1:\n%s", code, out)
	}
	for _, want := range []string{"no test binaries", cache, "make testbin", "TIDEGATE_TESTBIN", "--testbin"} {
		if !strings.Contains(out, want) {
			t.Errorf("sandbox up without test binaries should say %q:\n%s", want, out)
		}
	}
}

// The binary built with -trimpath, run outside the checkout with $TIDEGATE_TESTBIN unset, starts a
// sandbox from the cache of `make testbin` with its embedded CRDs, rolls out the demo's first release,
// shows it in status, and stops it with down.
func TestTrimpathBinaryRunsTheSandboxOutsideTheCheckout(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a sandbox of two API servers (about 2 minutes)")
	}
	dir, err := testbin.Dir("")
	if err != nil {
		t.Fatal(err)
	}
	// The cache that holds the test binaries this run uses, however they were named (the Makefile
	// names bin/testbin, a link into the cache).
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	env := []string{
		"TIDEGATE_TESTBIN_CACHE=" + filepath.Dir(real),
		// A killed test binary must not leave a sandbox behind.
		"TIDEGATE_SANDBOX_WATCH_PID=" + strconv.Itoa(os.Getpid()),
	}
	bin := buildCLI(t)
	sandbox := filepath.Join(t.TempDir(), "sandbox")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	t.Cleanup(func() {
		if out, code := cli(context.Background(), t, bin, env, "sandbox", "down", "--dir", sandbox); code != 0 {
			t.Errorf("sandbox down in cleanup exited %d:\n%s", code, out)
		}
	})

	out, code := cli(ctx, t, bin, env, "sandbox", "up", "--clusters", "1", "--dir", sandbox)
	if code != 0 {
		logs, _ := os.ReadFile(filepath.Join(sandbox, "sandbox.log"))
		t.Fatalf("sandbox up exited %d:\n%s\nsandbox.log:\n%s", code, out, logs)
	}
	out, code = cli(ctx, t, bin, env, "sandbox", "status", "--dir", sandbox)
	if code != 0 || !strings.Contains(out, "running") || !strings.Contains(out, "member-1") || !strings.Contains(out, "podinfo") {
		t.Errorf("sandbox status exited %d, want 0 and the running sandbox with member-1 and podinfo:\n%s", code, out)
	}
	if out, code = cli(ctx, t, bin, env, "sandbox", "down", "--dir", sandbox); code != 0 {
		t.Errorf("sandbox down exited %d:\n%s", code, out)
	}
	if out, code = cli(ctx, t, bin, env, "sandbox", "status", "--dir", sandbox); code != 1 {
		t.Errorf("sandbox status after down exited %d, want 1:\n%s", code, out)
	}
}
