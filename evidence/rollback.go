package evidence

import (
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/tidegate/tidegate/verdict"
)

// IrreversibleAnnotation marks an object whose apply cannot be undone by going back (a
// migration Job, say); its value is the reason, shown to whoever approves it.
const IrreversibleAnnotation = "tidegate.dev/irreversible"

// pruneAnnotation is how a package tells kustomize-controller to leave an object in place when
// it disappears from the source.
const pruneAnnotation = "kustomize.toolkit.fluxcd.io/prune"

// Changes a Finding can describe; the evidence contract in package cue defines them.
const (
	ChangeRemoved = verdict.ChangeRemoved
	ChangeChanged = verdict.ChangeChanged
	ChangeAdded   = verdict.ChangeAdded
)

// Finding is one rollbackSafe concern about one object: the #Finding of the evidence contract.
// The classification leaves Approved false; the engine sets it from spec.approvals.
type Finding = verdict.Finding

// RollbackSafety classifies the difference between the rendered known-good and candidate by
// what it means for going back. Every list is sorted and never nil, so that a policy can
// demand `prunedStateful: []`.
type RollbackSafety struct {
	// FirstRollout is true when there is no known-good: nothing to go back to. Irreversible
	// still lists the candidate's marked objects, since applying them is irreversible anyway.
	FirstRollout bool `json:"firstRollout"`
	// PrunedStateful are PersistentVolumeClaims, PersistentVolumes, StatefulSets and Namespaces
	// the candidate drops (change "removed"): kustomize-controller deletes them with their data,
	// and going back recreates them empty; and PersistentVolumeClaims, PersistentVolumes and
	// Namespaces the candidate adds (change "added"), which going back prunes with their data.
	// Objects annotated kustomize.toolkit.fluxcd.io/prune: disabled are not pruned and not listed.
	PrunedStateful []Finding `json:"prunedStateful"`
	// ChangedStateful are StatefulSets whose volumeClaimTemplates changed and
	// PersistentVolumeClaims whose spec changed.
	ChangedStateful []Finding `json:"changedStateful"`
	// CRDChanges are CustomResourceDefinitions that stop serving a version (or are dropped,
	// which deletes every custom resource of them), change their storage version, or are added
	// by the candidate (going back prunes them, and every custom resource of them).
	CRDChanges []Finding `json:"crdChanges"`
	// ImmutableRecreates are changes to fields the API server refuses to update, which apply
	// only by deleting and recreating the object (kustomize-controller's force).
	ImmutableRecreates []Finding `json:"immutableRecreates"`
	// Irreversible are candidate objects annotated tidegate.dev/irreversible that are new or
	// differ from the known-good.
	Irreversible []Finding `json:"irreversible"`
}

// objectKey identifies an object across revisions; the version is left out so that moving an
// object to a newer apiVersion of its group is a change, not a prune and an add.
type objectKey struct {
	group, kind, namespace, name string
}

func keyOf(o *unstructured.Unstructured) objectKey {
	gv, _ := schema.ParseGroupVersion(o.GetAPIVersion())
	return objectKey{group: gv.Group, kind: o.GetKind(), namespace: o.GetNamespace(), name: o.GetName()}
}

func index(objs []*unstructured.Unstructured) map[objectKey]*unstructured.Unstructured {
	m := make(map[objectKey]*unstructured.Unstructured, len(objs))
	for _, o := range objs {
		if o == nil {
			continue
		}
		k := keyOf(o)
		// The same object under two versions of its group: keep one, whatever the input order.
		if prev, ok := m[k]; ok && prev.GetAPIVersion() <= o.GetAPIVersion() {
			continue
		}
		m[k] = o
	}
	return m
}

// ClassifyRollback compares the rendered known-good (nil on a first rollout) with the rendered
// candidate. It is pure: the same renders always give the same classification.
func ClassifyRollback(knownGood, candidate []*unstructured.Unstructured) RollbackSafety {
	s := RollbackSafety{
		FirstRollout:       knownGood == nil,
		PrunedStateful:     []Finding{},
		ChangedStateful:    []Finding{},
		CRDChanges:         []Finding{},
		ImmutableRecreates: []Finding{},
		Irreversible:       []Finding{},
	}
	good, cand := index(knownGood), index(candidate)

	for k, g := range good {
		c, kept := cand[k]
		if !kept {
			if statefulKind(k) && g.GetAnnotations()[pruneAnnotation] != "disabled" {
				s.PrunedStateful = append(s.PrunedStateful, finding(g, "", ChangeRemoved,
					fmt.Sprintf("the candidate drops this %s: kustomize-controller prunes it with its data, and going back recreates it empty", k.kind)))
			}
			if k.group == "apiextensions.k8s.io" && k.kind == "CustomResourceDefinition" && g.GetAnnotations()[pruneAnnotation] != "disabled" {
				s.CRDChanges = append(s.CRDChanges, finding(g, "", ChangeRemoved,
					"the candidate drops this CustomResourceDefinition: pruning it deletes every custom resource of it"))
			}
			continue
		}
		s.ChangedStateful = append(s.ChangedStateful, changedStateful(k, g, c)...)
		s.CRDChanges = append(s.CRDChanges, crdChanges(k, g, c)...)
		s.ImmutableRecreates = append(s.ImmutableRecreates, immutableChanges(k, g, c)...)
	}

	if !s.FirstRollout {
		stateful, crds := prunedByGoingBack(good, cand)
		s.PrunedStateful = append(s.PrunedStateful, stateful...)
		s.CRDChanges = append(s.CRDChanges, crds...)
	}

	for k, c := range cand {
		reason, marked := c.GetAnnotations()[IrreversibleAnnotation]
		if !marked {
			continue
		}
		if reason == "" {
			reason = "marked irreversible without a reason"
		}
		g, existed := good[k]
		switch {
		case !existed:
			s.Irreversible = append(s.Irreversible, finding(c, "", ChangeAdded, reason))
		case !reflect.DeepEqual(g.Object, c.Object):
			s.Irreversible = append(s.Irreversible, finding(c, "", ChangeChanged, reason))
		}
	}

	for _, l := range [][]Finding{s.PrunedStateful, s.ChangedStateful, s.CRDChanges, s.ImmutableRecreates, s.Irreversible} {
		sortFindings(l)
	}
	return s
}

// Merge adds the findings of o that s does not have, keeping each list sorted: the classification
// of the same two revisions with another cluster's values. FirstRollout is the same for both.
func (s *RollbackSafety) Merge(o RollbackSafety) {
	s.FirstRollout = s.FirstRollout && o.FirstRollout
	for _, p := range []struct {
		into *[]Finding
		from []Finding
	}{
		{&s.PrunedStateful, o.PrunedStateful}, {&s.ChangedStateful, o.ChangedStateful}, {&s.CRDChanges, o.CRDChanges},
		{&s.ImmutableRecreates, o.ImmutableRecreates}, {&s.Irreversible, o.Irreversible},
	} {
		if *p.into == nil {
			*p.into = []Finding{}
		}
		for _, f := range p.from {
			if !slices.Contains(*p.into, f) {
				*p.into = append(*p.into, f)
			}
		}
		sortFindings(*p.into)
	}
}

func statefulKind(k objectKey) bool {
	switch {
	case k.group == "" && (k.kind == "PersistentVolumeClaim" || k.kind == "PersistentVolume" || k.kind == "Namespace"):
		return true
	case k.group == "apps" && k.kind == "StatefulSet":
		return true
	}
	return false
}

func changedStateful(k objectKey, g, c *unstructured.Unstructured) []Finding {
	var out []Finding
	switch {
	case k.group == "apps" && k.kind == "StatefulSet":
		before, after := claimTemplates(g), claimTemplates(c)
		for _, name := range unionKeys(before, after) {
			field := fmt.Sprintf("spec.volumeClaimTemplates[%s]", name)
			b, inBefore := before[name]
			a, inAfter := after[name]
			switch {
			case !inAfter:
				out = append(out, finding(c, field, ChangeRemoved, "the claim template is dropped; pods no longer mount its volumes"))
			case !inBefore:
				out = append(out, finding(c, field, ChangeAdded, "a claim template is added; going back leaves its claims behind, unused"))
			case !equalValues(b, a):
				out = append(out, finding(c, field, ChangeChanged, "the claim template changes; existing claims keep the old spec"))
			}
		}
	case k.group == "" && k.kind == "PersistentVolumeClaim":
		before, _, _ := unstructured.NestedMap(g.Object, "spec")
		after, _, _ := unstructured.NestedMap(c.Object, "spec")
		for _, name := range unionKeys(before, after) {
			if equalValues(before[name], after[name]) {
				continue
			}
			reason := "the claim's spec changes"
			if name == "resources" {
				reason = "the claim's resources change; a claim can grow but never shrink, so going back to a smaller request fails"
			}
			out = append(out, finding(c, "spec."+name, ChangeChanged, reason))
		}
	}
	return out
}

// claimTemplates maps a StatefulSet's volumeClaimTemplates by name.
func claimTemplates(o *unstructured.Unstructured) map[string]any {
	list, _, _ := unstructured.NestedSlice(o.Object, "spec", "volumeClaimTemplates")
	m := make(map[string]any, len(list))
	for i, t := range list {
		name, _, _ := unstructured.NestedString(asMap(t), "metadata", "name")
		if name == "" {
			name = fmt.Sprintf("#%d", i)
		}
		m[name] = t
	}
	return m
}

func crdChanges(k objectKey, g, c *unstructured.Unstructured) []Finding {
	if k.group != "apiextensions.k8s.io" || k.kind != "CustomResourceDefinition" {
		return nil
	}
	beforeServed, beforeStorage := crdVersions(g)
	afterServed, afterStorage := crdVersions(c)
	var out []Finding
	for _, v := range beforeServed {
		if !slices.Contains(afterServed, v) {
			out = append(out, finding(c, fmt.Sprintf("spec.versions[%s]", v), ChangeRemoved,
				fmt.Sprintf("version %s is no longer served; clients and stored objects using it break", v)))
		}
	}
	if beforeStorage != afterStorage {
		out = append(out, finding(c, "spec.versions", ChangeChanged,
			fmt.Sprintf("the storage version changes from %s to %s; objects written during the candidate are stored as %s, which going back must still serve", orNone(beforeStorage), orNone(afterStorage), orNone(afterStorage))))
	}
	return out
}

// crdVersions returns a CRD's served version names (sorted) and its storage version.
func crdVersions(o *unstructured.Unstructured) (served []string, storage string) {
	list, _, _ := unstructured.NestedSlice(o.Object, "spec", "versions")
	for _, v := range list {
		m := asMap(v)
		name, _, _ := unstructured.NestedString(m, "name")
		if s, _, _ := unstructured.NestedBool(m, "served"); s {
			served = append(served, name)
		}
		if s, _, _ := unstructured.NestedBool(m, "storage"); s {
			storage = name
		}
	}
	sort.Strings(served)
	return served, storage
}

// immutableField is a field the API server refuses to change on update.
type immutableField struct {
	group, kind string
	path        []string
	// dflt is what the API server fills in when the field is left out, so that spelling out the
	// default is not taken for a change.
	dflt any
	// onlyWhenSet ignores the change when the candidate leaves the field out (the API server
	// then keeps the allocated value, as for a Service's clusterIP).
	onlyWhenSet bool
}

var immutableFields = []immutableField{
	{group: "apps", kind: "Deployment", path: []string{"spec", "selector"}},
	{group: "apps", kind: "StatefulSet", path: []string{"spec", "selector"}},
	{group: "apps", kind: "DaemonSet", path: []string{"spec", "selector"}},
	{group: "apps", kind: "StatefulSet", path: []string{"spec", "serviceName"}},
	{group: "apps", kind: "StatefulSet", path: []string{"spec", "podManagementPolicy"}, dflt: "OrderedReady"},
	{group: "", kind: "Service", path: []string{"spec", "clusterIP"}, onlyWhenSet: true},
	{group: "batch", kind: "Job", path: []string{"spec", "template"}},
	{group: "", kind: "PersistentVolumeClaim", path: []string{"spec", "storageClassName"}},
	{group: "", kind: "PersistentVolumeClaim", path: []string{"spec", "accessModes"}},
}

func immutableChanges(k objectKey, g, c *unstructured.Unstructured) []Finding {
	var out []Finding
	for _, f := range immutableFields {
		if f.group != k.group || f.kind != k.kind {
			continue
		}
		before, beforeSet, _ := unstructured.NestedFieldNoCopy(g.Object, f.path...)
		after, afterSet, _ := unstructured.NestedFieldNoCopy(c.Object, f.path...)
		if f.onlyWhenSet && (!afterSet || isEmpty(after)) {
			continue
		}
		if f.dflt != nil {
			if !beforeSet || isEmpty(before) {
				before = f.dflt
			}
			if !afterSet || isEmpty(after) {
				after = f.dflt
			}
		}
		if equalValues(before, after) {
			continue
		}
		field := strings.Join(f.path, ".")
		out = append(out, finding(c, field, ChangeChanged,
			fmt.Sprintf("%s of a %s cannot be changed in place; applying it means deleting and recreating the object, both going forward and going back", field, k.kind)))
	}
	return out
}

func finding(o *unstructured.Unstructured, field, change, reason string) Finding {
	return Finding{
		APIVersion: o.GetAPIVersion(), Kind: o.GetKind(), Namespace: o.GetNamespace(), Name: o.GetName(),
		Field: field, Change: change, Reason: reason,
	}
}

func sortFindings(l []Finding) {
	sort.Slice(l, func(i, j int) bool {
		a, b := l[i], l[j]
		if r := (ObjectRef{a.APIVersion, a.Kind, a.Namespace, a.Name}); r != (ObjectRef{b.APIVersion, b.Kind, b.Namespace, b.Name}) {
			return r.less(ObjectRef{b.APIVersion, b.Kind, b.Namespace, b.Name})
		}
		if a.Field != b.Field {
			return a.Field < b.Field
		}
		if a.Change != b.Change {
			return a.Change < b.Change
		}
		return a.Reason < b.Reason
	})
}

// equalValues compares decoded JSON values, taking an absent field, null, "", [] and {} as
// the same: kustomize keeps what the author wrote, and `selector: {}` means what no selector does.
func equalValues(a, b any) bool {
	if isEmpty(a) && isEmpty(b) {
		return true
	}
	return reflect.DeepEqual(a, b)
}

func isEmpty(v any) bool {
	switch t := v.(type) {
	case nil:
		return true
	case string:
		return t == ""
	case []any:
		return len(t) == 0
	case map[string]any:
		return len(t) == 0
	}
	return false
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func unionKeys(a, b map[string]any) []string {
	keys := make([]string, 0, len(a)+len(b))
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
