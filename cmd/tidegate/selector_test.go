package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// -o name prints kind/name per object, as kubectl's; -o jsonpath=TEMPLATE runs a kubectl JSONPath
// template over the -o json document, of get and of the other read commands.
func TestOutputNameAndJSONPath(t *testing.T) {
	ctx := hub(t)
	newRollout(ctx, t, "out-a", func(fr *v1alpha1.FleetRollout) { fr.Labels = map[string]string{"out": "yes"} })
	newRollout(ctx, t, "out-b", func(fr *v1alpha1.FleetRollout) { fr.Labels = map[string]string{"out": "yes"} })
	for _, tc := range []struct {
		args   []string
		stdout string
	}{
		{[]string{"get", "rollouts", "-l", "out=yes", "-o", "name"}, "fleetrollout/out-a\nfleetrollout/out-b\n"},
		{[]string{"get", "rollouts", "-l", "out=yes", "-o", "jsonpath={.items[*].name}"}, "out-a out-b\n"},
		{[]string{"status", "out-a", "-o", "jsonpath={.phase} {.candidate.digest}"}, "Progressing " + webCandidate.Digest + "\n"},
	} {
		r := tidegate(ctx, append([]string{"-n", writesNS}, tc.args...)...)
		expectRun(t, r, exitOK, tc.stdout, "")
	}
	r := tidegate(ctx, "-n", writesNS, "get", "rollouts", "-o", "jsonpath={.items[")
	if r.code != exitUsage || !strings.HasPrefix(r.stderr, "error: -o jsonpath={.items[: ") {
		t.Errorf("an invalid template: exit %d, stderr %q", r.code, r.stderr)
	}
	r = tidegate(ctx, "-n", writesNS, "status", "out-a", "-o", "name")
	if r.code != exitUsage {
		t.Errorf("status -o name: exit %d, want a usage error (only get prints names)", r.code)
	}
}

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
