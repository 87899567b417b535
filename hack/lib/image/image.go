// Package image builds tidegate-controller's container image from a built binary, with no base
// image to pull: one layer holding the static binary over an empty base, run as 65532:65532, with
// the OCI labels of its version and source revision. The build is reproducible: the same binary
// gives the same digest, since every time in the image is the commit time the binary records.
//
// `make image` (hack/image) builds the binary and writes the image as an OCI image layout and as a
// tarball `docker load` and `podman load` read.
package image

import (
	"archive/tar"
	"bytes"
	"debug/buildinfo"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const (
	// Repository is where tidegate's releases publish the controller's image.
	Repository = "ghcr.io/tidegate/tidegate-controller"
	// Entrypoint is the binary's path in the image.
	Entrypoint = "/tidegate-controller"
	// User is the numeric user and group the controller runs as (no /etc/passwd needed), the
	// Deployment's runAsUser and runAsGroup.
	User = "65532:65532"
	// Source is the label naming the source repository.
	Source = "https://github.com/tidegate/tidegate"
)

// The OCI annotation keys (image-spec annotations.md) the image carries as config labels.
const (
	LabelTitle    = "org.opencontainers.image.title"
	LabelVersion  = "org.opencontainers.image.version"
	LabelRevision = "org.opencontainers.image.revision"
	LabelCreated  = "org.opencontainers.image.created"
	LabelSource   = "org.opencontainers.image.source"
	LabelLicenses = "org.opencontainers.image.licenses"
)

// Built is an image and what it was built from.
type Built struct {
	Image v1.Image
	// Tag is the image's reference by tag (Repository:version); Digest its manifest digest.
	Tag    name.Tag
	Digest v1.Hash
	// Version and Revision are the binary's: its module version and the commit it was built from.
	Version, Revision string
	// Modified is true when the binary was built from a tree with uncommitted changes.
	Modified bool
	Created  time.Time
}

// Ref is the image's reference by tag and digest, as the release manifests name it.
func (b *Built) Ref() string { return b.Tag.String() + "@" + b.Digest.String() }

// Build makes the image of binary, a tidegate-controller built for Linux without cgo (the image has
// no libc). version, when set, is the tag and version label; otherwise the binary's module version
// (a pseudo-version for a commit without a tag). The revision and the creation time are the
// binary's VCS stamp: a binary built without one (-buildvcs=false, no Git checkout) is refused,
// since the image could not say what it was built from.
func Build(binary, version string) (*Built, error) {
	info, err := buildinfo.ReadFile(binary)
	if err != nil {
		return nil, fmt.Errorf("reading the Go build information of %s: %w", binary, err)
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	switch {
	case settings["GOOS"] != "linux":
		return nil, fmt.Errorf("%s is built for GOOS=%s: the image runs on linux (build with GOOS=linux)", binary, settings["GOOS"])
	case settings["CGO_ENABLED"] != "0":
		return nil, fmt.Errorf("%s is built with cgo: the image has no libc (build with CGO_ENABLED=0)", binary)
	case settings["vcs.revision"] == "" || settings["vcs.time"] == "":
		return nil, fmt.Errorf("%s records no VCS revision: build it in a Git checkout with -buildvcs=true, so the image can say what it was built from", binary)
	}
	created, err := time.Parse(time.RFC3339, settings["vcs.time"])
	if err != nil {
		return nil, fmt.Errorf("%s: vcs.time %q: %w", binary, settings["vcs.time"], err)
	}
	if version == "" {
		version = info.Main.Version
	}
	tag, err := name.NewTag(Repository + ":" + tagOf(version))
	if err != nil {
		return nil, fmt.Errorf("version %q makes no image tag: %w", version, err)
	}
	content, err := os.ReadFile(binary)
	if err != nil {
		return nil, err
	}
	layer, err := binaryLayer(content, created)
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), layer)
	if err != nil {
		return nil, err
	}
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", settings["GOARCH"]
	cfg.Created = v1.Time{Time: created}
	cfg.Config = v1.Config{
		Entrypoint: []string{Entrypoint},
		User:       User,
		WorkingDir: "/",
		Labels: map[string]string{
			LabelTitle:    "tidegate-controller",
			LabelVersion:  version,
			LabelRevision: settings["vcs.revision"],
			LabelCreated:  created.UTC().Format(time.RFC3339),
			LabelSource:   Source,
			LabelLicenses: "Apache-2.0",
		},
	}
	cfg.History = []v1.History{{Created: v1.Time{Time: created}, CreatedBy: "tidegate make image: " + Entrypoint, Comment: "the tidegate-controller binary"}}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return nil, err
	}
	digest, err := img.Digest()
	if err != nil {
		return nil, err
	}
	return &Built{
		Image: img, Tag: tag, Digest: digest, Version: version, Revision: settings["vcs.revision"],
		Modified: settings["vcs.modified"] == "true", Created: created,
	}, nil
}

// binaryLayer is one layer with the binary at Entrypoint, owned by root, readable and executable
// by everyone and writable by no one, with created as its time.
func binaryLayer(content []byte, created time.Time) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{
		Typeflag: tar.TypeReg,
		Name:     strings.TrimPrefix(Entrypoint, "/"),
		Mode:     0o555,
		Size:     int64(len(content)),
		ModTime:  created.UTC(),
		Format:   tar.FormatPAX,
	}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(content); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
		tarball.WithMediaType(types.OCILayer))
}

// invalidTag matches what an image tag cannot hold ([A-Za-z0-9_][A-Za-z0-9_.-]{0,127}).
var invalidTag = regexp.MustCompile(`[^A-Za-z0-9_.-]`)

// tagOf turns a module version into a tag: "+dirty" and other build metadata become "-dirty".
func tagOf(version string) string {
	t := invalidTag.ReplaceAllString(version, "-")
	if len(t) > 128 {
		t = t[:128]
	}
	return t
}

// WriteLayout writes the image as an OCI image layout in dir (created, or replaced when it holds
// one already), its index naming the tag.
func (b *Built) WriteLayout(dir string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	return p.AppendImage(b.Image, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": b.Tag.String(),
	}))
}

// WriteTarball writes the image as a tarball `docker load` reads, tagged with its tag.
func (b *Built) WriteTarball(path string) error {
	return tarball.WriteToFile(path, b.Tag, b.Image)
}

// LayerBytes is the size of img's layers as stored (compressed).
func LayerBytes(img v1.Image) (int64, error) {
	layers, err := img.Layers()
	if err != nil {
		return 0, err
	}
	var n int64
	for _, l := range layers {
		size, err := l.Size()
		if err != nil {
			return 0, err
		}
		n += size
	}
	return n, nil
}

// Files lists the regular files, directories and links of img's layers, in order, as
// path → mode; a test reads an image back with it.
func Files(img v1.Image) (map[string]os.FileMode, error) {
	layers, err := img.Layers()
	if err != nil {
		return nil, err
	}
	files := map[string]os.FileMode{}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			return nil, err
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				rc.Close()
				return nil, err
			}
			files[h.Name] = h.FileInfo().Mode()
		}
		rc.Close()
	}
	return files, nil
}
