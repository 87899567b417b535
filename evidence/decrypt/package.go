package decrypt

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/getsops/sops/v3/cmd/sops/formats"
	"sigs.k8s.io/kustomize/api/konfig"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/kustomize/api/resource"
	"sigs.k8s.io/kustomize/api/types"

	"github.com/tidegate/tidegate/evidence"
)

// DecryptSources decrypts, in place on disk, the SOPS-encrypted files kustomize reads besides
// manifests (secretGenerator files and env files, patch files) of the kustomization in dir and of
// those it reaches through resources and components, within root, as kustomize-controller does
// before its build. A file without SOPS' marker for its format is left as it is.
func (d *decryptor) DecryptSources(root, dir string) error {
	visited, done := map[string]bool{}, map[string]bool{}
	var visit func(dir string) error
	visit = func(dir string) error {
		if visited[dir] {
			return nil
		}
		visited[dir] = true
		k, err := loadKustomizationFile(dir)
		if k == nil || err != nil {
			return err
		}
		file := func(ref string, f formats.Format) error {
			p, ok := within(root, dir, ref)
			if !ok || done[p] {
				return nil
			}
			done[p] = true
			return d.decryptFile(root, p, f)
		}
		for _, g := range k.SecretGenerator {
			for _, src := range g.FileSources {
				key, p, ok := strings.Cut(src, "=")
				if !ok {
					p = key
				}
				if err := file(p, formatForPath(key)); err != nil {
					return err
				}
			}
			for _, env := range g.EnvSources {
				f := formatForPath(env)
				if f == formats.Binary {
					f = formats.Dotenv
				}
				if err := file(env, f); err != nil {
					return err
				}
			}
		}
		for _, p := range k.Patches {
			if p.Path != "" && !evidence.IsRemote(p.Path) {
				if err := file(p.Path, formatForPath(p.Path)); err != nil {
					return err
				}
			}
		}
		for _, ref := range append(append([]string(nil), k.Resources...), k.Components...) {
			if p, ok := within(root, dir, ref); ok {
				if fi, err := os.Lstat(p); err == nil && fi.IsDir() {
					if err := visit(p); err != nil {
						return err
					}
				}
			}
		}
		return nil
	}
	return visit(dir)
}

// within is ref, relative to dir, when it lies inside root.
func within(root, dir, ref string) (string, bool) {
	if ref == "" || evidence.IsRemote(ref) {
		return "", false
	}
	p := filepath.Clean(filepath.Join(dir, filepath.FromSlash(ref)))
	rel, err := filepath.Rel(root, p)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", false
	}
	return p, true
}

// loadKustomizationFile reads the kustomization file in dir on disk, nil when there is none.
func loadKustomizationFile(dir string) (*types.Kustomization, error) {
	for _, name := range konfig.RecognizedKustomizationFileNames() {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			continue
		}
		var k types.Kustomization
		if err := k.Unmarshal(data); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		k.FixKustomization()
		return &k, nil
	}
	return nil, nil
}

// decryptFile decrypts the file at p in place when it is SOPS-encrypted in format f.
func (d *decryptor) decryptFile(root, p string, f formats.Format) error {
	name, _ := filepath.Rel(root, p)
	name = filepath.ToSlash(name)
	fi, err := os.Lstat(p)
	if err != nil || !fi.Mode().IsRegular() {
		// A file that is not there fails the build that reads it, with kustomize's own error.
		return nil
	}
	if fi.Size() > maxEncryptedFileSize {
		return fmt.Errorf("%s: %d bytes is over the %d bytes kustomize-controller decrypts", name, fi.Size(), maxEncryptedFileSize)
	}
	data, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	if !hasMarker(data, f) {
		return nil
	}
	plain, err := d.decrypt(data, f, f, name)
	if err != nil {
		return err
	}
	return os.WriteFile(p, plain, 0o600)
}

// DecryptResources decrypts the built resources as kustomize-controller does after its build: an
// object SOPS encrypted whole (a top-level sops field with a mac), or a Secret whose data entries
// are SOPS-encrypted files. Objects annotated kustomize.toolkit.fluxcd.io/decrypt: disabled are
// left alone.
func (d *decryptor) DecryptResources(m resmap.ResMap) error {
	for _, res := range m.Resources() {
		if evidence.DecryptionDisabled(res.GetAnnotations()) {
			continue
		}
		what := fmt.Sprintf("%s %s", res.GetKind(), qualified(res.GetNamespace(), res.GetName()))
		switch {
		case encryptedWhole(res):
			in, err := res.MarshalJSON()
			if err != nil {
				return err
			}
			out, err := d.decrypt(in, formats.Json, formats.Json, what)
			if err != nil {
				return err
			}
			if err := res.UnmarshalJSON(out); err != nil {
				return fmt.Errorf("%s: reading it decrypted: %w", what, err)
			}
		case res.GetKind() == "Secret":
			data := res.GetDataMap()
			changed := false
			for key, value := range data {
				raw, err := base64.StdEncoding.DecodeString(value)
				if err != nil {
					continue
				}
				in, ok := encryptedFormat(raw)
				if !ok {
					continue
				}
				out, err := d.decrypt(raw, in, formatForPath(key), fmt.Sprintf("%s entry %s", what, key))
				if err != nil {
					return err
				}
				data[key] = base64.StdEncoding.EncodeToString(out)
				changed = true
			}
			if changed {
				res.SetDataMap(data)
			}
		}
	}
	return nil
}

// encryptedWhole tells whether res is an object SOPS encrypted as a whole: a sops field with a mac.
func encryptedWhole(res *resource.Resource) bool {
	f := res.Field("sops")
	return !f.IsNilOrEmpty() && !f.Value.Field("mac").IsNilOrEmpty()
}

func qualified(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}
