package fleets

import (
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

func TestVacuous(t *testing.T) {
	budget := func(w v1alpha1.Wave, n int32) v1alpha1.Wave { w.MaxFailures = i32(n); return w }
	soak := func(w v1alpha1.Wave, d time.Duration) v1alpha1.Wave { w.Soak = &metav1.Duration{Duration: d}; return w }
	for _, tc := range []struct {
		name    string
		r       *v1alpha1.FleetRollout
		wave    string
		members int
		field   string   // SpecError.Field; empty when the wave can be judged
		want    []string // substrings of the error
	}{
		{"a wave with members", rollout(count("canary", nil, 1), wv("rest", sel())), "rest", 3, "", nil},
		{"an empty wave", rollout(count("canary", nil, 1), wv("gpu", sel("gpu", "true")), wv("rest", sel())), "gpu", 0,
			"spec.waves[1]", []string{`wave "gpu"`, "the wave has no clusters", "remove the wave from spec.waves"}},
		{"the one wave of a rollout without waves, empty", rollout(), AllWave, 0,
			"spec.clusterSelector", []string{"no eligible cluster is in the rollout", "add FleetClusters the clusterSelector selects"}},
		{"maxFailures equal to the wave's size", rollout(count("canary", nil, 1), budget(percent("ring", nil, 50), 2)), "ring", 2,
			"spec.waves[1].maxFailures", []string{"maxFailures 2 is not less than the wave's 2 clusters", "set maxFailures below 2"}},
		{"maxFailures above the wave's size", rollout(budget(wv("all", sel()), 5)), "all", 1,
			"spec.waves[0].maxFailures", []string{"maxFailures 5 is not less than the wave's 1 cluster,"}},
		{"maxFailures below the wave's size", rollout(budget(wv("all", sel()), 2)), "all", 3, "", nil},
		{"a soak of 0s", rollout(soak(wv("all", sel()), 0)), "all", 3,
			"spec.waves[0].soak", []string{"soak 0s is not longer than 0s", "leave it out for the policy's"}},
		{"a soak", rollout(soak(wv("all", sel()), time.Second)), "all", 3, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Vacuous(tc.r, tc.wave, tc.members)
			if tc.field == "" {
				if err != nil {
					t.Fatalf("Vacuous = %v, want nil", err)
				}
				return
			}
			var se *SpecError
			if !errors.As(err, &se) {
				t.Fatalf("Vacuous = %v, want a *SpecError", err)
			}
			if se.Field != tc.field || se.Wave != tc.wave || se.Rollout != "fleet/podinfo" {
				t.Errorf("SpecError names %s, wave %q, field %s; want fleet/podinfo, %q, %s", se.Rollout, se.Wave, se.Field, tc.wave, tc.field)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}
