// Package release builds tidegate's release manifests from config/ with kustomize: the CRDs alone,
// the controller without the CRDs, its admission policies, all three and the fleet namespace, the controller's image
// set to one image by tag and digest (`make release`, hack/release); and names the CLI binaries a
// release carries beside them.
package release

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/tidegate/tidegate/hack/lib/image"
)

// The files of a release, and the config/ kustomization each is built from.
const (
	CRDs       = "crds.yaml"       // config/crd: the CustomResourceDefinitions alone
	Controller = "controller.yaml" // config/controller: the controller, its RBAC and namespace, no CRD
	Admission  = "admission.yaml"  // config/admission: the ValidatingAdmissionPolicies that guard the record
	Install    = "install.yaml"    // config/default: all three and the fleet namespace, for a first install
)

// Files lists the release's files with the kustomization each is built from.
var Files = []struct{ Name, Config string }{
	{CRDs, "crd"}, {Controller, "controller"}, {Admission, "admission"}, {Install, "default"},
}

// CLIPlatforms are the GOOS/GOARCH pairs `make release` builds the tidegate CLI for, each without
// cgo, so that a release runs on the machines people type commands on without a Go toolchain or a
// checkout (the module cannot be installed by path: docs/operations.md#install).
var CLIPlatforms = []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64"}

// CLIName is the file name of the CLI binary for platform (GOOS/GOARCH): tidegate-linux-amd64.
func CLIName(platform string) string {
	return "tidegate-" + strings.ReplaceAll(platform, "/", "-")
}

// Sums is the name of the checksums file over every file of a release, in the format
// `sha256sum -c` reads.
const Sums = "SHA256SUMS"

// Build builds each of Files from configDir (a checkout's config/), the controller's image set to
// imageRef (<repository>:<tag>@sha256:<digest>, as `make image` writes it to dist/image.txt), and
// returns each file's YAML. A release names its image by both, so that the manifests say which
// version they run and pin its bytes.
func Build(configDir, imageRef string) (map[string][]byte, error) {
	if _, tag, digest, err := splitRef(imageRef); err != nil || tag == "" || digest == "" {
		return nil, fmt.Errorf("image %q is not <repository>:<tag>@sha256:<digest>: run `make image` first, it writes one to dist/image.txt", imageRef)
	}
	out := map[string][]byte{}
	for _, f := range Files {
		y, err := BuildConfig(configDir, f.Config, imageRef)
		if err != nil {
			return nil, err
		}
		out[f.Name] = y
	}
	return out, nil
}

// BuildConfig builds the kustomization config/<config> of configDir, the controller's image set to
// imageRef (<repository>:<tag>, <repository>@sha256:<digest> or both), and returns its YAML. It
// builds in memory, through an overlay that sets the image as `kustomize edit set image` would, so
// the checkout is left as it is.
func BuildConfig(configDir, config, imageRef string) ([]byte, error) {
	repo, tag, digest, err := splitRef(imageRef)
	if err != nil {
		return nil, err
	}
	fsys := filesys.MakeFsInMemory()
	if err := copyTree(os.DirFS(configDir), fsys, "/config"); err != nil {
		return nil, fmt.Errorf("reading %s: %w", configDir, err)
	}
	kustomization := fmt.Sprintf("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- ../../config/%s\nimages:\n- name: %s\n  newName: %s\n", config, image.Repository, repo)
	if tag != "" {
		kustomization += "  newTag: " + tag + "\n"
	}
	if digest != "" {
		kustomization += "  digest: " + digest + "\n"
	}
	overlay := "/release/" + config
	if err := fsys.MkdirAll(overlay); err != nil {
		return nil, err
	}
	if err := fsys.WriteFile(path.Join(overlay, "kustomization.yaml"), []byte(kustomization)); err != nil {
		return nil, err
	}
	res, err := Kustomizer().Run(fsys, overlay)
	if err != nil {
		return nil, fmt.Errorf("kustomize build config/%s: %w", config, err)
	}
	y, err := res.AsYaml()
	if err != nil {
		return nil, fmt.Errorf("kustomize build config/%s: %w", config, err)
	}
	return y, nil
}

// splitRef splits an image reference into its repository and its tag, its digest or both
// (<repository>:<tag>@sha256:<digest>); one of the two must be there.
func splitRef(ref string) (repo, tag, digest string, err error) {
	named, digest, hasDigest := strings.Cut(strings.TrimSpace(ref), "@")
	repo = named
	if i := strings.LastIndex(named, ":"); i >= 0 && !strings.Contains(named[i:], "/") {
		repo, tag = named[:i], named[i+1:]
	}
	switch {
	case repo == "" || strings.ContainsAny(ref, " \t\n"):
		return "", "", "", fmt.Errorf("image %q names no repository", ref)
	case hasDigest && (!strings.HasPrefix(digest, "sha256:") || len(digest) != len("sha256:")+64):
		return "", "", "", fmt.Errorf("image %q: the digest is not sha256:<64 hex digits>", ref)
	case tag == "" && digest == "":
		return "", "", "", fmt.Errorf("image %q has neither a tag nor a digest", ref)
	}
	return repo, tag, digest, nil
}

// copyTree copies the regular files under src into dst at root.
func copyTree(src fs.FS, dst filesys.FileSystem, root string) error {
	return fs.WalkDir(src, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		target := filepath.ToSlash(path.Join(root, p))
		if d.IsDir() {
			return dst.MkdirAll(target)
		}
		b, err := fs.ReadFile(src, p)
		if err != nil {
			return err
		}
		return dst.WriteFile(target, b)
	})
}

// Kustomizer builds as `kubectl kustomize` does: objects in the order kubectl applies them in one
// pass, Namespaces and CRDs first (kustomize's legacy order; krusty's default keeps the order of
// the files, which puts the controller's ServiceAccount before its Namespace).
func Kustomizer() *krusty.Kustomizer {
	opts := krusty.MakeDefaultOptions()
	opts.Reorder = krusty.ReorderOptionLegacy
	return krusty.MakeKustomizer(opts)
}
