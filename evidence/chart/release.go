package chart

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"strings"

	"github.com/Masterminds/semver/v3"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	"sigs.k8s.io/kustomize/api/builtins"
	"sigs.k8s.io/kustomize/api/provider"
	"sigs.k8s.io/kustomize/api/resmap"
	kustypes "sigs.k8s.io/kustomize/api/types"
)

// ReleaseName is the name helm-controller gives hr's Helm release: spec.releaseName, else
// "<spec.targetNamespace>-<name>", else its name; one over Helm's 53 characters is shortened as
// helm-controller shortens it (its internal/release.ShortenName): its first 40 characters, a
// hyphen and the first 12 hex digits of its sha256.
func ReleaseName(hr *helmv2.HelmRelease) string {
	const maxLength, hashLength = 53, 12
	name := hr.GetReleaseName()
	if len(name) <= maxLength {
		return name
	}
	sum := fmt.Sprintf("%x", sha256.Sum256([]byte(name)))
	return name[:maxLength-hashLength-1] + "-" + sum[:hashLength]
}

// ReleaseNamespace is the namespace of hr's Helm release: spec.targetNamespace, else the
// HelmRelease's own.
func ReleaseNamespace(hr *helmv2.HelmRelease) string { return hr.GetReleaseNamespace() }

// versionWithDigest is the chart version helm-controller renders a chart of an OCIRepository
// with (its mutateChartWithSourceRevision): version with the first 12 hex digits of the digest of
// revision, the source's artifact revision ("<tag>@<algorithm>:<hex>" or "<algorithm>:<hex>"),
// as semver build metadata, so that a tag pushed again with another chart is a new release. A tag
// that is a version other than the chart's is refused, as helm-controller refuses it. An empty
// revision (a chart of a HelmRepository) leaves version as it is.
func versionWithDigest(version, revision string) (string, error) {
	if revision == "" {
		return version, nil
	}
	ver, err := semver.NewVersion(version)
	if err != nil {
		return "", fmt.Errorf("invalid chart version %s", version)
	}
	digest := revision
	if tag, d, ok := strings.Cut(revision, "@"); ok {
		digest = d
		// A tag holds a version's "+" as "_" (helm push).
		if tagVer, err := semver.NewVersion(strings.ReplaceAll(tag, "_", "+")); err == nil && !tagVer.Equal(ver) {
			return "", fmt.Errorf("artifact revision %s does not match chart version %s", tag, version)
		}
	}
	_, hex, ok := strings.Cut(digest, ":")
	if !ok || strings.Contains(hex, ":") || len(hex) < 12 {
		return "", fmt.Errorf("invalid artifact revision %s", revision)
	}
	withDigest, err := ver.SetMetadata(hex[:12])
	if err != nil {
		return "", err
	}
	return withDigest.String(), nil
}

// postRenderer does to Helm's rendered manifests what helm-controller's post-renderers do
// (internal/postrender.BuildPostRenderers), with the same kustomize transformers: spec.commonMetadata's
// labels and annotations, then the origin labels helm.toolkit.fluxcd.io/name and
// helm.toolkit.fluxcd.io/namespace naming the HelmRelease (set last, so they win over a common
// label of the same key). spec.postRenderers (kustomize patches and images) are not rendered here:
// Render refuses a HelmRelease that has them rather than describe objects other than the applied ones.
type postRenderer struct {
	common *helmv2.CommonMetadata
	origin map[string]string
}

func newPostRenderer(hr *helmv2.HelmRelease) *postRenderer {
	group := helmv2.GroupVersion.Group
	return &postRenderer{common: hr.Spec.CommonMetadata, origin: map[string]string{
		group + "/name": hr.Name, group + "/namespace": hr.Namespace,
	}}
}

// Run is helm's postrenderer.PostRenderer's.
func (p *postRenderer) Run(rendered *bytes.Buffer) (*bytes.Buffer, error) {
	var transformers []resmap.Transformer
	if p.common != nil {
		if p.common.Labels != nil {
			transformers = append(transformers, labels(p.common.Labels))
		}
		if p.common.Annotations != nil {
			transformers = append(transformers, &builtins.AnnotationsTransformerPlugin{
				Annotations: p.common.Annotations,
				FieldSpecs:  []kustypes.FieldSpec{{Path: "metadata/annotations", CreateIfNotPresent: true}},
			})
		}
	}
	transformers = append(transformers, labels(p.origin))
	factory := resmap.NewFactory(provider.NewDefaultDepProvider().GetResourceFactory())
	m, err := factory.NewResMapFromBytes(rendered.Bytes())
	if err != nil {
		return nil, err
	}
	for _, t := range transformers {
		if err := t.Transform(m); err != nil {
			return nil, err
		}
	}
	out, err := m.AsYaml()
	if err != nil {
		return nil, err
	}
	return bytes.NewBuffer(out), nil
}

// labels sets labels on every object's metadata, as helm-controller's label transformer does.
func labels(l map[string]string) resmap.Transformer {
	return &builtins.LabelTransformerPlugin{
		Labels:     l,
		FieldSpecs: []kustypes.FieldSpec{{Path: "metadata/labels", CreateIfNotPresent: true}},
	}
}
