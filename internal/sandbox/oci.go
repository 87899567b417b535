package sandbox

import (
	"sync"

	"github.com/tidegate/tidegate/internal/localfleet"
)

// ociPackage is the podinfo package as the sandbox delivers it with --oci: every commit to the
// podinfo repository is also pushed to the sandbox's registry as a Flux OCI artifact, tag latest,
// and signed with the sandbox's cosign key. The Git repository stays the package's working tree
// (the demo reads and edits files there); the rollout's OCIRepository reads the registry.
type ociPackage struct {
	key        *localfleet.CosignKey
	repository string // <host>/podinfo

	mu    sync.Mutex
	files map[string]string // the package as last pushed
}

func newOCIPackage(l layout, reg *localfleet.Registry) (*ociPackage, error) {
	key, err := sandboxCosignKey(l)
	if err != nil {
		return nil, err
	}
	return &ociPackage{key: key, repository: reg.Host + "/" + repoPodinfo, files: map[string]string{}}, nil
}

// push applies a commit's files and removals to the package, pushes it and signs it. It returns
// the artifact's revision as the OCIRepository reports it (latest@sha256:<hex>).
func (p *ociPackage) push(files map[string]string, remove []string, message string) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for path, content := range files {
		p.files[path] = content
	}
	for _, path := range remove {
		delete(p.files, path)
	}
	a, err := localfleet.PushArtifact(p.repository+":"+ociTag, message, p.files)
	if err != nil {
		return "", err
	}
	if err := localfleet.Sign(a, p.key); err != nil {
		return "", err
	}
	return a.Revision(), nil
}

// sandboxCosignKey is the sandbox directory's cosign key: read from cosign.key, or made and
// written there (mode 0600) with its public key in cosign.pub.
func sandboxCosignKey(l layout) (*localfleet.CosignKey, error) {
	return keyFile(l.cosignKey(), l.cosignPub(), "cosign key", localfleet.ParseCosignKey,
		func() (*localfleet.CosignKey, []byte, []byte, error) {
			k, err := localfleet.NewCosignKey()
			if err != nil {
				return nil, nil, nil, err
			}
			private, err := k.PrivatePEM()
			return k, private, k.PublicPEM, err
		})
}
