package evidence

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// prunedByGoingBack lists what going back to the known-good deletes with its data: objects the
// candidate adds are in its Kustomization's inventory, so kustomize-controller prunes them when the
// Kustomization returns to a revision without them. That is a CustomResourceDefinition (and with
// it every custom resource of its kind, the package's and everyone else's), a
// PersistentVolumeClaim or PersistentVolume (the volume's data, as its reclaim policy says), or a
// Namespace (and everything in it). An added StatefulSet is not listed: pruning it leaves the claims
// of its volumeClaimTemplates in place. Objects annotated kustomize.toolkit.fluxcd.io/prune:
// disabled are left in place by kustomize-controller and not listed. The caller leaves a first
// rollout out: there is no going back.
func prunedByGoingBack(good, cand map[objectKey]*unstructured.Unstructured) (stateful, crds []Finding) {
	for k, c := range cand {
		if _, existed := good[k]; existed || c.GetAnnotations()[pruneAnnotation] == "disabled" {
			continue
		}
		switch {
		case k.group == "apiextensions.k8s.io" && k.kind == "CustomResourceDefinition":
			crds = append(crds, finding(c, "", ChangeAdded, addedCRDReason(c, cand)))
		case k.group == "" && (k.kind == "PersistentVolumeClaim" || k.kind == "PersistentVolume"):
			stateful = append(stateful, finding(c, "", ChangeAdded,
				fmt.Sprintf("the candidate adds this %s: going back to the known-good prunes it, and the data written to it during the candidate goes with it", k.kind)))
		case k.group == "" && k.kind == "Namespace":
			stateful = append(stateful, finding(c, "", ChangeAdded,
				"the candidate adds this Namespace: going back to the known-good prunes it, and with it everything in it, including objects the package does not apply"))
		}
	}
	return stateful, crds
}

// addedCRDReason says what pruning an added CRD deletes, counting the package's own objects of its kind.
func addedCRDReason(crd *unstructured.Unstructured, cand map[objectKey]*unstructured.Unstructured) string {
	group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
	kind, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "kind")
	if kind == "" {
		kind = "custom resource"
	}
	own := 0
	for k := range cand {
		if k.group == group && k.kind == kind {
			own++
		}
	}
	reason := fmt.Sprintf("the candidate adds this CustomResourceDefinition: going back to the known-good prunes it, and with it every %s on the cluster", kind)
	if own > 0 {
		reason += fmt.Sprintf(" (%d in the package, and any created since)", own)
	}
	return reason
}
