package testbin

import (
	"path/filepath"

	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/tidegate/tidegate/config"
)

// CRDs says which CustomResourceDefinitions an API server of NewEnvironment starts with.
type CRDs uint8

const (
	// TidegateCRDs are tidegate's, embedded from config/crd/bases.
	TidegateCRDs CRDs = 1 << iota
	// FluxCRDs are source-controller's and kustomize-controller's, from the testbin directory.
	FluxCRDs
)

// NewEnvironment returns an envtest environment (a kube-apiserver and etcd, not started) that runs
// the binaries of the testbin directory Dir(dir) finds, and installs crds when it starts.
func NewEnvironment(dir string, crds CRDs) (*envtest.Environment, error) {
	dir, err := Dir(dir)
	if err != nil {
		return nil, err
	}
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
