package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/tidegate/tidegate/internal/scheme"
	"github.com/tidegate/tidegate/internal/testbin"
	"github.com/tidegate/tidegate/test/testenv"
)

// The hub the kube commands are tested against: a real kube-apiserver and etcd (envtest) with the
// tidegate and Flux CRDs, started once in TestMain, and a kubeconfig file for the command line whose
// current context is an administrator in namespace "fleet"; its context "nobody" is a user without
// any permission. envErr says why the hub is not there: every test that needs it fails with that
// error, it never skips. The policy tests do not need it.
var (
	env        *envtest.Environment
	k8s        client.Client
	kubeconfig string
	envErr     error
)

// runAsCLI, set to 1 in its environment, makes the test binary run as the command line.
const runAsCLI = "TIDEGATE_TEST_RUN_AS_CLI"

// fixedNow is the clock of the command line in the tests: ages and request values are computed from it.
var fixedNow = time.Date(2026, 3, 1, 10, 10, 0, 0, time.UTC)

func TestMain(m *testing.M) {
	silenceClientLogs() // as main does
	// The MCP tests start the command line as a subprocess (an MCP client speaks to its stdio): this
	// test binary, run as the command line.
	if os.Getenv(runAsCLI) == "1" {
		os.Exit(runContext(context.Background(), defaultEnv(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	if testenv.Fuzzing() {
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "tidegate-cli-")
	if err != nil {
		panic(err)
	}
	code := testenv.RunWithEnvironment(m, func() (*envtest.Environment, error) {
		envErr = startHub(dir)
		return env, envErr
	})
	os.RemoveAll(dir)
	os.Exit(code)
}

func startHub(dir string) error {
	e, err := testbin.NewEnvironment("", testbin.TidegateCRDs|testbin.FluxCRDs)
	if err != nil {
		return err
	}
	cfg, err := e.Start()
	if err != nil {
		// Start may have left etcd or kube-apiserver running; stop what it started.
		_ = e.Stop()
		return fmt.Errorf("starting envtest: %w", err)
	}
	env = e
	if k8s, err = client.New(cfg, client.Options{Scheme: scheme.New()}); err != nil {
		return err
	}
	admin, err := e.AddUser(envtest.User{Name: "fleet-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fmt.Errorf("adding an admin user: %w", err)
	}
	nobody, err := e.AddUser(envtest.User{Name: "nobody"}, nil)
	if err != nil {
		return fmt.Errorf("adding a user: %w", err)
	}
	// One kubeconfig with both users: the admin's context is the current one, in namespace fleet.
	adminKC, err := admin.KubeConfig()
	if err != nil {
		return err
	}
	nobodyKC, err := nobody.KubeConfig()
	if err != nil {
		return err
	}
	kc, err := clientcmd.Load(adminKC)
	if err != nil {
		return err
	}
	nkc, err := clientcmd.Load(nobodyKC)
	if err != nil {
		return err
	}
	kc.Contexts[kc.CurrentContext].Namespace = "fleet"
	nctx := nkc.Contexts[nkc.CurrentContext]
	kc.AuthInfos["nobody"] = nkc.AuthInfos[nctx.AuthInfo]
	kc.Contexts["nobody"] = &clientcmdapi.Context{Cluster: kc.Contexts[kc.CurrentContext].Cluster, AuthInfo: "nobody", Namespace: "fleet"}
	kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
		return err
	}
	return createFixtures(context.Background())
}

// hub fails the test when the API server did not start, and returns a context bound to the test.
func hub(t *testing.T) context.Context {
	t.Helper()
	if envErr != nil {
		t.Fatalf("no hub API server: %v", envErr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// cliResult is what one run of the command line printed, and its exit code.
type cliResult struct {
	code           int
	stdout, stderr string
}

// tidegate runs the command line in-process against the hub, with the test kubeconfig and clock.
func tidegate(ctx context.Context, args ...string) cliResult {
	return tidegateAt(ctx, kubeconfig, args...)
}

// tidegateAt runs the command line in-process with the kubeconfig file kc and the test clock.
func tidegateAt(ctx context.Context, kc string, args ...string) cliResult {
	var stdout, stderr bytes.Buffer
	e := &cliEnv{now: func() time.Time { return fixedNow }, pollInterval: 50 * time.Millisecond}
	code := runContext(ctx, e, append([]string{"--kubeconfig", kc}, args...), strings.NewReader(""), &stdout, &stderr)
	return cliResult{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// namespace creates a namespace for a test's objects (envtest runs no namespace controller, so it
// is never removed; the tests delete what they create in it).
func namespace(ctx context.Context, name string) error {
	err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}
