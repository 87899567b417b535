package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// get -l lists only the objects whose labels match, as kubectl does; a selector that does not parse,
// or one given with a NAME, is a usage error.
func TestGetSelector(t *testing.T) {
	ctx := hub(t)
	newRollout(ctx, t, "sel-a", func(fr *v1alpha1.FleetRollout) { fr.Labels = map[string]string{"team": "a"} })
	newRollout(ctx, t, "sel-b", func(fr *v1alpha1.FleetRollout) { fr.Labels = map[string]string{"team": "b"} })
	r := tidegate(ctx, "-n", writesNS, "get", "rollouts", "-l", "team=a", "-o", "json")
	var got items[rolloutRow]
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || r.code != exitOK {
		t.Fatalf("get rollouts -l team=a: exit %d, %v: %s%s", r.code, err, r.stdout, r.stderr)
	}
	if len(got.Items) != 1 || got.Items[0].Name != "sel-a" {
		t.Errorf("get rollouts -l team=a listed %+v, want sel-a only", got.Items)
	}
	r = tidegate(ctx, "-n", writesNS, "get", "rollouts", "-l", "team in (b)")
	if r.code != exitOK || !strings.Contains(r.stdout, "sel-b") || strings.Contains(r.stdout, "sel-a") {
		t.Errorf("get rollouts -l 'team in (b)': exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = tidegate(ctx, "-n", writesNS, "get", "rollouts", "-l", "team==a==b")
	if r.code != exitUsage || !strings.Contains(r.stderr, `invalid label selector "team==a==b"`) {
		t.Errorf("an invalid selector: exit %d, stderr %q", r.code, r.stderr)
	}
	r = tidegate(ctx, "-n", writesNS, "get", "rollouts", "sel-a", "-l", "team=a")
	if r.code != exitUsage || !strings.Contains(r.stderr, "by name or listed by -l, not both") {
		t.Errorf("a NAME with -l: exit %d, stderr %q", r.code, r.stderr)
	}
}
