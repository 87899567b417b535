package fleets

import (
	"errors"
	"fmt"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// Vacuous tells why the wave named wave, with members clusters, could not be judged, as a
// *SpecError naming the rollout, the wave, the field and the fix; nil when it can be. A wave
// without members would pass its gates over no evidence; a maxFailures of at least its members
// would let noDisruption pass with every one of them failed; a soak of 0s would judge it on no
// samples. Plan keeps empty waves, so that wave names stay stable; the engine asks Vacuous before
// a wave starts, of the wave and of every later one up to the last with members, and starts none
// while one is vacuous. Empty waves after the last one with members are not asked about: the
// fleet is only smaller than the waves, and the engine skips them.
//
// CEL admission refuses what is known from the spec alone (maxFailures ≥ count, a soak of 0s);
// the size of a wave sized by percent or selector is known only once it is planned.
func Vacuous(r *v1alpha1.FleetRollout, wave string, members int) error {
	field := "spec.waves"
	var spec v1alpha1.Wave
	for i, w := range r.Spec.Waves {
		if w.Name == wave {
			field, spec = fmt.Sprintf("spec.waves[%d]", i), w
			break
		}
	}
	fail := func(sub string, err error, fix string) error {
		return &SpecError{Rollout: rolloutRef(r), Wave: wave, Field: field + sub, Err: err, Fix: fix}
	}
	switch {
	case members == 0 && len(r.Spec.Waves) == 0:
		return &SpecError{Rollout: rolloutRef(r), Wave: wave, Field: "spec.clusterSelector",
			Err: errors.New("no eligible cluster is in the rollout, and a wave over no cluster would pass on no evidence"),
			Fix: "add FleetClusters the clusterSelector selects, or make unreachable or suspended ones (status.skipped) eligible again"}
	case members == 0:
		return fail("", errors.New("the wave has no clusters, and a wave over no cluster would pass on no evidence"),
			"give it a selector, count or percent that matches eligible FleetClusters left by earlier waves, add such clusters, or remove the wave from spec.waves")
	case spec.MaxFailures != nil && int(*spec.MaxFailures) >= members:
		return fail(".maxFailures", fmt.Errorf("maxFailures %d is not less than the wave's %s, and noDisruption would pass with every one of them failed",
			*spec.MaxFailures, plural(members, "cluster")), fmt.Sprintf("set maxFailures below %d, or let the wave take more clusters", members))
	case spec.Soak != nil && spec.Soak.Duration <= 0:
		return fail(".soak", fmt.Errorf("soak %s is not longer than 0s, and noDisruption would be decided on no samples", spec.Soak.Duration),
			"set a soak longer than 0s, or leave it out for the policy's")
	}
	return nil
}
