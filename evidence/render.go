package evidence

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	fluxkustomize "github.com/fluxcd/pkg/kustomize"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/kustomize/api/konfig"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// ObjectRef names one rendered object.
type ObjectRef struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace"`
	Name       string `json:"name"`
}

// RefOf returns the reference of obj.
func RefOf(obj *unstructured.Unstructured) ObjectRef {
	return ObjectRef{APIVersion: obj.GetAPIVersion(), Kind: obj.GetKind(), Namespace: obj.GetNamespace(), Name: obj.GetName()}
}

func (r ObjectRef) less(o ObjectRef) bool {
	if r.APIVersion != o.APIVersion {
		return r.APIVersion < o.APIVersion
	}
	if r.Kind != o.Kind {
		return r.Kind < o.Kind
	}
	if r.Namespace != o.Namespace {
		return r.Namespace < o.Namespace
	}
	return r.Name < o.Name
}

// Summary is a bounded list of rendered objects, small enough to hand to a policy.
type Summary struct {
	// Objects are the first max references in (apiVersion, kind, namespace, name) order.
	Objects []ObjectRef `json:"objects"`
	// Total is how many objects were rendered; Truncated how many are not listed.
	Total     int `json:"total"`
	Truncated int `json:"truncated"`
}

// Summarize lists at most max of objs by reference, sorted.
func Summarize(objs []*unstructured.Unstructured, max int) Summary {
	refs := make([]ObjectRef, 0, len(objs))
	for _, o := range objs {
		refs = append(refs, RefOf(o))
	}
	sort.Slice(refs, func(i, j int) bool { return refs[i].less(refs[j]) })
	if max < 0 {
		max = 0
	}
	s := Summary{Objects: refs, Total: len(refs)}
	if len(refs) > max {
		s.Objects = refs[:max:max]
		s.Truncated = len(refs) - max
	}
	return s
}

// Rendered is a package as kustomize-controller builds it for one Kustomization, before the
// postBuild substitution, which Substitute makes for each cluster's values.
type Rendered struct {
	// Objects are the built objects, sorted by apiVersion, kind, namespace and name, before any
	// postBuild substitution.
	Objects []*unstructured.Unstructured
	// manifests is kustomize's output, which Substitute substitutes as kustomize-controller
	// substitutes its build, resource by resource.
	manifests []byte
	// commonMetadata is the Kustomization's, which Substitute sets on the objects after the
	// substitution, as kustomize-controller sets it on what it applies.
	commonMetadata *kustomizev1.CommonMetadata
	// secrets are the values the render decrypted, which Mask takes out of messages.
	secrets []string
}

// Mask is msg without any value the render decrypted: each is replaced by [redacted]. A message
// about the build (a substitution error, a member's dry-run rejection of its objects) goes
// through it before it is kept anywhere.
func (r *Rendered) Mask(msg string) string { return mask(msg, r.secrets) }

// Secrets are the values the render decrypted, as Rebuilt takes them.
func (r *Rendered) Secrets() []string { return r.secrets }

// Digest identifies the build: the sha256 of kustomize's output, and of the commonMetadata set
// over it when there is one ("sha256:<hex>"). Two builds with the same digest substitute, with
// the same postBuild, into the same objects.
func (r *Rendered) Digest() string {
	sum := sha256.Sum256(append(slices.Clip(r.manifests), commonMetadataDigest(r.commonMetadata)...))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Manifests is kustomize's output, as Rebuilt takes it.
func (r *Rendered) Manifests() []byte { return r.manifests }

// Rebuilt is a build made elsewhere (a render worker) for a Kustomization with spec, from its
// objects, sorted as Render sorts them, kustomize's output and the values it decrypted (Secrets).
func Rebuilt(spec kustomizev1.KustomizationSpec, objs []*unstructured.Unstructured, manifests []byte, secrets []string) *Rendered {
	return &Rendered{Objects: objs, manifests: manifests, commonMetadata: spec.CommonMetadata.DeepCopy(), secrets: secrets}
}

// Render builds the artifact for a Kustomization with spec as Render does, and also fails when a
// file the artifact could not hold (see Artifact.Skipped) is a manifest kustomize-controller
// would have picked up.
func (a *Artifact) Render(spec kustomizev1.KustomizationSpec) (*Rendered, error) {
	return render(a.FS, spec, a.Skipped, nil)
}

// RenderWith is Render decrypting with dec, as RenderWith.
func (a *Artifact) RenderWith(spec kustomizev1.KustomizationSpec, dec Decryptor) (*Rendered, error) {
	return render(a.FS, spec, a.Skipped, dec)
}

// Render builds fsys (an artifact's files) for a Flux Kustomization with spec the way
// kustomize-controller does, with its generator (fluxcd/pkg/kustomize): the package at spec.path
// ("" is the root), a kustomization.yaml generated when the directory has none (listing its
// manifests and the subdirectories that have one), and the Kustomization's targetNamespace,
// namePrefix, nameSuffix, patches, images and components applied over it; then SecureBuild,
// which loads files from anywhere in the artifact and nothing outside it. spec.postBuild and
// spec.commonMetadata are not applied here: Substitute does that, per cluster. A spec that sets a
// field the render does not apply as kustomize-controller does is refused (refuseUnrendered).
//
// Unlike kustomize-controller, nothing is ever fetched: a kustomization that refers to a remote
// base or file is refused, and plugins, KRM functions and Helm are disabled (as in
// kustomize-controller). The files are written to a private temporary directory for the build,
// as kustomize-controller extracts an artifact into its own; fsys is only read.
//
// A spec with decryption needs a Decryptor (RenderWith): Render refuses it.
func Render(fsys filesys.FileSystem, spec kustomizev1.KustomizationSpec) (*Rendered, error) {
	return render(fsys, spec, nil, nil)
}

// RenderWith is Render decrypting the package's SOPS-encrypted content with dec, as
// kustomize-controller decrypts it for a Kustomization with spec.decryption: the files kustomize
// reads besides manifests (secretGenerator sources, patch files) before the build, and the built
// objects after it (objects encrypted whole, and Secrets whose entries are encrypted files). A
// Secret left encrypted is refused, as kustomize-controller refuses to apply it, with decryption
// or without; a spec with decryption and no dec is a *DecryptionError, and so is what dec cannot
// decrypt. The objects and kustomize's output hold the decrypted values; no error does
// (Rendered.Mask).
func RenderWith(fsys filesys.FileSystem, spec kustomizev1.KustomizationSpec, dec Decryptor) (*Rendered, error) {
	return render(fsys, spec, nil, dec)
}

func render(fsys filesys.FileSystem, spec kustomizev1.KustomizationSpec, skipped []string, dec Decryptor) (*Rendered, error) {
	userPath := spec.Path
	if err := refuseUnrendered(spec); err != nil {
		return nil, err
	}
	dir, err := buildDir(userPath)
	if err != nil {
		return nil, err
	}
	if !fsys.Exists(dir) {
		return nil, fmt.Errorf("path %s not found in the artifact; check the rollout's spec.path", shown(userPath))
	}
	if !fsys.IsDir(dir) {
		return nil, fmt.Errorf("path %s is a file in the artifact, not a directory; check the rollout's spec.path", shown(userPath))
	}
	if kustomizationFile(fsys, dir) == "" {
		if err := refuseSkipped(dir, skipped); err != nil {
			return nil, fmt.Errorf("path %s has no kustomization file and one could not be generated: %w", shown(userPath), err)
		}
	}
	if err := refuseRemote(fsys, dir, spec.Components); err != nil {
		return nil, fmt.Errorf("path %s: %w", shown(userPath), err)
	}
	ks, err := kustomizationOf(spec)
	if err != nil {
		return nil, err
	}
	if spec.Decryption != nil && dec == nil {
		return nil, NewDecryptionError("the package is rendered without the keys of spec.template.decryption: they were not read")
	}

	// Generating reads manifests through kustomize's resource factory, which shares the global
	// schema a build resets, so the whole render holds the lock; holding it from the copy on also
	// keeps one working copy on disk at a time.
	buildMu.Lock()
	defer buildMu.Unlock()
	work, err := os.MkdirTemp("", "tidegate-render-")
	if err != nil {
		return nil, fmt.Errorf("rendering path %s: %w", shown(userPath), err)
	}
	defer func() { _ = os.RemoveAll(work) }()
	// The working copy's name must never reach a receipt: errors name files as the artifact does.
	hide := func(err error) error {
		msg := strings.ReplaceAll(err.Error(), work+string(filepath.Separator), "")
		if de := (*DecryptionError)(nil); errors.As(err, &de) {
			return &DecryptionError{msg: msg}
		}
		return errors.New(msg)
	}
	if err := copyOut(fsys, work); err != nil {
		return nil, fmt.Errorf("rendering path %s: %w", shown(userPath), hide(err))
	}
	dirPath := filepath.Join(work, filepath.FromSlash(dir))
	if _, err := fluxkustomize.NewGenerator(work, ks).WriteFile(dirPath); err != nil {
		if kustomizationFile(fsys, dir) == "" {
			return nil, fmt.Errorf("path %s has no kustomization file and one could not be generated: %w", shown(userPath), hide(err))
		}
		return nil, fmt.Errorf("kustomize build of path %s failed: the Kustomization's template does not apply: %w", shown(userPath), hide(err))
	}
	if dec != nil {
		if err := dec.DecryptSources(work, dirPath); err != nil {
			return nil, maskErr(fmt.Errorf("decrypting the sources of path %s: %w", shown(userPath), hide(err)), dec.Secrets())
		}
	}
	out, err := build(work, dirPath, dec)
	if err != nil {
		return nil, maskErr(fmt.Errorf("kustomize build of path %s failed: %w", shown(userPath), hide(err)), secretsOf(dec))
	}
	out.commonMetadata = spec.CommonMetadata.DeepCopy()
	return out, nil
}

// kustomizationOf is the Kustomization the generator reads spec from, as kustomize-controller
// hands it its own object.
func kustomizationOf(spec kustomizev1.KustomizationSpec) (unstructured.Unstructured, error) {
	spec.PostBuild = nil
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&kustomizev1.Kustomization{Spec: spec})
	if err != nil {
		return unstructured.Unstructured{}, fmt.Errorf("encoding the Kustomization spec for the render: %w", err)
	}
	return unstructured.Unstructured{Object: u}, nil
}

// copyOut writes every file of fsys below dir on disk.
func copyOut(fsys filesys.FileSystem, dir string) error {
	return fsys.Walk("/", func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		target := filepath.Join(dir, filepath.FromSlash(p))
		if info.IsDir() {
			return os.MkdirAll(target, 0o700)
		}
		data, err := fsys.ReadFile(p)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(target), 0o700); err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o600)
	})
}

// buildDir turns a spec.path into an absolute directory of the in-memory filesystem. A path
// that climbs out is refused rather than clamped to the root, so a typo never renders the
// whole repository.
func buildDir(userPath string) (string, error) {
	rel := path.Clean(strings.TrimPrefix(filepath.ToSlash(userPath), "/"))
	if rel == ".." || strings.HasPrefix(rel, "../") {
		return "", fmt.Errorf("path %s leads outside the artifact; check the rollout's spec.path", shown(userPath))
	}
	return path.Join("/", rel), nil
}

func shown(userPath string) string {
	if userPath == "" {
		return `""`
	}
	return userPath
}

// displayName is a filesystem path as the artifact's author knows it.
func displayName(p string) string { return strings.TrimPrefix(p, "/") }

// kustomizationFile returns the kustomization file kustomize would read in dir, or "".
func kustomizationFile(fsys filesys.FileSystem, dir string) string {
	for _, name := range konfig.RecognizedKustomizationFileNames() {
		p := path.Join(dir, name)
		if fsys.Exists(p) && !fsys.IsDir(p) {
			return p
		}
	}
	return ""
}

// refuseSkipped fails when a manifest the artifact could not hold lies below dir, where the
// generated kustomization.yaml would have listed it.
func refuseSkipped(dir string, skipped []string) error {
	for _, s := range skipped {
		ext := path.Ext(s)
		if strings.HasPrefix("/"+s, strings.TrimSuffix(dir, "/")+"/") && (ext == ".yaml" || ext == ".yml") {
			return fmt.Errorf("manifest %s has a name the renderer cannot hold (only letters, digits and -_.: are allowed); rename it or add a kustomization.yaml that does not list it", s)
		}
	}
	return nil
}

// refuseRemote follows the kustomizations reachable from dir, and from the components the
// Kustomization adds to it (spec.components, relative to dir), and refuses any reference
// kustomize would fetch (a git clone runs the git binary, a URL file is an HTTP GET): evidence
// must be about what the artifact holds, and the controller must not reach out on a package's
// say-so.
func refuseRemote(fsys filesys.FileSystem, dir string, components []string) error {
	queue := []string{dir}
	for _, c := range components {
		if isRemote(c) {
			return fmt.Errorf("spec.template.components names %q, which is remote; tidegate renders only what the artifact holds, so vendor it into the source", c)
		}
		if p := path.Join(dir, c); fsys.IsDir(p) {
			queue = append(queue, p)
		}
	}
	seen := map[string]bool{}
	for len(queue) > 0 {
		d := queue[0]
		queue = queue[1:]
		if seen[d] {
			continue
		}
		seen[d] = true
		kf := kustomizationFile(fsys, d)
		if kf == "" {
			continue
		}
		data, err := fsys.ReadFile(kf)
		if err != nil {
			return err
		}
		var k types.Kustomization
		if err := k.Unmarshal(data); err != nil {
			return fmt.Errorf("%s: %w", displayName(kf), err)
		}
		k.FixKustomization()
		dirs, files := kustomizationRefs(&k)
		for _, ref := range append(append([]string(nil), dirs...), files...) {
			if isRemote(ref) {
				return fmt.Errorf("%s refers to %q, which is remote; tidegate renders only what the artifact holds, so vendor it into the source", displayName(kf), ref)
			}
		}
		for _, ref := range dirs {
			if strings.Contains(ref, "\n") {
				continue
			}
			p := path.Join(d, ref)
			if path.IsAbs(ref) {
				p = path.Clean(ref)
			}
			if fsys.IsDir(p) {
				queue = append(queue, p)
			}
		}
	}
	return nil
}

// kustomizationRefs lists what a kustomization loads: dirs may be directories (other
// kustomizations), files are only ever files.
func kustomizationRefs(k *types.Kustomization) (dirs, files []string) {
	dirs = append(dirs, k.Resources...)
	dirs = append(dirs, k.Components...)
	dirs = append(dirs, k.Generators...)
	dirs = append(dirs, k.Transformers...)
	dirs = append(dirs, k.Validators...)
	files = append(files, k.Crds...)
	files = append(files, k.Configurations...)
	for _, p := range k.PatchesStrategicMerge {
		files = append(files, string(p))
	}
	for _, p := range k.Patches {
		files = append(files, p.Path)
	}
	for _, r := range k.Replacements {
		files = append(files, r.Path)
	}
	if p, ok := k.OpenAPI["path"]; ok {
		files = append(files, p)
	}
	for _, g := range k.ConfigMapGenerator {
		files = append(files, generatorFiles(g.GeneratorArgs)...)
	}
	for _, g := range k.SecretGenerator {
		files = append(files, generatorFiles(g.GeneratorArgs)...)
	}
	return dirs, files
}

func generatorFiles(g types.GeneratorArgs) []string {
	var files []string
	for _, f := range g.FileSources {
		files = append(files, f)
		if _, p, ok := strings.Cut(f, "="); ok {
			files = append(files, p)
		}
	}
	return append(files, g.EnvSources...)
}

// isRemote reports whether kustomize would fetch ref: a URL with a scheme, an scp-like
// "user@host:repo", a "git::" address or a github.com path. It errs on the side of "remote":
// a local directory named like a URL is refused too. Inline content (a patch written in the
// kustomization) is never remote.
func isRemote(ref string) bool {
	s := strings.TrimSpace(ref)
	if s == "" || strings.Contains(s, "\n") || strings.HasPrefix(s, "{") {
		return false
	}
	low := strings.ToLower(s)
	if strings.HasPrefix(low, "git::") || strings.HasPrefix(low, "github.com") || strings.Contains(s, "://") {
		return true
	}
	first, _, _ := strings.Cut(s, "/")
	return strings.Contains(first, "@")
}

// buildMu serialises renders: kustomize keeps global state (the OpenAPI schema, and maps that
// race, kubernetes-sigs/kustomize#3659), which is why kustomize-controller serialises too.
var buildMu sync.Mutex

// build runs kustomize-controller's build of dirPath within root, decrypting with dec (nil: no
// decryption); the caller holds buildMu.
func build(root, dirPath string, dec Decryptor) (*Rendered, error) {
	m, err := fluxkustomize.SecureBuild(root, dirPath, false)
	if err != nil {
		return nil, err
	}
	for _, res := range m.Resources() {
		// kustomize-controller's check that every object is one it can apply.
		if res.GetName() == "" || res.GetKind() == "" || res.GetApiVersion() == "" {
			return nil, fmt.Errorf("failed to decode Kubernetes apiVersion, kind and name from: %v", res.String())
		}
	}
	if dec != nil {
		if err := dec.DecryptResources(m); err != nil {
			return nil, err
		}
	}
	if err := refuseEncrypted(m); err != nil {
		return nil, err
	}
	manifests, err := m.AsYaml()
	if err != nil {
		return nil, err
	}
	objs, err := decode(m)
	if err != nil {
		return nil, err
	}
	return &Rendered{Objects: objs, manifests: manifests, secrets: secretsOf(dec)}, nil
}

// decode turns kustomize's resources into objects, sorted by reference.
func decode(m resmap.ResMap) ([]*unstructured.Unstructured, error) {
	objs := make([]*unstructured.Unstructured, 0, m.Size())
	for _, res := range m.Resources() {
		data, err := res.MarshalJSON()
		if err != nil {
			return nil, fmt.Errorf("encoding %s: %w", res.CurId(), err)
		}
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(data); err != nil {
			return nil, fmt.Errorf("decoding %s: %w", res.CurId(), err)
		}
		objs = append(objs, obj)
	}
	sort.SliceStable(objs, func(i, j int) bool { return RefOf(objs[i]).less(RefOf(objs[j])) })
	return objs, nil
}
