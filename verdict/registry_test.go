package verdict

import (
	"testing"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// Every gate of the registry (v1alpha1.Gates) has its evidence schema: a definition schemaOf names,
// an example document of it, and the built-in policy decides it over that example. A gate added to
// the registry without them fails here.
func TestEveryGateHasASchema(t *testing.T) {
	for _, g := range v1alpha1.Gates {
		if schemaOf[g] == "" {
			t.Errorf("gate %s has no evidence schema in schemaOf (verdict/policy.go) nor verdict/schema/%s.cue", g, g)
			continue
		}
		if ExampleEvidence(g) == nil {
			t.Errorf("gate %s has no example evidence (verdict/schema/examples/%s.json)", g, g)
		}
	}
	for g := range schemaOf {
		if _, ok := v1alpha1.GatePhaseOf[g]; !ok {
			t.Errorf("schemaOf names gate %s, which the registry (v1alpha1.Gates, GatePhaseOf) does not list", g)
		}
	}
	if t.Failed() {
		return // the built-in policy cannot compile without them
	}
	for _, g := range v1alpha1.Gates {
		if _, err := Evaluate(DefaultPolicy(), g, ExampleEvidence(g)); err != nil {
			t.Errorf("the built-in policy does not decide %s over its example evidence (verdict/policy/): %v", g, err)
		}
	}
}
