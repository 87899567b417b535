package evidence

import (
	"reflect"
	"strings"
	"testing"
)

// Going back prunes what the candidate added: a CRD with every object of its kind, claims and
// volumes with their data, a namespace with everything in it. Each is a finding needing approval,
// unless the package marks it not to be pruned; an added StatefulSet leaves its claims behind and
// is not one.
func TestClassifyRollbackSeesWhatGoingBackPrunes(t *testing.T) {
	widget := "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w, namespace: apps}\n"
	kept := edit(t, edit(t, pvc, "name: data,", "name: kept,"), "namespace: db}", "namespace: db, annotations: {kustomize.toolkit.fluxcd.io/prune: disabled}}")
	good := objects(t, deployment, configMap)
	cand := objects(t, deployment, configMap, pvc, pv, namespace, crd, widget, statefulSet, kept)

	got := ClassifyRollback(good, cand)
	want := []string{
		"pruned: Namespace /apps  added",
		"pruned: PersistentVolume /pv-1  added",
		"pruned: PersistentVolumeClaim db/data  added",
		"crd: CustomResourceDefinition /widgets.example.com  added",
	}
	if b := brief(got); !reflect.DeepEqual(b, want) {
		t.Errorf("classified\n  %s\nwant\n  %s", strings.Join(b, "\n  "), strings.Join(want, "\n  "))
	}
	if len(got.CRDChanges) == 1 && !strings.Contains(got.CRDChanges[0].Reason, "every Widget on the cluster (1 in the package") {
		t.Errorf("the CRD's reason %q does not say that every Widget goes with it", got.CRDChanges[0].Reason)
	}
	for _, f := range append(got.PrunedStateful, got.CRDChanges...) {
		if f.Approved || !strings.Contains(f.Reason, "going back to the known-good prunes it") {
			t.Errorf("finding %+v: want an unapproved finding saying what going back prunes", f)
		}
	}

	// Nothing to go back to on a first rollout; nothing new when the known-good has them already.
	if b := brief(ClassifyRollback(nil, cand)); len(b) != 0 {
		t.Errorf("first rollout: %q, want nothing", b)
	}
	if b := brief(ClassifyRollback(cand, cand)); len(b) != 0 {
		t.Errorf("the known-good has them: %q, want nothing", b)
	}
}
