package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/tidegate/tidegate/internal/localfleet"
)

// ociPackage is the podinfo package as the sandbox delivers it with --oci or --helm: every commit
// to the podinfo repository is also pushed to the sandbox's registry and signed with the sandbox's
// cosign key. With --oci it is a Flux OCI artifact, tag latest; with --helm the repository holds a
// chart, pushed as helm push does, tagged with the version of its Chart.yaml. The Git repository
// stays the package's working tree (the demo reads and edits files there); the rollout's
// OCIRepository reads the registry.
type ociPackage struct {
	key        *localfleet.CosignKey
	repository string // <host>/podinfo
	chart      bool
	// chartDir is where a chart is written out to be packaged (localfleet.PackageChart reads a
	// directory).
	chartDir string

	mu    sync.Mutex
	files map[string]string // the package as last pushed
}

func newOCIPackage(l layout, reg *localfleet.Registry, chart bool, chartDir string) (*ociPackage, error) {
	key, err := sandboxCosignKey(l)
	if err != nil {
		return nil, err
	}
	return &ociPackage{key: key, repository: reg.Host + "/" + repoPodinfo, chart: chart, chartDir: chartDir, files: map[string]string{}}, nil
}

// push applies a commit's files and removals to the package, pushes it and signs it. It returns
// the artifact's revision as the OCIRepository reports it (latest@sha256:<hex>, or
// <version>@sha256:<hex> for a chart).
func (p *ociPackage) push(files map[string]string, remove []string, message string) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for path, content := range files {
		p.files[path] = content
	}
	for _, path := range remove {
		delete(p.files, path)
	}
	a, err := p.pushFiles(message)
	if err != nil {
		return "", err
	}
	if err := localfleet.Sign(a, p.key); err != nil {
		return "", err
	}
	return a.Revision(), nil
}

func (p *ociPackage) pushFiles(message string) (localfleet.Artifact, error) {
	if !p.chart {
		return localfleet.PushArtifact(p.repository+":"+ociTag, message, p.files)
	}
	c, err := packageChart(p.chartDir, p.files)
	if err != nil {
		return localfleet.Artifact{}, err
	}
	if c.Name != repoPodinfo {
		return localfleet.Artifact{}, fmt.Errorf("the podinfo repository holds chart %s: the sandbox pushes it to %s, so it should be named %s", c.Name, p.repository, repoPodinfo)
	}
	// A chart is pushed to <host>/<its name>: the repository's host.
	return localfleet.PushChart(strings.TrimSuffix(p.repository, "/"+repoPodinfo), c)
}

// packageChart writes files (a chart, path → content) to dir, which it empties first, and packages
// them with the version of their Chart.yaml.
func packageChart(dir string, files map[string]string) (*localfleet.Chart, error) {
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	for name, content := range files {
		f := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(f), 0o700); err != nil {
			return nil, err
		}
		if err := os.WriteFile(f, []byte(content), 0o600); err != nil {
			return nil, err
		}
	}
	return localfleet.PackageChart(dir, "", "")
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
