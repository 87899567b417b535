package testbin

import (
	"path/filepath"
	"time"

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

// ControlPlaneStartTimeout bounds the start of one etcd or kube-apiserver of NewEnvironment.
const ControlPlaneStartTimeout = 4 * time.Minute

// NewEnvironment returns an envtest environment (a kube-apiserver and etcd, not started) that runs
// the binaries of the testbin directory Dir(dir) finds, and installs crds when it starts.
func NewEnvironment(dir string, crds CRDs) (*envtest.Environment, error) {
	dir, err := Dir(dir)
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: filepath.Join(dir, "bin"), ErrorIfCRDPathMissing: true,
		// envtest gives up on an etcd or kube-apiserver not ready by ControlPlaneStartTimeout and
		// starts it again (five tries), leaving the slow one running on the port the next try
		// wants; it copies this timeout over the processes' own StartTimeout, so it is set here.
		// On a loaded machine (make test's fleets on two cores) envtest's default of 20 s cut
		// starts short and the retries made them slower still.
		ControlPlaneStartTimeout: ControlPlaneStartTimeout,
		ControlPlaneStopTimeout:  time.Minute,
	}
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
