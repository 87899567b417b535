package evidence

import (
	"slices"
	"testing"
)

// What a chart's crds/ directory holds, going back cannot undo: a CRD the candidate adds stays,
// and so does one it changes; one it drops stays as it was, and a first rollout has no going
// back.
func TestClassifyChartCRDs(t *testing.T) {
	widgets := crd
	gadgets := edit(t, edit(t, crd, "widgets.example.com", "gadgets.example.com"), "{kind: Widget, plural: widgets}", "{kind: Gadget, plural: gadgets}")
	changed := edit(t, crd, "{name: v1alpha1, served: true, storage: false}", "{name: v1alpha1, served: false, storage: false}")
	brief := func(l []Finding) []string {
		out := []string{}
		for _, f := range l {
			out = append(out, f.Name+" "+f.Change)
		}
		return out
	}
	for _, tc := range []struct {
		name       string
		good, cand []string
		want       []string
	}{
		{"added", []string{widgets}, []string{widgets, gadgets}, []string{"gadgets.example.com added"}},
		{"changed", []string{widgets}, []string{changed}, []string{"widgets.example.com changed"}},
		{"dropped", []string{widgets, gadgets}, []string{widgets}, []string{}},
		{"none before", []string{}, []string{widgets}, []string{"widgets.example.com added"}},
	} {
		if got := brief(ClassifyChartCRDs(objects(t, tc.good...), objects(t, tc.cand...))); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	if got := ClassifyChartCRDs(nil, objects(t, widgets)); got == nil || len(got) != 0 {
		t.Errorf("a first rollout: %v, want an empty list", got)
	}
}
