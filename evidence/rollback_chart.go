package evidence

import (
	"reflect"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// ClassifyChartCRDs lists what going back cannot undo of the CRDs of a chart's crds/ directory:
// helm-controller applies them apart from the release, and Helm never upgrades or deletes them,
// so a CRD the candidate's crds/ adds, or holds otherwise than the known-good's, stays as the
// candidate left it when the release goes back to the known-good chart (change "added" or
// "changed"; a CRD it drops stays too, and loses nothing). knownGood nil is a first rollout: there
// is no going back, and nothing is listed. The findings are sorted and never nil; they are
// rollbackSafe's crdChanges, which ask for an approval of the candidate.
func ClassifyChartCRDs(knownGood, candidate []*unstructured.Unstructured) []Finding {
	out := []Finding{}
	if knownGood == nil {
		return out
	}
	good := index(knownGood)
	for k, c := range index(candidate) {
		g, existed := good[k]
		switch {
		case !existed:
			out = append(out, finding(c, "", ChangeAdded,
				"the candidate chart adds this CustomResourceDefinition in its crds/ directory: Helm never deletes a chart's crds/ CRDs, so going back to the known-good chart leaves it, and every custom resource of it, on the cluster"))
		case !reflect.DeepEqual(g.Object, c.Object):
			out = append(out, finding(c, "", ChangeChanged,
				"the candidate chart changes this CustomResourceDefinition in its crds/ directory: Helm applies a chart's crds/ CRDs apart from the release and never reverts them, so where the candidate's is applied, going back to the known-good chart keeps it"))
		}
	}
	sortFindings(out)
	return out
}
