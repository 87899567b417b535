package evidence

import (
	"context"
	"fmt"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	fluxkustomize "github.com/fluxcd/pkg/kustomize"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/kustomize/api/provider"
	"sigs.k8s.io/kustomize/api/resmap"
)

// Substitute returns the objects a Kustomization with postBuild pb applies from r: kustomize-
// controller's postBuild variable substitution (fluxcd/pkg/kustomize SubstituteVariables, as its
// build runs it: not strict, substituting only when there are variables unless the strategy is
// Always) over each built object, in kustomize's YAML of it, so that "replicas: ${replicas}"
// becomes a number (as does a quoted "${replicas}": kustomize's YAML keeps no quotes the package
// had that a string does not need). Objects labelled or
// annotated kustomize.toolkit.fluxcd.io/substitute: disabled are left alone; newlines in values
// are dropped. With pb nil nothing is substituted, as kustomize-controller substitutes nothing
// without a postBuild. Then the Kustomization's commonMetadata (the render's spec) is set on every
// object, as kustomize-controller sets it on what it applies, after its substitution. The objects
// come back new and sorted; r is not changed.
//
// Variables from pb.substituteFrom (ConfigMaps and Secrets on the hub) are not read: only
// pb.substitute is substituted, and a variable without a value and without a default becomes "".
// Errors (a variable name that is not a shell identifier, an expression that does not parse)
// name the object, as kustomize-controller's do.
func (r *Rendered) Substitute(pb *kustomizev1.PostBuild) ([]*unstructured.Unstructured, error) {
	if pb == nil {
		out := make([]*unstructured.Unstructured, 0, len(r.Objects))
		for _, o := range r.Objects {
			out = append(out, o.DeepCopy())
		}
		setCommonMetadata(out, r.commonMetadata)
		return out, nil
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&kustomizev1.Kustomization{Spec: kustomizev1.KustomizationSpec{PostBuild: pb}})
	if err != nil {
		return nil, fmt.Errorf("encoding the postBuild for the substitution: %w", err)
	}
	ks := unstructured.Unstructured{Object: u}
	always := pb.SubstituteStrategy == kustomizev1.SubstituteStrategyAlways

	// Reading resources consults kustomize's global schema, which builds reset.
	buildMu.Lock()
	defer buildMu.Unlock()
	m, err := resmap.NewFactory(provider.NewDefaultDepProvider().GetResourceFactory()).NewResMapFromBytes(r.manifests)
	if err != nil {
		return nil, fmt.Errorf("reading the build for the substitution: %w", err)
	}
	for _, res := range m.Resources() {
		// Dry-run: substituteFrom is not read (no client), the inline substitute is.
		out, err := fluxkustomize.SubstituteVariables(context.Background(), nil, ks, res,
			fluxkustomize.SubstituteWithDryRun(true),
			fluxkustomize.SubstituteWithStrict(false),
			fluxkustomize.SubstituteWithAlways(always))
		if err != nil {
			return nil, maskErr(fmt.Errorf("post build failed for '%s/%s': %w", res.GetGvk(), res.GetName(), err), r.secrets)
		}
		if out != nil {
			if _, err := m.Replace(res); err != nil {
				return nil, err
			}
		}
	}
	out, err := decode(m)
	if err != nil {
		return nil, err
	}
	setCommonMetadata(out, r.commonMetadata)
	return out, nil
}
