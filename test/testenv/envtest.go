package testenv

import (
	"fmt"
	"os"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/tidegate/tidegate/internal/testbin"
)

// RunWithAPIServer runs a package's tests against one real kube-apiserver and etcd (envtest) with
// crds installed. ready receives a client of that API server, or the error that kept it
// from starting: tests that need it must then fail with that error, never skip. It returns the exit
// code for os.Exit, 1 when stopping the API server failed.
func RunWithAPIServer(m *testing.M, scheme *runtime.Scheme, crds testbin.CRDs, ready func(client.Client, error)) int {
	return RunWithEnvironment(m, func() (*envtest.Environment, error) {
		env, c, err := startAPIServer(scheme, crds)
		ready(c, err)
		return env, err
	})
}

// RunWithEnvironment runs a package's tests around an envtest environment that start brings up (for
// suites that need more than RunWithAPIServer gives: a rest.Config, API server flags, users). An
// error from start is reported, and the tests still run: those that need the environment must fail
// with that error, never skip. The environment start returns, if any, is stopped afterwards; the exit
// code is m.Run's, or 1 when stopping failed.
func RunWithEnvironment(m *testing.M, start func() (*envtest.Environment, error)) int {
	env, err := start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "envtest not started, the tests that need it will fail: %v\n", err)
	}
	code := m.Run()
	if env != nil {
		if err := env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping envtest: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
	}
	return code
}

func startAPIServer(scheme *runtime.Scheme, crds testbin.CRDs) (*envtest.Environment, client.Client, error) {
	env, err := testbin.NewEnvironment("", crds)
	if err != nil {
		return nil, nil, err
	}
	cfg, err := env.Start()
	if err != nil {
		// Start may have left etcd or kube-apiserver running; stop what it started.
		_ = env.Stop()
		return nil, nil, fmt.Errorf("starting envtest: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		_ = env.Stop()
		return nil, nil, err
	}
	return env, c, nil
}
