package chart

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sort"
	"strings"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/common"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	releasev1 "helm.sh/helm/v4/pkg/release/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/kyaml/openapi"
	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"
	"sigs.k8s.io/yaml"
)

// Options says what Render cannot read from the chart and the HelmRelease: what helm-controller
// learns from the member cluster it installs on.
type Options struct {
	// KubeVersion is the member's Kubernetes version (.Capabilities.KubeVersion in the templates),
	// such as "v1.37.2"; empty, Helm's default.
	KubeVersion string
	// APIVersions are the API versions the member serves beyond Helm's defaults
	// (.Capabilities.APIVersions), as "group/version" or "group/version/Kind".
	APIVersions []string
	// SourceRevision is the artifact revision of the HelmRelease's chart source when it is an
	// OCIRepository (status.artifact.revision, "<tag>@sha256:<hex>"): helm-controller renders the
	// chart with that digest in its version (.Chart.Version). Empty for a chart without one.
	SourceRevision string
	// Upgrade renders as helm-controller renders an upgrade of a release the member has already
	// (.Release.IsUpgrade, and spec.upgrade's schema validation setting rather than spec.install's);
	// false renders the release's first install.
	Upgrade bool
}

// Hook is one of a chart's hooks: an object Helm creates at the events it names, not part of the
// release's objects.
type Hook struct {
	Kind, Name string
	// Events are the hook's events ("pre-install", "post-upgrade", …), as its helm.sh/hook
	// annotation lists them.
	Events []string
	// Weight orders the hooks of one event.
	Weight int
	// Object is the hook as Helm creates it.
	Object *unstructured.Unstructured
}

// Rendered is a chart as helm-controller renders it for one HelmRelease.
type Rendered struct {
	// Chart and Version are the chart's name and version, the version as helm-controller records
	// it (with the source's digest: Options.SourceRevision).
	Chart, Version string
	// ReleaseName and Namespace are the Helm release's (ReleaseName, ReleaseNamespace).
	ReleaseName, Namespace string
	// Objects are the release's objects as Helm applies them, sorted by apiVersion, kind,
	// namespace and name: post-rendered, a namespaced object without a namespace put in the
	// release's, and marked as Helm marks what a release owns (the label
	// app.kubernetes.io/managed-by=Helm, the annotations meta.helm.sh/release-name and
	// meta.helm.sh/release-namespace).
	Objects []*unstructured.Unstructured
	// CRDs are the chart's crds/ files (its dependencies' too), in Helm's order: helm-controller
	// applies them before the release (spec.install.crds, spec.upgrade.crds), and they are not
	// templates.
	CRDs []*unstructured.Unstructured
	// Hooks are the chart's hooks, in the order Helm runs those of one event: by weight, then
	// name.
	Hooks []Hook
}

// Render renders archive (a chart .tgz, as source-controller serves it) for hr with values (what
// ComposeValues composes; the chart's values.yaml goes under them) as helm-controller's install or
// upgrade renders it: Helm's install action, client-only (no cluster: lookup finds nothing and
// the capabilities are Options'), with helm-controller's release name and namespace and its
// post-renderers and post-render strategy. It fails on a chart that does not load or render, and
// on a HelmRelease with spec.postRenderers, which it does not apply.
//
// values and the objects may hold what Secrets hold: they are not for logs.
func Render(ctx context.Context, archive []byte, hr *helmv2.HelmRelease, values map[string]any, opts Options) (*Rendered, error) {
	if len(hr.Spec.PostRenderers) > 0 {
		return nil, fmt.Errorf("HelmRelease %s/%s has spec.postRenderers, which tidegate does not render", hr.Namespace, hr.Name)
	}
	chrt, err := loader.LoadArchive(bytes.NewReader(archive))
	if err != nil {
		return nil, fmt.Errorf("loading the chart of HelmRelease %s/%s: %w", hr.Namespace, hr.Name, err)
	}
	if chrt.Metadata.Version, err = versionWithDigest(chrt.Metadata.Version, opts.SourceRevision); err != nil {
		return nil, fmt.Errorf("the chart of HelmRelease %s/%s: %w", hr.Namespace, hr.Name, err)
	}
	r := &Rendered{Chart: chrt.Name(), Version: chrt.Metadata.Version, ReleaseName: ReleaseName(hr), Namespace: ReleaseNamespace(hr)}
	rel, err := install(ctx, r, chrt, hr, values, opts)
	if err != nil {
		return nil, fmt.Errorf("rendering chart %s %s for HelmRelease %s/%s: %w", r.Chart, r.Version, hr.Namespace, hr.Name, err)
	}
	for _, crd := range chrt.CRDObjects() {
		objs, err := decode(crd.File.Data)
		if err != nil {
			return nil, fmt.Errorf("reading %s of chart %s: %w", crd.Filename, r.Chart, err)
		}
		r.CRDs = append(r.CRDs, objs...)
	}
	scope := scopes(r.CRDs)
	if r.Objects, err = decode([]byte(rel.Manifest)); err != nil {
		return nil, fmt.Errorf("reading the manifest of chart %s: %w", r.Chart, err)
	}
	scope = scope.with(r.Objects)
	for _, o := range r.Objects {
		scope.place(o, r.Namespace)
		markOwned(o, r.ReleaseName, r.Namespace)
	}
	sort.Slice(r.Objects, func(i, j int) bool { return less(r.Objects[i], r.Objects[j]) })
	for _, h := range rel.Hooks {
		objs, err := decode([]byte(h.Manifest))
		if err != nil || len(objs) != 1 {
			return nil, fmt.Errorf("reading hook %s of chart %s: %d objects, %v", h.Path, r.Chart, len(objs), err)
		}
		scope.place(objs[0], r.Namespace)
		hook := Hook{Kind: h.Kind, Name: h.Name, Weight: h.Weight, Object: objs[0]}
		for _, e := range h.Events {
			hook.Events = append(hook.Events, string(e))
		}
		r.Hooks = append(r.Hooks, hook)
	}
	// The order Helm runs the hooks of an event in.
	sort.SliceStable(r.Hooks, func(i, j int) bool {
		if r.Hooks[i].Weight != r.Hooks[j].Weight {
			return r.Hooks[i].Weight < r.Hooks[j].Weight
		}
		return r.Hooks[i].Name < r.Hooks[j].Name
	})
	return r, nil
}

// install runs Helm's install action client-only, as helm-controller's newInstall (or newUpgrade)
// sets it up for hr.
func install(ctx context.Context, r *Rendered, chrt *chartv2.Chart, hr *helmv2.HelmRelease, values map[string]any, opts Options) (*releasev1.Release, error) {
	cfg := action.NewConfiguration(action.ConfigurationSetLogger(slog.DiscardHandler))
	in := action.NewInstall(cfg)
	in.DryRunStrategy = action.DryRunClient
	in.ReleaseName, in.Namespace = r.ReleaseName, r.Namespace
	in.IsUpgrade = opts.Upgrade
	in.SkipSchemaValidation = hr.GetInstall().DisableSchemaValidation
	if opts.Upgrade {
		in.SkipSchemaValidation = hr.GetUpgrade().DisableSchemaValidation
	}
	in.SkipCRDs, in.Devel = true, true
	in.PostRenderer = newPostRenderer(hr)
	in.PostRenderStrategy = action.PostRenderStrategy(hr.GetPostRenderStrategy())
	if in.PostRenderStrategy == "" {
		in.PostRenderStrategy = action.PostRenderStrategyCombined
	}
	if opts.KubeVersion != "" {
		v, err := common.ParseKubeVersion(opts.KubeVersion)
		if err != nil {
			return nil, fmt.Errorf("kube version %q: %w", opts.KubeVersion, err)
		}
		in.KubeVersion = v
	}
	in.APIVersions = opts.APIVersions
	if values == nil {
		values = map[string]any{}
	}
	out, err := in.RunWithContext(ctx, chrt, values)
	if err != nil {
		return nil, err
	}
	rel, ok := out.(*releasev1.Release)
	if !ok {
		return nil, errors.New("helm gave a release of another API than v1")
	}
	return rel, nil
}

// decode reads a stream of YAML documents into objects, skipping empty ones.
func decode(manifests []byte) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	docs := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(manifests)))
	for {
		doc, err := docs.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, err
		}
		j, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, err
		}
		if s := string(bytes.TrimSpace(j)); s == "null" || s == "{}" {
			continue
		}
		// As the API machinery reads JSON: whole numbers as int64, not float64.
		o := &unstructured.Unstructured{}
		if err := o.UnmarshalJSON(j); err != nil {
			return nil, err
		}
		objs = append(objs, o)
	}
}

// scope says which kinds are namespaced: the CRDs of the chart say for theirs, kustomize's
// built-in schema for Kubernetes' own; a kind neither knows is taken as namespaced, as Helm would
// only apply it once a CRD made it known.
type scope map[string]bool // "group/Kind" → namespaced

func scopes(crds []*unstructured.Unstructured) scope { return scope{}.with(crds) }

// with adds the scopes of the CRDs among objs.
func (s scope) with(objs []*unstructured.Unstructured) scope {
	for _, o := range objs {
		if o.GetKind() != "CustomResourceDefinition" || !strings.HasPrefix(o.GetAPIVersion(), "apiextensions.k8s.io/") {
			continue
		}
		group, _, _ := unstructured.NestedString(o.Object, "spec", "group")
		kind, _, _ := unstructured.NestedString(o.Object, "spec", "names", "kind")
		scope, _, _ := unstructured.NestedString(o.Object, "spec", "scope")
		s[group+"/"+kind] = scope != "Cluster"
	}
	return s
}

// place puts o, when it is namespaced and has no namespace, in ns, as Helm's client does when it
// applies the release.
func (s scope) place(o *unstructured.Unstructured, ns string) {
	if o.GetNamespace() != "" {
		return
	}
	gvk := o.GroupVersionKind()
	namespaced, known := s[gvk.Group+"/"+gvk.Kind]
	if !known {
		namespaced, known = openapi.IsNamespaceScoped(kyaml.TypeMeta{APIVersion: o.GetAPIVersion(), Kind: o.GetKind()})
	}
	if namespaced || !known {
		o.SetNamespace(ns)
	}
}

// markOwned marks o as Helm marks the objects of a release when it applies them.
func markOwned(o *unstructured.Unstructured, release, ns string) {
	l := o.GetLabels()
	if l == nil {
		l = map[string]string{}
	}
	l["app.kubernetes.io/managed-by"] = "Helm"
	o.SetLabels(l)
	a := o.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a["meta.helm.sh/release-name"] = release
	a["meta.helm.sh/release-namespace"] = ns
	o.SetAnnotations(a)
}

func less(a, b *unstructured.Unstructured) bool {
	ka := []string{a.GetAPIVersion(), a.GetKind(), a.GetNamespace(), a.GetName()}
	kb := []string{b.GetAPIVersion(), b.GetKind(), b.GetNamespace(), b.GetName()}
	return slices.Compare(ka, kb) < 0
}
