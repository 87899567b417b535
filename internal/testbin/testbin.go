// Package testbin finds the test binaries and CRDs that `make testbin` (hack/testbin.sh and
// hack/flux-cli.sh) builds and caches.
package testbin

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/tidegate/tidegate/config"
)

// Dir returns the testbin directory: $TIDEGATE_TESTBIN when set, else bin/testbin in the repository.
// It fails, naming the fix, when the binaries have not been built.
func Dir() (string, error) {
	dir := os.Getenv("TIDEGATE_TESTBIN")
	if dir == "" {
		dir = filepath.Join(RepoRoot(), "bin", "testbin")
	}
	for _, b := range []string{"kube-apiserver", "etcd", "source-controller", "kustomize-controller"} {
		if _, err := os.Stat(filepath.Join(dir, "bin", b)); err != nil {
			return "", fmt.Errorf("test binary %s is missing in %s: run `make testbin` first (about 20 minutes the first time): %w", b, dir, err)
		}
	}
	return dir, nil
}

// RepoRoot returns the root of the tidegate repository this package was built from.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// FluxCLI returns the path of the Flux CLI (`flux`) that `make testbin` (hack/flux-cli.sh) builds:
// $TIDEGATE_FLUX_CLI when set, else bin/flux-cli/bin/flux in the repository. It fails, naming the
// fix, when the binary has not been built.
func FluxCLI() (string, error) {
	path := os.Getenv("TIDEGATE_FLUX_CLI")
	if path == "" {
		path = filepath.Join(RepoRoot(), "bin", "flux-cli", "bin", "flux")
	}
	info, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("the Flux CLI is missing at %s: run `make testbin` first (hack/flux-cli.sh, a few minutes the first time): %w", path, err)
	}
	if info.IsDir() || info.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("the Flux CLI at %s is not an executable file: run `make testbin` (hack/flux-cli.sh)", path)
	}
	return path, nil
}

// CRDs says which CustomResourceDefinitions an API server of NewEnvironment starts with.
type CRDs uint8

const (
	// TidegateCRDs are tidegate's, embedded from config/crd/bases.
	TidegateCRDs CRDs = 1 << iota
	// FluxCRDs are source-controller's and kustomize-controller's, from the testbin directory.
	FluxCRDs
)

// NewEnvironment returns an envtest environment (a kube-apiserver and etcd, not started) that runs
// the binaries of the testbin directory dir, as Dir returns it, and installs crds when it starts.
func NewEnvironment(dir string, crds CRDs) (*envtest.Environment, error) {
	env := &envtest.Environment{BinaryAssetsDirectory: filepath.Join(dir, "bin"), ErrorIfCRDPathMissing: true}
	if crds&TidegateCRDs != 0 {
		c, err := config.CRDs()
		if err != nil {
			return nil, err
		}
		env.CRDs = c
	}
	if crds&FluxCRDs != 0 {
		env.CRDDirectoryPaths = []string{filepath.Join(dir, "crds")}
	}
	return env, nil
}
