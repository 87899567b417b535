package collector

import (
	"testing"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// Every gate of the registry (v1alpha1.Gates) has its collector, and its phase; a gate added to the
// registry without a collector fails here, not at its first decision.
func TestEveryGateHasACollector(t *testing.T) {
	for _, g := range v1alpha1.Gates {
		if collectors[g] == nil {
			t.Errorf("gate %s has no collector in collectors (evidence/collector/collector.go)", g)
		}
		if v1alpha1.GatePhaseOf[g] == "" {
			t.Errorf("gate %s has no phase in v1alpha1.GatePhaseOf", g)
		}
	}
	for g := range collectors {
		if _, ok := v1alpha1.GatePhaseOf[g]; !ok {
			t.Errorf("collectors has gate %s, which the registry (v1alpha1.Gates, GatePhaseOf) does not list", g)
		}
	}
}
