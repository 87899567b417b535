package fleets

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

func TestPlan(t *testing.T) {
	for _, tc := range []struct {
		name      string
		rollout   *v1alpha1.FleetRollout
		inventory Inventory
		want      string
		wantNotes []string // substrings, each expected in some note
	}{
		{
			name:      "no waves plans one wave all",
			rollout:   rollout(),
			inventory: Inventory{cl("b"), cl("a"), cl("c")},
			want:      "all: a b c",
			wantNotes: []string{`spec.waves is empty: one wave "all"`},
		},
		{
			name:      "empty fleet with no waves keeps the all wave, empty",
			rollout:   rollout(),
			inventory: nil,
			want:      "all:",
			wantNotes: []string{`wave "all" is empty: no cluster is eligible`, "no cluster is eligible: the clusterSelector matched 0 of the 0 clusters in the inventory and 0 of those are skipped"},
		},
		{
			name:      "empty fleet keeps every wave, empty",
			rollout:   rollout(count("canary", nil, 1), percent("rest", nil, 100)),
			inventory: Inventory{},
			want:      lines("canary:", "rest:"),
			wantNotes: []string{`wave "canary" is empty`, `wave "rest" is empty`, `wave "rest": 100% of 0 eligible clusters, rounded up, caps it at 0`},
		},
		{
			name:    "wave selectors pick from what earlier waves left, in name order",
			rollout: rollout(wv("canary", sel("tier", "canary")), wv("eu", sel("region", "eu")), wv("rest", nil)),
			inventory: Inventory{
				cl("us-2", "region", "us"), cl("eu-1", "region", "eu", "tier", "canary"),
				cl("eu-2", "region", "eu"), cl("us-1", "region", "us", "tier", "canary"), cl("eu-3", "region", "eu"),
			},
			want: lines("canary: eu-1 us-1", "eu: eu-2 eu-3", "rest: us-2"),
		},
		{
			name:      "an empty selector {} matches all remaining, like nil",
			rollout:   rollout(count("canary", nil, 1), wv("rest", &metav1.LabelSelector{})),
			inventory: Inventory{cl("b"), cl("a"), cl("c")},
			want:      lines("canary: a", "rest: b c"),
		},
		{
			name: "matchExpressions In, NotIn, Exists, DoesNotExist",
			rollout: rollout(
				wv("in", expr("region", metav1.LabelSelectorOpIn, "eu", "ap")),
				wv("notin", expr("region", metav1.LabelSelectorOpNotIn, "us")),
				wv("exists", expr("gpu", metav1.LabelSelectorOpExists)),
				wv("absent", expr("gpu", metav1.LabelSelectorOpDoesNotExist)),
			),
			inventory: Inventory{
				cl("a", "region", "eu"), cl("b", "region", "ap"), cl("c"), cl("d", "region", "us", "gpu", "yes"),
				cl("e", "region", "us"),
			},
			// c has no region: NotIn matches a missing key, as in Kubernetes.
			want: lines("in: a b", "notin: c", "exists: d", "absent: e"),
		},
		{
			name:      "clusterSelector narrows candidates; unselected clusters are not listed",
			rollout:   withClusterSelector(rollout(), sel("env", "prod")),
			inventory: Inventory{cl("p1", "env", "prod"), suspended(cl("s1", "env", "stage")), cl("p2", "env", "prod"), cl("x")},
			want:      "all: p1 p2",
		},
		{
			name:      "clusterSelector {} selects all",
			rollout:   withClusterSelector(rollout(), &metav1.LabelSelector{}),
			inventory: Inventory{cl("a"), cl("b", "env", "prod")},
			want:      "all: a b",
		},
		{
			name:      "clusterSelector that matches nothing",
			rollout:   withClusterSelector(rollout(count("canary", nil, 1)), sel("env", "nowhere")),
			inventory: Inventory{cl("a"), cl("b")},
			want:      "canary:",
			wantNotes: []string{"no cluster is eligible: the clusterSelector matched 0 of the 2 clusters in the inventory and 0 of those are skipped"},
		},
		{
			name:      "count caps a wave, first by name; leftovers join the last wave",
			rollout:   rollout(count("canary", nil, 1), count("ring-1", nil, 2)),
			inventory: named(5),
			want:      lines("canary: c01", "ring-1: c02 c03 c04 c05"),
			wantNotes: []string{`2 clusters no wave selected joined the last wave "ring-1"`},
		},
		{
			name:      "count larger than the fleet takes what there is",
			rollout:   rollout(count("canary", nil, 10), wv("rest", nil)),
			inventory: named(3),
			want:      lines("canary: c01 c02 c03", "rest:"),
			wantNotes: []string{`wave "rest" is empty: no eligible cluster left by earlier waves matches its selector`},
		},
		{
			name:      "40% of 7 rounds 2.8 up to 3",
			rollout:   rollout(percent("ring", nil, 40), wv("rest", nil)),
			inventory: named(7),
			want:      lines("ring: c01 c02 c03", "rest: c04 c05 c06 c07"),
			wantNotes: []string{`wave "ring": 40% of 7 eligible clusters, rounded up, caps it at 3`},
		},
		{
			name:      "1% of 5 rounds 0.05 up to 1",
			rollout:   rollout(percent("canary", nil, 1), wv("rest", nil)),
			inventory: named(5),
			want:      lines("canary: c01", "rest: c02 c03 c04 c05"),
		},
		{
			name:      "34% of 3 rounds 1.02 up to 2; 50% of 3 caps at 2 but one is left",
			rollout:   rollout(percent("a", nil, 34), percent("b", nil, 50), wv("rest", nil)),
			inventory: named(3),
			want:      lines("a: c01 c02", "b: c03", "rest:"),
		},
		{
			name:      "an exact 25% of 8 is 2, not rounded up to 3",
			rollout:   rollout(percent("a", nil, 25), wv("rest", nil)),
			inventory: named(8),
			want:      lines("a: c01 c02", "rest: c03 c04 c05 c06 c07 c08"),
		},
		{
			name:      "percent of one cluster is that cluster",
			rollout:   rollout(percent("canary", nil, 10), wv("rest", nil)),
			inventory: named(1),
			want:      lines("canary: c01", "rest:"),
		},
		{
			name:    "percent counts eligible clusters, not candidates: 50% of 5 eligible is 3",
			rollout: rollout(percent("half", nil, 50), wv("rest", nil)),
			inventory: Inventory{
				cl("c01"), suspended(cl("c02")), cl("c03"), unreachable(cl("c04")), cl("c05"), cl("c06"),
			},
			want: lines("half: c01 c03 c04", "rest: c05 c06", "skip c02: Suspended"),
		},
		{
			name:      "percent caps the selector's matches, not the remaining fleet",
			rollout:   rollout(percent("eu", sel("region", "eu"), 50), wv("rest", nil)),
			inventory: Inventory{cl("a", "region", "eu"), cl("b", "region", "eu"), cl("c", "region", "eu"), cl("d"), cl("e")},
			want:      lines("eu: a b c", "rest: d e"),
		},
		{
			name:      "leftovers join the last wave even past its selector and count",
			rollout:   rollout(wv("canary", sel("tier", "canary")), count("eu", sel("region", "eu"), 1)),
			inventory: Inventory{cl("a", "tier", "canary"), cl("b", "region", "eu"), cl("c", "region", "eu"), cl("d", "region", "us")},
			want:      lines("canary: a", "eu: b c d"),
			wantNotes: []string{`2 clusters no wave selected joined the last wave "eu"`},
		},
		{
			name:      "an empty middle wave is kept and noted",
			rollout:   rollout(count("canary", nil, 1), wv("gpu", sel("gpu", "yes")), wv("rest", nil)),
			inventory: named(3),
			want:      lines("canary: c01", "gpu:", "rest: c02 c03"),
			wantNotes: []string{`wave "gpu" is empty: no eligible cluster left by earlier waves matches its selector; it is kept so wave names stay stable`},
		},
		{
			name:    "suspended are skipped; unreachable and unknown reachability are planned",
			rollout: rollout(),
			inventory: Inventory{
				cl("a"), suspended(cl("b")), unreachable(cl("c")), unknownReach(cl("d")), suspended(unreachable(cl("e"))),
			},
			want: lines("all: a c d", "skip b: Suspended", "skip e: Suspended"),
			wantNotes: []string{
				"2 clusters skipped: suspended; clear spec.suspend on the FleetCluster to include it",
			},
		},
		{
			name:    "SystemConfiguration reaches clusters opted in by name or by owner/*",
			rollout: sysConfig(rollout(), "platform"),
			inventory: Inventory{
				optIn(cl("by-name"), "podinfo"), optIn(cl("by-owner"), "platform/*"), cl("none"),
				optIn(cl("other-rollout"), "cert-manager"), optIn(cl("other-owner"), "security/*"),
				optIn(cl("owner-no-star"), "platform"), optIn(cl("two"), "x", "platform/*"),
			},
			want: lines("all: by-name by-owner two",
				"skip none: NoOptIn", "skip other-owner: NoOptIn", "skip other-rollout: NoOptIn", "skip owner-no-star: NoOptIn"),
			wantNotes: []string{`4 clusters skipped: no opt-in for SystemConfiguration rollout podinfo; a cluster opts in with "podinfo" or "platform/*" in spec.optIns`},
		},
		{
			name:      "SystemConfiguration without owner never matches /*",
			rollout:   sysConfig(rollout(), ""),
			inventory: Inventory{optIn(cl("a"), "/*"), optIn(cl("b"), "podinfo")},
			want:      lines("all: b", "skip a: NoOptIn"),
		},
		{
			name:      "no opt-in outranks suspended as the reason",
			rollout:   sysConfig(rollout(), "platform"),
			inventory: Inventory{suspended(unreachable(cl("a"))), suspended(optIn(cl("b"), "podinfo"))},
			want:      lines("all:", "skip a: NoOptIn", "skip b: Suspended"),
		},
		{
			name:      "other classes ignore opt-ins",
			rollout:   func() *v1alpha1.FleetRollout { r := rollout(); r.Spec.Class = v1alpha1.ClassSystemService; return r }(),
			inventory: Inventory{cl("a"), optIn(cl("b"), "other")},
			want:      "all: a b",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Plan(Input{Rollout: tc.rollout, Inventory: tc.inventory})
			if err != nil {
				t.Fatalf("Plan: %v", err)
			}
			if got := render(p); got != tc.want {
				t.Errorf("plan:\n%s\nwant:\n%s\nnotes: %q", got, tc.want, p.Notes)
			}
			for _, want := range tc.wantNotes {
				if !containsSubstring(p.Notes, want) {
					t.Errorf("no note contains %q; notes: %q", want, p.Notes)
				}
			}
			if p.Rollout != "fleet/podinfo" || p.Hash != Hash(&tc.rollout.Spec) {
				t.Errorf("plan names rollout %q with hash %q, want fleet/podinfo and %q", p.Rollout, p.Hash, Hash(&tc.rollout.Spec))
			}
		})
	}
}

func TestPlanSkipReasons(t *testing.T) {
	r := sysConfig(rollout(), "platform")
	p, err := Plan(Input{Rollout: r, Inventory: Inventory{cl("a"), suspended(optIn(cl("b"), "podinfo")), unreachable(optIn(cl("c"), "podinfo"))}})
	if err != nil {
		t.Fatal(err)
	}
	want := []Skip{
		{Cluster: "a", Cause: SkipNoOptIn, Reason: "no opt-in for SystemConfiguration rollout podinfo"},
		{Cluster: "b", Cause: SkipSuspended, Reason: "cluster is suspended (spec.suspend)"},
	}
	if !reflect.DeepEqual(p.Skipped, want) {
		t.Errorf("skipped = %+v, want %+v", p.Skipped, want)
	}
	// Unreachable is not a reason to skip: its wave holds on it instead (fleets/doc.go).
	if !reflect.DeepEqual(p.Eligible, []string{"c"}) {
		t.Errorf("eligible = %q, want [c]", p.Eligible)
	}
}

func TestPlanIsIndependentOfInventoryOrder(t *testing.T) {
	r := rollout(count("canary", nil, 1), percent("ring", sel("region", "eu"), 50), wv("rest", nil))
	inv := Inventory{cl("d", "region", "eu"), suspended(cl("a")), cl("c", "region", "eu"), cl("b"), cl("e", "region", "eu")}
	want, err := Plan(Input{Rollout: r, Inventory: inv})
	if err != nil {
		t.Fatal(err)
	}
	rev := make(Inventory, len(inv))
	for i := range inv {
		rev[len(inv)-1-i] = inv[i]
	}
	got, err := Plan(Input{Rollout: r, Inventory: rev})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("reversed inventory plans\n%s\nwant\n%s", render(got), render(want))
	}
}

func TestPlanErrors(t *testing.T) {
	bad := &metav1.LabelSelector{MatchLabels: map[string]string{"not a key!": "x"}}
	badOp := expr("region", "Near", "eu")
	for _, tc := range []struct {
		name      string
		rollout   *v1alpha1.FleetRollout
		inventory Inventory
		field     string   // SpecError.Field, empty when the error is not a SpecError
		contains  []string // substrings of the message
	}{
		{"invalid clusterSelector", withClusterSelector(rollout(), bad), nil,
			"spec.clusterSelector", []string{`rollout "fleet/podinfo"`, "spec.clusterSelector", "fix the label selector"}},
		{"invalid wave selector key", rollout(count("canary", nil, 1), wv("ring", bad)), nil,
			"spec.waves[1].selector", []string{`rollout "fleet/podinfo" wave "ring"`, "fix the label selector"}},
		{"invalid wave selector operator", rollout(wv("eu", badOp)), nil,
			"spec.waves[0].selector", []string{`wave "eu"`, `"Near" is not a valid label selector operator`}},
		{"duplicate wave name", rollout(count("canary", nil, 1), count("canary", nil, 2)), nil,
			"spec.waves[1].name", []string{`wave "canary"`, "spec.waves[0]", "unique name"}},
		{"empty wave name", rollout(count("", nil, 1)), nil,
			"spec.waves[0].name", []string{"give every wave a name"}},
		{"count zero", rollout(count("canary", nil, 0)), nil,
			"spec.waves[0].count", []string{`wave "canary"`, "count 0 is less than 1"}},
		{"percent zero", rollout(percent("canary", nil, 0)), nil,
			"spec.waves[0].percent", []string{"percent 0 is outside 1..100", "set percent between 1 and 100"}},
		{"percent over 100", rollout(percent("canary", nil, 101)), nil,
			"spec.waves[0].percent", []string{"percent 101 is outside 1..100"}},
		{"count and percent", rollout(v1alpha1.Wave{Name: "w", Count: i32(1), Percent: i32(10)}), nil,
			"spec.waves[0]", []string{"set count or percent, not both"}},
		{"duplicate cluster in inventory", rollout(), Inventory{cl("a"), cl("b"), cl("a")},
			"", []string{`rollout "fleet/podinfo"`, `FleetCluster "a" twice`}},
		{"no rollout", nil, nil, "", []string{"no FleetRollout given"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Plan(Input{Rollout: tc.rollout, Inventory: tc.inventory})
			if err == nil {
				t.Fatal("Plan succeeded, want an error")
			}
			var se *SpecError
			if isSpec := errors.As(err, &se); isSpec != (tc.field != "") {
				t.Fatalf("errors.As(%v, *SpecError) = %v, want %v", err, isSpec, tc.field != "")
			}
			if se != nil && se.Field != tc.field {
				t.Errorf("field = %q, want %q", se.Field, tc.field)
			}
			for _, s := range tc.contains {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not contain %q", err, s)
				}
			}
			if msg := err.Error(); msg[:1] != strings.ToLower(msg[:1]) {
				t.Errorf("error %q does not start lower-case", msg)
			}
		})
	}
}

func containsSubstring(notes []string, want string) bool {
	for _, n := range notes {
		if strings.Contains(n, want) {
			return true
		}
	}
	return false
}
