package evidence

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/konfig"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/provider"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/kustomize/kyaml/openapi"
	"sigs.k8s.io/yaml"
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

// Render builds the artifact at path as Render does, and also fails when a file the artifact
// could not hold (see Artifact.Skipped) is a manifest kustomize-controller would have picked up.
func (a *Artifact) Render(path string) ([]*unstructured.Unstructured, error) {
	return render(a.FS, path, a.Skipped)
}

// Render runs kustomize build on fsys at path (a Flux spec.path such as "./apps/web"; "" is
// the root), the way kustomize-controller does: when the directory has no kustomization file,
// one is generated listing its manifests (and subdirectories that have a kustomization), and
// files anywhere in fsys may be loaded. Unlike kustomize-controller, nothing is ever fetched:
// a kustomization that refers to a remote base or file is refused, and plugins, KRM functions
// and Helm are disabled. A generated kustomization.yaml is written into fsys for the build and
// removed after it, as kustomize-controller does in its working copy, so give Render a
// filesystem no one else writes to meanwhile.
//
// The objects come back sorted by apiVersion, kind, namespace and name. Flux's Kustomization
// template (targetNamespace, patches, images, postBuild substitution) is not applied.
func Render(fsys filesys.FileSystem, path string) ([]*unstructured.Unstructured, error) {
	return render(fsys, path, nil)
}

func render(fsys filesys.FileSystem, userPath string, skipped []string) ([]*unstructured.Unstructured, error) {
	// Generating reads manifests through kustomize's resource factory, which shares the
	// global schema a build resets, so the whole render holds the lock.
	buildMu.Lock()
	defer buildMu.Unlock()
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
		generated, err := generateKustomization(fsys, dir, skipped)
		if err != nil {
			return nil, fmt.Errorf("path %s has no kustomization file and one could not be generated: %w", shown(userPath), err)
		}
		// Removed again, as kustomize-controller cleans its working copy, so that a later
		// render of a parent path scans this directory's files rather than a generated file.
		defer func() { _ = fsys.RemoveAll(generated) }()
	}
	if err := refuseRemote(fsys, dir); err != nil {
		return nil, fmt.Errorf("path %s: %w", shown(userPath), err)
	}
	objs, err := build(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build of path %s failed: %w", shown(userPath), err)
	}
	return objs, nil
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

// generateKustomization writes the kustomization.yaml kustomize-controller would generate for
// dir: every .yaml/.yml file below it that decodes as Kubernetes objects, and every
// subdirectory holding a kustomization file instead of what is inside it.
func generateKustomization(fsys filesys.FileSystem, dir string, skipped []string) (string, error) {
	for _, s := range skipped {
		ext := path.Ext(s)
		if strings.HasPrefix("/"+s, strings.TrimSuffix(dir, "/")+"/") && (ext == ".yaml" || ext == ".yml") {
			return "", fmt.Errorf("manifest %s has a name the renderer cannot hold (only letters, digits and -_.: are allowed); rename it or add a kustomization.yaml that does not list it", s)
		}
	}
	factory := provider.NewDefaultDepProvider().GetResourceFactory()
	prefix := strings.TrimSuffix(dir, "/") + "/"
	var resources []string
	err := fsys.Walk(dir, func(p string, info os.FileInfo, err error) (walkErr error) {
		if err != nil || p == dir {
			return err
		}
		if info.IsDir() {
			if kustomizationFile(fsys, p) != "" {
				resources = append(resources, "./"+strings.TrimPrefix(p, prefix))
				return filepath.SkipDir
			}
			return nil
		}
		if ext := path.Ext(p); ext != ".yaml" && ext != ".yml" {
			return nil
		}
		data, err := fsys.ReadFile(p)
		if err != nil {
			return err
		}
		defer func() {
			if r := recover(); r != nil {
				walkErr = fmt.Errorf("decoding %s panicked: %v", displayName(p), r)
			}
		}()
		if _, err := factory.SliceFromBytes(data); err != nil {
			return fmt.Errorf("%s does not decode as Kubernetes YAML: %w", displayName(p), err)
		}
		resources = append(resources, "./"+strings.TrimPrefix(p, prefix))
		return nil
	})
	if err != nil {
		return "", err
	}
	k := types.Kustomization{TypeMeta: types.TypeMeta{APIVersion: types.KustomizationVersion, Kind: types.KustomizationKind}}
	if len(resources) == 0 {
		// kustomize refuses an empty kustomization; kustomize-controller sets a placeholder
		// namespace so that an empty directory renders to nothing.
		k.Namespace = "_placeholder"
	}
	k.Resources = resources
	data, err := yaml.Marshal(k)
	if err != nil {
		return "", err
	}
	kf := path.Join(dir, konfig.DefaultKustomizationFileName())
	return kf, fsys.WriteFile(kf, data)
}

// refuseRemote follows the kustomizations reachable from dir and refuses any reference kustomize
// would fetch (a git clone runs the git binary, a URL file is an HTTP GET): evidence must be
// about what the artifact holds, and the controller must not reach out on a package's say-so.
func refuseRemote(fsys filesys.FileSystem, dir string) error {
	queue := []string{dir}
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

// build runs kustomize; the caller holds buildMu.
func build(fsys filesys.FileSystem, dir string) (objs []*unstructured.Unstructured, err error) {
	// kustomize panics on some malformed input; a package must not take the controller down.
	defer func() {
		if r := recover(); r != nil {
			objs, err = nil, fmt.Errorf("kustomize panicked: %v", r)
		}
	}()
	// Each build starts from the built-in schema so that one package's openapi.path cannot leak
	// into the next build.
	openapi.ResetOpenAPI()
	_ = openapi.Schema()
	defer openapi.ResetOpenAPI()

	opts := &krusty.Options{
		LoadRestrictions: types.LoadRestrictionsNone,
		PluginConfig:     types.DisabledPluginConfig(),
	}
	resMap, err := krusty.MakeKustomizer(opts).Run(fsys, dir)
	if err != nil {
		return nil, err
	}
	for _, res := range resMap.Resources() {
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
