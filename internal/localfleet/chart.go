package localfleet

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"sigs.k8s.io/yaml"
)

// The media types of a Helm chart in an OCI registry (what `helm push` writes, and what an
// OCIRepository's spec.layerSelector.mediaType names to take the chart from it): the chart's
// metadata as JSON for the config, and one layer, the packaged chart.
const (
	HelmConfigMediaType types.MediaType = "application/vnd.cncf.helm.config.v1+json"
	HelmChartMediaType  types.MediaType = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
)

// Chart is a packaged Helm chart.
type Chart struct {
	// Name and Version are the chart's, from its Chart.yaml.
	Name, Version string
	// Metadata is its Chart.yaml as JSON: the config of its OCI artifact.
	Metadata []byte
	// Archive is the chart as `helm package` writes it, a gzipped tarball of its files under a
	// directory named after it: what source-controller serves as the artifact of an OCIRepository
	// that selects the chart's layer, and what helm-controller loads.
	Archive []byte
}

// PackageChart packages the chart in dir as `helm package --version --app-version` does, without
// the Helm SDK (this package ships in the sandbox binary, which has no use for it): every regular
// file of dir under the chart's name, with Chart.yaml's version and appVersion replaced by version
// and appVersion when they are not empty. The tarball is reproducible, as PushArtifact's is.
// Unlike `helm package`, it reads no .helmignore and resolves no dependencies.
func PackageChart(dir, version, appVersion string) (*Chart, error) {
	files := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(p)
		files[filepath.ToSlash(rel)] = string(b)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("reading the chart in %s: %w", dir, err)
	}
	return PackageChartFiles(dir, files, version, appVersion)
}

// PackageChartFiles packages the chart of files, by their paths in the chart's directory, as
// PackageChart packages the chart in dir (which names it in errors). It may change files.
func PackageChartFiles(dir string, files map[string]string, version, appVersion string) (*Chart, error) {
	var meta map[string]any
	var err error
	if err = yaml.Unmarshal([]byte(files["Chart.yaml"]), &meta); err != nil {
		return nil, fmt.Errorf("reading the Chart.yaml in %s: %w", dir, err)
	}
	if meta == nil {
		return nil, fmt.Errorf("%s holds no chart: it has no Chart.yaml", dir)
	}
	for key, v := range map[string]string{"version": version, "appVersion": appVersion} {
		if v != "" {
			meta[key] = v
		}
	}
	c := &Chart{}
	c.Name, _ = meta["name"].(string)
	c.Version, _ = meta["version"].(string)
	if c.Name == "" || c.Version == "" || strings.ContainsAny(c.Name, "/\\") {
		return nil, fmt.Errorf("the Chart.yaml in %s has no name or no version", dir)
	}
	if version != "" || appVersion != "" {
		b, err := yaml.Marshal(meta)
		if err != nil {
			return nil, err
		}
		files["Chart.yaml"] = string(b)
	}
	if c.Metadata, err = json.Marshal(meta); err != nil {
		return nil, err
	}
	under := make(map[string]string, len(files))
	for p, content := range files {
		under[path.Join(c.Name, p)] = content
	}
	if c.Archive, err = packageTarball(under); err != nil {
		return nil, err
	}
	return c, nil
}

// PushChart pushes c to repository ("<host>/<path>", plain HTTP) as `helm push` does: to
// <repository>/<name>, tagged with its version ("+" written "_", which a tag cannot hold), the
// config its metadata and the one layer its archive, of Helm's media types. Sign signs it as it
// signs any artifact.
func PushChart(repository string, c *Chart) (Artifact, error) {
	ref := repository + "/" + c.Name + ":" + strings.ReplaceAll(c.Version, "+", "_")
	tag, err := name.NewTag(ref, name.Insecure)
	if err != nil {
		return Artifact{}, fmt.Errorf("chart reference %q: %w", ref, err)
	}
	img, err := newChartImage(c)
	if err != nil {
		return Artifact{}, err
	}
	return push(tag, img)
}

// chartImage is a chart as an OCI image of its own config: go-containerregistry's mutate package
// writes a config of an image's own schema, where a chart's is its metadata.
type chartImage struct {
	config, manifest []byte
	layer            v1.Layer
}

func newChartImage(c *Chart) (v1.Image, error) {
	img := &chartImage{config: c.Metadata, layer: static.NewLayer(c.Archive, HelmChartMediaType)}
	layerDigest, err := img.layer.Digest()
	if err != nil {
		return nil, err
	}
	configDigest, configSize, err := v1.SHA256(bytes.NewReader(c.Metadata))
	if err != nil {
		return nil, err
	}
	img.manifest, err = json.Marshal(v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		Config:        v1.Descriptor{MediaType: HelmConfigMediaType, Digest: configDigest, Size: configSize},
		Layers:        []v1.Descriptor{{MediaType: HelmChartMediaType, Digest: layerDigest, Size: int64(len(c.Archive))}},
		Annotations: map[string]string{
			"org.opencontainers.image.title":   c.Name,
			"org.opencontainers.image.version": c.Version,
		},
	})
	if err != nil {
		return nil, err
	}
	return partial.CompressedToImage(img)
}

func (i *chartImage) RawConfigFile() ([]byte, error)      { return i.config, nil }
func (i *chartImage) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }
func (i *chartImage) RawManifest() ([]byte, error)        { return i.manifest, nil }

func (i *chartImage) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	if d, err := i.layer.Digest(); err == nil && d == h {
		return i.layer, nil
	}
	if d, _, err := v1.SHA256(bytes.NewReader(i.config)); err == nil && d == h {
		return static.NewLayer(i.config, HelmConfigMediaType), nil
	}
	return nil, errors.New("the chart has no blob " + h.String())
}
