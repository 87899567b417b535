package evidence

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	ssautil "github.com/fluxcd/pkg/ssa/utils"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// renderedFields are the fields of a Kustomization spec that decide what kustomize-controller
// applies, and that the render applies as it does: path; through its generator (fluxcd/pkg/
// kustomize) targetNamespace, namePrefix, nameSuffix, patches, images, components,
// ignoreMissingComponents and buildMetadata; decryption (RenderWith); postBuild (Substitute);
// commonMetadata, set on every object after the substitution (Substitute).
var renderedFields = []string{"path", "targetNamespace", "namePrefix", "nameSuffix", "patches", "images", "components",
	"ignoreMissingComponents", "buildMetadata", "postBuild", "commonMetadata", "decryption"}

// notBuildFields are the fields of a Kustomization spec that say how, when, where or as whom
// kustomize-controller applies and checks the build, not what it builds.
var notBuildFields = []string{"sourceRef", "kubeConfig", "interval", "retryInterval", "timeout", "prune", "wait", "force",
	"suspend", "deletionPolicy", "healthChecks", "healthCheckExprs", "dependsOn", "serviceAccountName"}

// refusedFields are the fields of a Kustomization spec that change what kustomize-controller
// applies in a way the render does not: spec.ignore drops fields from the apply. The template
// sets none of them.
var refusedFields = []string{"ignore"}

// refuseUnrendered fails for a spec that sets a field the render does not apply
// (UnrenderedFields), so that the gates never judge objects other than those kustomize-controller
// applies.
func refuseUnrendered(spec kustomizev1.KustomizationSpec) error {
	unknown, err := UnrenderedFields(spec)
	if err != nil {
		return err
	}
	if len(unknown) > 0 {
		return fmt.Errorf("the render does not apply %v of the Kustomization: the gates would judge other objects than kustomize-controller applies", unknown)
	}
	return nil
}

// UnrenderedFields are the fields spec sets ("spec.<name>", sorted) that would change what
// kustomize-controller applies in a way the render does not: those of refusedFields, and any of
// no list. TestEveryKustomizationFieldIsSorted keeps the lists whole as Flux adds fields.
func UnrenderedFields(spec kustomizev1.KustomizationSpec) ([]string, error) {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&spec)
	if err != nil {
		return nil, fmt.Errorf("encoding the Kustomization spec for the render: %w", err)
	}
	var unknown []string
	for k, v := range u {
		if !slices.Contains(renderedFields, k) && !slices.Contains(notBuildFields, k) && !zero(v) {
			unknown = append(unknown, "spec."+k)
		}
	}
	sort.Strings(unknown)
	return unknown, nil
}

// zero tells whether an unstructured value sets nothing.
func zero(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case map[string]any:
		return len(x) == 0
	case []any:
		return len(x) == 0
	case string:
		return x == ""
	case bool:
		return !x
	}
	return false
}

// setCommonMetadata sets cm's labels and annotations on objs, as kustomize-controller sets them
// on what it applies (after the postBuild substitution), with its own function.
func setCommonMetadata(objs []*unstructured.Unstructured, cm *kustomizev1.CommonMetadata) {
	if cm != nil {
		ssautil.SetCommonMetadata(objs, cm.Labels, cm.Annotations)
	}
}

// commonMetadataDigest is what commonMetadata adds to a build's digest: nothing without it.
func commonMetadataDigest(cm *kustomizev1.CommonMetadata) []byte {
	if cm == nil {
		return nil
	}
	b, err := json.Marshal(cm)
	if err != nil {
		// Two string maps always encode.
		panic(fmt.Sprintf("encoding commonMetadata: %v", err))
	}
	return append([]byte("\n---commonMetadata\n"), b...)
}
