package fleets

import (
	"regexp"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

func baseSpec() *v1alpha1.FleetRolloutSpec {
	return &rollout(
		count("canary", sel("tier", "canary"), 1),
		percent("ring-1", expr("region", metav1.LabelSelectorOpIn, "eu", "us"), 30),
		wv("rest", nil),
	).Spec
}

func TestHashChangesWithWhatPlanReads(t *testing.T) {
	base := Hash(baseSpec())
	if !regexp.MustCompile(`^[0-9a-f]{16}$`).MatchString(base) {
		t.Fatalf("Hash = %q, want 16 lower-case hex characters", base)
	}
	if again := Hash(baseSpec()); again != base {
		t.Fatalf("Hash is not stable: %q then %q", base, again)
	}
	for name, edit := range map[string]func(s *v1alpha1.FleetRolloutSpec){
		"wave renamed":          func(s *v1alpha1.FleetRolloutSpec) { s.Waves[0].Name = "canary-1" },
		"wave selector":         func(s *v1alpha1.FleetRolloutSpec) { s.Waves[0].Selector = sel("tier", "pilot") },
		"wave selector removed": func(s *v1alpha1.FleetRolloutSpec) { s.Waves[0].Selector = nil },
		"wave selector values":  func(s *v1alpha1.FleetRolloutSpec) { s.Waves[1].Selector.MatchExpressions[0].Values = []string{"eu"} },
		"wave selector operator": func(s *v1alpha1.FleetRolloutSpec) {
			s.Waves[1].Selector.MatchExpressions[0].Operator = metav1.LabelSelectorOpNotIn
		},
		"count":                   func(s *v1alpha1.FleetRolloutSpec) { s.Waves[0].Count = i32(2) },
		"count to percent":        func(s *v1alpha1.FleetRolloutSpec) { s.Waves[0].Count, s.Waves[0].Percent = nil, i32(1) },
		"percent":                 func(s *v1alpha1.FleetRolloutSpec) { s.Waves[1].Percent = i32(31) },
		"waves reordered":         func(s *v1alpha1.FleetRolloutSpec) { s.Waves[0], s.Waves[1] = s.Waves[1], s.Waves[0] },
		"wave added":              func(s *v1alpha1.FleetRolloutSpec) { s.Waves = append(s.Waves, wv("late", nil)) },
		"waves cleared":           func(s *v1alpha1.FleetRolloutSpec) { s.Waves = nil },
		"clusterSelector":         func(s *v1alpha1.FleetRolloutSpec) { s.ClusterSelector = sel("env", "prod") },
		"class SystemConfig":      func(s *v1alpha1.FleetRolloutSpec) { s.Class = v1alpha1.ClassSystemConfiguration },
		"class SystemService":     func(s *v1alpha1.FleetRolloutSpec) { s.Class = v1alpha1.ClassSystemService },
		"label value moves field": func(s *v1alpha1.FleetRolloutSpec) { s.Waves[0].Selector = sel("tiercanary", "") },
	} {
		s := baseSpec()
		edit(s)
		if Hash(s) == base {
			t.Errorf("%s: hash unchanged; the engine would miss a plan edit", name)
		}
	}

	sc := baseSpec()
	sc.Class, sc.Owner = v1alpha1.ClassSystemConfiguration, "platform"
	sc2 := baseSpec()
	sc2.Class, sc2.Owner = v1alpha1.ClassSystemConfiguration, "security"
	if Hash(sc) == Hash(sc2) {
		t.Error("owner of a SystemConfiguration rollout decides opt-ins, but does not change the hash")
	}
}

func TestHashIgnoresWhatPlanDoesNotRead(t *testing.T) {
	base := Hash(baseSpec())
	for name, edit := range map[string]func(s *v1alpha1.FleetRolloutSpec){
		"soak":                     func(s *v1alpha1.FleetRolloutSpec) { s.Waves[0].Soak = &metav1.Duration{} },
		"maxFailures":              func(s *v1alpha1.FleetRolloutSpec) { s.Waves[0].MaxFailures = i32(3) },
		"requireApproval":          func(s *v1alpha1.FleetRolloutSpec) { s.Waves[0].RequireApproval = true },
		"hold":                     func(s *v1alpha1.FleetRolloutSpec) { s.Hold = &v1alpha1.Hold{Reason: "x"} },
		"revision":                 func(s *v1alpha1.FleetRolloutSpec) { s.Revision = "main@sha1:abc" },
		"owner of a UserWorkload":  func(s *v1alpha1.FleetRolloutSpec) { s.Owner = "apps" },
		"class spelled as default": func(s *v1alpha1.FleetRolloutSpec) { s.Class = v1alpha1.ClassUserWorkload },
		"clusterSelector {}":       func(s *v1alpha1.FleetRolloutSpec) { s.ClusterSelector = &metav1.LabelSelector{} },
		"wave selector nil as {}":  func(s *v1alpha1.FleetRolloutSpec) { s.Waves[2].Selector = &metav1.LabelSelector{} },
		"selector values reordered": func(s *v1alpha1.FleetRolloutSpec) {
			s.Waves[1].Selector.MatchExpressions[0].Values = []string{"us", "eu", "us"}
		},
		"selector requirements reordered": func(s *v1alpha1.FleetRolloutSpec) {
			s.ClusterSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "b", Operator: metav1.LabelSelectorOpExists}, {Key: "a", Operator: metav1.LabelSelectorOpExists},
			}}
		},
	} {
		s := baseSpec()
		edit(s)
		if name == "selector requirements reordered" {
			// Compare against the same requirements in the other order, not against base.
			o := baseSpec()
			o.ClusterSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "a", Operator: metav1.LabelSelectorOpExists}, {Key: "b", Operator: metav1.LabelSelectorOpExists},
			}}
			if Hash(s) != Hash(o) {
				t.Errorf("%s: hash changed", name)
			}
			continue
		}
		if Hash(s) != base {
			t.Errorf("%s: hash changed; the engine would re-plan for an edit that does not change the plan", name)
		}
	}
}

func TestHashOfInvalidSelectorDoesNotFail(t *testing.T) {
	s := baseSpec()
	s.Waves[0].Selector = expr("region", "Near", "eu")
	if h := Hash(s); h == "" || h == Hash(baseSpec()) {
		t.Errorf("Hash of a spec with an invalid selector = %q", h)
	}
}
